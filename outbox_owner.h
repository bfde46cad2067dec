/*-------------------------------------------------------------------------
 *
 * outbox_owner.h
 *		Running what touches a table as that table's owner.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_owner.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_OWNER_H
#define OUTBOX_OWNER_H

/* the work to run as the owner, with its argument */
typedef void (*OutboxOwnerWork) (void *arg);

extern Oid	outbox_rel_owner(Oid relid);
extern void outbox_as_owner(Oid owner, OutboxOwnerWork work, void *arg);
extern void outbox_as_rel_owner(Oid relid, OutboxOwnerWork work, void *arg);

#endif							/* OUTBOX_OWNER_H */
