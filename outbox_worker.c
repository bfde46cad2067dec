/*-------------------------------------------------------------------------
 *
 * outbox_worker.c
 *		The outbox's background worker.
 *
 * With shared_preload_libraries = 'delivery_outbox', one worker runs for
 * each database named in delivery_outbox.database (registered by _PG_init,
 * the database's name in bgw_extra, its hand-over ring's index in
 * bgw_main_arg).  Each pass of its loop:
 *
 * - sends the wake-ups that producers in notify = deferred mode handed over
 *	 at commit (a ring of row ids per served database, in shared memory),
 *	 in batches, one NOTIFY per id, from its own transactions;
 * - every sweep_interval: moves rows delivered longer than reclaim_after
 *	 back to pending and, when retain_acked is set, deletes acked rows older
 *	 than it, both in bounded batches through the same C paths as
 *	 outbox_reclaim() and outbox_purge() (so the trigger stays the authority
 *	 and locked rows are skipped), dead-letters pending rows past their
 *	 expiry, then re-counts the open backlog;
 * - when the next row scheduled for later (not_before) falls due, or a
 *	 producer committed new ones: notifies the rows that fell due since its
 *	 last look, and wakes outbox_wait().
 *
 * An error in a pass is reported, its transaction aborted, and the loop
 * goes on a second later; the worker exits only when told to, or to leave
 * its database to a command that needs it to itself.
 *
 * Databases come and go: the worker leaves its database to DROP DATABASE
 * and the like, and waits before it connects again (outbox_databases.c).
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_worker.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/resowner.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "utils/backend_status.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "delivery_outbox.h"
#include "outbox_partitions.h"
#include "outbox_registry.h"
#include "outbox_rows.h"
#include "outbox_shmem.h"
#include "outbox_table.h"
#include "outbox_databases.h"
#include "outbox_worker.h"
#include "outbox_xact.h"

/* How many ids a transaction notifies. */
#define SWEEPER_NOTIFY_BATCH	8192

/* Rows one sweep pass reclaims, and purges, at most. */
#define SWEEPER_MAX_ROWS		10000

/* Wake-up batches sent before the loop looks at its other duties again. */
#define SWEEPER_MAX_BATCHES		4

/* How often scheduled rows that fell due are looked for, and at most how many. */
#define SWEEPER_DUE_MS			500
#define SWEEPER_DUE_ROWS		1000

/*
 * How far back the first look goes: rows that fell due while no worker ran
 * are found by the relays' drain, not woken one by one.
 */
#define SWEEPER_DUE_LOOKBACK_MS	10000

/* Where the due wake-ups of one outbox got to: (not_before, id). */
typedef struct SweeperDuePosition
{
	Oid			relid;			/* hash key */
	TimestampTz not_before;
	int64		id;
} SweeperDuePosition;

typedef enum SweeperStep
{
	SWEEP_RECLAIM,
	SWEEP_PURGE,
	SWEEP_EXPIRE,
	SWEEP_PARTITIONS
} SweeperStep;

/* Partitions one sweep drops per outbox at most, each in a transaction. */
#define SWEEPER_MAX_DROPS		8

/* One outbox's work for sweeper_guarded: a sweep step, or its wake-ups. */
typedef struct SweeperJob
{
	SweeperStep step;
	OutboxTable *table;
	TimestampTz now;
	SweeperDuePosition *pos;
	int			n;				/* rows woken */
} SweeperJob;

static void sweeper_detach(int code, Datum arg);
static bool sweeper_send_wakeups(OutboxDatabase *db, int max_batches);
static void sweeper_notify(const OutboxWakeup *wakeups, int n);
static bool sweeper_sweep(OutboxDatabase *db);
static void sweeper_sweep_tables(SweeperStep step, TimestampTz now);
static TimestampTz sweeper_wake_due(OutboxDatabase *db, TimestampTz now);
static bool sweeper_guarded(bool (*work) (void *arg), SweeperJob *job,
							const char *what);
static bool sweeper_step_work(void *arg);
static void sweeper_shards(void);
static bool sweeper_shards_work(void *arg);
static void sweeper_partitions(void);
static bool sweeper_due_work(void *arg);
static void sweeper_rewind_due(TimestampTz from);
static void sweeper_recover(void);
static bool sweeper_ring_used(OutboxDatabase *db);

/* The worker's own slot, and its wake-up batch buffer. */
static OutboxDatabase *sweeper_db = NULL;
static OutboxWakeup *sweeper_batch = NULL;

/* When the next sweep is due; whether "not installed" was logged. */
static TimestampTz sweeper_next_sweep = 0;
static TimestampTz sweeper_next_due = 0;
static HTAB *sweeper_due_positions = NULL;
static int64 *sweeper_due_ids = NULL;
static bool sweeper_missing_logged = false;

/*
 * outbox_sweeper_main
 *
 * Entry point of the worker serving the main_arg-th database of
 * delivery_outbox.database, named in bgw_extra.
 */
void
outbox_sweeper_main(Datum main_arg)
{
	int			index = DatumGetInt32(main_arg);
	char		dbname[NAMEDATALEN];
	sigjmp_buf	local_sigjmp_buf;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	strlcpy(dbname, MyBgworkerEntry->bgw_extra, sizeof(dbname));
	if (outbox_shared == NULL || index < 0 || index >= OUTBOX_MAX_WORKERS)
		proc_exit(0);			/* can't happen: registered only when
								 * preloaded */

	/* not into a database a command needs to itself, or that is gone */
	outbox_sweeper_attach(index);
	BackgroundWorkerInitializeConnection(dbname, NULL, 0);
	outbox_sweeper_connected();
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
									   sizeof(OutboxWakeup) * SWEEPER_NOTIFY_BATCH);
	sweeper_due_ids = MemoryContextAlloc(TopMemoryContext,
										 sizeof(int64) * SWEEPER_DUE_ROWS);
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(SweeperDuePosition);
		sweeper_due_positions = hash_create("delivery_outbox due positions",
											16, &ctl, HASH_ELEM | HASH_BLOBS);
	}

	sweeper_db = outbox_database(MyDatabaseId, true);
	if (sweeper_db == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("delivery_outbox cannot track more than %d databases",
						OUTBOX_MAX_DATABASES)));

	/*
	 * The ring is this database's alone: one another database still holds (it
	 * was renamed away from the configured name in a way the commit callback
	 * did not see, as by COMMIT PREPARED) is taken from it, its producers
	 * then notifying at commit themselves.
	 */
	{
		int			i;

		for (i = 0; i < OUTBOX_MAX_DATABASES; i++)
		{
			OutboxDatabase *other = &outbox_shared->databases[i];

			if (other == sweeper_db || !OidIsValid(other->dboid))
				continue;
			SpinLockAcquire(&other->mutex);
			if (other->ring == index)
			{
				other->ring_tail = other->ring_head;
				other->ring = -1;
			}
			SpinLockRelease(&other->mutex);
		}
	}
	SpinLockAcquire(&sweeper_db->mutex);
	sweeper_db->ring = index;
	sweeper_db->worker_pid = MyProcPid;
	sweeper_db->worker_latch = MyLatch;
	SpinLockRelease(&sweeper_db->mutex);
	before_shmem_exit(sweeper_detach, (Datum) 0);

	ereport(LOG,
			(errmsg("delivery_outbox sweeper started for database \"%s\"",
					dbname)));

	/*
	 * An error in a pass comes back here, as in the server's own long-lived
	 * processes (bgwriter.c): report it, abort the transaction, wait a second
	 * and go on with the loop.  The worker does not exit for an error it may
	 * well meet again at once; the wake-ups of a failed batch are lost
	 * (relays drain).  Whatever must survive this lives in file-static
	 * variables, not in locals.
	 */
	if (sigsetjmp(local_sigjmp_buf, 1) != 0)
	{
		error_context_stack = NULL;
		sweeper_recover();
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 1000, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
	PG_exception_stack = &local_sigjmp_buf;

	for (;;)
	{
		TimestampTz now;
		long		timeout;
		bool		more;
		bool		sent;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			sweeper_next_sweep = 0; /* apply a new interval right away */
		}
		if (outbox_sweeper_held())
		{
			/* restarted by the postmaster; waits before it connects again */
			ereport(LOG,
					(errmsg("delivery_outbox sweeper leaves database \"%s\" for a command that needs it",
							dbname)));
			proc_exit(1);
		}

		now = GetCurrentTimestamp();
		sent = sweeper_ring_used(sweeper_db);
		more = sweeper_send_wakeups(sweeper_db, SWEEPER_MAX_BATCHES);

		/*
		 * Rows scheduled for later: look when the next one falls due, or when
		 * a producer committed new ones (it sets the hint and our latch).
		 */
		if (pg_atomic_exchange_u32(&sweeper_db->scheduled_hint, 0) != 0)
		{
			sweeper_rewind_due((TimestampTz)
							   pg_atomic_exchange_u64(&sweeper_db->scheduled_min,
													  (uint64) PG_INT64_MAX));
			sweeper_next_due = 0;
		}
		if (now >= sweeper_next_due)
			sweeper_next_due = sweeper_wake_due(sweeper_db, now);

		if (now >= sweeper_next_sweep)
		{
			/* due or not, the next pass is an interval away */
			sweeper_next_sweep = TimestampTzPlusMilliseconds(now,
															 outbox_sweep_interval);
			if (sweeper_sweep(sweeper_db))
			{
				if (sweeper_missing_logged)
					ereport(LOG,
							(errmsg("delivery_outbox sweeper: extension found in database \"%s\", sweeping",
									dbname)));
				sweeper_missing_logged = false;
			}
			else if (!sweeper_missing_logged)
			{
				ereport(LOG,
						(errmsg("delivery_outbox sweeper: extension \"%s\" is not installed in database \"%s\", waiting",
								OUTBOX_EXTENSION_NAME, dbname)));
				sweeper_missing_logged = true;
			}
		}

		if (more)
			continue;			/* wake-ups still waiting: no sleep */

		/*
		 * Having just sent wake-ups, let a little more accumulate before the
		 * next batch: under load this turns a transaction per producer commit
		 * into one per deferred_batch_delay, at that much latency.
		 */
		if (sent && outbox_deferred_batch_delay > 0)
			(void) WaitLatch(MyLatch, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 outbox_deferred_batch_delay, PG_WAIT_EXTENSION);

		timeout = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
												  Min(sweeper_next_sweep,
													  sweeper_next_due));
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Max(timeout, 1),
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
 * An error in a pass: report it and abort the transaction, leaving the
 * worker as it is at the top of its loop.
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
 * sweeper_notify
 *
 * NOTIFY n wake-ups, each on the channel of its outbox (an outbox of its
 * own channel, else delivery_outbox.channel); the wake-ups of a table that
 * is no longer an outbox are dropped.  The channel comes from the registry,
 * so that a lock on one outbox (ALTER TABLE) never holds up the wake-ups of
 * the others.  In a transaction.
 */
static void
sweeper_notify(const OutboxWakeup *wakeups, int n)
{
	bool		installed = outbox_installed();
	Oid			relid = InvalidOid;
	bool		is_outbox = false;
	char	   *channel = NULL;
	int			i;

	for (i = 0; i < n; i++)
	{
		if (!installed)
		{
			outbox_notify(wakeups[i].id, wakeups[i].relid, NULL);
			continue;
		}
		/* from the registry alone: no lock on the outbox itself */
		if (wakeups[i].relid != relid)
		{
			relid = wakeups[i].relid;
			channel = NULL;
			is_outbox = outbox_channel_of(relid, &channel);
		}
		if (is_outbox)
			outbox_notify(wakeups[i].id, relid, channel);
	}
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
	OutboxWakeup *ring = &outbox_shared->rings[(Size) db->ring * size];
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
			take = (int) Min((uint64) Min(OUTBOX_COPY_CHUNK,
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
		PushActiveSnapshot(GetTransactionSnapshot());
		pgstat_report_activity(STATE_RUNNING, "delivery_outbox: sending wake-ups");
		sweeper_notify(sweeper_batch, n);
		PopActiveSnapshot();
		CommitTransactionCommand();
		pgstat_report_activity(STATE_IDLE, NULL);
	}

	SpinLockAcquire(&db->mutex);
	more = db->ring_head != db->ring_tail;
	SpinLockRelease(&db->mutex);
	return more;
}

/*
 * sweeper_sweep_tables
 *
 * One step of a pass in every outbox of the database, at most
 * SWEEPER_MAX_ROWS rows each: reclaim, purge, or dead-letter expired rows.
 * Each table is locked first, without waiting: one that another session
 * holds locked is left for the next pass, so that one tenant's ALTER TABLE
 * does not hold up the others; one dropped or detached meanwhile is skipped.
 */
static void
sweeper_sweep_tables(SweeperStep step, TimestampTz now)
{
	ListCell   *lc;

	foreach(lc, outbox_table_list())
	{
		Oid			relid = lfirst_oid(lc);
		OutboxTable *table;

		/* a table someone holds locked (ALTER, attach) waits for a pass */
		if (!ConditionalLockRelationOid(relid, RowExclusiveLock))
			continue;
		table = outbox_find_table(relid);
		if (table == NULL)
			continue;

		/*
		 * An outbox whose dead-letter table was dropped cannot move rows
		 * there: it is left out, so that it does not fail the others' step.
		 */
		if (step != SWEEP_PURGE && outbox_table_has_policy(table) &&
			outbox_table_dead_name(table) == NULL)
		{
			/* once a pass: from the reclaim, or the expiry if no reclaim runs */
			ereport(step == SWEEP_RECLAIM || outbox_reclaim_after < 0 ? WARNING : DEBUG1,
					(errmsg("delivery_outbox sweeper: outbox %s has no dead-letter table, skipped",
							outbox_table_name(table)),
					 errhint("Detach the outbox and attach it again to recreate it.")));
			continue;
		}
		/* nor does one whose dead-letter table someone holds locked */
		if (step != SWEEP_PURGE && outbox_table_has_policy(table) &&
			!ConditionalLockRelationOid(outbox_table_dead_relid(table),
										RowExclusiveLock))
			continue;
		if (step == SWEEP_EXPIRE && !outbox_table_has_policy(table))
			continue;
		{
			SweeperJob	job = {.step = step,.table = table,.now = now};

			(void) sweeper_guarded(sweeper_step_work, &job,
								   step == SWEEP_RECLAIM ? "reclaim" :
								   step == SWEEP_PURGE ? "purge" : "expiry");
		}
	}
}

/*
 * sweeper_guarded
 *
 * Run job's work on one outbox in a subtransaction: an error (a row whose
 * backoff overflows, a constraint of the dead-letter table) is reported as
 * a warning naming the outbox and "what", undoes that outbox's work alone
 * (its NOTIFYs included), and returns false, so that one outbox cannot
 * stall the others' sweeps or wake-ups.
 */
static bool
sweeper_guarded(bool (*work) (void *arg), SweeperJob *job, const char *what)
{
	ErrorData  *edata = outbox_subxact_try(work, job, NULL, NULL);

	if (edata == NULL)
		return true;
	if (job->table == NULL)
		ereport(WARNING,
				(errmsg("delivery_outbox sweeper: the %s failed: %s",
						what, edata->message),
				 errdetail("It is tried again at the next pass.")));
	else
		ereport(WARNING,
				(errmsg("delivery_outbox sweeper: the %s of outbox %s failed: %s",
						what, outbox_table_name(job->table), edata->message),
				 errdetail("The other outboxes go on; this one is tried again at the next pass.")));
	FreeErrorData(edata);
	return false;
}

/*
 * sweeper_shards
 *
 * On a Citus node, the shards of distributed outboxes held here that are
 * not outboxes yet become ones (made or moved in since the last pass, or
 * with changed settings), before the steps sweep them.
 */
static void
sweeper_shards(void)
{
	SweeperJob	job = {.table = NULL};

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (outbox_lock_table())
	{
		pgstat_report_activity(STATE_RUNNING, "delivery_outbox: shards");
		(void) sweeper_guarded(sweeper_shards_work, &job, "registration of this node's shards");
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
}

/* sweeper_shards' work (sweeper_guarded's) */
static bool
sweeper_shards_work(void *arg)
{
	outbox_register_local_shards(outbox_extension_namespace());
	return true;
}

/*
 * sweeper_step_work
 *
 * One sweep step (job->step) on one outbox (sweeper_guarded's work).
 */
static bool
sweeper_step_work(void *arg)
{
	SweeperJob *job = arg;
	TimestampTz cutoff;
	int64		rows;

	switch (job->step)
	{
		case SWEEP_RECLAIM:
			(void) outbox_reclaim_rows(job->table,
									   TimestampTzPlusMilliseconds(job->now,
																   -(int64) outbox_reclaim_after * 1000),
									   SWEEPER_MAX_ROWS);
			break;
		case SWEEP_PURGE:
			/* a partitioned outbox drops its partitions instead */
			if (!outbox_table_partitioned(job->table) &&
				outbox_partitions_retention(job->table, job->now, &cutoff))
				(void) outbox_purge_rows(job->table, cutoff, SWEEPER_MAX_ROWS);
			break;
		case SWEEP_EXPIRE:
			(void) outbox_expire_rows(job->table, SWEEPER_MAX_ROWS);
			break;
		case SWEEP_PARTITIONS:
			(void) outbox_partitions_upkeep(job->table);
			job->n = outbox_partitions_retention(job->table, job->now, &cutoff) ?
				(int) outbox_partitions_drop(job->table,
											 outbox_partitions_sweep(job->table, cutoff),
											 1, &rows) : 0;
			break;
	}
	return true;
}

/*
 * sweeper_due_work
 *
 * NOTIFY the rows of one outbox that fell due after its position, moving
 * the position past them; job->n is how many (sweeper_guarded's work).
 */
static bool
sweeper_due_work(void *arg)
{
	SweeperJob *job = arg;
	int			i;

	job->n = outbox_due_rows(job->table, &job->pos->not_before, &job->pos->id,
							 sweeper_due_ids, SWEEPER_DUE_ROWS);
	/* reported only when there is something to do: a look is cheap */
	if (job->n > 0)
		pgstat_report_activity(STATE_RUNNING, "delivery_outbox: waking due rows");
	for (i = 0; i < job->n; i++)
		outbox_notify(sweeper_due_ids[i], outbox_table_relid(job->table),
					  outbox_table_channel(job->table));
	return true;
}

/*
 * sweeper_rewind_due
 *
 * Rows scheduled for "from" were committed, perhaps after the worker looked
 * past that time: every outbox's position goes back to it (a row woken
 * twice is harmless, one never woken is not).
 */
static void
sweeper_rewind_due(TimestampTz from)
{
	HASH_SEQ_STATUS status;
	SweeperDuePosition *pos;

	hash_seq_init(&status, sweeper_due_positions);
	while ((pos = hash_seq_search(&status)) != NULL)
	{
		if (pos->not_before >= from)
		{
			pos->not_before = from;
			pos->id = 0;
		}
	}
}

/*
 * sweeper_wake_due
 *
 * NOTIFY, on its outbox's channel, every row scheduled for later (its
 * not_before) that fell due since the last look, up to SWEEPER_DUE_ROWS per
 * outbox, and wake outbox_wait() callers; in one transaction.  Returns when
 * to look again: when the next row falls due (at once if a batch was full,
 * within SWEEPER_DUE_MS if a table was locked), at the latest at the next
 * sweep.
 */
static TimestampTz
sweeper_wake_due(OutboxDatabase *db, TimestampTz now)
{
	int64		woken = 0;
	TimestampTz next = sweeper_next_sweep;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (outbox_lock_table())
	{
		ListCell   *lc;

		foreach(lc, outbox_table_list())
		{
			Oid			relid = lfirst_oid(lc);
			OutboxTable *table;
			SweeperDuePosition *pos;
			bool		found;
			int			n;

			if (!ConditionalLockRelationOid(relid, AccessShareLock))
			{
				next = Min(next, TimestampTzPlusMilliseconds(now, SWEEPER_DUE_MS));
				continue;
			}
			table = outbox_find_table(relid);
			if (table == NULL || !outbox_table_has_policy(table))
				continue;
			pos = hash_search(sweeper_due_positions, &relid, HASH_ENTER, &found);
			if (!found)
			{
				pos->not_before = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
															  -SWEEPER_DUE_LOOKBACK_MS);
				pos->id = 0;
			}
			{
				SweeperJob	job = {.table = table,.pos = pos};
				SweeperDuePosition saved = *pos;

				if (!sweeper_guarded(sweeper_due_work, &job, "wake-ups"))
				{
					/* its position stays put: those rows are looked at again */
					*pos = saved;
					next = Min(next, TimestampTzPlusMilliseconds(now, SWEEPER_DUE_MS));
					continue;
				}
				n = job.n;
			}
			/* reported only when there is something to do: a look is cheap */
			if (n > 0 && woken == 0)
				pgstat_report_activity(STATE_RUNNING, "delivery_outbox: waking due rows");
			woken += n;
			if (n == SWEEPER_DUE_ROWS)
				next = now;
			else
			{
				TimestampTz due = outbox_next_due_at(table, pos->not_before);

				if (due != 0)
					next = Min(next, due);
			}
		}
	}
	PopActiveSnapshot();
	CommitTransactionCommand();

	/* after the commit, so that the woken see what was notified */
	if (woken > 0)
	{
		pgstat_report_activity(STATE_IDLE, NULL);
		ConditionVariableBroadcast(&db->pending_cv);
	}
	return next;
}

/*
 * sweeper_partitions
 *
 * The partitions of every partitioned outbox: made ahead, and dropped once
 * past the outbox's retention, each drop in a transaction of its own, which
 * holds the outbox's ACCESS EXCLUSIVE lock from the drop to its commit.
 */
static void
sweeper_partitions(void)
{
	Oid		   *relids = NULL;
	int			n = 0;
	int			i;

	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (outbox_lock_table())
	{
		List	   *list = outbox_table_list();
		ListCell   *lc;

		relids = MemoryContextAlloc(TopMemoryContext,
									sizeof(Oid) * list_length(list));
		foreach(lc, list)
		{
			OutboxTable *table = outbox_find_table(lfirst_oid(lc));

			if (table != NULL && outbox_table_partitioned(table))
				relids[n++] = lfirst_oid(lc);
		}
	}
	PopActiveSnapshot();
	CommitTransactionCommand();

	for (i = 0; i < n; i++)
	{
		int			round;

		for (round = 0; round < SWEEPER_MAX_DROPS; round++)
		{
			SweeperJob	job = {.step = SWEEP_PARTITIONS};

			SetCurrentStatementStartTimestamp();
			StartTransactionCommand();
			PushActiveSnapshot(GetTransactionSnapshot());
			pgstat_report_activity(STATE_RUNNING, "delivery_outbox: partitions");
			/* a table someone holds locked (ALTER, a drop) waits for a pass */
			if (outbox_lock_table() &&
				ConditionalLockRelationOid(relids[i], AccessShareLock) &&
				(job.table = outbox_find_table(relids[i])) != NULL)
			{
				job.now = GetCurrentTimestamp();
				if (!sweeper_guarded(sweeper_step_work, &job, "partition upkeep"))
					job.n = 0;
			}
			PopActiveSnapshot();
			CommitTransactionCommand();
			pgstat_report_activity(STATE_IDLE, NULL);
			if (job.n == 0)
				break;
		}
	}
	if (relids != NULL)
		pfree(relids);
}

/*
 * sweeper_sweep
 *
 * One bounded pass over every outbox of the database: reclaim, purge and
 * re-count the backlog, each in a transaction of its own, with waiting
 * wake-ups sent in between so that a pass delays them little.  Each
 * transaction first locks the extension's table (and re-checks that it is
 * still the extension's), so DROP EXTENSION waits for a step instead of
 * failing it.  Returns false when the extension is not installed in this
 * database.
 */
static bool
sweeper_sweep(OutboxDatabase *db)
{
	int			step;

	sweeper_shards();
	for (step = 0; step < 4; step++)
	{
		TimestampTz now;
		bool		installed;

		if (step == 0 && outbox_reclaim_after < 0)
			continue;

		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());
		installed = outbox_lock_table();
		if (installed)
		{
			pgstat_report_activity(STATE_RUNNING, "delivery_outbox: sweep");
			now = GetCurrentTimestamp();
			if (step < 3)
				sweeper_sweep_tables(step == 0 ? SWEEP_RECLAIM :
									 step == 1 ? SWEEP_PURGE : SWEEP_EXPIRE,
									 now);
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
	sweeper_partitions();
	pgstat_report_stat(true);

	return true;
}
