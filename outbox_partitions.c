/*-------------------------------------------------------------------------
 *
 * outbox_partitions.c
 *		Partitioned outboxes (docs/partitions.md): partitions made ahead of
 *		the id sequence.  Their drops, once their rows are all acked and old
 *		enough, are outbox_retention.c's; what both use is in
 *		outbox_partitions_int.h.
 *
 * A partitioned outbox is partitioned by range of id, partition_rows ids
 * per partition: partition k, named <table>_p<k>, holds the ids from
 * k * partition_rows + 1 up to (k + 1) * partition_rows.  The partition of
 * the sequence's next id and the one after it are made ahead, by the
 * worker at each sweep and by the enqueue functions when missing, owned by
 * the outbox's owner: a new table attached under SHARE UPDATE EXCLUSIVE, a
 * lock that producers and relays do not conflict with (CREATE TABLE ...
 * PARTITION OF would take ACCESS EXCLUSIVE).  A producer makes one ahead
 * only if it gets that lock at once, so producers do not wait on each
 * other for it; one whose own rows need a partition another session is
 * making waits for that session's commit.
 *
 * Whose rights (SPEC.md "Trust"): a statement that reads a table's rows or
 * can run its code runs as that table's owner through outbox_as_owner():
 * the ATTACH (its validation scan, the indexes it builds on the new table,
 * the CHECK constraints it simplifies) as the outbox's owner, the reads,
 * the count and the DROP of a partition as the partition's.  Only the
 * CREATE TABLE ... (LIKE ...) of the new, empty table and its ALTER ...
 * OWNER TO run as the calling user (the definer of the SQL functions, the
 * worker, or the maker connected as the definer): the owner may lack
 * CREATE on the schema and cannot give a table away, and neither
 * statement evaluates anything of the table (LIKE copies expressions
 * without running them, an empty table has no row to check).  Attaching
 * as the owner clones the outbox's row triggers as internal ones, for
 * which PostgreSQL checks no EXECUTE on their functions (granted to
 * nobody).
 *
 * The partition maker (outbox_make_in_worker) is a background worker a
 * producer waits for, where the deadlock detector cannot see the wait.  So
 * a producer whose transaction holds a lock the maker needs (SHARE UPDATE
 * EXCLUSIVE or stronger on the outbox: it made or dropped a partition
 * already, or locked the table) makes the partitions itself instead; any
 * other wait is bounded by the maker's lock_timeout and by the producer,
 * which stops the maker after OUTBOX_MAKER_WAIT.  After a maker that left
 * partitions missing, this backend starts no other one for that outbox
 * for OUTBOX_MAKER_BACKOFF: its enqueues make only the partitions their
 * rows need, themselves, meanwhile.
 *
 * A partition is dropped when every id of its range has been drawn, it
 * holds no open row and its newest ack is older than the retention.  The
 * drop takes ACCESS EXCLUSIVE on the outbox, under
 * delivery_outbox.partition_lock_timeout: a producer or relay waits that
 * long at most, and a drop that does not get the lock is left for later.
 * Under the lock, which no writer holds then, the partition is read again
 * with a new snapshot.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_partitions.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/xact.h"
#include "access/transam.h"
#include "catalog/namespace.h"
#include "catalog/pg_index.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "common/int.h"
#include "executor/spi.h"
#include "lib/qunique.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "partitioning/partbounds.h"
#include "partitioning/partdesc.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "tcop/tcopprot.h"
#include "utils/acl.h"
#include "utils/backend_status.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/partcache.h"
#include "utils/regproc.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "delivery_outbox.h"
#include "outbox_order.h"
#include "outbox_owner.h"
#include "outbox_partitions.h"
#include "outbox_partitions_int.h"
#include "outbox_shmem.h"
#include "outbox_xact.h"

int			outbox_partition_lock_timeout = 100;

/* What outbox_make_in_worker asks its worker for (in bgw_extra). */
typedef struct OutboxMakeRequest
{
	Oid			dboid;
	Oid			userid;
	Oid			relid;
	int64		rows;
} OutboxMakeRequest;

/* How long the partition maker waits for a lock before giving up (ms). */
#define OUTBOX_MAKER_LOCK_TIMEOUT	2000

/*
 * How long a producer waits for the maker before stopping it and making
 * the partitions itself (ms): the maker's lock waits and a little more,
 * plus some time for each partition to make (a batch can want hundreds).
 */
#define OUTBOX_MAKER_WAIT			(2 * OUTBOX_MAKER_LOCK_TIMEOUT + 1000)
#define OUTBOX_MAKER_WAIT_EACH		500

/*
 * How long after a maker that left partitions missing this backend starts
 * no other one for that outbox (ms).
 */
#define OUTBOX_MAKER_BACKOFF		10000

/* This backend's makers that left partitions missing, by outbox. */
typedef struct OutboxMakerFailure
{
	Oid			relid;			/* hash key */
	TimestampTz failed_at;
} OutboxMakerFailure;

static HTAB *outbox_maker_failures = NULL;

static int	outbox_make_missing(OutboxTable *table, const int64 *ks, int nks,
								int64 need_k, bool wait);
static int	outbox_partitions_wanted(OutboxTable *table, int64 rows,
									 int64 **ks, int64 *need_k);
static bool outbox_partitions_missing(OutboxTable *table, const int64 *ks,
									  int nks);
static bool outbox_make_in_worker(OutboxTable *table, int64 rows, int nks);
static bool outbox_maker_backing_off(Oid relid);
static void outbox_maker_failed(Oid relid, bool failed);
static bool outbox_maker_blocked(OutboxTable *table);
static bool outbox_owner_may_attach(OutboxPartitionJob *job);
static bool outbox_rel_calls_functions(Relation rel);
static bool outbox_range_free(const OutboxPartition *parts, int nparts,
							  int64 lower, int64 upper);
static void outbox_make_partition(OutboxPartitionJob *job);

static bool outbox_make_partition_work(void *arg);
static int	outbox_safe_path(void);

PG_FUNCTION_INFO_V1(outbox_partitions_ahead);

/*
 * The bounds of partition k of n ids: from k * n + 1 (never past the
 * largest id, since k is that of an id) up to (k + 1) * n + 1, exclusive,
 * saturated at the largest bigint for the last partition a huge
 * partition_rows allows (its bound would wrap: an empty range).
 */
static inline int64
outbox_part_lower(int64 k, int64 n)
{
	return k * n + 1;
}

static inline int64
outbox_part_upper(int64 k, int64 n)
{
	int64		upper;

	if (pg_mul_s64_overflow(k + 1, n, &upper) ||
		pg_add_s64_overflow(upper, 1, &upper))
		return PG_INT64_MAX;
	return upper;
}

/*
 * outbox_partitions_make
 *
 * For the enqueue functions and outbox_purge: make the missing partitions
 * of a partitioned outbox from the one of the sequence's next id through
 * the one rows + partition_rows ids further.  They are made by a
 * background worker started for it, in a transaction of its own, so that
 * the caller's transaction holds no lock for them and everyone sees them
 * at once; where no worker can be started (or it could not make them),
 * the caller makes them itself: the ones its rows need now waiting for the
 * lock, the ones ahead only if the lock is had at once.  No maker is
 * started when the caller holds a lock it would need (outbox_maker_blocked),
 * and for OUTBOX_MAKER_BACKOFF after one that failed here: the caller then
 * makes only the partitions its rows need.  Returns how many the caller
 * made itself.
 */
int
outbox_partitions_make(OutboxTable *table, int64 rows)
{
	Oid			relid = outbox_table_relid(table);
	int64	   *ks;
	int			nks;
	int64		need_k;

	if (!outbox_table_partitioned(table))
		return 0;
	nks = outbox_partitions_wanted(table, rows, &ks, &need_k);
	if (!outbox_partitions_missing(table, ks, nks))
		return 0;				/* the usual case: all there */
	if (outbox_maker_backing_off(relid))
	{
		int			nneed = 0;

		/* ks ascends: those up to need_k come first */
		while (nneed < nks && ks[nneed] <= need_k)
			nneed++;
		return nneed > 0 ? outbox_make_missing(table, ks, nneed, need_k, false) : 0;
	}
	if (!outbox_maker_blocked(table) && outbox_make_in_worker(table, rows, nks))
	{
		AcceptInvalidationMessages();	/* what it made, seen here now */
		outbox_maker_failed(relid, outbox_partitions_missing(table, ks, nks));
	}
	return outbox_make_missing(table, ks, nks, need_k, false);
}

/*
 * outbox_partitions_upkeep
 *
 * For the background worker's sweeps, and outbox_create: make the missing
 * partitions ahead of a partitioned outbox's sequence, in the caller's
 * transaction, only if the lock is had at once.
 */
int
outbox_partitions_upkeep(OutboxTable *table)
{
	int64	   *ks;
	int			nks;
	int64		need_k;

	if (!outbox_table_partitioned(table))
		return 0;
	nks = outbox_partitions_wanted(table, 0, &ks, &need_k);
	return outbox_make_missing(table, ks, nks, -1, false);
}

/*
 * outbox_partitions_wanted
 *
 * The partitions (*ks, ascending; returns how many) an outbox should have
 * before rows more rows go in: from the one of the sequence's next id
 * through the one rows + partition_rows ids further; *need_k is the last
 * one those rows need.
 */
static int
outbox_partitions_wanted(OutboxTable *table, int64 rows, int64 **ks,
						 int64 *need_k)
{
	int64		n = outbox_table_policy(table)->partition_rows;
	int64		next = Max(outbox_partition_next_id(table), 1);
	int64		first = (next - 1) / n;
	int64		last = (Min(next, PG_INT64_MAX - rows - n) + rows + n - 1) / n;
	int			nks = (int) Min(last - first + 1, (int64) (MaxAllocSize / sizeof(int64)));
	int			i;

	*ks = palloc(sizeof(int64) * nks);
	for (i = 0; i < nks; i++)
		(*ks)[i] = first + i;
	*need_k = (Min(next, PG_INT64_MAX - rows) + rows - 2) / n;
	return nks;
}

/*
 * outbox_partitions_missing
 *
 * Whether any of partitions ks is missing.
 */
static bool
outbox_partitions_missing(OutboxTable *table, const int64 *ks, int nks)
{
	int64		n = outbox_table_policy(table)->partition_rows;
	Relation	rel = table_open(outbox_table_relid(table), AccessShareLock);
	OutboxPartition *parts;
	int			nparts = outbox_partition_list(rel, &parts);
	bool		missing = false;
	int			i;

	for (i = 0; i < nks && !missing; i++)
		missing = outbox_range_free(parts, nparts, outbox_part_lower(ks[i], n), outbox_part_upper(ks[i], n));
	table_close(rel, AccessShareLock);
	pfree(parts);
	return missing;
}

/*
 * outbox_make_in_worker
 *
 * Start a background worker that makes the partitions rows more rows need
 * (outbox_partitions_worker_main), as the current user, and wait for it to
 * end.  False when none could be started.  The worker gives up on a lock
 * it does not get within OUTBOX_MAKER_LOCK_TIMEOUT; one still running
 * after OUTBOX_MAKER_WAIT, and OUTBOX_MAKER_WAIT_EACH for each of the nks
 * partitions wanted, is stopped (it rolls back): the caller, which
 * the deadlock detector does not see waiting here, then makes the
 * partitions itself.
 */
static bool
outbox_make_in_worker(OutboxTable *table, int64 rows, int nks)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	OutboxMakeRequest req;
	pid_t		pid;
	BgwHandleStatus status;
	TimestampTz deadline;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "delivery_outbox");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "outbox_partitions_worker_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "delivery_outbox partition maker");
	snprintf(worker.bgw_type, BGW_MAXLEN, "delivery_outbox partition maker");
	req.dboid = MyDatabaseId;
	req.userid = GetUserId();
	req.relid = outbox_table_relid(table);
	req.rows = rows;
	StaticAssertStmt(sizeof(req) <= BGW_EXTRALEN, "bgw_extra is too small");
	memcpy(worker.bgw_extra, &req, sizeof(req));
	worker.bgw_notify_pid = MyProcPid;
	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
		return false;
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										   OUTBOX_MAKER_WAIT +
										   (int64) OUTBOX_MAKER_WAIT_EACH * nks);
	for (;;)
	{
		long		remaining;
		int			rc;

		/* the postmaster sets our latch when the worker starts or ends */
		status = GetBackgroundWorkerPid(handle, &pid);
		if (status == BGWH_STOPPED || status == BGWH_POSTMASTER_DIED)
			break;
		remaining = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		if (remaining <= 0)
		{
			ereport(DEBUG1,
					(errmsg_internal("delivery_outbox: partition maker for outbox %s stopped, still running after %d ms",
									 outbox_table_name(table),
									 OUTBOX_MAKER_WAIT + OUTBOX_MAKER_WAIT_EACH * nks)));
			TerminateBackgroundWorker(handle);
			status = WaitForBackgroundWorkerShutdown(handle);
			break;
		}
		rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_POSTMASTER_DEATH,
					   remaining, PG_WAIT_EXTENSION);
		if (rc & WL_POSTMASTER_DEATH)
		{
			status = BGWH_POSTMASTER_DIED;
			break;
		}
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	if (status == BGWH_POSTMASTER_DIED)
		ereport(FATAL,
				(errcode(ERRCODE_ADMIN_SHUTDOWN),
				 errmsg("postmaster exited while a partition was being made")));
	pfree(handle);
	return status == BGWH_STOPPED;
}

/*
 * outbox_maker_blocked
 *
 * Whether the maker would wait for this transaction: it holds a lock on the
 * outbox that conflicts with the maker's SHARE UPDATE EXCLUSIVE (that one
 * or stronger; ROW EXCLUSIVE, row locks and ACCESS SHARE do not, nor does
 * the ACCESS SHARE that CREATE TABLE ... LIKE takes), or the outbox has a
 * default partition, which ATTACH PARTITION locks ACCESS EXCLUSIVE and
 * which this transaction may have written to.
 */
static bool
outbox_maker_blocked(OutboxTable *table)
{
	Relation	rel = table_open(outbox_table_relid(table), AccessShareLock);
	PartitionDesc pd = RelationGetPartitionDesc(rel, true);
	bool		blocked;

	blocked = CheckRelationLockedByMe(rel, ShareUpdateExclusiveLock, true) ||
		(pd->boundinfo != NULL && partition_bound_has_default(pd->boundinfo));
	table_close(rel, AccessShareLock);
	return blocked;
}

/*
 * outbox_maker_backing_off
 *
 * Whether a maker started by this backend for outbox relid left partitions
 * missing less than OUTBOX_MAKER_BACKOFF ago.
 */
static bool
outbox_maker_backing_off(Oid relid)
{
	OutboxMakerFailure *f;

	if (outbox_maker_failures == NULL)
		return false;
	f = hash_search(outbox_maker_failures, &relid, HASH_FIND, NULL);
	return f != NULL &&
		!TimestampDifferenceExceeds(f->failed_at, GetCurrentTimestamp(),
									OUTBOX_MAKER_BACKOFF);
}

/*
 * outbox_maker_failed
 *
 * Remember (failed) or forget that a maker for outbox relid left
 * partitions missing just now.  Kept in backend memory: a lasting failure
 * (a name clash, an event trigger, a lock held for long) then costs each
 * backend one maker per OUTBOX_MAKER_BACKOFF, not one per enqueue.
 */
static void
outbox_maker_failed(Oid relid, bool failed)
{
	OutboxMakerFailure *f;

	if (outbox_maker_failures == NULL)
	{
		HASHCTL		ctl;

		if (!failed)
			return;
		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(OutboxMakerFailure);
		ctl.hcxt = TopMemoryContext;
		outbox_maker_failures = hash_create("delivery_outbox partition makers",
											16, &ctl,
											HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	if (failed)
	{
		f = hash_search(outbox_maker_failures, &relid, HASH_ENTER, NULL);
		f->failed_at = GetCurrentTimestamp();
		ereport(DEBUG1,
				(errmsg_internal("delivery_outbox: partition maker for outbox %u left partitions missing; none is started again for %d ms",
								 relid, OUTBOX_MAKER_BACKOFF)));
	}
	else
		(void) hash_search(outbox_maker_failures, &relid, HASH_REMOVE, NULL);
}

/*
 * outbox_partitions_worker_main
 *
 * Entry point of the worker outbox_make_in_worker starts: make the
 * partitions its request names, in a transaction of its own.  SIGTERM sets
 * the interrupt flag (die) rather than exiting from the handler, so that a
 * stop inside the DDL's critical sections waits for their end.
 */
void
outbox_partitions_worker_main(Datum main_arg)
{
	OutboxMakeRequest req;
	OutboxTable *table;
	char		timeout[16];

	memcpy(&req, MyBgworkerEntry->bgw_extra, sizeof(req));
	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(req.dboid, req.userid, 0);
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "delivery_outbox: making partitions");
	snprintf(timeout, sizeof(timeout), "%d", OUTBOX_MAKER_LOCK_TIMEOUT);
	(void) set_config_option("lock_timeout", timeout, PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SET, true, 0, false);
	if (outbox_installed() &&
		(table = outbox_find_table(req.relid)) != NULL &&
		outbox_table_partitioned(table))
	{
		int64	   *ks;
		int			nks;
		int64		need_k;

		nks = outbox_partitions_wanted(table, req.rows, &ks, &need_k);
		(void) outbox_make_missing(table, ks, nks, need_k, true);
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	proc_exit(0);
}

/*
 * outbox_partitions_make_for
 *
 * Make the missing partitions of ids (positive ones; nids of them), which
 * rows are about to take (outbox_redrive: dead letters of a partition
 * dropped since), waiting for the lock.  Returns how many were made.
 */
int
outbox_partitions_make_for(OutboxTable *table, const int64 *ids, int nids)
{
	int64		n = outbox_table_policy(table)->partition_rows;
	int64	   *ks;
	int			nks = 0;
	int			i;

	if (!outbox_table_partitioned(table) || nids == 0)
		return 0;
	ks = palloc(sizeof(int64) * nids);
	for (i = 0; i < nids; i++)
		if (ids[i] > 0)
			ks[nks++] = (ids[i] - 1) / n;
	qsort(ks, nks, sizeof(int64), outbox_int64_cmp);
	nks = qunique(ks, nks, sizeof(int64), outbox_int64_cmp);
	return outbox_make_missing(table, ks, nks, PG_INT64_MAX, true);
}

/*
 * outbox_make_missing
 *
 * Make those of partitions ks (nks of them, ascending) that are missing,
 * under the outbox's SHARE UPDATE EXCLUSIVE lock, held to the end of the
 * transaction: waited for (wait, or a partition up to need_k is missing),
 * else had at once or nothing is done (another session is making or
 * dropping one).  A partition up to
 * need_k that cannot be made is an error, a later one a warning.  Returns
 * how many were made.
 */
static int
outbox_make_missing(OutboxTable *table, const int64 *ks, int nks,
					int64 need_k, bool wait)
{
	int64		n = outbox_table_policy(table)->partition_rows;
	Oid			relid = outbox_table_relid(table);
	int			made = 0;
	int			nparts;
	int			i;
	OutboxPartition *parts;
	Relation	rel;
	OutboxPartitionJob job;

	rel = table_open(relid, AccessShareLock);
	nparts = outbox_partition_list(rel, &parts);
	for (i = 0; i < nks; i++)
		if (outbox_range_free(parts, nparts, outbox_part_lower(ks[i], n), outbox_part_upper(ks[i], n)))
			break;
	if (i == nks)
	{
		table_close(rel, AccessShareLock);
		return 0;				/* the usual case: all there */
	}

	/*
	 * A partition the rows need now is waited for: the session holding the
	 * lock is making it, or dropping one, and this one makes it if that
	 * session rolls back.
	 */
	if (wait || ks[i] <= need_k)
		LockRelationOid(relid, ShareUpdateExclusiveLock);
	else if (!ConditionalLockRelationOid(relid, ShareUpdateExclusiveLock))
	{
		table_close(rel, AccessShareLock);
		return 0;
	}

	/*
	 * What the lock's holder before us made is in the catalogs now.  The
	 * table is closed again, but stays locked: ALTER TABLE refuses a table
	 * this session has open.
	 */
	pfree(parts);
	nparts = outbox_partition_list(rel, &parts);
	outbox_partition_job(rel, &job);
	table_close(rel, NoLock);
	for (i = 0; i < nks; i++)
	{
		ErrorData  *edata;

		if (!outbox_range_free(parts, nparts, outbox_part_lower(ks[i], n), outbox_part_upper(ks[i], n)))
			continue;
		job.k = ks[i];
		job.rows = n;

		/*
		 * A partition made ahead that cannot be made (the owner lost CREATE
		 * on the schema, a name taken) is a warning; one the rows need now is
		 * the caller's error.
		 */
		edata = outbox_subxact_try(outbox_make_partition_work, &job, NULL, NULL);
		if (edata == NULL)
			made++;
		else if (ks[i] <= need_k)
			ReThrowError(edata);
		else
		{
			ereport(WARNING,
					(errmsg("could not make partition " INT64_FORMAT " of outbox %s: %s",
							ks[i], outbox_table_name(table), edata->message),
					 errhint("It is tried again when the next rows are enqueued, and at the worker's sweeps.")));
			FreeErrorData(edata);
			break;
		}
	}
	return made;
}


/*
 * outbox_partitions_ahead
 *
 * SQL: outbox_partitions_ahead(tbl regclass) → integer, for outbox_create:
 * make the first partitions of a new partitioned outbox.  Not for direct
 * use (no grant to PUBLIC).
 */
Datum
outbox_partitions_ahead(PG_FUNCTION_ARGS)
{
	OutboxTable *table = outbox_find_table(PG_GETARG_OID(0));

	if (table == NULL || !outbox_table_partitioned(table))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("relation with OID %u is not a partitioned outbox",
						PG_GETARG_OID(0))));
	{
		int64	   *ks;
		int			nks;
		int64		need_k;

		/* the new table is this transaction's: its lock is had at once */
		nks = outbox_partitions_wanted(table, 0, &ks, &need_k);
		PG_RETURN_INT32(outbox_make_missing(table, ks, nks, PG_INT64_MAX, false));
	}
}

/*
 * outbox_partition_list
 *
 * The partitions of rel with their id ranges, in id order (palloc'd).  A
 * bound of MINVALUE or MAXVALUE (a partition someone added by hand) is
 * taken as the int8 range's end.
 */
int
outbox_partition_list(Relation rel, OutboxPartition **parts)
{
	PartitionDesc pd = RelationGetPartitionDesc(rel, true);
	PartitionBoundInfo b = pd->boundinfo;
	int			n = 0;
	int			i;

	*parts = palloc(sizeof(OutboxPartition) * Max(pd->nparts, 1));
	if (b == NULL || b->strategy != PARTITION_STRATEGY_RANGE)
		return 0;
	for (i = 1; i < b->ndatums; i++)
	{
		int			p = b->indexes[i];

		if (p < 0)
			continue;
		(*parts)[n].relid = pd->oids[p];
		(*parts)[n].lower = b->kind[i - 1][0] == PARTITION_RANGE_DATUM_VALUE ?
			DatumGetInt64(b->datums[i - 1][0]) : PG_INT64_MIN;
		(*parts)[n].upper = b->kind[i][0] == PARTITION_RANGE_DATUM_VALUE ?
			DatumGetInt64(b->datums[i][0]) : PG_INT64_MAX;
		n++;
	}
	return n;
}

/*
 * outbox_range_free
 *
 * Whether no partition overlaps the ids [lower, upper).
 */
static bool
outbox_range_free(const OutboxPartition *parts, int nparts, int64 lower,
				  int64 upper)
{
	int			i;

	for (i = 0; i < nparts; i++)
		if (parts[i].lower < upper && lower < parts[i].upper)
			return false;
	return true;
}

/*
 * outbox_partition_job
 *
 * What making or dropping a partition of rel needs of it, for use once
 * rel is closed.
 */
void
outbox_partition_job(Relation rel, OutboxPartitionJob *job)
{
	memset(job, 0, sizeof(*job));
	job->relid = RelationGetRelid(rel);
	job->owner = rel->rd_rel->relowner;
	job->nspid = RelationGetNamespace(rel);
	job->relname = pstrdup(RelationGetRelationName(rel));
}

/*
 * outbox_make_partition
 *
 * Make partition job->k of job->relid (job->rows ids each) as its owner: a
 * table like it, attached for its range.  Its indexes and row triggers
 * come from the outbox's.
 */
static void
outbox_make_partition(OutboxPartitionJob *job)
{
	char	   *nsp = get_namespace_name(job->nspid);
	char		suffix[48];
	char	   *name;
	int			attempt;
	char	   *qname;
	char	   *parent;
	int			save_nestlevel;
	OutboxPartitionSql sql = {0};

	/* <table>_p<k>, the table's name shortened to fit, a number if taken */
	for (attempt = 0;; attempt++)
	{
		int			len;

		if (attempt == 0)
			snprintf(suffix, sizeof(suffix), "_p" INT64_FORMAT, job->k);
		else
			snprintf(suffix, sizeof(suffix), "_p" INT64_FORMAT "_%d", job->k, attempt);
		len = pg_mbcliplen(job->relname, strlen(job->relname),
						   NAMEDATALEN - 1 - strlen(suffix));
		name = psprintf("%.*s%s", len, job->relname, suffix);
		/* a relation's name is its row type's too */
		if (!OidIsValid(get_relname_relid(name, job->nspid)) &&
			!OidIsValid(GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid,
										CStringGetDatum(name),
										ObjectIdGetDatum(job->nspid))))
			break;
	}
	qname = quote_qualified_identifier(nsp, name);
	parent = quote_qualified_identifier(nsp, job->relname);

	/*
	 * As the calling user: the owner may lack CREATE on the schema, and
	 * cannot give the table to itself.  Nothing of the outbox runs here: LIKE
	 * copies the defaults and CHECK constraints without evaluating them, and
	 * the new table has no row, no index and no trigger yet.
	 */
	save_nestlevel = outbox_safe_path();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute(psprintf("CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS"
							 " INCLUDING CONSTRAINTS INCLUDING STORAGE"
							 " INCLUDING COMPRESSION)", qname, parent),
					false, 0) != SPI_OK_UTILITY ||
		SPI_execute(psprintf("ALTER TABLE %s OWNER TO %s", qname,
							 quote_identifier(GetUserNameFromId(job->owner, false))),
					false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not make partition %s", qname);
	SPI_finish();
	AtEOXact_GUC(true, save_nestlevel);

	/*
	 * ATTACH PARTITION scans the new table (and a default partition), builds
	 * the outbox's indexes on it and simplifies its CHECK constraints and
	 * index expressions, which evaluates the immutable calls among them: the
	 * owner's functions run there.  So it runs as the outbox's owner, who
	 * owns both tables now.  But it also copies the outbox's row triggers to
	 * the new table, checking EXECUTE on their functions for the current
	 * user, and the extension's are granted to nobody: an owner without that
	 * grant gets the ATTACH run as the calling user, only if none of those
	 * expressions calls anything but a built-in function (nothing of the
	 * owner's can run then).
	 */
	sql.sql = psprintf("ALTER TABLE %s ATTACH PARTITION %s"
					   " FOR VALUES FROM (" INT64_FORMAT ") TO (" INT64_FORMAT ")",
					   parent, qname, outbox_part_lower(job->k, job->rows),
					   outbox_part_upper(job->k, job->rows));
	if (outbox_owner_may_attach(job))
		outbox_as_owner(job->owner, outbox_run_utility, &sql);
	else
	{
		save_nestlevel = outbox_safe_path();
		outbox_run_utility(&sql);
		AtEOXact_GUC(true, save_nestlevel);
	}
	ereport(DEBUG1,
			(errmsg_internal("delivery_outbox: made partition %s of outbox %s",
							 qname, parent)));
}

/*
 * outbox_owner_may_attach
 *
 * Whether the owner of outbox job->relid may execute the function of every
 * row trigger ATTACH PARTITION copies from it (its triggers that are not
 * internal).  When not, and the outbox's CHECK constraints, index
 * expressions or index predicates call a function that is not built in,
 * raises 42501: attaching as the calling user could run that function
 * with the caller's rights.
 */
static bool
outbox_owner_may_attach(OutboxPartitionJob *job)
{
	Relation	rel = table_open(job->relid, AccessShareLock);
	TriggerDesc *trigdesc = rel->trigdesc;
	Oid			denied = InvalidOid;
	int			i;

	for (i = 0; trigdesc != NULL && i < trigdesc->numtriggers; i++)
	{
		Trigger    *tg = &trigdesc->triggers[i];

		if (!TRIGGER_FOR_ROW(tg->tgtype) || tg->tgisinternal)
			continue;
		if (!DatumGetBool(DirectFunctionCall3(has_function_privilege_id_id,
											  ObjectIdGetDatum(job->owner),
											  ObjectIdGetDatum(tg->tgfoid),
											  CStringGetTextDatum("EXECUTE"))))
		{
			denied = tg->tgfoid;
			break;
		}
	}
	if (OidIsValid(denied) && outbox_rel_calls_functions(rel))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("cannot attach a new partition to outbox \"%s\" as its owner",
						RelationGetRelationName(rel)),
				 errdetail("Its CHECK constraints or index expressions call functions that are not built in, and role \"%s\" may not execute the trigger function %s that attaching copies to the partition.",
						   GetUserNameFromId(job->owner, false),
						   format_procedure(denied)),
				 errhint("Grant EXECUTE on function %s to role \"%s\".",
						 format_procedure(denied),
						 GetUserNameFromId(job->owner, false))));
	table_close(rel, AccessShareLock);
	return !OidIsValid(denied);
}

/* check_functions_in_node's test: a function that is not built in */
static bool
outbox_not_built_in(Oid func_id, void *context)
{
	return func_id >= FirstNormalObjectId;
}

/* outbox_rel_calls_functions's walker */
static bool
outbox_calls_walker(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (check_functions_in_node(node, outbox_not_built_in, context))
		return true;
	return expression_tree_walker(node, outbox_calls_walker, context);
}

/*
 * outbox_rel_calls_functions
 *
 * Whether a CHECK constraint of rel, or an expression or predicate of one
 * of its indexes, calls a function (an operator's, a cast's, a type's
 * I/O) that is not built in.  The expressions are read as stored, never
 * simplified: simplifying them would evaluate their immutable calls.
 */
static bool
outbox_rel_calls_functions(Relation rel)
{
	TupleConstr *constr = RelationGetDescr(rel)->constr;
	List	   *indexes;
	ListCell   *lc;
	int			i;

	for (i = 0; constr != NULL && i < constr->num_check; i++)
		if (outbox_calls_walker(stringToNode(constr->check[i].ccbin), NULL))
			return true;
	indexes = RelationGetIndexList(rel);
	foreach(lc, indexes)
	{
		HeapTuple	tup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(lfirst_oid(lc)));
		bool		calls = false;
		AttrNumber	cols[2] = {Anum_pg_index_indexprs, Anum_pg_index_indpred};
		int			c;

		if (!HeapTupleIsValid(tup))
			continue;
		for (c = 0; c < 2 && !calls; c++)
		{
			bool		isnull;
			Datum		d = SysCacheGetAttr(INDEXRELID, tup, cols[c], &isnull);

			if (!isnull)
				calls = outbox_calls_walker(stringToNode(TextDatumGetCString(d)), NULL);
		}
		ReleaseSysCache(tup);
		if (calls)
			return true;
	}
	return false;
}

/*
 * outbox_partition_next_id
 *
 * A lower bound of the next id of a partitioned outbox's sequence (1 for
 * an outbox without one).
 */
int64
outbox_partition_next_id(OutboxTable *table)
{
	Oid			seqrelid;

	if (!outbox_order_sequence(outbox_table_relid(table), &seqrelid))
		return 1;
	return outbox_order_next_id(seqrelid);
}

/*
 * outbox_run_utility
 *
 * outbox_as_owner's work: run the utility statement sql->sql.
 */
void
outbox_run_utility(void *arg)
{
	OutboxPartitionSql *sql = arg;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute(sql->sql, false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not run \"%s\"", sql->sql);
	SPI_finish();
}

/*
 * outbox_run_select
 *
 * outbox_as_owner's work: run sql->sql, a query of one by-value column and
 * one row, with sql->snapshot (or the transaction's), into sql->value and
 * sql->isnull.  row_security is off, so that a policy the owner forced on
 * the table raises 42501 rather than hiding the rows a drop must see.
 */
void
outbox_run_select(void *arg)
{
	OutboxPartitionSql *sql = arg;
	SPIPlanPtr	plan;

	(void) set_config_option("row_security", "off", PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	plan = SPI_prepare(sql->sql, 0, NULL);
	if (plan == NULL ||
		SPI_execute_snapshot(plan, NULL, NULL, sql->snapshot, InvalidSnapshot,
							 true, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not run \"%s\"", sql->sql);
	sql->value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
							   1, &sql->isnull);
	SPI_finish();
}

/* outbox_subxact_try's work: making a partition */
static bool
outbox_make_partition_work(void *arg)
{
	OutboxPartitionJob *job = arg;

	outbox_make_partition(job);
	return true;
}

/*
 * outbox_safe_path
 *
 * A GUC nest level with search_path pinned to pg_catalog, pg_temp, for the
 * statements run on an outbox's partitions; the caller ends it with
 * AtEOXact_GUC(true, level).
 */
static int
outbox_safe_path(void)
{
	int			level = NewGUCNestLevel();

	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	return level;
}
