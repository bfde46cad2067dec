/*-------------------------------------------------------------------------
 *
 * outbox_marker_locks.h
 *		The insert markers without shared memory, as locks.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_marker_locks.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_MARKER_LOCKS_H
#define OUTBOX_MARKER_LOCKS_H

#include "access/transam.h"
#include "utils/snapshot.h"

/* the kinds of marker a transaction's lock can be */
#define OUTBOX_LOCK_BOUND		0x0000
#define OUTBOX_LOCK_WINDOW		0x4000

extern void outbox_marker_lock(uint16 kind, Oid relid, int64 value,
							   bool acquire);
extern void outbox_history_lock(FullTransactionId xid, Oid relid,
								int64 bound);
extern void outbox_history_fold(FullTransactionId mine);
extern int64 outbox_marker_locks(uint16 kind, Oid relid, Snapshot snapshot);

#endif							/* OUTBOX_MARKER_LOCKS_H */
