/*-------------------------------------------------------------------------
 *
 * outbox_xact.c
 *		Per-transaction bookkeeping and wake-ups.
 *
 * Whatever a transaction does to outbox rows is recorded per
 * (sub)transaction level and published only when the top-level transaction
 * has committed and released its locks: counter deltas go to the database's
 * shared slot, outbox_wait() sleepers are woken when rows became pending,
 * and in deferred mode the ids of those rows are handed to the database's
 * worker.  Nothing of ours runs while a committing transaction holds the
 * NOTIFY lock after its queue entries are written.  An aborted
 * (sub)transaction's bookkeeping is forgotten; a prepared transaction's is
 * stashed in shared memory until COMMIT PREPARED or ROLLBACK PREPARED.
 *
 * Wake-ups: the NOTIFY payload is the row id in decimal and nothing else;
 * async.c sends it at commit, never on rollback.  Commit mode's are kept in
 * a list of the transaction's and handed to async.c at its pre-commit, not
 * in the trigger: PREPARE TRANSACTION refuses a transaction that queued a
 * NOTIFY, and a prepared transaction's go out at COMMIT PREPARED.  Above
 * delivery_outbox.notify_queue_limit of queue usage the NOTIFY is skipped
 * (a full queue would make the producer's COMMIT fail); relays find such
 * rows by draining the table.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_xact.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/async.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "storage/proclist.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "delivery_outbox.h"
#include "outbox_shmem.h"
#include "outbox_xact.h"

/*
 * What the current transaction did, kept per (sub)transaction level and
 * published only when the top-level transaction commits: counter deltas for
 * shared memory, whether rows became pending (outbox_wait() sleepers are
 * woken), and how many of the deferred wake-up ids belong to the levels
 * below this one.
 */
typedef struct OutboxXactLevel
{
	int			nest_level;
	int64		deltas[OUTBOX_NUM_COUNTERS];	/* the database's */
	List	   *tables;			/* OutboxTableDeltas: each outbox's */
	bool		made_pending;
	int			nids_at_start;
	int			nnotify_at_start;
	struct OutboxXactLevel *parent;
} OutboxXactLevel;

/*
 * A wake-up in commit mode, queued for NOTIFY at the transaction's
 * pre-commit (or stashed at its PREPARE): its row, outbox and channel (NULL:
 * delivery_outbox.channel).
 */
typedef struct OutboxNotifyLater
{
	OutboxWakeup wakeup;
	const char *channel;
} OutboxNotifyLater;

/* One outbox's share of a level's deltas. */
typedef struct OutboxTableDeltas
{
	Oid			relid;
	int64		deltas[OUTBOX_NUM_COUNTERS];
} OutboxTableDeltas;

static OutboxXactLevel *outbox_level(void);
static OutboxTableDeltas *outbox_table_deltas(OutboxXactLevel *level,
											  Oid relid);
static void outbox_publish(OutboxDatabase *db, const int64 *deltas,
						   bool made_pending);
static void outbox_publish_tables(List *tables, const OutboxWakeup *dropped,
								  int ndropped);
static void outbox_stash_prepared(OutboxXactLevel *level);
static void outbox_stash_wakeups(OutboxPrepared *p);
static void outbox_hint_worker(OutboxDatabase *db, TimestampTz not_before);

/* This transaction's bookkeeping (in TopTransactionContext), see above. */
static OutboxXactLevel *outbox_xact = NULL;
static OutboxWakeup *outbox_deferred_ids = NULL;
static int	outbox_deferred_count = 0;
static int	outbox_deferred_space = 0;
static OutboxNotifyLater *outbox_notify_ids = NULL;
static int	outbox_notify_count = 0;
static int	outbox_notify_space = 0;

/*
 * The queued wake-ups went to async.c (pre-commit): one that comes later in
 * the commit (another module's pre-commit callback writing a row) goes
 * there at once.
 */
static bool outbox_notify_flushed = false;

/*
 * A committed transaction's bookkeeping, between its commit and the release
 * of its locks (see outbox_xact_release_callback).
 */
static OutboxXactLevel *outbox_committed = NULL;

/*
 * This transaction made rows pending for later (not_before in the future),
 * the earliest due at outbox_scheduled_min.
 */
static bool outbox_scheduled = false;
static TimestampTz outbox_scheduled_min = 0;
static OutboxWakeup *outbox_committed_ids = NULL;
static int	outbox_committed_nids = 0;

/* Set by _PG_init: an outbox's own channel from the registry, see above. */
outbox_channel_lookup_type outbox_channel_lookup = NULL;

/*
 * Outboxes whose order epoch this transaction moved on: moved on again
 * once it has committed (see outbox_note_order_change).
 */
#define OUTBOX_ORDER_CHANGES	8
static Oid	outbox_order_changes[OUTBOX_ORDER_CHANGES];
static int	outbox_norder_changes = 0;
static bool outbox_order_changes_lost = false;

/* GID of the PREPARE TRANSACTION this transaction ends with, if any. */
static char outbox_prepare_gid[GIDSIZE];

/*
 * outbox_count
 *
 * Add delta to one of the counters of this database and of the outbox
 * relid when (and if) the current transaction commits.  A no-op without
 * shared memory.
 */
void
outbox_count(Oid relid, OutboxCounter counter, int64 delta)
{
	OutboxXactLevel *level;

	if (outbox_shared == NULL)
		return;
	level = outbox_level();
	level->deltas[counter] += delta;
	outbox_table_deltas(level, relid)->deltas[counter] += delta;
}

/*
 * outbox_table_deltas
 *
 * The deltas of the outbox relid at this level, made on first use.  A
 * transaction touches few outboxes: a short list, the last one used first.
 */
static OutboxTableDeltas *
outbox_table_deltas(OutboxXactLevel *level, Oid relid)
{
	OutboxTableDeltas *t;
	ListCell   *lc;
	MemoryContext old;

	foreach(lc, level->tables)
	{
		t = lfirst(lc);
		if (t->relid == relid)
			return t;
	}
	old = MemoryContextSwitchTo(TopTransactionContext);
	t = palloc0(sizeof(OutboxTableDeltas));
	t->relid = relid;
	level->tables = lcons(t, level->tables);
	MemoryContextSwitchTo(old);
	return t;
}

/*
 * outbox_note_order_change
 *
 * A row may join a recipient of outbox relid below the recipient's open
 * rows (re-addressed, or with an id of its own): move the outbox's order
 * epoch on now, before the row is written, and again once the transaction
 * has committed, when its rows are in the indexes and visible: an ordered
 * claim that read the epoch in between cannot have seen them in place.
 */
void
outbox_note_order_change(Oid relid)
{
	int			i;

	outbox_order_epoch_bump(relid);
	for (i = 0; i < outbox_norder_changes; i++)
		if (outbox_order_changes[i] == relid)
			return;
	if (outbox_norder_changes < OUTBOX_ORDER_CHANGES)
		outbox_order_changes[outbox_norder_changes++] = relid;
	else
		outbox_order_changes_lost = true;
}

/*
 * outbox_wake
 *
 * A row of the outbox relid became pending: wake relays, on channel (NULL:
 * delivery_outbox.channel), as delivery_outbox.notify says.  In deferred
 * mode the id waits in this transaction's list and is handed to the
 * database's worker at commit, with relid, by which the worker finds the
 * outbox's channel; where no worker serves the database, it falls back to
 * commit mode.
 */
void
outbox_wake(int64 id, Oid relid, const char *channel)
{
	OutboxDatabase *db;

	/* a level for every wake-up: an aborted subtransaction drops its own */
	outbox_level()->made_pending = true;

	if (outbox_notify_mode == OUTBOX_NOTIFY_OFF)
		return;

	if (outbox_notify_mode == OUTBOX_NOTIFY_DEFERRED &&
		(db = outbox_my_database(false)) != NULL && db->ring >= 0)
	{
		if (outbox_deferred_count == outbox_deferred_space)
		{
			int			space = Max(64, outbox_deferred_space * 2);

			if (outbox_deferred_ids == NULL)
				outbox_deferred_ids =
					MemoryContextAlloc(TopTransactionContext,
									   sizeof(OutboxWakeup) * space);
			else
				outbox_deferred_ids = repalloc(outbox_deferred_ids,
											   sizeof(OutboxWakeup) * space);
			outbox_deferred_space = space;
		}
		outbox_deferred_ids[outbox_deferred_count].id = id;
		outbox_deferred_ids[outbox_deferred_count].relid = relid;
		outbox_deferred_count++;
		return;
	}

	/* a table whose triggers name no channel may have one in the registry */
	if (channel == NULL && outbox_channel_lookup != NULL)
		channel = outbox_channel_lookup(relid);

	/*
	 * The NOTIFY waits for the transaction's pre-commit
	 * (outbox_xact_callback): a transaction that is prepared instead
	 * (two-phase commit: Citus's, across worker nodes) must not have queued
	 * one, which PREPARE TRANSACTION refuses; it sends its wake-ups at COMMIT
	 * PREPARED (with the library preloaded, from shared memory; without, they
	 * are dropped and relays drain).
	 */
	if (outbox_notify_flushed)
		outbox_notify(id, relid, channel);
	else
	{
		OutboxNotifyLater *later;

		if (outbox_notify_count == outbox_notify_space)
		{
			int			space = Max(64, outbox_notify_space * 2);

			if (outbox_notify_ids == NULL)
				outbox_notify_ids =
					MemoryContextAlloc(TopTransactionContext,
									   sizeof(OutboxNotifyLater) * space);
			else
				outbox_notify_ids = repalloc(outbox_notify_ids,
											 sizeof(OutboxNotifyLater) * space);
			outbox_notify_space = space;
		}
		later = &outbox_notify_ids[outbox_notify_count];
		later->wakeup.id = id;
		later->wakeup.relid = relid;
		/* one copy of a channel for a run of rows on it */
		if (channel == NULL)
			later->channel = NULL;
		else if (outbox_notify_count > 0 &&
				 outbox_notify_ids[outbox_notify_count - 1].channel != NULL &&
				 strcmp(outbox_notify_ids[outbox_notify_count - 1].channel,
						channel) == 0)
			later->channel = outbox_notify_ids[outbox_notify_count - 1].channel;
		else
			later->channel = MemoryContextStrdup(TopTransactionContext, channel);
		outbox_notify_count++;
	}
}

/*
 * outbox_notify
 *
 * Queue the wake-up for a row of the outbox relid that became pending, on
 * channel (NULL: delivery_outbox.channel): the id, nothing else.
 * async.c sends it when the transaction commits and drops it on rollback.
 * When the notification queue is fuller than notify_queue_limit the NOTIFY
 * is skipped, since a full queue makes a notifying COMMIT fail; the row is
 * kept, and the skip is logged once until the queue drains again.  Also used
 * by the worker for deferred wake-ups.
 */
void
outbox_notify(int64 id, Oid relid, const char *channel)
{
	static LocalTransactionId checked_in = InvalidLocalTransactionId;
	static double usage = 0.0;
	static bool skip_logged = false;	/* until the queue drains again */
	char		payload[32];
	LocalTransactionId lxid = OUTBOX_PROC_LXID(MyProc);

	/*
	 * The queue fills slowly and only at commits: read its usage once per
	 * transaction, not once per row (it takes NotifyQueueLock).
	 */
	if (lxid != checked_in)
	{
		LOCAL_FCINFO(usage_fcinfo, 0);

		InitFunctionCallInfoData(*usage_fcinfo, NULL, 0, InvalidOid, NULL, NULL);
		usage = DatumGetFloat8(pg_notification_queue_usage(usage_fcinfo));
		checked_in = lxid;
	}

	if (usage >= outbox_notify_queue_limit)
	{
		if (!skip_logged)
		{
			ereport(LOG,
					(errmsg("delivery_outbox: notification queue is %.1f%% full, skipping wake-ups for new rows",
							usage * 100.0),
					 errdetail("The rows are kept; relays find them by draining the table."),
					 errhint("Find the session that LISTENs without consuming its notifications (often one idle in a long transaction, see pg_stat_activity), or raise \"%s.notify_queue_limit\" (now %g).",
							 OUTBOX_GUC_PREFIX, outbox_notify_queue_limit)));
			skip_logged = true;
		}
		outbox_count(relid, OUTBOX_COUNT_NOTIFY_SKIPPED, 1);
		return;
	}
	skip_logged = false;

	pg_lltoa(id, payload);		/* what INT64_FORMAT prints */
	Async_Notify(channel != NULL ? channel : outbox_channel, payload);
	outbox_count(relid, OUTBOX_COUNT_NOTIFIED, 1);
}

/*
 * outbox_my_database
 *
 * This database's shared slot (allocated when create is true), or NULL.
 * Slots never move, so the pointer is kept for the life of the backend.
 */
OutboxDatabase *
outbox_my_database(bool create)
{
	static OutboxDatabase *mine = NULL;
	static bool full_logged = false;

	if (mine == NULL && outbox_shared != NULL)
	{
		mine = outbox_database(MyDatabaseId, create);
		if (mine == NULL && create && !full_logged)
		{
			ereport(LOG,
					(errmsg("delivery_outbox tracks at most %d databases: no counters, commit wake-ups for outbox_wait() or deferred wake-ups in this one",
							OUTBOX_MAX_DATABASES)));
			full_logged = true;
		}
	}
	return mine;
}

/*
 * outbox_level
 *
 * The bookkeeping of the current (sub)transaction level, created on first
 * use.
 */
static OutboxXactLevel *
outbox_level(void)
{
	int			nest_level = GetCurrentTransactionNestLevel();

	if (outbox_xact == NULL || outbox_xact->nest_level < nest_level)
	{
		OutboxXactLevel *level;

		level = MemoryContextAllocZero(TopTransactionContext,
									   sizeof(OutboxXactLevel));
		level->nest_level = nest_level;
		level->nids_at_start = outbox_deferred_count;
		level->nnotify_at_start = outbox_notify_count;
		level->parent = outbox_xact;
		outbox_xact = level;
	}
	return outbox_xact;
}

/*
 * outbox_subxact_callback
 *
 * A committed subtransaction's bookkeeping joins its parent's; an aborted
 * one's is forgotten, deferred ids included.
 */
void
outbox_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	OutboxXactLevel *level = outbox_xact;
	int			nest_level = GetCurrentTransactionNestLevel();

	if (level == NULL || level->nest_level != nest_level)
		return;

	if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		OutboxXactLevel *parent = level->parent;
		int			c;

		if (parent != NULL && parent->nest_level == nest_level - 1)
		{
			ListCell   *lc;

			for (c = 0; c < OUTBOX_NUM_COUNTERS; c++)
				parent->deltas[c] += level->deltas[c];
			foreach(lc, level->tables)
			{
				OutboxTableDeltas *t = lfirst(lc);
				OutboxTableDeltas *p = outbox_table_deltas(parent, t->relid);

				for (c = 0; c < OUTBOX_NUM_COUNTERS; c++)
					p->deltas[c] += t->deltas[c];
			}
			parent->made_pending |= level->made_pending;
			outbox_xact = parent;
		}
		else
			level->nest_level = nest_level - 1;
	}
	else if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		outbox_deferred_count = level->nids_at_start;
		outbox_notify_count = level->nnotify_at_start;
		outbox_xact = level->parent;
	}
}

/*
 * outbox_xact_callback
 *
 * At commit, keep the transaction's bookkeeping for
 * outbox_xact_release_callback, which publishes it once the transaction's
 * locks are released.  At PREPARE the deltas and the first wake-ups are
 * stashed until COMMIT PREPARED, which sends those.  On abort,
 * forget.  Any other event clears a commit's bookkeeping that was never
 * published (can't happen), so nothing stale is ever read.
 */
void
outbox_xact_callback(XactEvent event, void *arg)
{
	OutboxXactLevel *level = outbox_xact;

	outbox_committed = NULL;

	/*
	 * Commit mode's wake-ups, queued now for async.c, which sends them at
	 * commit (PreCommit_Notify comes after these callbacks)
	 */
	if (event == XACT_EVENT_PRE_COMMIT || event == XACT_EVENT_PARALLEL_PRE_COMMIT)
	{
		int			i;

		for (i = 0; i < outbox_notify_count; i++)
			outbox_notify(outbox_notify_ids[i].wakeup.id,
						  outbox_notify_ids[i].wakeup.relid,
						  outbox_notify_ids[i].channel);
		outbox_notify_count = 0;
		outbox_notify_flushed = true;
		return;
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
	{
		int			i;

		for (i = 0; i < outbox_norder_changes; i++)
			outbox_order_epoch_bump(outbox_order_changes[i]);
		if (outbox_order_changes_lost)
			outbox_order_epoch_bump_all(MyDatabaseId);
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
	{
		outbox_norder_changes = 0;
		outbox_order_changes_lost = false;
	}
	if (level != NULL &&
		(event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT))
	{
		outbox_committed = level;
		outbox_committed_ids = outbox_deferred_ids;
		outbox_committed_nids = outbox_deferred_count;
	}
	else if (level != NULL && event == XACT_EVENT_PREPARE)
		outbox_stash_prepared(level);
	/* a prepared transaction tells the worker at COMMIT PREPARED */
	if (event == XACT_EVENT_PREPARE)
		outbox_scheduled = false;

	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			/* the memory goes with TopTransactionContext */
			outbox_xact = NULL;
			outbox_deferred_ids = NULL;
			outbox_deferred_count = 0;
			outbox_deferred_space = 0;
			outbox_notify_ids = NULL;
			outbox_notify_count = 0;
			outbox_notify_space = 0;
			outbox_notify_flushed = false;
			outbox_prepare_gid[0] = '\0';
			break;
		default:
			break;
	}
}

/*
 * outbox_xact_release_callback
 *
 * Publish a committed transaction's bookkeeping: add the counter deltas to
 * shared memory, hand the deferred wake-ups to the worker, and wake
 * outbox_wait() sleepers.  This runs in the last phase of the top-level
 * resource owner's release, after the transaction's locks are gone: in
 * commit mode the NOTIFY lock, which PostgreSQL holds from PreCommit_Notify
 * through the WAL flush to the release of the locks, serializes every
 * notifying commit of the cluster, and none of this needs it.  The
 * transaction is committed and visible, so a woken sleeper finds its rows;
 * nothing here may fail or wait.  The bookkeeping's memory, in
 * TopTransactionContext, lives until after this phase.
 */
void
outbox_xact_release_callback(ResourceReleasePhase phase, bool isCommit,
							 bool isTopLevel, void *arg)
{
	OutboxXactLevel *level = outbox_committed;
	OutboxDatabase *db;
	int			taken;

	if (phase != RESOURCE_RELEASE_AFTER_LOCKS || !isTopLevel)
		return;
	if (outbox_scheduled)
	{
		outbox_scheduled = false;
		if (isCommit && (db = outbox_my_database(false)) != NULL)
			outbox_hint_worker(db, outbox_scheduled_min);
	}
	if (level == NULL || !isCommit)
		return;
	/* once: the callback runs for every resource owner of the tree */
	outbox_committed = NULL;

	db = outbox_my_database(true);
	if (db == NULL)
		return;
	taken = outbox_committed_nids > 0 ?
		outbox_handover(db, outbox_committed_ids, outbox_committed_nids) : 0;
	outbox_publish(db, level->deltas, level->made_pending);
	outbox_publish_tables(level->tables, outbox_committed_ids + taken,
						  outbox_committed_nids - taken);
}

/*
 * outbox_note_scheduled
 *
 * A row became pending with a not_before in the future: at commit, tell the
 * worker, which sleeps until the next row falls due, to look again, and
 * from when (a transaction may commit after its rows fell due, behind the
 * worker's position).
 */
void
outbox_note_scheduled(TimestampTz not_before)
{
	if (!outbox_scheduled || not_before < outbox_scheduled_min)
		outbox_scheduled_min = not_before;
	outbox_scheduled = true;
}

/*
 * outbox_hint_worker
 *
 * Rows scheduled for later, the earliest due at not_before, were committed:
 * tell the worker (the earliest not_before of all such commits, a hint, and
 * its latch).  Never fails.
 */
static void
outbox_hint_worker(OutboxDatabase *db, TimestampTz not_before)
{
	Latch	   *latch;
	uint64		seen = pg_atomic_read_u64(&db->scheduled_min);

	while ((int64) seen > not_before &&
		   !pg_atomic_compare_exchange_u64(&db->scheduled_min, &seen,
										   (uint64) not_before))
		;
	pg_atomic_write_u32(&db->scheduled_hint, 1);
	SpinLockAcquire(&db->mutex);
	latch = db->worker_latch;
	SpinLockRelease(&db->mutex);
	if (latch != NULL)
		SetLatch(latch);
}

/*
 * outbox_publish_tables
 *
 * Add committed deltas to each outbox's counters, and count the wake-ups
 * the hand-over ring had no room for against their outboxes.  Never fails:
 * an outbox without a slot (all taken) goes uncounted.
 */
static void
outbox_publish_tables(List *tables, const OutboxWakeup *dropped, int ndropped)
{
	ListCell   *lc;
	int			i;

	foreach(lc, tables)
	{
		OutboxTableDeltas *t = lfirst(lc);
		OutboxTableSlot *slot = outbox_table_slot(MyDatabaseId, t->relid, true);
		int			c;

		if (slot == NULL)
			continue;
		for (c = 0; c < OUTBOX_NUM_COUNTERS; c++)
		{
			if (t->deltas[c] != 0)
				pg_atomic_fetch_add_u64(&slot->counters[c], t->deltas[c]);
		}
	}
	for (i = 0; i < ndropped; i++)
	{
		OutboxTableSlot *slot = outbox_table_slot(MyDatabaseId,
												  dropped[i].relid, true);

		if (slot != NULL)
			pg_atomic_fetch_add_u64(&slot->counters[OUTBOX_COUNT_HANDOVER_DROPPED], 1);
	}
}

/*
 * outbox_publish
 *
 * Add committed deltas to a database's counters and wake its
 * outbox_wait() sleepers when rows became pending.  Never fails.
 */
static void
outbox_publish(OutboxDatabase *db, const int64 *deltas, bool made_pending)
{
	int			c;

	for (c = 0; c < OUTBOX_NUM_COUNTERS; c++)
	{
		if (deltas[c] != 0)
			pg_atomic_fetch_add_u64(&db->counters[c], deltas[c]);
	}

	/*
	 * Skip the CV's spinlock when nobody waits.  The unlocked look is safe:
	 * our commit is already visible, and a waiter checks the table after
	 * putting itself on the list, so after the barrier either we see the
	 * waiter or the waiter sees our rows.
	 */
	if (made_pending)
	{
		pg_memory_barrier();
		if (!proclist_is_empty(&db->pending_cv.wakeup))
			ConditionVariableBroadcast(&db->pending_cv);
	}
}

/*
 * outbox_stash_prepared
 *
 * The transaction was prepared: keep its deltas in shared memory under its
 * GID until COMMIT PREPARED (or ROLLBACK PREPARED) decides.  With every
 * entry taken, the work goes uncounted (the gauges are repaired by the next
 * count).
 */
static void
outbox_stash_prepared(OutboxXactLevel *level)
{
	ListCell   *lc;
	int			i;

	if (outbox_shared == NULL || outbox_prepare_gid[0] == '\0')
		return;

	SpinLockAcquire(&outbox_shared->mutex);
	for (i = 0; i < OUTBOX_MAX_PREPARED; i++)
	{
		OutboxPrepared *p = &outbox_shared->prepared[i];

		if (OidIsValid(p->dboid))
			continue;
		p->dboid = MyDatabaseId;
		strlcpy(p->gid, outbox_prepare_gid, GIDSIZE);
		memcpy(p->deltas, level->deltas, sizeof(p->deltas));
		p->made_pending = level->made_pending;
		p->scheduled = outbox_scheduled;
		p->scheduled_min = outbox_scheduled_min;
		p->ntables = 0;
		foreach(lc, level->tables)
		{
			OutboxTableDeltas *t = lfirst(lc);

			if (p->ntables == OUTBOX_PREPARED_TABLES)
				break;
			p->relids[p->ntables] = t->relid;
			memcpy(p->table_deltas[p->ntables], t->deltas, sizeof(t->deltas));
			p->ntables++;
		}
		outbox_stash_wakeups(p);
		break;
	}
	SpinLockRelease(&outbox_shared->mutex);
}

/*
 * outbox_stash_wakeups
 *
 * The wake-ups a prepared transaction owes, both modes' (a deferred one
 * cannot wait in the worker's ring for a commit that may never come), into
 * its entry p: the first ones, and with more the last as well, which wakes
 * the relays that drain the others.  Called with the mutex held.
 */
static void
outbox_stash_wakeups(OutboxPrepared *p)
{
	int			total = outbox_notify_count + outbox_deferred_count;
	bool		more = total > OUTBOX_PREPARED_WAKEUPS;
	int			i;

	p->nwakeups = 0;
	for (i = 0; i < total && p->nwakeups < OUTBOX_PREPARED_WAKEUPS; i++)
	{
		/* with more than fit, the last slot takes the very last one */
		int			j = (more && p->nwakeups == OUTBOX_PREPARED_WAKEUPS - 1) ?
			total - 1 : i;

		p->wakeups[p->nwakeups++] = j < outbox_notify_count ?
			outbox_notify_ids[j].wakeup :
			outbox_deferred_ids[j - outbox_notify_count];
	}
}

/*
 * outbox_finish_prepared
 *
 * COMMIT PREPARED (commit = true) or ROLLBACK PREPARED of gid succeeded in
 * this database: publish or drop what was stashed for it.
 */
void
outbox_finish_prepared(const char *gid, bool commit)
{
	OutboxPrepared found;
	bool		have = false;
	int			i;

	if (outbox_shared == NULL)
		return;

	SpinLockAcquire(&outbox_shared->mutex);
	for (i = 0; i < OUTBOX_MAX_PREPARED && !have; i++)
	{
		OutboxPrepared *p = &outbox_shared->prepared[i];

		if (p->dboid == MyDatabaseId && strcmp(p->gid, gid) == 0)
		{
			found = *p;
			p->dboid = InvalidOid;
			have = true;
		}
	}
	SpinLockRelease(&outbox_shared->mutex);

	/* what it wrote may have joined recipients below their open rows */
	if (commit)
		outbox_order_epoch_bump_all(MyDatabaseId);

	if (have && commit)
	{
		OutboxDatabase *db = outbox_my_database(true);

		if (db != NULL)
		{
			List	   *tables = NIL;

			outbox_publish(db, found.deltas, found.made_pending);
			for (i = 0; i < found.ntables; i++)
			{
				OutboxTableDeltas *t = palloc(sizeof(OutboxTableDeltas));

				t->relid = found.relids[i];
				memcpy(t->deltas, found.table_deltas[i], sizeof(t->deltas));
				tables = lappend(tables, t);
			}
			outbox_publish_tables(tables, NULL, 0);
			if (found.scheduled)
				outbox_hint_worker(db, found.scheduled_min);
		}
	}

	/*
	 * The wake-ups it owes, sent when this statement's own transaction
	 * commits, just after (the prepared one has committed already)
	 */
	if (have && commit)
	{
		for (i = 0; i < found.nwakeups; i++)
		{
			const char *channel = outbox_channel_lookup != NULL ?
				outbox_channel_lookup(found.wakeups[i].relid) : NULL;

			outbox_notify(found.wakeups[i].id, found.wakeups[i].relid, channel);
		}
	}
}

/*
 * outbox_xact_note_prepare
 *
 * The current transaction is about to be prepared under gid.
 */
void
outbox_xact_note_prepare(const char *gid)
{
	strlcpy(outbox_prepare_gid, gid, GIDSIZE);
}

/*
 * outbox_xact_forget_gauges
 *
 * The backlog was just counted, this transaction's own changes included:
 * they must not be added again when it commits.
 */
void
outbox_xact_forget_gauges(void)
{
	OutboxXactLevel *level;

	for (level = outbox_xact; level != NULL; level = level->parent)
	{
		int			c;

		ListCell   *lc;

		for (c = OUTBOX_FIRST_GAUGE; c < OUTBOX_NUM_COUNTERS; c++)
			level->deltas[c] = 0;
		foreach(lc, level->tables)
		{
			OutboxTableDeltas *t = lfirst(lc);

			for (c = OUTBOX_FIRST_GAUGE; c < OUTBOX_NUM_COUNTERS; c++)
				t->deltas[c] = 0;
		}
	}
}

/*
 * outbox_subxact_try
 *
 * Run work(arg) in a subtransaction, with lock_timeout set to lock_timeout
 * (if not NULL): kept, its locks held, when work returns true; rolled back
 * when it returns false (*kept, if not NULL, says which).  NULL when work
 * returned; else its error (in the caller's memory context), everything it
 * did undone.  The subtransaction is closed either way, so that a caller
 * may throw the error again: a PL/pgSQL EXCEPTION block catching it then
 * rolls back its own subtransaction, not this one.
 */
ErrorData *
outbox_subxact_try(bool (*work) (void *arg), void *arg,
				   const char *lock_timeout, bool *kept)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	ErrorData  *volatile edata = NULL;
	volatile bool keep = false;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		int			save_nestlevel = NewGUCNestLevel();

		if (lock_timeout != NULL)
			(void) set_config_option("lock_timeout", lock_timeout,
									 PGC_USERSET, PGC_S_SESSION,
									 GUC_ACTION_SAVE, true, 0, false);
		keep = work(arg);
		AtEOXact_GUC(true, save_nestlevel);
		if (keep)
			ReleaseCurrentSubTransaction();
		else
			RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		keep = false;
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_END_TRY();
	if (kept != NULL)
		*kept = keep;
	return edata;
}
