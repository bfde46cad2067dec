/*-------------------------------------------------------------------------
 *
 * outbox_xact.h
 *		Per-transaction bookkeeping and wake-ups: counter deltas published
 *		at commit, deferred wake-ups handed to the worker, NOTIFY.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_xact.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_XACT_H
#define OUTBOX_XACT_H

#include "access/xact.h"
#include "utils/elog.h"
#include "utils/resowner.h"

#include "outbox_shmem.h"

extern void outbox_count(Oid relid, OutboxCounter counter, int64 delta);
extern void outbox_wake(int64 id, Oid relid, const char *channel);
extern void outbox_note_scheduled(TimestampTz not_before);
extern void outbox_note_order_change(Oid relid);

/*
 * Where a row's triggers name no channel (the extension's own table, whose
 * triggers CREATE EXTENSION makes), the channel of the outbox's registry
 * row, or NULL (delivery_outbox.channel).  An upcall: set by _PG_init to
 * outbox_default_channel() of outbox_table.c, which is above this layer.
 */
typedef const char *(*outbox_channel_lookup_type) (Oid relid);
extern outbox_channel_lookup_type outbox_channel_lookup;
extern void outbox_notify(int64 id, Oid relid, const char *channel);
extern OutboxDatabase *outbox_my_database(bool create);
extern void outbox_xact_forget_gauges(void);
extern ErrorData *outbox_subxact_try(bool (*work) (void *arg), void *arg,
									 const char *lock_timeout, bool *kept);

/* registered by _PG_init */
extern void outbox_xact_callback(XactEvent event, void *arg);
extern void outbox_subxact_callback(SubXactEvent event,
									SubTransactionId mySubid,
									SubTransactionId parentSubid, void *arg);
extern void outbox_xact_release_callback(ResourceReleasePhase phase,
										 bool isCommit, bool isTopLevel,
										 void *arg);

/* two-phase commit, followed from the ProcessUtility hook */
extern void outbox_xact_note_prepare(const char *gid);
extern void outbox_finish_prepared(const char *gid, bool commit);

#endif							/* OUTBOX_XACT_H */
