/*-------------------------------------------------------------------------
 *
 * outbox_shmem.h
 *		Shared memory: one slot per database (counters, the condition
 *		variable outbox_wait() sleeps on, the worker's hand-over ring) and
 *		the stash of prepared transactions' counters.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_shmem.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_SHMEM_H
#define OUTBOX_SHMEM_H

#include "access/xact.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

/* Databases whose counters and wake-ups shared memory can track. */
#define OUTBOX_MAX_DATABASES	16

/* Databases the worker can serve (one worker, and one hand-over ring, each). */
#define OUTBOX_MAX_WORKERS		8

/* Counters kept per database since server start; see outbox_activity(). */
typedef enum OutboxCounter
{
	OUTBOX_COUNT_ENQUEUED,
	OUTBOX_COUNT_CLAIMED,
	OUTBOX_COUNT_ACKED,
	OUTBOX_COUNT_RELEASED,
	OUTBOX_COUNT_RECLAIMED,
	OUTBOX_COUNT_PURGED,
	OUTBOX_COUNT_NOTIFIED,
	OUTBOX_COUNT_NOTIFY_SKIPPED,
	OUTBOX_COUNT_HANDOVER_DROPPED,
	OUTBOX_COUNT_DEAD_LETTERED, /* since 1.2: not in 1.1's outbox_activity */
	OUTBOX_COUNT_REDRIVEN,
	OUTBOX_COUNT_BACKLOG_PENDING,	/* gauges: applied as signed deltas */
	OUTBOX_COUNT_BACKLOG_DELIVERED,
	OUTBOX_NUM_COUNTERS
} OutboxCounter;

#define OUTBOX_FIRST_GAUGE	OUTBOX_COUNT_BACKLOG_PENDING

/*
 * One database's shared state.  dboid is set once, under the shared mutex,
 * and never changes; everything else is atomics, or protected by the slot's
 * own mutex.
 */
typedef struct OutboxDatabase
{
	Oid			dboid;			/* InvalidOid: slot unused */
	pg_atomic_uint64 counters[OUTBOX_NUM_COUNTERS];
	pg_atomic_uint32 backlog_valid; /* gauges hold a count plus deltas */
	pg_atomic_uint64 backlog_counted_at;	/* TimestampTz of that count */
	ConditionVariable pending_cv;	/* broadcast when rows became pending */
	pg_atomic_uint32 scheduled_hint;	/* rows scheduled for later committed */
	pg_atomic_uint64 scheduled_min; /* the earliest not_before among them */

	slock_t		mutex;			/* protects the fields below */
	int			ring;			/* hand-over ring of its worker, or -1 */
	int			worker_pid;		/* 0 when no worker serves it */
	Latch	   *worker_latch;
	uint64		ring_head;		/* next id is written at head % size */
	uint64		ring_tail;		/* next id to send is at tail % size */
} OutboxDatabase;

/*
 * One outbox's counters (the same as its database's, for that table only),
 * found by (database, table OID).  A slot is taken on first use, under the
 * shared mutex, and given back when the worker finds its table gone or the
 * database is dropped.
 */
#define OUTBOX_MAX_TABLES		128

typedef struct OutboxTableSlot
{
	Oid			dboid;			/* InvalidOid: slot unused */
	Oid			relid;
	pg_atomic_uint64 counters[OUTBOX_NUM_COUNTERS];
	pg_atomic_uint32 backlog_valid;
	pg_atomic_uint64 order_epoch;	/* moved on when a row may join a
									 * recipient below what was open */
} OutboxTableSlot;

/* A deferred wake-up: a row of an outbox became pending. */
typedef struct OutboxWakeup
{
	int64		id;				/* the row */
	Oid			relid;			/* its outbox, for the channel */
} OutboxWakeup;

/*
 * Work of a prepared transaction, counted when COMMIT PREPARED succeeds:
 * its database's deltas, and those of the first OUTBOX_PREPARED_TABLES
 * outboxes it touched (more go uncounted per outbox); and the wake-ups of
 * the rows it made pending, which PREPARE TRANSACTION cannot carry (it
 * refuses a transaction that has queued a NOTIFY) and COMMIT PREPARED
 * sends.
 */
#define OUTBOX_MAX_PREPARED		64
#define OUTBOX_PREPARED_TABLES	4
#define OUTBOX_PREPARED_WAKEUPS	32

typedef struct OutboxPrepared
{
	Oid			dboid;			/* InvalidOid: entry unused */
	char		gid[GIDSIZE];
	bool		made_pending;
	bool		scheduled;		/* it made rows pending for later... */
	TimestampTz scheduled_min;	/* ... the earliest due then */
	int64		deltas[OUTBOX_NUM_COUNTERS];
	int			ntables;
	Oid			relids[OUTBOX_PREPARED_TABLES];
	int64		table_deltas[OUTBOX_PREPARED_TABLES][OUTBOX_NUM_COUNTERS];
	/* the wake-ups it owes, sent at COMMIT PREPARED: its first, and last */
	int			nwakeups;
	OutboxWakeup wakeups[OUTBOX_PREPARED_WAKEUPS];
} OutboxPrepared;

typedef struct OutboxShared
{
	slock_t		mutex;			/* protects slot allocation and prepared[] */
	OutboxPrepared prepared[OUTBOX_MAX_PREPARED];
	TimestampTz started;
	int			ring_size;		/* ids per hand-over ring */
	OutboxDatabase databases[OUTBOX_MAX_DATABASES];
	OutboxTableSlot tables[OUTBOX_MAX_TABLES];
	OutboxWakeup rings[FLEXIBLE_ARRAY_MEMBER];	/* OUTBOX_MAX_WORKERS rings */
} OutboxShared;

/* Ids one spinlock section copies into or out of a hand-over ring. */
#define OUTBOX_COPY_CHUNK		256

/* NULL unless the library was preloaded */
extern OutboxShared *outbox_shared;

extern Size outbox_shmem_size(void);
extern void outbox_shmem_init(void);
extern OutboxDatabase *outbox_database(Oid dboid, bool create);
extern void outbox_forget_database(Oid dboid);
extern OutboxTableSlot *outbox_table_slot(Oid dboid, Oid relid, bool create);
extern void outbox_forget_table_slot(OutboxTableSlot *slot);
extern int	outbox_handover(OutboxDatabase *db, const OutboxWakeup *wakeups,
							int n);
extern bool outbox_order_epoch(Oid relid, uint64 *epoch);
extern void outbox_order_epoch_bump(Oid relid);
extern void outbox_order_epoch_bump_all(Oid dboid);

#endif							/* OUTBOX_SHMEM_H */
