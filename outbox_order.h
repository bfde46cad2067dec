/*-------------------------------------------------------------------------
 *
 * outbox_order.h
 *		What ordered delivery and the insert markers know of an outbox
 *		table: the markers' statement trigger, the id sequence's position,
 *		the indexes and setting of the outbox.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_order.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_ORDER_H
#define OUTBOX_ORDER_H

#include "fmgr.h"
#include "utils/relcache.h"

#include "outbox_trigger.h"

/* What ordered delivery knows of one outbox, found once per backend. */
typedef struct OutboxOrderInfo
{
	Oid			relid;			/* hash key */
	bool		valid;
	Oid			seqrelid;		/* the id's sequence, or InvalidOid */
	Oid			open_index;		/* (recipient, id) of open rows */
	Oid			delivered_index;	/* (recipient, id) of delivered rows */
	Oid			in_flight_index;	/* (delivered_at) of delivered rows */
	bool		ordered;		/* the outbox's setting (the registry's) */
} OutboxOrderInfo;

extern OutboxOrderInfo *outbox_order_info(Relation rel);
extern bool outbox_order_is_ordered(Relation rel);
extern bool outbox_order_sequence(Oid relid, Oid *seqrelid);
extern bool outbox_order_sequence_ok(Oid seqrelid);
extern int64 outbox_order_next_id(Oid seqrelid);

/* the statement trigger, and what it does, which the direct insert calls */
extern Datum outbox_insert_statement(PG_FUNCTION_ARGS);
extern void outbox_order_statement_start(Relation rel);
extern void outbox_order_statement_end(Relation rel);

/* registered by _PG_init */
extern void outbox_order_relcache_callback(Datum arg, Oid relid);

#endif							/* OUTBOX_ORDER_H */
