/*-------------------------------------------------------------------------
 *
 * outbox_table.h
 *		Finding outbox tables: the extension's own (the default outbox) and,
 *		by OID, any other table the extension manages.
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

#include "datatype/timestamp.h"
#include "executor/spi.h"

/*
 * One outbox table as this backend knows it: where it is, how its rows map
 * onto the default outbox's row type, and the statements prepared on it
 * (see outbox_statements.c).  Entries live for the life of the backend and are
 * re-checked after any invalidation of their table.
 */
typedef struct OutboxTable OutboxTable;

/*
 * An outbox's delivery policy (docs/delivery-policy.md), from its registry
 * row; the defaults keep 1.1's behaviour.
 */
typedef struct OutboxPolicy
{
	int32		max_attempts;	/* 0: unlimited */
	Interval	backoff_base;	/* zero: no backoff */
	Interval	backoff_max;
	bool		has_ttl;
	Interval	ttl;
	bool		ordered;		/* per-recipient ordered delivery */
	bool		has_retain_acked;	/* else delivery_outbox.retain_acked */
	Interval	retain_acked;
	int64		partition_rows; /* ids per partition; 0: not partitioned */
} OutboxPolicy;

/* Statements kept per table and user; see outbox_statements.c. */
#define OUTBOX_NUM_PLANS_MAX	44

extern OutboxTable *outbox_default_table(void);
extern OutboxTable *outbox_find_table(Oid relid);
extern List *outbox_table_list(void);
extern bool outbox_channel_of(Oid relid, char **channel);
extern const char *outbox_default_channel(Oid relid);
extern bool outbox_table_is_ordered(Oid relid);
extern Oid	outbox_table_relid(OutboxTable *table);
extern Oid	outbox_table_owner(OutboxTable *table);
extern const char *outbox_table_name(OutboxTable *table);
extern const char *outbox_table_row_expr(OutboxTable *table);
extern bool outbox_table_utc(OutboxTable *table);
extern const char *outbox_table_channel(OutboxTable *table);
extern bool outbox_table_has_policy(OutboxTable *table);
extern const OutboxPolicy *outbox_table_policy(OutboxTable *table);
extern bool outbox_table_partitioned(OutboxTable *table);
extern bool outbox_table_distributed(OutboxTable *table);
extern Oid	outbox_extension_namespace(void);
extern const char *outbox_table_dead_name(OutboxTable *table);
extern Oid	outbox_table_dead_relid(OutboxTable *table);
extern SPIPlanPtr *outbox_table_plans(OutboxTable *table);
extern void outbox_table_plans_pin(void);
extern void outbox_table_plans_unpin(void);

extern bool outbox_installed(void);
extern bool outbox_lock_table(void);

/* registered by _PG_init */
extern void outbox_table_relcache_callback(Datum arg, Oid relid);
extern void outbox_table_syscache_callback(Datum arg, int cacheid,
										   uint32 hashvalue);

#endif							/* OUTBOX_TABLE_H */
