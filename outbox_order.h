/*-------------------------------------------------------------------------
 *
 * outbox_order.h
 *		Ordered delivery's reads of an outbox: its recipients' heads, found
 *		with a dirty snapshot and the insert markers; the statement trigger
 *		that marks inserts; the id sequence's position.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_order.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_ORDER_H
#define OUTBOX_ORDER_H

#include "fmgr.h"
#include "utils/relcache.h"
#include "utils/timestamp.h"

#include "outbox_trigger.h"

/* What an ordered claim may hand out: runs of rows, one per group. */
typedef struct OutboxHeads
{
	int			n;				/* rows */
	int64	   *ids;			/* each run's rows in id order */
	int		   *group;			/* the run each row belongs to */
	text	  **recipient;		/* each row's */
	text	  **tenant;			/* each row's, NULL for the NULL tenant */
	int64	   *low;			/* where its recipient's scan started */
} OutboxHeads;

extern void outbox_order_heads(Relation rel, const OutboxColumns *cols,
							   text *recipient, bool by_tenant, text *tenant,
							   TimestampTz now, bool has_ttl,
							   TimestampTz ttl_cutoff, int max_rows,
							   OutboxHeads *heads);
extern int	outbox_order_locked_run(Relation rel, const OutboxColumns *cols,
									text *recipient, text *tenant, int64 low,
									const int64 *run, int n, TimestampTz now,
									bool has_ttl, TimestampTz ttl_cutoff);
extern void outbox_order_wake_next(Relation rel, const OutboxColumns *cols,
								   HeapTuple tuple, const char *channel);
extern bool outbox_order_sequence(Oid relid, Oid *seqrelid);
extern bool outbox_order_sequence_ok(Oid seqrelid);
extern int64 outbox_order_next_id(Oid seqrelid);

/* the statement trigger, and what it does, which the direct insert calls */
extern Datum outbox_insert_statement(PG_FUNCTION_ARGS);
extern void outbox_order_statement_start(Relation rel);
extern void outbox_order_statement_end(Relation rel);

/* registered by _PG_init */
extern void outbox_order_relcache_callback(Datum arg, Oid relid);

#endif							/* OUTBOX_ORDER_H */
