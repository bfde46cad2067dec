/*-------------------------------------------------------------------------
 *
 * outbox_marker_locks.c
 *		The insert markers without shared memory: locks of the lock manager
 *		that every backend can list.
 *
 * Without the preload there is no shared memory of ours, so a marker is an
 * advisory lock of a tag no SQL function makes, in AccessShareLock mode,
 * which conflicts with nothing: nobody ever waits for one.  The inserting
 * transaction holds its bound until it ends and its statement's window
 * until the statement ends (a prepared transaction keeps its locks, also
 * across a restart); a session lock of the inserting backend keeps its
 * history, given back once every snapshot sees the transaction ended (or
 * when the backend exits: a snapshot older than a producer that has
 * disconnected since may then get a horizon too high).  Readers list every
 * lock of the server (GetLockStatusData), which is slower than reading
 * shared memory.
 *
 * A history lock's tag has room for 32 bits of its xid only.  The holder
 * knows the full one (and gives the lock back by it), but a reader takes
 * the tag's xid for the latest transaction with those 32 bits, not after
 * the next xid, and ignores it once every snapshot sees that one ended
 * (GlobalVisCheckRemovableFullXid): right for any lock younger than 2^32
 * transactions.  One older (its backend idle all that time) is read as a
 * transaction 2^32 (or a multiple) later, which is wrong only while that
 * one is still running for the reader's snapshot: a horizon held down for
 * that moment once every 2^32 transactions, where a plain 32-bit xid
 * would seem to run for every snapshot for 2^31 transactions on end.  outbox_markers.c decides what to mark; this file only
 * holds and lists the locks.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_marker_locks.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"

#include "outbox_marker_locks.h"

/*
 * Without shared memory: a marker is an advisory lock tag (database, table,
 * value's low 32 bits, OUTBOX_LOCK_FLAG | kind | value's next 13 bits);
 * the functions of SQL set the last field to 1 or 2, never this.  A
 * transaction's bound and its statements' windows are transaction locks;
 * its history (the bound, for snapshots that do not see it committed) is a
 * session lock with the transaction's xid in place of the database,
 * given back once every snapshot sees the transaction ended.
 */
#define OUTBOX_LOCK_FLAG		0x8000
#define OUTBOX_LOCK_KIND		0x6000
#define OUTBOX_LOCK_HISTORY		0x2000
#define OUTBOX_LOCK_HIGH		0x1fff
#define OUTBOX_LOCK_MAX_VALUE	((INT64CONST(1) << 45) - 1)

/* History locks one backend holds at most, folding older ones together. */
#define OUTBOX_HISTORY_MAX		16

/* ... when a new transaction finds this many or more */
#define OUTBOX_HISTORY_FOLD		8

typedef struct OutboxHistoryLock
{
	FullTransactionId xid;
	Oid			relid;
	int64		bound;
} OutboxHistoryLock;

/* the history locks this backend holds */
static OutboxHistoryLock outbox_history[OUTBOX_HISTORY_MAX];
static int	outbox_nhistory = 0;

static void outbox_lock_tag(LOCKTAG *tag, uint16 kind, uint32 field1,
							Oid relid, int64 value);
static FullTransactionId outbox_full_xid(TransactionId xid,
										 FullTransactionId next);

/*
 * outbox_lock_tag
 *
 * The advisory lock tag of a marker (see OUTBOX_LOCK_FLAG).  Values are
 * kept in 45 bits; one above is marked as the largest, which only ever
 * lowers what readers derive from it.
 */
static void
outbox_lock_tag(LOCKTAG *tag, uint16 kind, uint32 field1, Oid relid,
				int64 value)
{
	uint64		v = value < 0 ? 0 : Min((uint64) value, (uint64) OUTBOX_LOCK_MAX_VALUE);

	SET_LOCKTAG_ADVISORY(*tag, field1, relid, (uint32) v,
						 OUTBOX_LOCK_FLAG | kind |
						 (uint16) ((v >> 32) & OUTBOX_LOCK_HIGH));
}

/*
 * outbox_full_xid
 *
 * The latest transaction whose 32 bits are xid, not after next (the next
 * xid to be assigned, read after xid was): the one a history lock names,
 * unless the lock is 2^32 transactions old (see the file's header).
 */
static FullTransactionId
outbox_full_xid(TransactionId xid, FullTransactionId next)
{
	uint64		n = U64FromFullTransactionId(next);
	uint64		full = (n & ~(uint64) PG_UINT32_MAX) | xid;

	if (full >= n && n > PG_UINT32_MAX)
		full -= (uint64) PG_UINT32_MAX + 1;
	return FullTransactionIdFromU64(full);
}

/*
 * outbox_marker_lock
 *
 * Without shared memory: take (or give back) the lock that marks relid
 * with value, of kind OUTBOX_LOCK_BOUND or OUTBOX_LOCK_WINDOW, for the
 * top-level transaction (an aborted subtransaction's statements are closed
 * by outbox_markers_subxact_callback).  Nothing conflicts with an
 * AccessShareLock of such a tag: it never waits.
 */
void
outbox_marker_lock(uint16 kind, Oid relid, int64 value, bool acquire)
{
	LOCKTAG		tag;
	ResourceOwner save = CurrentResourceOwner;

	outbox_lock_tag(&tag, kind, MyDatabaseId, relid, value);
	CurrentResourceOwner = TopTransactionResourceOwner;
	PG_TRY();
	{
		if (acquire)
			(void) LockAcquire(&tag, AccessShareLock, false, false);
		else
			(void) LockRelease(&tag, AccessShareLock, false);
	}
	PG_FINALLY();
	{
		CurrentResourceOwner = save;
	}
	PG_END_TRY();
}

/*
 * outbox_history_lock
 *
 * Without shared memory: the session lock that keeps transaction xid's
 * bound on relid after it ends, for snapshots that do not see it ended.
 */
void
outbox_history_lock(FullTransactionId xid, Oid relid, int64 bound)
{
	LOCKTAG		tag;
	int			i;

	/* one per transaction and outbox: a lower bound replaces the old one */
	for (i = 0; i < outbox_nhistory; i++)
	{
		OutboxHistoryLock *h = &outbox_history[i];

		if (!FullTransactionIdEquals(h->xid, xid) || h->relid != relid)
			continue;
		if (h->bound <= bound)
			return;
		outbox_lock_tag(&tag, OUTBOX_LOCK_HISTORY, XidFromFullTransactionId(xid),
						relid, bound);
		(void) LockAcquire(&tag, AccessShareLock, true, false);
		outbox_lock_tag(&tag, OUTBOX_LOCK_HISTORY, XidFromFullTransactionId(xid),
						relid, h->bound);
		(void) LockRelease(&tag, AccessShareLock, true);
		h->bound = bound;
		return;
	}
	if (outbox_nhistory == OUTBOX_HISTORY_MAX)
		outbox_history_fold(xid);
	if (outbox_nhistory == OUTBOX_HISTORY_MAX)
		return;					/* all the running transaction's: no room */
	outbox_lock_tag(&tag, OUTBOX_LOCK_HISTORY, XidFromFullTransactionId(xid),
					relid, bound);
	(void) LockAcquire(&tag, AccessShareLock, true, false);
	outbox_history[outbox_nhistory].xid = xid;
	outbox_history[outbox_nhistory].relid = relid;
	outbox_history[outbox_nhistory].bound = bound;
	outbox_nhistory++;
}

/*
 * outbox_history_fold
 *
 * Without shared memory, before a transaction marks: give back the history
 * locks of transactions every snapshot sees ended; when that leaves too
 * many, fold the others of each outbox into one, with the newest of their
 * xids (a snapshot that sees a backend's newest transaction ended sees its
 * earlier ones ended too) and the lowest bound.  The running transaction's
 * own are never folded.
 */
void
outbox_history_fold(FullTransactionId mine)
{
	LOCKTAG		tag;
	int			i;
	int			kept = 0;

	for (i = 0; i < outbox_nhistory; i++)
	{
		OutboxHistoryLock *h = &outbox_history[i];

		if (!FullTransactionIdEquals(h->xid, mine) &&
			GlobalVisCheckRemovableFullXid(NULL, h->xid))
		{
			outbox_lock_tag(&tag, OUTBOX_LOCK_HISTORY,
							XidFromFullTransactionId(h->xid), h->relid, h->bound);
			(void) LockRelease(&tag, AccessShareLock, true);
		}
		else
			outbox_history[kept++] = *h;
	}
	outbox_nhistory = kept;
	if (outbox_nhistory < OUTBOX_HISTORY_FOLD)
		return;

	/* fold: one per outbox, the newest xid, the lowest bound */
	{
		OutboxHistoryLock folded[OUTBOX_HISTORY_MAX];
		int			nfolded = 0;
		FullTransactionId newest = InvalidFullTransactionId;

		for (i = 0; i < outbox_nhistory; i++)
			if (!FullTransactionIdEquals(outbox_history[i].xid, mine) &&
				(!FullTransactionIdIsValid(newest) ||
				 FullTransactionIdFollows(outbox_history[i].xid, newest)))
				newest = outbox_history[i].xid;
		kept = 0;
		for (i = 0; i < outbox_nhistory; i++)
		{
			OutboxHistoryLock *h = &outbox_history[i];
			int			f;

			if (FullTransactionIdEquals(h->xid, mine))
			{
				outbox_history[kept++] = *h;
				continue;
			}
			for (f = 0; f < nfolded; f++)
				if (folded[f].relid == h->relid)
					break;
			if (f == nfolded)
			{
				folded[nfolded].xid = newest;
				folded[nfolded].relid = h->relid;
				folded[nfolded].bound = h->bound;
				nfolded++;
			}
			else
				folded[f].bound = Min(folded[f].bound, h->bound);
		}
		/* the folded ones first, then the old ones given back */
		for (i = 0; i < nfolded; i++)
		{
			outbox_lock_tag(&tag, OUTBOX_LOCK_HISTORY,
							XidFromFullTransactionId(folded[i].xid),
							folded[i].relid, folded[i].bound);
			(void) LockAcquire(&tag, AccessShareLock, true, false);
		}
		for (i = 0; i < outbox_nhistory; i++)
		{
			OutboxHistoryLock *h = &outbox_history[i];

			if (FullTransactionIdEquals(h->xid, mine))
				continue;
			outbox_lock_tag(&tag, OUTBOX_LOCK_HISTORY,
							XidFromFullTransactionId(h->xid), h->relid, h->bound);
			(void) LockRelease(&tag, AccessShareLock, true);
		}
		for (i = 0; i < nfolded; i++)
			outbox_history[kept++] = folded[i];
		outbox_nhistory = kept;
	}
}

/*
 * outbox_marker_locks
 *
 * Without shared memory: the lowest value relid is marked with, of kind
 * OUTBOX_LOCK_BOUND (with a snapshot: also the history of transactions it
 * does not see ended) or OUTBOX_LOCK_WINDOW, from the lock manager's list
 * of every lock held; PG_INT64_MAX when none.
 */
int64
outbox_marker_locks(uint16 kind, Oid relid, Snapshot snapshot)
{
	LockData   *locks = GetLockStatusData();
	int64		lowest = PG_INT64_MAX;
	OutboxHistoryLock *history = palloc(sizeof(OutboxHistoryLock) *
										Max(locks->nelements, 1));
	int			nhistory = 0;
	FullTransactionId next;
	int			i;

	for (i = 0; i < locks->nelements; i++)
	{
		LOCKTAG    *tag = &locks->locks[i].locktag;
		uint16		tagkind = tag->locktag_field4 & OUTBOX_LOCK_KIND;
		int64		value;

		if (tag->locktag_type != LOCKTAG_ADVISORY ||
			(tag->locktag_field4 & OUTBOX_LOCK_FLAG) == 0 ||
			tag->locktag_field2 != relid || locks->locks[i].holdMask == 0)
			continue;
		value = (int64) (((uint64) (tag->locktag_field4 & OUTBOX_LOCK_HIGH) << 32) |
						 tag->locktag_field3);
		if (tagkind == kind && tag->locktag_field1 == MyDatabaseId)
			lowest = Min(lowest, value);
		else if (kind == OUTBOX_LOCK_BOUND && tagkind == OUTBOX_LOCK_HISTORY &&
				 snapshot != NULL && value < lowest)
		{
			history[nhistory].xid = FullTransactionIdFromEpochAndXid(0, tag->locktag_field1);
			history[nhistory].bound = value;
			nhistory++;
		}
	}
	/* outside the lock manager's partitions: these may look at clog */
	next = nhistory > 0 ? ReadNextFullTransactionId() : InvalidFullTransactionId;
	for (i = 0; i < nhistory; i++)
	{
		TransactionId xid = XidFromFullTransactionId(history[i].xid);

		if (history[i].bound < lowest &&
			!GlobalVisCheckRemovableFullXid(NULL, outbox_full_xid(xid, next)) &&
			XidInMVCCSnapshot(xid, snapshot))
			lowest = history[i].bound;
	}
	pfree(history);
	return lowest;
}
