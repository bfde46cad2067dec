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

#include "access/xact.h"
#include "nodes/pg_list.h"
#include "nodes/nodes.h"

/* started by the postmaster, registered by _PG_init; called by nobody */
extern PGDLLEXPORT void outbox_sweeper_main(Datum main_arg);

/* the workers leave a database a command needs to itself (_PG_init's hooks) */
extern Size outbox_sweepers_shmem_size(void);
extern void outbox_sweepers_shmem_init(List *names);
extern void outbox_sweepers_before_utility(Node *parsetree);
extern void outbox_sweepers_xact_callback(XactEvent event, void *arg);

#endif							/* OUTBOX_WORKER_H */
