/*-------------------------------------------------------------------------
 *
 * outbox_databases.h
 *		The workers leave a database that a command needs to itself.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_databases.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_DATABASES_H
#define OUTBOX_DATABASES_H

#include "access/xact.h"
#include "nodes/nodes.h"
#include "nodes/pg_list.h"

/* shared memory and the hooks (_PG_init) */
extern Size outbox_sweepers_shmem_size(void);
extern void outbox_sweepers_shmem_init(List *names);
extern void outbox_sweepers_before_utility(Node *parsetree);
extern void outbox_sweepers_xact_callback(XactEvent event, void *arg);

/* the worker's side (outbox_worker.c) */
extern void outbox_sweeper_attach(int index);
extern void outbox_sweeper_connected(void);
extern bool outbox_sweeper_held(void);

#endif							/* OUTBOX_DATABASES_H */
