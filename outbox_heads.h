/*-------------------------------------------------------------------------
 *
 * outbox_heads.h
 *		The ordered claims' reads of an outbox: each group's head and run,
 *		the check of a locked run, the wake-up of a group's next row.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_heads.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_HEADS_H
#define OUTBOX_HEADS_H

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

/* registered by _PG_init */
extern void outbox_heads_relcache_callback(Datum arg, Oid relid);

#endif							/* OUTBOX_HEADS_H */
