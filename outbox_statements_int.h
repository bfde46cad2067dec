/*-------------------------------------------------------------------------
 *
 * outbox_statements_int.h
 *		What the statements' table (outbox_statements.c) and their
 *		preparation and execution (outbox_execute.c) share.  Not for other
 *		files.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_statements_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_STATEMENTS_INT_H
#define OUTBOX_STATEMENTS_INT_H

#include "outbox_statements.h"

/* What outbox_execute_work disables for a statement's planning. */
typedef enum OutboxWalk
{
	OUTBOX_WALK_NONE = 0,		/* nothing: planned as it comes */
	OUTBOX_WALK_SCAN,			/* scans but index scans, sorts, JIT */
	OUTBOX_WALK_JOINS			/* the same, and joins but nested loops */
} OutboxWalk;

typedef struct OutboxPlanDef
{
	const char *sql;
	Oid			argtypes[OUTBOX_PLAN_MAX_ARGS]; /* InvalidOid-terminated */

	/*
	 * The statement for a table without the delivery policy's columns: the
	 * default outbox of an extension still at 1.0 or 1.1 (the new library
	 * runs before ALTER EXTENSION UPDATE), with the same parameters and
	 * result columns; NULL where the 1.1 functions have no such statement.
	 */
	const char *legacy;

	/*
	 * A scan that must walk its index in order and stop after its batch,
	 * whatever the table's statistics say: planned and run with the planner's
	 * other paths disabled (see outbox_execute_work), its joins' too for a
	 * statement that joins its locked rows back to the table.
	 */
	OutboxWalk	walk;

	/*
	 * Rows by id: the number of the parameter holding their ids (an int8[]),
	 * 0 for none.  Such a statement keeps its generic plan (see outbox_plan),
	 * and on a partitioned outbox its %P bounds the ids' range from that
	 * array, which outbox_execute passes sorted (see there).
	 */
	int			ids;

	/* keeps its generic plan (as every statement of rows by id does) */
	bool		generic;
} OutboxPlanDef;

/*
 * A parameter compared with the table's own timestamps (created_at,
 * delivered_at, acked_at): timestamptz, or timestamp for a table that keeps
 * UTC wall-clock times.  The policy's columns (not_before, expires_at) are
 * timestamptz in every outbox, and their parameters plain TIMESTAMPTZOID.
 */
#define TABLE_TIME			((Oid) 1)

/*
 * What a dedup_key's %K expands to (outbox_plan_text), or on a partitioned
 * or distributed outbox, which has no unique index on (recipient,
 * dedup_key) to infer, the second: any conflict is the key's
 */
#define OUTBOX_KEY_CONFLICT \
	"ON CONFLICT (recipient, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING"
#define OUTBOX_PARTITIONED_KEY_CONFLICT	"ON CONFLICT DO NOTHING"

/* 1.1's statement is the same as the current one (OutboxPlanDef.legacy) */
extern const char outbox_same_sql[];
#define OUTBOX_SAME_SQL		outbox_same_sql

/* one entry per OutboxPlanId */
extern const OutboxPlanDef outbox_plan_defs[OUTBOX_NUM_PLANS];

#endif							/* OUTBOX_STATEMENTS_INT_H */
