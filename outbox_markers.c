/*-------------------------------------------------------------------------
 *
 * outbox_markers.c
 *		Insert markers: the ids a running insert into an outbox may still
 *		make appear, announced in shared memory before they are drawn.
 *
 * Ids are taken from the outbox's sequence at insert, so a row with a lower
 * id can commit after one with a higher id.  Two readers need to know about
 * such rows before they are visible:
 *
 * - outbox_horizon() (every outbox): the highest id H such that no row with
 *   an id <= H can still appear.  A transaction inserting into an outbox
 *   announces, before its first row's id is drawn, a *bound*: no row it
 *   inserts has a lower id (the sequence's next value, read then; lowered by
 *   any id a row brings along).  The horizon is the sequence's last value,
 *   read first, capped below the bound of every such transaction that the
 *   caller's snapshot does not see as committed.
 *
 * - the ordered claims (outbox_heads.c): a row is in the table's indexes,
 *   where a dirty snapshot finds it while its transaction runs, from its
 *   index insertion on; before that, from the moment its id is drawn, only
 *   the inserting statement knows it.  An insert into an ordered outbox
 *   announces a *window* for as long as each statement runs: ids at or
 *   above it may be drawn but not yet in the indexes (the statement's bound
 *   at its start, then each row's id as the row is about to be inserted,
 *   every lower row of the statement being in the indexes by then).
 *
 * Each backend has one slot, which only it writes, under the slot's
 * spinlock; readers copy under that spinlock and decide outside it.  A
 * slot keeps its current (or last) transaction's markers and, folded
 * together, those of its earlier transactions that some snapshot may not
 * yet see as committed (a reader's snapshot sees the newest of them
 * committed only if it sees them all: a backend runs them in turn).  A
 * prepared transaction's markers move to a shared array at PREPARE and
 * stay there while any snapshot may not see its end.
 *
 * Order of events, which the correctness rests on: a producer publishes its
 * bound (a spinlock release: a barrier) before drawing ids; a reader reads
 * the sequence (under its buffer lock) before the markers, and the
 * producer's markers are cleared only after its commit is visible
 * (XACT_EVENT_COMMIT follows ProcArrayEndTransaction).
 *
 * Transactions are named by their FullTransactionId.  A slot's history
 * goes only when its backend next marks, which a backend that stays idle,
 * or has left, never does: a 32-bit xid kept that long would, after 2^31
 * more transactions, compare as in the future, running for every snapshot,
 * and hold the horizon down until 2^31 more went by.  Clearing a slot when
 * its backend leaves would not do (a snapshot older than the backend's last
 * commit may still need its bound, and an idle backend does not leave).
 * So a reader first asks whether every snapshot sees the transaction ended
 * (GlobalVisCheckRemovableFullXid, exact at any age), which drops old
 * history wherever it lies, and only for a transaction some snapshot may
 * still see running, so recent enough for 32 bits, asks its own snapshot.
 *
 * Without the preload there is no shared memory of ours: the markers are
 * then locks of the lock manager (outbox_marker_locks.c), and this file
 * keeps only the backend's own view of them.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_markers.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "outbox_compat.h"
#include "outbox_marker_locks.h"
#include "outbox_markers.h"
#include "outbox_shmem.h"
#include "outbox_xact.h"

/* Outboxes one transaction's markers name; more make it mark them all. */
#define OUTBOX_MARKER_TABLES	8

/* Prepared transactions whose markers shared memory keeps. */
#define OUTBOX_MARKER_PREPARED	64

/* What marks every outbox: a set that overflowed. */
#define OUTBOX_MARK_ALL			((int64) 1)

typedef struct OutboxMarkerEntry
{
	Oid			relid;
	int64		bound;			/* no row of the set has a lower id */
	int64		window;			/* or OUTBOX_NO_WINDOW */
} OutboxMarkerEntry;

/* The markers of one transaction, or of several folded together. */
typedef struct OutboxMarkerSet
{
	FullTransactionId xid;		/* the (newest) transaction; Invalid: empty */
	Oid			dboid;			/* its database; InvalidOid: history folded
								 * from several (a slot reused by a backend of
								 * another database), which applies to every
								 * database */
	bool		overflow;		/* more outboxes than entries: all marked */
	int			nentries;
	OutboxMarkerEntry entries[OUTBOX_MARKER_TABLES];
} OutboxMarkerSet;

typedef struct OutboxMarkerSlot
{
	slock_t		mutex;
	Oid			dboid;
	bool		live;			/* cur's transaction is running */
	OutboxMarkerSet cur;
	OutboxMarkerSet prev;		/* earlier transactions, folded */
} OutboxMarkerSlot;

typedef struct OutboxPreparedMarkers
{
	Oid			dboid;			/* InvalidOid: unused */
	OutboxMarkerSet set;
} OutboxPreparedMarkers;

typedef struct OutboxMarkersShared
{
	slock_t		mutex;			/* protects prepared[] */
	OutboxPreparedMarkers prepared[OUTBOX_MARKER_PREPARED];
	int			nslots;
	OutboxMarkerSlot slots[FLEXIBLE_ARRAY_MEMBER];
} OutboxMarkersShared;

/* A statement of this transaction inserting into an outbox, still running. */
typedef struct OutboxMarkerOpen
{
	Oid			relid;
	int			nest_level;
} OutboxMarkerOpen;

#define OUTBOX_MARKER_MAX_OPEN	64

static OutboxMarkerSlot *outbox_my_slot(void);
static OutboxMarkerEntry *outbox_my_entry(Oid relid, bool create);
static void outbox_publish_markers(const OutboxMarkerSet *prev);
static void outbox_fold_markers(OutboxMarkerSlot *slot,
								OutboxMarkerSet *prev);
static int64 outbox_set_bound(const OutboxMarkerSet *set, Oid relid);
static void outbox_close_windows(int from);
static void outbox_reserve_prepared(void);
static bool outbox_can_mark(void);
static bool outbox_xid_running(FullTransactionId xid, Snapshot snapshot);

static OutboxMarkersShared *outbox_markers = NULL;

/*
 * This backend's own view of its slot's current set (only it writes the
 * slot), the statements still open, and how deep each entry's are.
 */
static bool outbox_marking = false;
static OutboxMarkerSet outbox_my_set;
static int	outbox_depth[OUTBOX_MARKER_TABLES];
static bool outbox_windowed[OUTBOX_MARKER_TABLES];
static OutboxMarkerOpen outbox_open[OUTBOX_MARKER_MAX_OPEN];
static int	outbox_nopen = 0;
static bool outbox_open_lost = false;	/* more opens than tracked */
static int	outbox_prepared_entry = -1; /* reserved at PRE_PREPARE */

/* without shared memory: the value each entry's window lock carries */
static int64 outbox_window_lock[OUTBOX_MARKER_TABLES];

/*
 * outbox_markers_size
 *
 * The shared memory the markers take: a slot per backend.
 */
Size
outbox_markers_size(void)
{
	return add_size(offsetof(OutboxMarkersShared, slots),
					mul_size(MaxBackends, sizeof(OutboxMarkerSlot)));
}

/*
 * outbox_markers_init
 *
 * Create (or attach to) the markers, from shmem_startup_hook.
 */
void
outbox_markers_init(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	outbox_markers = ShmemInitStruct("delivery_outbox markers",
									 outbox_markers_size(), &found);
	if (!found)
	{
		int			i;

		memset(outbox_markers, 0, outbox_markers_size());
		SpinLockInit(&outbox_markers->mutex);
		outbox_markers->nslots = MaxBackends;
		for (i = 0; i < MaxBackends; i++)
			SpinLockInit(&outbox_markers->slots[i].mutex);
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * outbox_marker_needs_bound
 *
 * Whether outbox_marker_open() for relid needs a bound now: the current
 * transaction has not marked it yet, or the statement opens a window.  The
 * caller reads the bound (the sequence) only then.
 */
bool
outbox_marker_needs_bound(Oid relid, bool window)
{
	if (!outbox_can_mark())
		return false;
	return window || !outbox_marking || outbox_my_entry(relid, false) == NULL;
}

/*
 * outbox_marker_open
 *
 * A statement starts inserting into outbox relid, whose ids will all be at
 * least bound (the caller read the sequence's next value), and, when window
 * is set (an ordered outbox), has a window until outbox_marker_close().
 * Published before the statement draws an id.  Assigns the transaction's
 * xid.
 */
void
outbox_marker_open(Oid relid, int64 bound, bool window)
{
	OutboxMarkerSlot *slot = outbox_my_slot();
	OutboxMarkerEntry *entry;
	OutboxMarkerSet prev;
	bool		folded = false;

	if (!outbox_can_mark())
		return;
	if (!outbox_marking)
	{
		FullTransactionId xid = GetTopFullTransactionId();

		if (slot != NULL)
		{
			/* the history goes into the slot with the new set, below */
			outbox_fold_markers(slot, &prev);
			folded = true;
		}
		else
			outbox_history_fold(xid);
		memset(&outbox_my_set, 0, sizeof(outbox_my_set));
		memset(outbox_window_lock, 0, sizeof(outbox_window_lock));
		memset(outbox_depth, 0, sizeof(outbox_depth));
		memset(outbox_windowed, 0, sizeof(outbox_windowed));
		outbox_my_set.xid = xid;
		outbox_my_set.dboid = MyDatabaseId;
		outbox_nopen = 0;
		outbox_open_lost = false;
		outbox_marking = true;
	}
	entry = outbox_my_entry(relid, true);
	if (entry != NULL)
	{
		int			e = entry - outbox_my_set.entries;

		if (bound < entry->bound)
		{
			entry->bound = bound;
			if (slot == NULL)
			{
				outbox_marker_lock(OUTBOX_LOCK_BOUND, relid, bound, true);
				outbox_history_lock(outbox_my_set.xid, relid, bound);
			}
		}
		if (window)
		{
			outbox_windowed[e] = true;
			if (outbox_depth[e]++ == 0)
				entry->window = bound;
			else
				entry->window = Min(entry->window, bound);
			if (slot == NULL && outbox_window_lock[e] == 0)
			{
				outbox_marker_lock(OUTBOX_LOCK_WINDOW, relid, entry->window, true);
				outbox_window_lock[e] = Max(entry->window, 1);
			}
		}
	}
	else if (slot == NULL)
	{
		/* more outboxes than entries: mark this one from its bound on */
		outbox_marker_lock(OUTBOX_LOCK_BOUND, relid, bound, true);
		outbox_history_lock(outbox_my_set.xid, relid, bound);
		if (window)
			outbox_marker_lock(OUTBOX_LOCK_WINDOW, relid, bound, true);
	}
	if (window)
	{
		if (outbox_nopen < OUTBOX_MARKER_MAX_OPEN)
		{
			outbox_open[outbox_nopen].relid = relid;
			outbox_open[outbox_nopen].nest_level = GetCurrentTransactionNestLevel();
			outbox_nopen++;
		}
		else
			outbox_open_lost = true;
	}
	outbox_publish_markers(folded ? &prev : NULL);
}

/*
 * outbox_marker_row
 *
 * A row with this id is about to be inserted into relid (its BEFORE ROW
 * trigger): an id below the bound lowers it (a row that brings its own id),
 * and an open window moves up to it, every earlier row of the statement
 * being in the indexes by now.  A row without a statement marker (logical
 * replication's apply fires no statement trigger) marks itself from here.
 * True when the row's id is below what the transaction's statements drew
 * from the sequence (a row that brings its own id, or is not known to).
 */
bool
outbox_marker_row(Oid relid, int64 id)
{
	OutboxMarkerEntry *entry;
	int			e;
	bool		changed = false;
	bool		below = false;

	if (!outbox_can_mark())
		return true;
	entry = outbox_marking ? outbox_my_entry(relid, false) : NULL;
	if (entry == NULL)
	{
		outbox_marker_open(relid, id, false);
		return true;
	}
	e = entry - outbox_my_set.entries;
	if (id < entry->bound)
	{
		entry->bound = id;
		changed = true;
		below = true;
		if (outbox_my_slot() == NULL)
		{
			outbox_marker_lock(OUTBOX_LOCK_BOUND, relid, id, true);
			outbox_history_lock(outbox_my_set.xid, relid, id);
		}
	}

	/*
	 * The window never moves up within a statement: its rows need not be
	 * inserted in the order their ids were drawn (ids given, or drawn under a
	 * sort), so a row's id says nothing of those not yet in.
	 */
	if (outbox_windowed[e] && outbox_depth[e] > 0 && id < entry->window)
	{
		entry->window = id;
		changed = true;
	}
	if (changed)
		outbox_publish_markers(NULL);
	return below;
}

/*
 * outbox_marker_close
 *
 * A statement that opened a window on relid ended: its rows are all in the
 * indexes.
 */
void
outbox_marker_close(Oid relid)
{
	int			i;

	if (!outbox_can_mark() || !outbox_marking)
		return;
	for (i = outbox_nopen - 1; i >= 0; i--)
	{
		if (outbox_open[i].relid == relid)
		{
			OutboxMarkerEntry *entry = outbox_my_entry(relid, false);

			memmove(&outbox_open[i], &outbox_open[i + 1],
					(outbox_nopen - i - 1) * sizeof(OutboxMarkerOpen));
			outbox_nopen--;
			if (entry != NULL)
			{
				int			e = entry - outbox_my_set.entries;

				if (--outbox_depth[e] <= 0 && !outbox_open_lost)
				{
					outbox_depth[e] = 0;
					entry->window = OUTBOX_NO_WINDOW;
					if (outbox_window_lock[e] != 0)
					{
						outbox_marker_lock(OUTBOX_LOCK_WINDOW, relid,
										   outbox_window_lock[e], false);
						outbox_window_lock[e] = 0;
					}
				}
			}
			outbox_publish_markers(NULL);
			return;
		}
	}
}

/*
 * outbox_marker_horizon
 *
 * The horizon of outbox relid: horizon (the caller read the sequence's last
 * value before calling) capped below the bound of every transaction
 * inserting into it that the snapshot does not see as committed.
 */
int64
outbox_marker_horizon(Oid relid, int64 horizon, Snapshot snapshot)
{
	int			i;
	OutboxPreparedMarkers prepared[OUTBOX_MARKER_PREPARED];
	int			nprepared = 0;

	if (outbox_markers == NULL)
		return Min(horizon, outbox_marker_locks(OUTBOX_LOCK_BOUND, relid, snapshot) - 1);

	for (i = 0; i < outbox_markers->nslots; i++)
	{
		OutboxMarkerSlot *slot = &outbox_markers->slots[i];
		bool		live;
		FullTransactionId cur_xid;
		FullTransactionId prev_xid;
		int64		cur_bound;
		int64		prev_bound;

		if (!OidIsValid(slot->dboid))
			continue;			/* never used */
		SpinLockAcquire(&slot->mutex);
		live = slot->live;
		cur_xid = slot->cur.xid;
		prev_xid = slot->prev.xid;
		cur_bound = outbox_set_bound(&slot->cur, relid);
		prev_bound = outbox_set_bound(&slot->prev, relid);
		SpinLockRelease(&slot->mutex);

		if (cur_bound != OUTBOX_NO_WINDOW &&
			(live || outbox_xid_running(cur_xid, snapshot)))
			horizon = Min(horizon, cur_bound - 1);
		if (prev_bound != OUTBOX_NO_WINDOW &&
			outbox_xid_running(prev_xid, snapshot))
			horizon = Min(horizon, prev_bound - 1);
	}

	SpinLockAcquire(&outbox_markers->mutex);
	for (i = 0; i < OUTBOX_MARKER_PREPARED; i++)
		if (outbox_markers->prepared[i].dboid == MyDatabaseId)
			prepared[nprepared++] = outbox_markers->prepared[i];
	SpinLockRelease(&outbox_markers->mutex);
	for (i = 0; i < nprepared; i++)
	{
		int64		bound = outbox_set_bound(&prepared[i].set, relid);
		FullTransactionId xid = prepared[i].set.xid;

		/* a prepared transaction still pending is never removable */
		if (bound != OUTBOX_NO_WINDOW &&
			FullTransactionIdIsValid(xid) &&
			!GlobalVisCheckRemovableFullXid(NULL, xid) &&
			(TransactionIdIsInProgress(XidFromFullTransactionId(xid)) ||
			 XidInMVCCSnapshot(XidFromFullTransactionId(xid), snapshot)))
			horizon = Min(horizon, bound - 1);
	}
	return horizon;
}

/*
 * outbox_marker_window
 *
 * The lowest window any running statement has open on outbox relid: ids at
 * or above it may have been drawn for rows not yet in the indexes.
 * OUTBOX_NO_WINDOW when none.
 */
int64
outbox_marker_window(Oid relid)
{
	int64		window = OUTBOX_NO_WINDOW;
	int			i;

	if (outbox_markers == NULL)
		return outbox_marker_locks(OUTBOX_LOCK_WINDOW, relid, NULL);

	for (i = 0; i < outbox_markers->nslots; i++)
	{
		OutboxMarkerSlot *slot = &outbox_markers->slots[i];
		int			e;

		if (slot->dboid != MyDatabaseId)
			continue;			/* a live set is its owner's database's */
		SpinLockAcquire(&slot->mutex);
		if (slot->live && slot->cur.dboid == MyDatabaseId)
		{
			if (slot->cur.overflow)
				window = Min(window, OUTBOX_MARK_ALL);
			for (e = 0; e < slot->cur.nentries; e++)
				if (slot->cur.entries[e].relid == relid)
					window = Min(window, slot->cur.entries[e].window);
		}
		SpinLockRelease(&slot->mutex);
	}
	return window;
}

/*
 * outbox_markers_xact_callback
 *
 * At the end of the transaction its markers stop being live (its commit is
 * visible by then) and stay as history; at PREPARE they move to the shared
 * array (an entry is reserved at PRE_PREPARE, where failing is still
 * allowed).
 */
void
outbox_markers_xact_callback(XactEvent event, void *arg)
{
	OutboxMarkerSlot *slot;

	if (!outbox_marking)
		return;
	slot = outbox_my_slot();
	if (slot == NULL)
	{
		/* the locks go with the transaction (a prepared one keeps them) */
		if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
			event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
			event == XACT_EVENT_PREPARE)
		{
			outbox_marking = false;
			outbox_nopen = 0;
		}
		return;
	}
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			outbox_reserve_prepared();
			return;
		case XACT_EVENT_PREPARE:
			if (outbox_prepared_entry >= 0)
			{
				SpinLockAcquire(&outbox_markers->mutex);
				outbox_markers->prepared[outbox_prepared_entry].set = outbox_my_set;
				outbox_markers->prepared[outbox_prepared_entry].dboid = MyDatabaseId;
				SpinLockRelease(&outbox_markers->mutex);
				outbox_prepared_entry = -1;
			}
			memset(&outbox_my_set, 0, sizeof(outbox_my_set));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			if (outbox_prepared_entry >= 0)
			{
				/* a PREPARE that failed after PRE_PREPARE */
				SpinLockAcquire(&outbox_markers->mutex);
				outbox_markers->prepared[outbox_prepared_entry].set.nentries = 0;
				SpinLockRelease(&outbox_markers->mutex);
				outbox_prepared_entry = -1;
			}
			break;
		default:
			return;
	}

	/*
	 * A rolled-back insert into an ordered outbox may have held rows back,
	 * and no NOTIFY comes of a rollback: wake outbox_wait() sleepers.
	 */
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
	{
		int			e;

		for (e = 0; e < outbox_my_set.nentries; e++)
		{
			if (outbox_windowed[e])
			{
				OutboxDatabase *db = outbox_my_database(false);

				if (db != NULL)
					ConditionVariableBroadcast(&db->pending_cv);
				break;
			}
		}
	}
	outbox_close_windows(0);
	outbox_marking = false;
	SpinLockAcquire(&slot->mutex);
	slot->cur = outbox_my_set;
	slot->live = false;
	SpinLockRelease(&slot->mutex);
}

/*
 * outbox_markers_subxact_callback
 *
 * An aborted subtransaction's statements will not close their windows:
 * close them here.
 */
void
outbox_markers_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
								SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	int			from;

	if (event != SUBXACT_EVENT_ABORT_SUB || !outbox_marking)
		return;
	for (from = 0; from < outbox_nopen; from++)
		if (outbox_open[from].nest_level >= level)
			break;
	if (from < outbox_nopen)
	{
		outbox_close_windows(from);
		outbox_publish_markers(NULL);
	}
}

/*
 * outbox_my_slot
 *
 * This backend's slot, or NULL without shared memory (or a backend
 * without one).
 */
static OutboxMarkerSlot *
outbox_my_slot(void)
{
	if (outbox_markers == NULL || OUTBOX_MY_BACKEND_INDEX < 0 ||
		OUTBOX_MY_BACKEND_INDEX >= outbox_markers->nslots ||
		!OidIsValid(MyDatabaseId))
		return NULL;
	return &outbox_markers->slots[OUTBOX_MY_BACKEND_INDEX];
}

/*
 * outbox_my_entry
 *
 * The current set's entry for relid; with create, a new one (none when the
 * set is full: it overflows, which marks every outbox).
 */
static OutboxMarkerEntry *
outbox_my_entry(Oid relid, bool create)
{
	int			e;

	for (e = 0; e < outbox_my_set.nentries; e++)
		if (outbox_my_set.entries[e].relid == relid)
			return &outbox_my_set.entries[e];
	if (!create)
		return NULL;
	if (outbox_my_set.nentries == OUTBOX_MARKER_TABLES)
	{
		outbox_my_set.overflow = true;
		return NULL;
	}
	e = outbox_my_set.nentries++;
	outbox_my_set.entries[e].relid = relid;
	outbox_my_set.entries[e].bound = OUTBOX_NO_WINDOW;
	outbox_my_set.entries[e].window = OUTBOX_NO_WINDOW;
	return &outbox_my_set.entries[e];
}

/*
 * outbox_publish_markers
 *
 * Copy this backend's current set into its slot, live, and with prev (not
 * NULL: a new transaction's first marker) the slot's history from
 * outbox_fold_markers, under the same spinlock: readers see the slot
 * before the transaction marked or after, either of which is right.
 */
static void
outbox_publish_markers(const OutboxMarkerSet *prev)
{
	OutboxMarkerSlot *slot = outbox_my_slot();

	if (slot == NULL)
		return;					/* the locks are the markers */
	SpinLockAcquire(&slot->mutex);
	slot->dboid = MyDatabaseId;
	if (prev != NULL)
		slot->prev = *prev;
	slot->cur = outbox_my_set;
	slot->live = true;
	SpinLockRelease(&slot->mutex);
}

/*
 * outbox_fold_markers
 *
 * Before a new transaction marks: the slot's last transaction joins the
 * history while some snapshot may not see it committed; history that every
 * snapshot sees committed is dropped.  The history is returned in *result,
 * for outbox_publish_markers() to write with the new set.  Called outside
 * any spinlock (the visibility tests may take locks); only this backend
 * writes the slot, so it reads it without one.
 */
static void
outbox_fold_markers(OutboxMarkerSlot *slot, OutboxMarkerSet *result)
{
	OutboxMarkerSet prev = slot->prev;
	OutboxMarkerSet cur = slot->cur;
	int			i;

	if (FullTransactionIdIsValid(prev.xid) &&
		GlobalVisCheckRemovableFullXid(NULL, prev.xid))
		memset(&prev, 0, sizeof(prev));
	if (FullTransactionIdIsValid(cur.xid) &&
		!GlobalVisCheckRemovableFullXid(NULL, cur.xid))
	{
		/* history of another database (the slot's last owner) stays valid */
		if (!FullTransactionIdIsValid(prev.xid))
			prev.dboid = cur.dboid;
		else if (prev.dboid != cur.dboid)
			prev.dboid = InvalidOid;
		prev.xid = cur.xid;
		prev.overflow |= cur.overflow;
		for (i = 0; i < cur.nentries; i++)
		{
			int			e;

			for (e = 0; e < prev.nentries; e++)
				if (prev.entries[e].relid == cur.entries[i].relid)
					break;
			if (e == prev.nentries)
			{
				if (e == OUTBOX_MARKER_TABLES)
				{
					prev.overflow = true;
					continue;
				}
				prev.entries[e] = cur.entries[i];
				prev.nentries++;
			}
			else
				prev.entries[e].bound = Min(prev.entries[e].bound,
											cur.entries[i].bound);
			prev.entries[e].window = OUTBOX_NO_WINDOW;
		}
	}
	else if (FullTransactionIdIsValid(cur.xid))
		memset(&prev, 0, sizeof(prev));
	*result = prev;
}

/*
 * outbox_set_bound
 *
 * The bound a set puts on outbox relid, OUTBOX_NO_WINDOW if none.  Called
 * under a spinlock: no calls out.
 */
static int64
outbox_set_bound(const OutboxMarkerSet *set, Oid relid)
{
	int64		bound = OUTBOX_NO_WINDOW;
	int			e;

	if (!FullTransactionIdIsValid(set->xid) ||
		(OidIsValid(set->dboid) && set->dboid != MyDatabaseId))
		return bound;
	if (set->overflow)
		bound = OUTBOX_MARK_ALL;
	for (e = 0; e < set->nentries; e++)
		if (set->entries[e].relid == relid)
			bound = Min(bound, set->entries[e].bound);
	return bound;
}

/*
 * outbox_close_windows
 *
 * Forget the open statements from the from'th on, and close the windows
 * no statement holds open any more (in the local set: the caller
 * publishes).
 */
static void
outbox_close_windows(int from)
{
	int			e;

	outbox_nopen = from;
	memset(outbox_depth, 0, sizeof(outbox_depth));
	for (e = 0; e < outbox_nopen; e++)
	{
		OutboxMarkerEntry *entry = outbox_my_entry(outbox_open[e].relid, false);

		if (entry != NULL)
			outbox_depth[entry - outbox_my_set.entries]++;
	}
	if (from == 0)
		outbox_open_lost = false;
	for (e = 0; e < outbox_my_set.nentries; e++)
	{
		if (outbox_depth[e] > 0 || outbox_open_lost)
			continue;
		outbox_my_set.entries[e].window = OUTBOX_NO_WINDOW;
		if (outbox_window_lock[e] != 0)
			outbox_marker_lock(OUTBOX_LOCK_WINDOW, outbox_my_set.entries[e].relid,
							   outbox_window_lock[e], false);
		outbox_window_lock[e] = 0;
	}
}

/*
 * outbox_can_mark
 *
 * Whether this backend marks its inserts: in its shared memory slot, or,
 * without the preload, in the lock manager.
 */
static bool
outbox_can_mark(void)
{
	if (outbox_markers != NULL)
		return outbox_my_slot() != NULL;
	return OidIsValid(MyDatabaseId) && IsTransactionState();
}

/*
 * outbox_reserve_prepared
 *
 * An entry of the shared array for the markers of the transaction being
 * prepared; entries of prepared transactions every snapshot sees ended are
 * taken back first.  Raises 53400 when all are in use.
 */
static void
outbox_reserve_prepared(void)
{
	FullTransactionId xids[OUTBOX_MARKER_PREPARED];
	bool		stale[OUTBOX_MARKER_PREPARED];
	int			i;

	SpinLockAcquire(&outbox_markers->mutex);
	for (i = 0; i < OUTBOX_MARKER_PREPARED; i++)
		xids[i] = OidIsValid(outbox_markers->prepared[i].dboid) ?
			outbox_markers->prepared[i].set.xid : InvalidFullTransactionId;
	SpinLockRelease(&outbox_markers->mutex);

	for (i = 0; i < OUTBOX_MARKER_PREPARED; i++)
		stale[i] = !FullTransactionIdIsValid(xids[i]) ||
			GlobalVisCheckRemovableFullXid(NULL, xids[i]);

	SpinLockAcquire(&outbox_markers->mutex);
	for (i = 0; i < OUTBOX_MARKER_PREPARED; i++)
	{
		OutboxPreparedMarkers *p = &outbox_markers->prepared[i];

		if ((!OidIsValid(p->dboid) && p->set.nentries >= 0) ||
			(OidIsValid(p->dboid) && stale[i] &&
			 FullTransactionIdEquals(p->set.xid, xids[i])))
		{
			/* reserved: readers skip it until PREPARE fills it in */
			p->dboid = InvalidOid;
			p->set.xid = InvalidFullTransactionId;
			p->set.nentries = -1;
			outbox_prepared_entry = i;
			break;
		}
	}
	SpinLockRelease(&outbox_markers->mutex);
	if (outbox_prepared_entry < 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("too many prepared transactions have inserted into outboxes"),
				 errdetail("At most %d prepared transactions with outbox inserts can be pending at a time.",
						   OUTBOX_MARKER_PREPARED),
				 errhint("Commit or roll back some of them first.")));
}

/*
 * outbox_xid_running
 *
 * Whether transaction xid (of a set; Invalid: none) may still be running
 * for snapshot: not when every snapshot sees it ended, however long ago
 * that was; else as the snapshot says, which only a transaction that
 * recent can be asked in 32 bits.  Called outside any spinlock.
 */
static bool
outbox_xid_running(FullTransactionId xid, Snapshot snapshot)
{
	if (!FullTransactionIdIsValid(xid) ||
		GlobalVisCheckRemovableFullXid(NULL, xid))
		return false;
	return XidInMVCCSnapshot(XidFromFullTransactionId(xid), snapshot);
}
