/*-------------------------------------------------------------------------
 *
 * outbox_table.h
 *		Finding the outbox table, its prepared statements, and the row
 *		operations that both the SQL functions and the worker run.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_table.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_TABLE_H
#define OUTBOX_TABLE_H

#include "utils/timestamp.h"

#include "outbox_shmem.h"

/* Parameters of a statement, at most. */
#define OUTBOX_PLAN_MAX_ARGS	4

/* Each statement the functions run; see outbox_plan_defs in outbox_table.c. */
typedef enum OutboxPlanId
{
	OUTBOX_PLAN_ENQUEUE,
	OUTBOX_PLAN_CLAIM,			/* four filter variants, in this order */
	OUTBOX_PLAN_CLAIM_R,
	OUTBOX_PLAN_CLAIM_T,
	OUTBOX_PLAN_CLAIM_RT,
	OUTBOX_PLAN_ACK_LOCK,
	OUTBOX_PLAN_ACK_LOCK_R,
	OUTBOX_PLAN_ACK_DELIVER,
	OUTBOX_PLAN_ACK_FINISH,
	OUTBOX_PLAN_RELEASE,
	OUTBOX_PLAN_RECLAIM,
	OUTBOX_PLAN_RESYNC,
	OUTBOX_PLAN_RESYNC_NULL_TENANT,
	OUTBOX_PLAN_REASSIGN,
	OUTBOX_PLAN_REPLAY,
	OUTBOX_PLAN_REPLAY_T,
	OUTBOX_PLAN_PURGE,
	OUTBOX_PLAN_STATS,
	OUTBOX_PLAN_ENQUEUE_BATCH,
	OUTBOX_PLAN_EXISTS,
	OUTBOX_PLAN_EXISTS_R,
	OUTBOX_PLAN_BACKLOG,
	OUTBOX_NUM_PLANS
} OutboxPlanId;

/* the table */
extern const char *outbox_table(void);
extern Oid	outbox_table_oid(void);
extern bool outbox_installed(void);
extern bool outbox_lock_table(void);

/* its statements, through SPI */
extern void outbox_spi_connect(void);
extern uint64 outbox_execute(OutboxPlanId id, Datum *values,
							 const char *nulls, int expected);
extern uint64 outbox_run(OutboxPlanId id, Datum *values, const char *nulls,
						 int expected);

/* row operations of the API and the worker */
extern uint64 outbox_reclaim_rows(TimestampTz cutoff, int64 max_rows);
extern uint64 outbox_purge_rows(TimestampTz cutoff, int64 max_rows);
extern void outbox_sync_backlog(OutboxDatabase *db);

/* registered by _PG_init */
extern void outbox_table_relcache_callback(Datum arg, Oid relid);
extern void outbox_table_syscache_callback(Datum arg, int cacheid,
										   uint32 hashvalue);

#endif							/* OUTBOX_TABLE_H */
