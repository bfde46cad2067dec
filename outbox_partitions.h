/*-------------------------------------------------------------------------
 *
 * outbox_partitions.h
 *		Partitioned outboxes: partitions made ahead of the id sequence, and
 *		dropped once their rows are all acked and old enough.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_partitions.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_PARTITIONS_H
#define OUTBOX_PARTITIONS_H

#include "datatype/timestamp.h"
#include "fmgr.h"

#include "outbox_table.h"

/* GUC delivery_outbox.partition_lock_timeout (ms) */
extern int	outbox_partition_lock_timeout;

extern int	outbox_partitions_make(OutboxTable *table, int64 rows);
extern int	outbox_partitions_upkeep(OutboxTable *table);
extern int	outbox_partitions_make_for(OutboxTable *table, const int64 *ids,
									   int nids);

/*
 * What retention at a cutoff would do to a partitioned outbox
 * (outbox_partitions_sweep): the partitions to drop, oldest first, with
 * their rows, and the id ranges [kept_lower, kept_upper) of the others.
 */
typedef struct OutboxPartitionJob OutboxPartitionJob;
typedef struct OutboxPartitionSweep
{
	TimestampTz cutoff;
	OutboxPartitionJob *job;
	int			ndrop;
	Oid		   *drop;
	int64	   *drop_rows;
	int			nkept;
	int64	   *kept_lower;
	int64	   *kept_upper;
} OutboxPartitionSweep;

extern OutboxPartitionSweep *outbox_partitions_sweep(OutboxTable *table,
													 TimestampTz cutoff);
extern int64 outbox_partitions_drop(OutboxTable *table,
									OutboxPartitionSweep *sw, int max_drops,
									int64 *rows);
extern bool outbox_partitions_retention(OutboxTable *table, TimestampTz now,
										TimestampTz *cutoff);

extern Datum outbox_partitions_ahead(PG_FUNCTION_ARGS);
extern PGDLLEXPORT void outbox_partitions_worker_main(Datum main_arg);

#endif							/* OUTBOX_PARTITIONS_H */
