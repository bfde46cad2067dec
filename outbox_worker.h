/*-------------------------------------------------------------------------
 *
 * outbox_worker.h
 *		The background worker ("sweeper").
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_worker.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_WORKER_H
#define OUTBOX_WORKER_H

/* started by the postmaster, registered by _PG_init; called by nobody */
extern PGDLLEXPORT void outbox_sweeper_main(Datum main_arg);

#endif							/* OUTBOX_WORKER_H */
