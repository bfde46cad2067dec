/*-------------------------------------------------------------------------
 *
 * outbox_retention.c
 *		Retention of partitioned outboxes (docs/partitions.md): a partition
 *		whose ids are all drawn, that holds no open row and no ack younger
 *		than the outbox's retain_acked is dropped, under the outbox's ACCESS
 *		EXCLUSIVE lock had within delivery_outbox.partition_lock_timeout,
 *		or left for a later sweep.  The worker's sweep and outbox_purge call
 *		it; the partitions it reads and drops it reads and drops as their
 *		owner (outbox_as_rel_owner), as outbox_partitions.c explains.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_retention.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "catalog/namespace.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "delivery_outbox.h"
#include "outbox_owner.h"
#include "outbox_partitions.h"
#include "outbox_partitions_int.h"
#include "outbox_xact.h"

/* What outbox_drop_partition did. */
#define OUTBOX_DROP_NO_LOCK		0	/* the lock was not had: nothing done */
#define OUTBOX_DROP_KEPT		1	/* under the lock, it did not qualify */
#define OUTBOX_DROP_DONE		2

static bool outbox_partition_droppable(Oid relid, TimestampTz cutoff,
									   bool latest);
static int64 outbox_partition_rows(Oid relid);
static int	outbox_drop_partition(OutboxPartitionJob *job, TimestampTz cutoff);
static bool outbox_lock_for_drop(void *arg);

/*
 * outbox_partitions_sweep
 *
 * What retention at cutoff would do to a partitioned outbox, read without
 * any lock beyond ACCESS SHARE: the partitions that qualify for a drop
 * (their ids all drawn, no open row, no ack at or after cutoff: DT_NOBEGIN,
 * none), oldest first, and the id ranges of the
 * others, whose acked rows outbox_purge deletes instead.  A partition that
 * is itself partitioned (one added by hand) never qualifies.
 */
OutboxPartitionSweep *
outbox_partitions_sweep(OutboxTable *table, TimestampTz cutoff)
{
	OutboxPartitionSweep *sw = palloc0(sizeof(OutboxPartitionSweep));
	Relation	rel;
	OutboxPartition *parts;
	int			nparts;
	int64		next;
	int			i;

	sw->cutoff = cutoff;
	if (!outbox_table_partitioned(table))
		return sw;
	next = outbox_partition_next_id(table);
	rel = table_open(outbox_table_relid(table), AccessShareLock);
	nparts = outbox_partition_list(rel, &parts);
	sw->job = palloc(sizeof(OutboxPartitionJob));
	outbox_partition_job(rel, sw->job);
	table_close(rel, NoLock);
	sw->drop = palloc(sizeof(Oid) * Max(nparts, 1));
	sw->kept_lower = palloc(sizeof(int64) * Max(nparts, 1));
	sw->kept_upper = palloc(sizeof(int64) * Max(nparts, 1));
	for (i = 0; i < nparts; i++)
	{
		CHECK_FOR_INTERRUPTS();
		/* the partition of the next id, or one above it, still gets rows */
		if (!TIMESTAMP_IS_NOBEGIN(cutoff) && parts[i].upper <= next &&
			get_rel_relkind(parts[i].relid) == RELKIND_RELATION &&
			outbox_partition_droppable(parts[i].relid, cutoff, false))
			sw->drop[sw->ndrop++] = parts[i].relid;
		else
		{
			sw->kept_lower[sw->nkept] = parts[i].lower;
			sw->kept_upper[sw->nkept] = parts[i].upper;
			sw->nkept++;
		}
	}
	pfree(parts);
	return sw;
}

/*
 * outbox_partitions_drop
 *
 * Drop up to max_drops of the partitions sw found, oldest first, each if
 * the outbox's lock is had within delivery_outbox.partition_lock_timeout
 * and it still qualifies then (the first one whose lock is not had ends
 * it).  *rows is set to the number of rows they held.  Returns the number
 * dropped.  Each drop holds the outbox's ACCESS EXCLUSIVE lock to the end
 * of the transaction: the caller should end it soon, doing nothing long
 * before then.
 */
int64
outbox_partitions_drop(OutboxTable *table, OutboxPartitionSweep *sw,
					   int max_drops, int64 *rows)
{
	int			i;
	int64		dropped = 0;
	bool		more = true;

	*rows = 0;
	for (i = 0; i < sw->ndrop && dropped < max_drops && more; i++)
	{
		int64		held;

		CHECK_FOR_INTERRUPTS();

		/*
		 * Its rows, counted before the lock: being all acked, they can only
		 * go (a concurrent purge), or the partition stops qualifying.
		 */
		held = outbox_partition_rows(sw->drop[i]);
		sw->job->partid = sw->drop[i];
		switch (outbox_drop_partition(sw->job, sw->cutoff))
		{
			case OUTBOX_DROP_NO_LOCK:
				more = false;	/* later */
				break;
			case OUTBOX_DROP_DONE:
				*rows += held;
				dropped++;
				break;
		}
	}
	if (*rows > 0)
		outbox_count(outbox_table_relid(table), OUTBOX_COUNT_PURGED, *rows);
	return dropped;
}

/*
 * outbox_partitions_retention
 *
 * The cutoff of the acked rows kept by an outbox at now: its retain_acked,
 * else delivery_outbox.retain_acked; false when both keep them for good.
 */
bool
outbox_partitions_retention(OutboxTable *table, TimestampTz now,
							TimestampTz *cutoff)
{
	const OutboxPolicy *policy = outbox_table_policy(table);

	if (policy->has_retain_acked)
	{
		*cutoff = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
														  TimestampTzGetDatum(now),
														  IntervalPGetDatum(&policy->retain_acked)));
		return true;
	}
	if (outbox_retain_acked < 0)
		return false;
	*cutoff = TimestampTzPlusMilliseconds(now, -(int64) outbox_retain_acked * 1000);
	return true;
}

/*
 * outbox_partition_droppable
 *
 * Whether partition relid holds no open row and no ack at or after cutoff,
 * read from its indexes with the transaction's snapshot, or (latest) a new
 * one.  Read as the partition's owner (outbox_run_select).
 */
static bool
outbox_partition_droppable(Oid relid, TimestampTz cutoff, bool latest)
{
	char	   *name = quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
												  get_rel_name(relid));
	OutboxPartitionSql sql = {0};

	sql.snapshot = latest ? GetLatestSnapshot() : InvalidSnapshot;
	/* open rows, then the newest ack, each from its partial index */
	sql.sql = psprintf("SELECT EXISTS (SELECT FROM ONLY %s"
					   " WHERE delivery_state OPERATOR(pg_catalog.=)"
					   " ANY ('{pending,delivered}'::pg_catalog.text[]))",
					   name);
	outbox_as_rel_owner(relid, outbox_run_select, &sql);
	if (DatumGetBool(sql.value))
		return false;
	sql.sql = psprintf("SELECT pg_catalog.max(acked_at) FROM ONLY %s"
					   " WHERE delivery_state OPERATOR(pg_catalog.=) 'acked'",
					   name);
	outbox_as_rel_owner(relid, outbox_run_select, &sql);

	/*
	 * A timestamptz, or a "timestamp" of UTC wall-clock time (an attached
	 * table's): the same representation of the same instant.
	 */
	return sql.isnull || DatumGetTimestampTz(sql.value) < cutoff;
}

/*
 * outbox_partition_rows
 *
 * The number of rows of partition relid, counted as its owner.
 */
static int64
outbox_partition_rows(Oid relid)
{
	OutboxPartitionSql sql = {0};

	sql.snapshot = InvalidSnapshot;
	sql.sql = psprintf("SELECT pg_catalog.count(*) FROM ONLY %s",
					   quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
												  get_rel_name(relid)));
	outbox_as_rel_owner(relid, outbox_run_select, &sql);
	return DatumGetInt64(sql.value);
}

/*
 * outbox_drop_partition
 *
 * Drop partition partid of rel, if the outbox's ACCESS EXCLUSIVE lock can
 * be had within delivery_outbox.partition_lock_timeout and the partition
 * still qualifies then: OUTBOX_DROP_DONE, _KEPT, or _NO_LOCK (nothing was
 * done).  The lock, once had, is held to the end of the transaction.  The
 * DROP runs as the partition's owner, who may drop it.
 */
static int
outbox_drop_partition(OutboxPartitionJob *job, TimestampTz cutoff)
{
	Oid			partid = job->partid;
	ErrorData  *edata;
	char		timeout[16];
	OutboxPartitionSql sql = {0};

	snprintf(timeout, sizeof(timeout), "%d", outbox_partition_lock_timeout);
	edata = outbox_subxact_try(outbox_lock_for_drop, job, timeout, NULL);
	/* not had in time, or a deadlock with another drop: later */
	if (edata != NULL && edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE &&
		edata->sqlerrcode != ERRCODE_T_R_DEADLOCK_DETECTED)
		ReThrowError(edata);
	if (edata != NULL)
	{
		ereport(DEBUG1,
				(errmsg_internal("delivery_outbox: partition %s of outbox %s not dropped: %s",
								 get_rel_name(partid), job->relname,
								 edata->message)));
		FreeErrorData(edata);
		return OUTBOX_DROP_NO_LOCK;
	}
	if (get_rel_name(partid) == NULL)
		return OUTBOX_DROP_KEPT;	/* dropped meanwhile */

	/* no writer is left: a new snapshot sees every row of the partition */
	if (!outbox_partition_droppable(partid, cutoff, true))
		return OUTBOX_DROP_KEPT;
	sql.sql = psprintf("DROP TABLE %s",
					   quote_qualified_identifier(get_namespace_name(get_rel_namespace(partid)),
												  get_rel_name(partid)));
	outbox_as_rel_owner(partid, outbox_run_utility, &sql);
	ereport(DEBUG1,
			(errmsg_internal("delivery_outbox: dropped partition %s of outbox %s",
							 sql.sql + strlen("DROP TABLE "), job->relname)));
	return OUTBOX_DROP_DONE;
}

/* outbox_subxact_try's work: the locks of a drop */
static bool
outbox_lock_for_drop(void *arg)
{
	OutboxPartitionJob *job = arg;

	LockRelationOid(job->relid, AccessExclusiveLock);

	/*
	 * The partition's lock without waiting: a wait here (for an autovacuum of
	 * it, say) would hold everyone up behind the outbox's lock.
	 */
	if (!ConditionalLockRelationOid(job->partid, AccessExclusiveLock))
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("partition %s of outbox %s is locked",
						get_rel_name(job->partid), job->relname)));
	return true;
}
