/*-------------------------------------------------------------------------
 *
 * outbox_insert.h
 *		outbox_enqueue's insert without SQL.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_insert.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_INSERT_H
#define OUTBOX_INSERT_H

#include "outbox_compat.h"
#include "outbox_table.h"

extern bool outbox_insert_row(OutboxTable *table, Datum *values,
							  const char *nulls, int64 *id, bool *conflict);
pg_noreturn extern void outbox_no_row_inserted(void);

/* registered by _PG_init */
extern void outbox_insert_relcache_callback(Datum arg, Oid relid);
extern void outbox_insert_syscache_callback(Datum arg, int cacheid,
											uint32 hashvalue);

#endif							/* OUTBOX_INSERT_H */
