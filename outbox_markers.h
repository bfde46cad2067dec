/*-------------------------------------------------------------------------
 *
 * outbox_markers.h
 *		Insert markers: what every backend inserting into an outbox has
 *		announced about the ids its rows may get, in shared memory.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_markers.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_MARKERS_H
#define OUTBOX_MARKERS_H

#include "access/xact.h"
#include "utils/snapshot.h"

/* No window: no statement of the transaction is inserting into the outbox. */
#define OUTBOX_NO_WINDOW	PG_INT64_MAX

extern Size outbox_markers_size(void);
extern void outbox_markers_init(void);

/* producers */
extern bool outbox_marker_needs_bound(Oid relid, bool window);
extern void outbox_marker_open(Oid relid, int64 bound, bool window);
extern bool outbox_marker_row(Oid relid, int64 id);
extern void outbox_marker_close(Oid relid);

/* readers */
extern int64 outbox_marker_horizon(Oid relid, int64 horizon,
								   Snapshot snapshot);
extern int64 outbox_marker_window(Oid relid);

/* registered by _PG_init */
extern void outbox_markers_xact_callback(XactEvent event, void *arg);
extern void outbox_markers_subxact_callback(SubXactEvent event,
											SubTransactionId mySubid,
											SubTransactionId parentSubid,
											void *arg);

#endif							/* OUTBOX_MARKERS_H */
