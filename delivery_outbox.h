/*-------------------------------------------------------------------------
 *
 * delivery_outbox.h
 *		The extension's names and settings (GUC variables).
 *
 * Every GUC is defined in _PG_init (delivery_outbox.c); the files that read
 * one include this header, which depends on nothing else of ours.
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

/* every difference between PostgreSQL majors is in outbox_compat.h */
#include "outbox_compat.h"

#define OUTBOX_EXTENSION_NAME	"delivery_outbox"
#define OUTBOX_GUC_PREFIX		"delivery_outbox"

/* delivery_outbox.notify */
typedef enum OutboxNotifyMode
{
	OUTBOX_NOTIFY_COMMIT,
	OUTBOX_NOTIFY_DEFERRED,
	OUTBOX_NOTIFY_OFF
} OutboxNotifyMode;

/* settings of every backend */
extern char *outbox_channel;
extern int	outbox_max_payload_size;
extern double outbox_notify_queue_limit;
extern int	outbox_notify_mode;
extern bool outbox_direct_insert;
extern int	outbox_max_cached_outboxes;

/* settings of the background worker */
extern int	outbox_sweep_interval;
extern int	outbox_reclaim_after;
extern int	outbox_retain_acked;
extern int	outbox_handover_size;
extern int	outbox_deferred_batch_delay;

/* qsort's (and qunique's) comparison of int64s */
static inline int
outbox_int64_cmp(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return (x > y) - (x < y);
}

#endif							/* DELIVERY_OUTBOX_H */
