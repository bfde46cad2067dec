/*-------------------------------------------------------------------------
 *
 * outbox_shmem.c
 *		The extension's shared memory: database slots, hand-over rings,
 *		counters.
 *
 * With shared_preload_libraries = 'delivery_outbox' the postmaster sets up
 * one OutboxShared: a slot per database (its counters behind
 * outbox_activity(), the condition variable outbox_wait() sleeps on, and
 * the hand-over ring of the worker serving it) and the stash of prepared
 * transactions' counters.  Without the preload outbox_shared stays NULL and
 * every caller degrades as documented.
 *
 * Invariants: a producer never blocks on the worker (a full ring drops the
 * wake-ups, counted, and never the rows); a ring is only written under its
 * database slot's spinlock, in short chunks; slots are allocated once and
 * never freed, so pointers to them stay valid for the life of the server.
 * Under a spinlock go only loads, stores and atomics (which PostgreSQL
 * keeps usable there, emulated ones included): no call that can fail or
 * wait, not even the clock's.
 *
 * This file depends on nothing else of the extension but its settings.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_shmem.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#include "delivery_outbox.h"
#include "outbox_shmem.h"

OutboxShared *outbox_shared = NULL;

/*
 * outbox_shmem_size
 *
 * The size of the shared state, for shmem_request_hook.
 */
Size
outbox_shmem_size(void)
{
	Size		size = offsetof(OutboxShared, rings);

	size = add_size(size, mul_size(mul_size(OUTBOX_MAX_WORKERS,
											outbox_handover_size),
								   sizeof(OutboxWakeup)));
	return size;
}

/*
 * outbox_shmem_init
 *
 * Create (or attach to) the shared state, from shmem_startup_hook.
 */
void
outbox_shmem_init(void)
{
	bool		found;
	int			i;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	outbox_shared = ShmemInitStruct("delivery_outbox", outbox_shmem_size(),
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
			pg_atomic_init_u32(&db->scheduled_hint, 0);
			pg_atomic_init_u64(&db->scheduled_min, (uint64) PG_INT64_MAX);
			SpinLockInit(&db->mutex);
			db->ring = -1;
			db->worker_pid = 0;
			db->worker_latch = NULL;
			db->ring_head = 0;
			db->ring_tail = 0;
		}
		for (i = 0; i < OUTBOX_MAX_TABLES; i++)
		{
			OutboxTableSlot *slot = &outbox_shared->tables[i];
			int			c;

			slot->dboid = InvalidOid;
			slot->relid = InvalidOid;
			for (c = 0; c < OUTBOX_NUM_COUNTERS; c++)
				pg_atomic_init_u64(&slot->counters[c], 0);
			pg_atomic_init_u32(&slot->backlog_valid, 0);
			pg_atomic_init_u64(&slot->order_epoch, 0);
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
	for (i = 0; i < OUTBOX_MAX_TABLES; i++)
	{
		if (outbox_shared->tables[i].dboid == dboid)
			outbox_shared->tables[i].dboid = InvalidOid;
	}
	SpinLockRelease(&outbox_shared->mutex);
}

/*
 * outbox_table_slot
 *
 * The counters of the outbox relid of database dboid, taken on first use
 * when create is true.  NULL without shared memory, or when every slot is
 * taken.  A slot found without the lock may be given back meanwhile (its
 * table dropped): a counter added to it then is lost with the table.
 */
OutboxTableSlot *
outbox_table_slot(Oid dboid, Oid relid, bool create)
{
	OutboxTableSlot *result = NULL;
	TimestampTz now;
	int			i;

	if (outbox_shared == NULL || !OidIsValid(dboid) || !OidIsValid(relid))
		return NULL;
	for (i = 0; i < OUTBOX_MAX_TABLES; i++)
	{
		OutboxTableSlot *slot = &outbox_shared->tables[i];

		if (slot->dboid == dboid && slot->relid == relid)
			return slot;
	}
	if (!create)
		return NULL;

	/* a system call: never under the spinlock, where only stores go */
	now = GetCurrentTimestamp();
	SpinLockAcquire(&outbox_shared->mutex);
	for (i = 0; i < OUTBOX_MAX_TABLES && result == NULL; i++)
	{
		OutboxTableSlot *slot = &outbox_shared->tables[i];

		if (slot->dboid == dboid && slot->relid == relid)
			result = slot;
	}
	for (i = 0; i < OUTBOX_MAX_TABLES && result == NULL; i++)
	{
		OutboxTableSlot *slot = &outbox_shared->tables[i];
		int			c;

		if (OidIsValid(slot->dboid))
			continue;
		for (c = 0; c < OUTBOX_NUM_COUNTERS; c++)
			pg_atomic_write_u64(&slot->counters[c], 0);
		pg_atomic_write_u32(&slot->backlog_valid, 0);
		/* unique across the slot's lives: a cached epoch never matches */
		pg_atomic_write_u64(&slot->order_epoch, (uint64) now);
		slot->relid = relid;
		pg_write_barrier();
		slot->dboid = dboid;
		result = slot;
	}
	SpinLockRelease(&outbox_shared->mutex);
	return result;
}

/*
 * outbox_forget_table_slot
 *
 * Its table is gone: give the slot back.
 */
void
outbox_forget_table_slot(OutboxTableSlot *slot)
{
	SpinLockAcquire(&outbox_shared->mutex);
	slot->dboid = InvalidOid;
	SpinLockRelease(&outbox_shared->mutex);
}

/*
 * outbox_handover
 *
 * Called by a committed producer (notify = deferred): append the ids to the
 * database's ring and wake its worker.  Must not fail and must not wait: what
 * does not fit is dropped and counted (the rows are there; relays drain).
 * Returns how many were taken: the first ones.
 */
int
outbox_handover(OutboxDatabase *db, const OutboxWakeup *wakeups, int nids)
{
	OutboxWakeup *ring;
	int			size = outbox_shared->ring_size;
	int			done = 0;
	Latch	   *latch = NULL;

	while (done < nids)
	{
		int			n = Min(nids - done, OUTBOX_COPY_CHUNK);
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
			ring[(db->ring_head + i) % size] = wakeups[done + i];
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
	return done;
}

/*
 * outbox_order_epoch
 *
 * The order epoch of outbox relid of this database, in *epoch: it moves
 * on whenever a row may have joined one of its recipients with an id below
 * that recipient's open rows (a re-addressed row, one that brings its own
 * id), which the ordered claims' memory of where each recipient's open
 * rows start must not outlive.  False without shared memory or a slot.
 */
bool
outbox_order_epoch(Oid relid, uint64 *epoch)
{
	OutboxTableSlot *slot = outbox_table_slot(MyDatabaseId, relid, true);

	if (slot == NULL)
		return false;
	*epoch = pg_atomic_read_u64(&slot->order_epoch);
	return true;
}

/*
 * outbox_order_epoch_bump
 *
 * Move outbox relid's order epoch on (see outbox_order_epoch), before the
 * row concerned is written.
 */
void
outbox_order_epoch_bump(Oid relid)
{
	OutboxTableSlot *slot = outbox_table_slot(MyDatabaseId, relid, true);

	if (slot != NULL)
		pg_atomic_fetch_add_u64(&slot->order_epoch, 1);
}

/*
 * outbox_order_epoch_bump_all
 *
 * Move the order epoch of every outbox of database dboid on (a prepared
 * transaction committed: what it wrote is not known here).
 */
void
outbox_order_epoch_bump_all(Oid dboid)
{
	int			i;

	if (outbox_shared == NULL)
		return;
	for (i = 0; i < OUTBOX_MAX_TABLES; i++)
	{
		OutboxTableSlot *slot = &outbox_shared->tables[i];

		if (slot->dboid == dboid)
			pg_atomic_fetch_add_u64(&slot->order_epoch, 1);
	}
}
