/*-------------------------------------------------------------------------
 *
 * outbox_rows.h
 *		The row operations that both the SQL functions and the worker use.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_rows.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_ROWS_H
#define OUTBOX_ROWS_H

#include "utils/timestamp.h"

#include "outbox_shmem.h"
#include "outbox_statements.h"
#include "outbox_table.h"

/* row operations of the API and the worker */
extern Datum outbox_ttl_cutoff(OutboxTable *table, TimestampTz now,
							   char *null);
extern uint64 outbox_requeue(OutboxTable *table, OutboxPlanId id,
							 const Datum *own, const char *own_nulls, int nown,
							 OutboxCounter counter);
extern uint64 outbox_move_rows(OutboxTable *table, OutboxPlanId id,
							   Datum *values, const char *nulls,
							   OutboxCounter counter);
extern uint64 outbox_reclaim_rows(OutboxTable *table, TimestampTz cutoff,
								  int64 max_rows);
extern uint64 outbox_expire_rows(OutboxTable *table, int64 max_rows);
extern TimestampTz outbox_next_due_at(OutboxTable *table, TimestampTz after);
extern int	outbox_due_rows(OutboxTable *table, TimestampTz *after,
							int64 *after_id, int64 *ids, int max);
extern uint64 outbox_purge_rows(OutboxTable *table, TimestampTz cutoff,
								int64 max_rows);
extern uint64 outbox_purge_range(OutboxTable *table, TimestampTz cutoff,
								 int64 lower, int64 upper);
extern void outbox_sync_backlog(OutboxDatabase *db);
extern uint64 outbox_claim_ordered(OutboxTable *table, int64 max_rows,
								   text *recipient, text *tenant,
								   TimestampTz now, bool probe);
extern uint64 outbox_claim_locked(OutboxTable *table, OutboxPlanId lock,
								  Datum *values, const char *nulls);

#endif							/* OUTBOX_ROWS_H */
