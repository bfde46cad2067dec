/*-------------------------------------------------------------------------
 *
 * delivery_outbox.h
 *		Declarations shared by the backend side (delivery_outbox.c) and the
 *		background worker and shared memory (outbox_sweeper.c).
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		delivery_outbox.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef DELIVERY_OUTBOX_H
#define DELIVERY_OUTBOX_H

#include "access/xact.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#define OUTBOX_EXTENSION_NAME	"delivery_outbox"
#define OUTBOX_GUC_PREFIX		"delivery_outbox"

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
	OUTBOX_COUNT_BACKLOG_PENDING,		/* gauges: applied as signed deltas */
	OUTBOX_COUNT_BACKLOG_DELIVERED,
	OUTBOX_NUM_COUNTERS
} OutboxCounter;

#define OUTBOX_FIRST_GAUGE	OUTBOX_COUNT_BACKLOG_PENDING

/* delivery_outbox.notify */
typedef enum OutboxNotifyMode
{
	OUTBOX_NOTIFY_COMMIT,
	OUTBOX_NOTIFY_DEFERRED,
	OUTBOX_NOTIFY_OFF
} OutboxNotifyMode;

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

	slock_t		mutex;			/* protects the fields below */
	int			ring;			/* hand-over ring of its worker, or -1 */
	int			worker_pid;		/* 0 when no worker serves it */
	Latch	   *worker_latch;
	uint64		ring_head;		/* next id is written at head % size */
	uint64		ring_tail;		/* next id to send is at tail % size */
} OutboxDatabase;

/* Work of a prepared transaction, counted when COMMIT PREPARED succeeds. */
#define OUTBOX_MAX_PREPARED		64

typedef struct OutboxPrepared
{
	Oid			dboid;			/* InvalidOid: entry unused */
	char		gid[GIDSIZE];
	bool		made_pending;
	int64		deltas[OUTBOX_NUM_COUNTERS];
} OutboxPrepared;

typedef struct OutboxShared
{
	slock_t		mutex;			/* protects slot allocation and prepared[] */
	OutboxPrepared prepared[OUTBOX_MAX_PREPARED];
	TimestampTz started;
	int			ring_size;		/* ids per hand-over ring */
	OutboxDatabase databases[OUTBOX_MAX_DATABASES];
	int64		rings[FLEXIBLE_ARRAY_MEMBER];	/* OUTBOX_MAX_WORKERS rings */
} OutboxShared;

/* outbox_sweeper.c */
extern OutboxShared *outbox_shared;
extern char *outbox_database_names;
extern int	outbox_sweep_interval;
extern int	outbox_reclaim_after;
extern int	outbox_retain_acked;
extern int	outbox_handover_size;
extern int	outbox_deferred_batch_delay;

extern void outbox_sweeper_init(void);
extern OutboxDatabase *outbox_database(Oid dboid, bool create);
extern void outbox_forget_database(Oid dboid);
extern void outbox_handover(OutboxDatabase *db, const int64 *ids, int nids);
extern PGDLLEXPORT void outbox_sweeper_main(Datum main_arg);

/* delivery_outbox.c */
extern void outbox_notify(int64 id);
extern uint64 outbox_reclaim_rows(TimestampTz cutoff, int64 max_rows);
extern uint64 outbox_purge_rows(TimestampTz cutoff, int64 max_rows);
extern void outbox_sync_backlog(OutboxDatabase *db);
extern bool outbox_installed(void);
extern bool outbox_lock_table(void);
extern void outbox_count(OutboxCounter counter, int64 delta);

#endif							/* DELIVERY_OUTBOX_H */
