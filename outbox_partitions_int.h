/*-------------------------------------------------------------------------
 *
 * outbox_partitions_int.h
 *		What the two halves of partitioned outboxes share: the partition
 *		maker (outbox_partitions.c) and retention (outbox_retention.c).  Not
 *		for other files.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_partitions_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_PARTITIONS_INT_H
#define OUTBOX_PARTITIONS_INT_H

#include "utils/elog.h"
#include "utils/rel.h"
#include "utils/snapshot.h"

#include "outbox_partitions.h"

/* What the maker's and retention's work is given (outbox_subxact_try). */
struct OutboxPartitionJob
{
	Oid			relid;			/* the outbox */
	Oid			owner;
	Oid			nspid;
	char	   *relname;
	Oid			partid;			/* the partition to lock */
	int64		k;				/* the partition to make */
	int64		rows;
};

/* A statement run by outbox_run_utility / _select, and what it returns. */
typedef struct OutboxPartitionSql
{
	const char *sql;
	Snapshot	snapshot;		/* a select's, or InvalidSnapshot */
	bool		isnull;			/* a select's one value */
	Datum		value;			/* (by value) */
} OutboxPartitionSql;

/* One partition of an outbox: its id range [lower, upper). */
typedef struct OutboxPartition
{
	Oid			relid;
	int64		lower;
	int64		upper;
} OutboxPartition;

extern int	outbox_partition_list(Relation rel, OutboxPartition **parts);
extern void outbox_partition_job(Relation rel, OutboxPartitionJob *job);
extern int64 outbox_partition_next_id(OutboxTable *table);
extern void outbox_run_utility(void *arg);
extern void outbox_run_select(void *arg);

#endif							/* OUTBOX_PARTITIONS_INT_H */
