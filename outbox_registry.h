/*-------------------------------------------------------------------------
 *
 * outbox_registry.h
 *		Reading the registry and Citus's catalog; registering a node's
 *		shards (see outbox_registry.c).
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_registry.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_REGISTRY_H
#define OUTBOX_REGISTRY_H

#include "utils/relcache.h"

#include "outbox_table.h"

extern Relation outbox_registry_open(Oid extnsp);
extern bool outbox_registry_row(Oid extnsp, Oid relid, char **channel,
								OutboxPolicy *policy, Oid *dead);
extern void outbox_policy_defaults(OutboxPolicy *policy);
extern bool outbox_relation_distributed(Oid relid);
extern void outbox_register_local_shards(Oid extnsp);

#endif							/* OUTBOX_REGISTRY_H */
