/*-------------------------------------------------------------------------
 *
 * outbox_statements.h
 *		The statements run on an outbox table, and their execution.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_statements.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_STATEMENTS_H
#define OUTBOX_STATEMENTS_H

#include "outbox_table.h"

/* Parameters of a statement, at most. */
#define OUTBOX_PLAN_MAX_ARGS	8

/* Each statement; see outbox_plan_defs in outbox_statements.c. */
typedef enum OutboxPlanId
{
	OUTBOX_PLAN_ENQUEUE,
	OUTBOX_PLAN_ENQUEUE_DEDUP,
	OUTBOX_PLAN_DEDUP_LOOKUP,
	OUTBOX_PLAN_CLAIM,			/* four filter variants, in this order */
	OUTBOX_PLAN_CLAIM_R,
	OUTBOX_PLAN_CLAIM_T,
	OUTBOX_PLAN_CLAIM_RT,
	OUTBOX_PLAN_CLAIM_LOCK,		/* the same four, for a partitioned outbox */
	OUTBOX_PLAN_CLAIM_LOCK_R,
	OUTBOX_PLAN_CLAIM_LOCK_T,
	OUTBOX_PLAN_CLAIM_LOCK_RT,
	OUTBOX_PLAN_CLAIM_IDS,
	OUTBOX_PLAN_ACK_LOCK,
	OUTBOX_PLAN_ACK_LOCK_R,
	OUTBOX_PLAN_ACK_DELIVER,
	OUTBOX_PLAN_ACK_FINISH,
	OUTBOX_PLAN_ACK_DELETE,
	OUTBOX_PLAN_RELEASE,
	OUTBOX_PLAN_RECLAIM,
	OUTBOX_PLAN_RESYNC,
	OUTBOX_PLAN_RESYNC_NULL_TENANT,
	OUTBOX_PLAN_REASSIGN,
	OUTBOX_PLAN_REJECT,
	OUTBOX_PLAN_REDRIVE,
	OUTBOX_PLAN_EXPIRE,
	OUTBOX_PLAN_DUE,
	OUTBOX_PLAN_NEXT_DUE,
	OUTBOX_PLAN_NEXT_DUE_R,
	OUTBOX_PLAN_REPLAY,
	OUTBOX_PLAN_REPLAY_T,
	OUTBOX_PLAN_PURGE,
	OUTBOX_PLAN_PURGE_RANGE,
	OUTBOX_PLAN_STATS,
	OUTBOX_PLAN_ENQUEUE_BATCH,
	OUTBOX_PLAN_ENQUEUE_BATCH_DEDUP,
	OUTBOX_PLAN_DEDUP_LOOKUP_BATCH,
	OUTBOX_PLAN_EXISTS,
	OUTBOX_PLAN_EXISTS_R,
	OUTBOX_PLAN_BACKLOG,
	OUTBOX_PLAN_ORDERED_LOCK,
	OUTBOX_NUM_PLANS
} OutboxPlanId;

/* a table's statements, through SPI */
extern void outbox_spi_connect(void);
extern uint64 outbox_execute(OutboxTable *table, OutboxPlanId id,
							 Datum *values, const char *nulls, int expected);
extern uint64 outbox_run(OutboxTable *table, OutboxPlanId id, Datum *values,
						 const char *nulls, int expected);

#endif							/* OUTBOX_STATEMENTS_H */
