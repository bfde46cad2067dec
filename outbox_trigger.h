/*-------------------------------------------------------------------------
 *
 * outbox_trigger.h
 *		The state machine's triggers and the outbox table's column map.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_trigger.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_TRIGGER_H
#define OUTBOX_TRIGGER_H

#include "access/htup.h"
#include "utils/array.h"
#include "utils/relcache.h"

#include "outbox_shmem.h"

/* The outbox table's columns. */
#define COL_ID					"id"
#define COL_RECIPIENT			"recipient"
#define COL_KIND				"kind"
#define COL_TENANT_ID			"tenant_id"
#define COL_PAYLOAD				"payload"
#define COL_STATE				"delivery_state"
#define COL_ATTEMPTS			"delivery_attempts"
#define COL_CREATED_AT			"created_at"
#define COL_DELIVERED_AT		"delivered_at"
#define COL_ACKED_AT			"acked_at"
/* since 1.2, the delivery policy's (optional: InvalidAttrNumber if absent) */
#define COL_NOT_BEFORE			"not_before"
#define COL_EXPIRES_AT			"expires_at"
#define COL_DEDUP_KEY			"dedup_key"

/* The three delivery states. */
typedef enum OutboxState
{
	OUTBOX_PENDING,
	OUTBOX_DELIVERED,
	OUTBOX_ACKED
} OutboxState;

/* Attribute numbers of the guarded table's columns, cached per relation. */
typedef struct OutboxColumns
{
	Oid			relid;			/* InvalidOid when the cache is empty */
	Oid			outbox;			/* the outbox: relid, or a partition's root */
	bool		partition;		/* relid is a partition of the outbox */
	Oid			outbox_owner;	/* the outbox's owner */
	AttrNumber	id;
	AttrNumber	recipient;
	AttrNumber	kind;
	AttrNumber	tenant_id;
	AttrNumber	payload;
	AttrNumber	state;
	AttrNumber	attempts;
	AttrNumber	created_at;
	AttrNumber	delivered_at;
	AttrNumber	acked_at;
	AttrNumber	not_before;
	AttrNumber	expires_at;
	AttrNumber	dedup_key;
} OutboxColumns;

/* Which counter a delivered -> pending move feeds: release or reclaim. */
extern OutboxCounter outbox_requeue_counter;

/*
 * Which counter a DELETE feeds: purged, or none (OUTBOX_NUM_COUNTERS) while
 * rows move to the dead letters, which their statement counts.
 */
extern OutboxCounter outbox_delete_counter;

extern const OutboxColumns *outbox_columns(Relation rel, const char *funcname);
extern void outbox_key_lock_batch(Oid relid, ArrayType *recipients,
								  ArrayType *keys);

/*
 * Upcalls of the triggers into the layers above them, set by _PG_init (a
 * NULL one is not called): wake relays for the next row of the group of a
 * row of an ordered outbox whose run ended, acked or dead-lettered
 * (outbox_order_wake_next(), outbox_heads.c) ...
 */
typedef void (*outbox_wake_next_type) (Relation rel, const OutboxColumns *cols,
									   HeapTuple tuple, const char *channel);
extern outbox_wake_next_type outbox_wake_next;

/* ... whether a table is an ordered outbox, by the registry
 * (outbox_table_is_ordered(), outbox_table.c) ... */
typedef bool (*outbox_is_ordered_type) (Oid relid);
extern outbox_is_ordered_type outbox_is_ordered;

/* ... and the same, kept per backend until the table changes
 * (outbox_order_is_ordered(), outbox_order.c). */
typedef bool (*outbox_rel_ordered_type) (Relation rel);
extern outbox_rel_ordered_type outbox_rel_ordered;

/* registered by _PG_init */
extern void outbox_trigger_relcache_callback(Datum arg, Oid relid);

#endif							/* OUTBOX_TRIGGER_H */
