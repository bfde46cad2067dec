/*-------------------------------------------------------------------------
 *
 * outbox_sweeper.c
 *		The outbox's background worker and shared memory.
 *
 * With shared_preload_libraries = 'delivery_outbox', one worker runs for
 * each database named in delivery_outbox.database.  Each pass of its loop:
 *
 * - sends the wake-ups that producers in notify = deferred mode handed over
 *	 at commit (a ring of row ids per served database, in shared memory),
 *	 in batches, one NOTIFY per id, from its own transactions;
 * - every sweep_interval: moves rows delivered longer than reclaim_after
 *	 back to pending and, when retain_acked is set, deletes acked rows older
 *	 than it, both in bounded batches through the same C paths as
 *	 outbox_reclaim() and outbox_purge() (so the trigger stays the authority
 *	 and locked rows are skipped), then re-counts the open backlog.
 *
 * Shared memory also holds, per database, the counters behind
 * outbox_activity() and the condition variable that outbox_wait() sleeps
 * on; backends update them when their transactions commit.
 *
 * Invariants: a producer never blocks on the worker (a full ring drops the
 * wake-ups, counted, and never the rows); a ring is only written under its
 * database slot's spinlock, in short chunks; slots are allocated once and
 * never freed, so pointers to them stay valid for the life of the server.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_sweeper.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#if PG_VERSION_NUM >= 140000
#include "utils/backend_status.h"
#endif
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/varlena.h"

#include "delivery_outbox.h"

/* How many ids a spinlock section copies, and a transaction notifies. */
#define SWEEPER_COPY_CHUNK		256
#define SWEEPER_NOTIFY_BATCH	8192

/* Rows one sweep pass reclaims, and purges, at most. */
#define SWEEPER_MAX_ROWS		10000

/* Wake-up batches sent before the loop looks at its other duties again. */
#define SWEEPER_MAX_BATCHES		4


static void sweeper_shmem_request(void);
static void sweeper_shmem_startup(void);
static Size sweeper_shmem_size(void);
static List *sweeper_database_names(void);
static bool sweeper_database_check(char **newval, void **extra,
								   GucSource source);
static void sweeper_detach(int code, Datum arg);
static bool sweeper_send_wakeups(OutboxDatabase *db, int max_batches);
static bool sweeper_sweep(OutboxDatabase *db);
static void sweeper_recover(void);
static bool sweeper_ring_used(OutboxDatabase *db);

/* GUC variables */
char	   *outbox_database_names = NULL;
int			outbox_sweep_interval = 30000;
int			outbox_reclaim_after = 60;
int			outbox_retain_acked = -1;
int			outbox_handover_size = 65536;
int			outbox_deferred_batch_delay = 2;

OutboxShared *outbox_shared = NULL;

#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_shmem_request_hook = NULL;
#endif
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* The worker's own slot, and its wake-up batch buffer. */
static OutboxDatabase *sweeper_db = NULL;
static int64 *sweeper_batch = NULL;

/*
 * outbox_sweeper_init
 *
 * Called from _PG_init.  Defines the worker's reloadable GUCs; when loaded
 * through shared_preload_libraries, also the postmaster ones, asks for
 * shared memory and registers one worker per database in
 * delivery_outbox.database.
 */
void
outbox_sweeper_init(void)
{
	int			ndatabases;
	int			i;

	DefineCustomIntVariable(OUTBOX_GUC_PREFIX ".sweep_interval",
							"Time between two sweeps of the background worker.",
							NULL,
							&outbox_sweep_interval,
							30000, 10, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable(OUTBOX_GUC_PREFIX ".reclaim_after",
							"Rows delivered longer ago than this go back to pending at each sweep.",
							"-1 disables reclaiming by the worker.",
							&outbox_reclaim_after,
							60, -1, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable(OUTBOX_GUC_PREFIX ".retain_acked",
							"Acked rows older than this are purged at each sweep.",
							"-1 keeps acked rows until outbox_purge() is called.",
							&outbox_retain_acked,
							-1, -1, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	/* PGC_POSTMASTER settings exist only when the library is preloaded */
	if (!process_shared_preload_libraries_in_progress)
		return;

	/* only the worker reads it, and it runs only when preloaded */
	DefineCustomIntVariable(OUTBOX_GUC_PREFIX ".deferred_batch_delay",
							"In deferred mode, how long the worker lets wake-ups gather after sending a batch.",
							"0 sends each batch as soon as the previous one is out.  More delay means fewer, larger NOTIFY transactions, and that much more latency under load.",
							&outbox_deferred_batch_delay,
							2, 0, 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomStringVariable(OUTBOX_GUC_PREFIX ".database",
							   "Databases the delivery_outbox background worker serves.",
							   "A comma-separated list; empty means no worker.  Needs shared_preload_libraries.",
							   &outbox_database_names,
							   "",
							   PGC_POSTMASTER,
							   GUC_LIST_INPUT,
							   sweeper_database_check, NULL, NULL);

	DefineCustomIntVariable(OUTBOX_GUC_PREFIX ".handover_size",
							"Row ids each served database can hold for deferred wake-ups.",
							NULL,
							&outbox_handover_size,
							65536, 1024, 16 * 1024 * 1024,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);


#if PG_VERSION_NUM >= 150000
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = sweeper_shmem_request;
#else
	sweeper_shmem_request();
#endif
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = sweeper_shmem_startup;

	ndatabases = list_length(sweeper_database_names());
	for (i = 0; i < ndatabases; i++)
	{
		BackgroundWorker worker;

		memset(&worker, 0, sizeof(worker));
		worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
			BGWORKER_BACKEND_DATABASE_CONNECTION;
		worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
		worker.bgw_restart_time = 5;
		snprintf(worker.bgw_library_name, BGW_MAXLEN, "delivery_outbox");
		snprintf(worker.bgw_function_name, BGW_MAXLEN, "outbox_sweeper_main");
		snprintf(worker.bgw_name, BGW_MAXLEN, "delivery_outbox sweeper %d", i);
		snprintf(worker.bgw_type, BGW_MAXLEN, "delivery_outbox sweeper");
		worker.bgw_main_arg = Int32GetDatum(i);
		RegisterBackgroundWorker(&worker);
	}
}

/*
 * sweeper_database_check
 *
 * delivery_outbox.database must be a list of at most OUTBOX_MAX_WORKERS names.
 */
static bool
sweeper_database_check(char **newval, void **extra, GucSource source)
{
	char	   *raw = pstrdup(*newval);
	List	   *names;
	bool		ok;

	ok = SplitIdentifierString(raw, ',', &names);
	if (!ok)
		GUC_check_errdetail("List syntax is invalid.");
	else if (list_length(names) > OUTBOX_MAX_WORKERS)
	{
		GUC_check_errdetail("At most %d databases can be served.",
							OUTBOX_MAX_WORKERS);
		ok = false;
	}
	else
	{
		ListCell   *a;
		ListCell   *b;

		foreach(a, names)
		{
			for_each_cell(b, names, lnext(names, a))
			{
				if (strcmp(lfirst(a), lfirst(b)) == 0)
				{
					GUC_check_errdetail("Database \"%s\" is listed twice.",
										(char *) lfirst(a));
					ok = false;
				}
			}
		}
	}
	list_free(names);
	pfree(raw);
	return ok;
}

/*
 * sweeper_database_names
 *
 * The names in delivery_outbox.database (NIL when empty or malformed; the
 * check hook rejects malformed lists).
 */
static List *
sweeper_database_names(void)
{
	char	   *raw = pstrdup(outbox_database_names ? outbox_database_names : "");
	List	   *names;

	if (!SplitIdentifierString(raw, ',', &names))
		return NIL;
	return names;
}

static Size
sweeper_shmem_size(void)
{
	Size		size = offsetof(OutboxShared, rings);

	size = add_size(size, mul_size(mul_size(OUTBOX_MAX_WORKERS,
											outbox_handover_size),
								   sizeof(int64)));
	return size;
}

static void
sweeper_shmem_request(void)
{
#if PG_VERSION_NUM >= 150000
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
#endif
	RequestAddinShmemSpace(sweeper_shmem_size());
}

/*
 * sweeper_shmem_startup
 *
 * Create (or attach to) the shared state.
 */
static void
sweeper_shmem_startup(void)
{
	bool		found;
	int			i;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	outbox_shared = ShmemInitStruct("delivery_outbox", sweeper_shmem_size(),
									&found);
	if (!found)
	{
		SpinLockInit(&outbox_shared->mutex);
		for (i = 0; i < OUTBOX_MAX_PREPARED; i++)
			outbox_shared->prepared[i].dboid = InvalidOid;
		outbox_shared->started = GetCurrentTimestamp();
		outbox_shared->ring_size = outbox_handover_size;
		for (i = 0; i < OUTBOX_MAX_DATABASES; i++)
		{
			OutboxDatabase *db = &outbox_shared->databases[i];
			int			c;

			db->dboid = InvalidOid;
			for (c = 0; c < OUTBOX_NUM_COUNTERS; c++)
				pg_atomic_init_u64(&db->counters[c], 0);
			pg_atomic_init_u32(&db->backlog_valid, 0);
			pg_atomic_init_u64(&db->backlog_counted_at, 0);
			ConditionVariableInit(&db->pending_cv);
			SpinLockInit(&db->mutex);
			db->ring = -1;
			db->worker_pid = 0;
			db->worker_latch = NULL;
			db->ring_head = 0;
			db->ring_tail = 0;
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * outbox_database
 *
 * The shared slot of a database, allocated on first use when create is
 * true.  NULL without shared memory, or when every slot is taken.
 */
OutboxDatabase *
outbox_database(Oid dboid, bool create)
{
	OutboxDatabase *result = NULL;
	int			i;

	if (outbox_shared == NULL || !OidIsValid(dboid))
		return NULL;

	/* dboid is written once, under the mutex, before the slot is used */
	for (i = 0; i < OUTBOX_MAX_DATABASES; i++)
	{
		if (outbox_shared->databases[i].dboid == dboid)
			return &outbox_shared->databases[i];
	}
	if (!create)
		return NULL;

	SpinLockAcquire(&outbox_shared->mutex);
	for (i = 0; i < OUTBOX_MAX_DATABASES && result == NULL; i++)
	{
		OutboxDatabase *db = &outbox_shared->databases[i];

		if (db->dboid == dboid)
			result = db;
		else if (!OidIsValid(db->dboid))
		{
			db->dboid = dboid;
			result = db;
		}
	}
	SpinLockRelease(&outbox_shared->mutex);

	return result;
}

/*
 * outbox_forget_database
 *
 * The database was dropped: give its slot back, counters cleared, unless a
 * worker's ring is attached to it (a served database keeps its slot; its
 * worker cannot connect any more and retries until the list changes).
 */
void
outbox_forget_database(Oid dboid)
{
	int			i;

	if (outbox_shared == NULL)
		return;

	SpinLockAcquire(&outbox_shared->mutex);
	for (i = 0; i < OUTBOX_MAX_DATABASES; i++)
	{
		OutboxDatabase *db = &outbox_shared->databases[i];
		int			c;

		if (db->dboid != dboid || db->ring >= 0)
			continue;
		for (c = 0; c < OUTBOX_NUM_COUNTERS; c++)
			pg_atomic_write_u64(&db->counters[c], 0);
		pg_atomic_write_u32(&db->backlog_valid, 0);
		db->dboid = InvalidOid;
	}
	SpinLockRelease(&outbox_shared->mutex);
}

/*
 * outbox_handover
 *
 * Called by a committed producer (notify = deferred): append the ids to the
 * database's ring and wake its worker.  Must not fail and must not wait: what
 * does not fit is dropped and counted (the rows are there; relays drain).
 */
void
outbox_handover(OutboxDatabase *db, const int64 *ids, int nids)
{
	int64	   *ring;
	int			size = outbox_shared->ring_size;
	int			done = 0;
	Latch	   *latch = NULL;

	while (done < nids)
	{
		int			n = Min(nids - done, SWEEPER_COPY_CHUNK);
		int			i;

		SpinLockAcquire(&db->mutex);
		if (db->ring < 0)
		{
			SpinLockRelease(&db->mutex);
			break;
		}
		ring = &outbox_shared->rings[(Size) db->ring * size];
		/* an empty ring means the worker may be asleep: wake it */
		if (db->ring_head == db->ring_tail)
			latch = db->worker_latch;
		n = Min(n, (int) (size - (db->ring_head - db->ring_tail)));
		for (i = 0; i < n; i++)
			ring[(db->ring_head + i) % size] = ids[done + i];
		db->ring_head += n;
		SpinLockRelease(&db->mutex);

		if (n == 0)
			break;				/* full */
		done += n;
	}

	if (done < nids)
		pg_atomic_fetch_add_u64(&db->counters[OUTBOX_COUNT_HANDOVER_DROPPED],
								nids - done);
	if (latch != NULL)
		SetLatch(latch);
}

/*
 * outbox_sweeper_main
 *
 * Entry point of the worker serving the main_arg-th database of
 * delivery_outbox.database.
 */
void
outbox_sweeper_main(Datum main_arg)
{
	int			index = DatumGetInt32(main_arg);
	List	   *names;
	char	   *dbname;
	volatile TimestampTz next_sweep = 0;
	volatile bool missing_logged = false;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	names = sweeper_database_names();
	dbname = index < list_length(names) ? (char *) list_nth(names, index) : NULL;
	if (dbname == NULL || outbox_shared == NULL)
		proc_exit(0);			/* the list changed; nothing to serve */

	BackgroundWorkerInitializeConnection(dbname, NULL, 0);
	pgstat_report_appname("delivery_outbox sweeper");

	/*
	 * Wake-ups need no durability: do not wait for WAL flushes.  Passes are
	 * bounded by themselves; a database-wide timeout must not abort them.
	 */
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("lock_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("idle_in_transaction_session_timeout", "0", PGC_SUSET,
					PGC_S_OVERRIDE);
	/* the same path the kept plans were first parsed under: no re-parsing */
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET,
					PGC_S_OVERRIDE);

	sweeper_batch = MemoryContextAlloc(TopMemoryContext,
									   sizeof(int64) * SWEEPER_NOTIFY_BATCH);

	sweeper_db = outbox_database(MyDatabaseId, true);
	if (sweeper_db == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("delivery_outbox cannot track more than %d databases",
						OUTBOX_MAX_DATABASES)));

	SpinLockAcquire(&sweeper_db->mutex);
	sweeper_db->ring = index;
	sweeper_db->worker_pid = MyProcPid;
	sweeper_db->worker_latch = MyLatch;
	SpinLockRelease(&sweeper_db->mutex);
	before_shmem_exit(sweeper_detach, (Datum) 0);

	ereport(LOG,
			(errmsg("delivery_outbox sweeper started for database \"%s\"",
					dbname)));

	for (;;)
	{
		TimestampTz now;
		long		timeout;
		bool		more = false;
		bool		sent = false;
		bool		failed = false;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			next_sweep = 0;		/* apply a new interval right away */
		}

		now = GetCurrentTimestamp();
		PG_TRY();
		{
			sent = sweeper_ring_used(sweeper_db);
			more = sweeper_send_wakeups(sweeper_db, SWEEPER_MAX_BATCHES);

			if (now >= next_sweep)
			{
				/* due or not, the next pass is an interval away */
				next_sweep = TimestampTzPlusMilliseconds(now,
														 outbox_sweep_interval);
				if (sweeper_sweep(sweeper_db))
				{
					if (missing_logged)
						ereport(LOG,
								(errmsg("delivery_outbox sweeper: extension found in database \"%s\", sweeping",
										dbname)));
					missing_logged = false;
				}
				else if (!missing_logged)
				{
					ereport(LOG,
							(errmsg("delivery_outbox sweeper: extension \"%s\" is not installed in database \"%s\", waiting",
									OUTBOX_EXTENSION_NAME, dbname)));
					missing_logged = true;
				}
			}
		}
		PG_CATCH();
		{
			sweeper_recover();
			failed = true;
		}
		PG_END_TRY();

		if (more && !failed)
			continue;			/* wake-ups still waiting: no sleep */

		/*
		 * Having just sent wake-ups, let a little more accumulate before the
		 * next batch: under load this turns a transaction per producer
		 * commit into one per deferred_batch_delay, at that much latency.
		 */
		if (sent && !failed && outbox_deferred_batch_delay > 0)
			(void) WaitLatch(MyLatch, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 outbox_deferred_batch_delay, PG_WAIT_EXTENSION);

		now = GetCurrentTimestamp();
		timeout = TimestampDifferenceMilliseconds(now, next_sweep);
		if (failed)
			timeout = Min(timeout, 1000);	/* retry, but not in a hot loop */
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Max(timeout, failed ? 1000 : 1),
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/*
 * sweeper_ring_used
 *
 * Whether ids are waiting in the ring.
 */
static bool
sweeper_ring_used(OutboxDatabase *db)
{
	bool		used;

	SpinLockAcquire(&db->mutex);
	used = db->ring_head != db->ring_tail;
	SpinLockRelease(&db->mutex);
	return used;
}

/*
 * sweeper_recover
 *
 * An error in a pass: report it, abort the transaction, and go on with the
 * loop (the worker does not exit for an error it may well meet again; the
 * loop retries after a second).  The wake-ups of a failed batch are lost.
 */
static void
sweeper_recover(void)
{
	HOLD_INTERRUPTS();
	EmitErrorReport();
	AbortOutOfAnyTransaction();
	FlushErrorState();
	MemoryContextSwitchTo(TopMemoryContext);
	pgstat_report_activity(STATE_IDLE, NULL);
	RESUME_INTERRUPTS();
}

/*
 * sweeper_detach
 *
 * On exit: stop taking hand-overs into this worker's ring's latch.  The
 * ring itself stays attached to the slot, so ids handed over while the
 * worker restarts are sent by its successor.
 */
static void
sweeper_detach(int code, Datum arg)
{
	if (sweeper_db == NULL)
		return;
	SpinLockAcquire(&sweeper_db->mutex);
	sweeper_db->worker_pid = 0;
	sweeper_db->worker_latch = NULL;
	SpinLockRelease(&sweeper_db->mutex);
}

/*
 * sweeper_send_wakeups
 *
 * NOTIFY the ids waiting in the ring, SWEEPER_NOTIFY_BATCH per transaction,
 * at most max_batches transactions.  Returns true when ids are still waiting.
 */
static bool
sweeper_send_wakeups(OutboxDatabase *db, int max_batches)
{
	int			size = outbox_shared->ring_size;
	int64	   *ring = &outbox_shared->rings[(Size) db->ring * size];
	int			batches;
	bool		more;

	for (batches = 0; batches < max_batches; batches++)
	{
		int			n = 0;
		int			i;

		while (n < SWEEPER_NOTIFY_BATCH)
		{
			int			take;

			SpinLockAcquire(&db->mutex);
			take = (int) Min((uint64) Min(SWEEPER_COPY_CHUNK,
										  SWEEPER_NOTIFY_BATCH - n),
							 db->ring_head - db->ring_tail);
			for (i = 0; i < take; i++)
				sweeper_batch[n + i] = ring[(db->ring_tail + i) % size];
			db->ring_tail += take;
			SpinLockRelease(&db->mutex);
			if (take == 0)
				break;
			n += take;
		}
		if (n == 0)
			return false;

		StartTransactionCommand();
		pgstat_report_activity(STATE_RUNNING, "delivery_outbox: sending wake-ups");
		for (i = 0; i < n; i++)
			outbox_notify(sweeper_batch[i]);
		CommitTransactionCommand();
		pgstat_report_activity(STATE_IDLE, NULL);
	}

	SpinLockAcquire(&db->mutex);
	more = db->ring_head != db->ring_tail;
	SpinLockRelease(&db->mutex);
	return more;
}

/*
 * sweeper_sweep
 *
 * One bounded pass: reclaim, purge and re-count the backlog, each in a
 * transaction of its own, with waiting wake-ups sent in between so that a
 * pass delays them little.  Each transaction first locks the outbox table
 * (and re-checks that it is still the extension's), so DROP EXTENSION waits
 * for a step instead of failing it.  Returns false when the extension is not
 * installed in this database.
 */
static bool
sweeper_sweep(OutboxDatabase *db)
{
	int			step;

	for (step = 0; step < 3; step++)
	{
		TimestampTz now;
		bool		installed;

		if (step == 0 ? outbox_reclaim_after < 0 :
			step == 1 ? outbox_retain_acked < 0 : false)
			continue;

		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());
		installed = outbox_lock_table();
		if (installed)
		{
			pgstat_report_activity(STATE_RUNNING, "delivery_outbox: sweep");
			now = GetCurrentTimestamp();
			if (step == 0)
				(void) outbox_reclaim_rows(TimestampTzPlusMilliseconds(now,
																	   -(int64) outbox_reclaim_after * 1000),
										   SWEEPER_MAX_ROWS);
			else if (step == 1)
				(void) outbox_purge_rows(TimestampTzPlusMilliseconds(now,
																	 -(int64) outbox_retain_acked * 1000),
										 SWEEPER_MAX_ROWS);
			else
				outbox_sync_backlog(db);	/* after the pass's own changes */
		}
		PopActiveSnapshot();
		CommitTransactionCommand();
		pgstat_report_activity(STATE_IDLE, NULL);
		if (!installed)
			return false;

		(void) sweeper_send_wakeups(db, SWEEPER_MAX_BATCHES);
	}
	pgstat_report_stat(true);

	return true;
}
