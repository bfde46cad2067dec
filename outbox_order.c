/*-------------------------------------------------------------------------
 *
 * outbox_order.c
 *		What ordered delivery and the insert markers know of an outbox
 *		table: the statement trigger that marks inserts, the id sequence's
 *		position, the indexes the ordered claims read and the outbox's
 *		setting, found once per backend.
 *
 * The insert markers themselves (what a running insert announces) are in
 * outbox_markers.c; the ordered claims' reads of the rows in
 * outbox_heads.c.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_order.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "catalog/dependency.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_depend.h"
#include "catalog/pg_index.h"
#include "catalog/pg_sequence.h"
#include "commands/sequence.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "storage/bufmgr.h"
#include "utils/hsearch.h"
#include "utils/rel.h"
#include "utils/ruleutils.h"
#include "utils/syscache.h"

#include "delivery_outbox.h"
#include "outbox_markers.h"
#include "outbox_order.h"

/* The definitions, as pg_get_indexdef prints them, of the indexes read. */
#define OUTBOX_OPEN_INDEX_DEF \
	" (recipient, id) WHERE (delivery_state = ANY ('{pending,delivered}'::text[]))"
#define OUTBOX_DELIVERED_INDEX_DEF \
	" (recipient, id) WHERE (delivery_state = 'delivered'::text)"
#define OUTBOX_IN_FLIGHT_INDEX_DEF \
	" (delivered_at) WHERE (delivery_state = 'delivered'::text)"

PG_FUNCTION_INFO_V1(outbox_insert_statement);

static HTAB *outbox_order_infos = NULL;

/*
 * outbox_insert_statement
 *
 * BEFORE and AFTER INSERT ... FOR EACH STATEMENT trigger of every outbox:
 * before the statement draws an id, mark the transaction's bound (the
 * sequence's next value) and, on an ordered outbox, open the statement's
 * window; after it, close the window.  Raises 39P01 when misused.
 */
Datum
outbox_insert_statement(PG_FUNCTION_ARGS)
{
	const char *funcname = "outbox_insert_statement";
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Relation	rel;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" was not called by trigger manager",
						funcname)));
	if (TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" must be fired for INSERT FOR EACH STATEMENT",
						funcname)));

	rel = trigdata->tg_relation;
	if (TRIGGER_FIRED_BEFORE(trigdata->tg_event))
		outbox_order_statement_start(rel);
	else
		outbox_order_statement_end(rel);

	return PointerGetDatum(NULL);
}

/*
 * outbox_order_statement_start
 *
 * What outbox_insert_statement does before a statement inserts into rel
 * (the direct insert calls it instead of firing the trigger).
 */
void
outbox_order_statement_start(Relation rel)
{
	OutboxOrderInfo *info = outbox_order_info(rel);

	if (outbox_marker_needs_bound(RelationGetRelid(rel), info->ordered))
		outbox_marker_open(RelationGetRelid(rel),
						   OidIsValid(info->seqrelid) ?
						   outbox_order_next_id(info->seqrelid) : 1,
						   info->ordered);
}

/*
 * outbox_order_statement_end
 *
 * What outbox_insert_statement does after a statement inserted into rel.
 */
void
outbox_order_statement_end(Relation rel)
{
	outbox_marker_close(RelationGetRelid(rel));
}

/*
 * outbox_order_next_id
 *
 * A lower bound of the next id the sequence seqrelid hands out: its last
 * value plus one (with an increment of one, the next value itself), read
 * from its page under the buffer lock, without a privilege check.
 */
int64
outbox_order_next_id(Oid seqrelid)
{
	/* nextval's lock mode: the statement about to draw holds it anyway */
	Relation	seqrel = relation_open(seqrelid, RowExclusiveLock);
	Buffer		buf;
	Page		page;
	ItemId		lp;
	HeapTupleData tuple;
	Form_pg_sequence_data seq;
	int64		last;
	bool		called;

	if (seqrel->rd_rel->relkind != RELKIND_SEQUENCE)
		elog(ERROR, "relation %u is not a sequence", seqrelid);
	buf = ReadBuffer(seqrel, 0);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	lp = PageGetItemId(page, FirstOffsetNumber);
	if (!ItemIdIsNormal(lp))
		elog(ERROR, "sequence %u has no tuple", seqrelid);
	tuple.t_data = (HeapTupleHeader) PageGetItem(page, lp);
	seq = (Form_pg_sequence_data) GETSTRUCT(&tuple);
	last = seq->last_value;
	called = seq->is_called;
	UnlockReleaseBuffer(buf);
	relation_close(seqrel, NoLock);

	if (!called)
		return last;
	return last == PG_INT64_MAX ? last : last + 1;
}

/*
 * outbox_order_sequence_ok
 *
 * Whether sequence seqrelid can give an order: it counts up, with CACHE 1
 * (with a cache, a session hands out ids below the last value at any time).
 */
bool
outbox_order_sequence_ok(Oid seqrelid)
{
	HeapTuple	tup = SearchSysCache1(SEQRELID, ObjectIdGetDatum(seqrelid));
	bool		ok;

	if (!HeapTupleIsValid(tup))
		return false;
	ok = ((Form_pg_sequence) GETSTRUCT(tup))->seqincrement > 0 &&
		((Form_pg_sequence) GETSTRUCT(tup))->seqcache == 1;
	ReleaseSysCache(tup);
	return ok;
}

/*
 * outbox_order_sequence
 *
 * The sequence of rel's id column (identity or serial), in *seqrelid;
 * false if it has none.
 */
bool
outbox_order_sequence(Oid relid, Oid *seqrelid)
{
	Relation	rel = table_open(relid, AccessShareLock);

	*seqrelid = outbox_order_info(rel)->seqrelid;
	table_close(rel, AccessShareLock);
	return OidIsValid(*seqrelid);
}

/*
 * outbox_order_is_ordered
 *
 * For the triggers (outbox_rel_ordered): whether rel is an ordered outbox,
 * as found once and kept until the table is invalidated (outbox_configure
 * does so when the setting changes).
 */
bool
outbox_order_is_ordered(Relation rel)
{
	return outbox_order_info(rel)->ordered;
}

/*
 * outbox_order_relcache_callback
 *
 * Forget what was found of a relation (its indexes, its sequence).
 */
void
outbox_order_relcache_callback(Datum arg, Oid relid)
{
	HASH_SEQ_STATUS status;
	OutboxOrderInfo *info;

	if (outbox_order_infos == NULL)
		return;
	hash_seq_init(&status, outbox_order_infos);
	while ((info = hash_seq_search(&status)) != NULL)
		if (relid == InvalidOid || info->relid == relid)
			info->valid = false;

}

/*
 * outbox_order_info
 *
 * The sequence and the indexes of rel, found once and kept: the indexes by
 * their definition (their names follow the table's only until it is
 * renamed).
 */
OutboxOrderInfo *
outbox_order_info(Relation rel)
{
	Oid			relid = RelationGetRelid(rel);
	OutboxOrderInfo *info;
	bool		found;
	List	   *indexes;
	ListCell   *lc;
	AttrNumber	id_attnum;

	if (outbox_order_infos == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(OutboxOrderInfo);
		outbox_order_infos = hash_create("delivery_outbox order info", 16,
										 &ctl, HASH_ELEM | HASH_BLOBS);
	}
	info = hash_search(outbox_order_infos, &relid, HASH_ENTER, &found);
	if (found && info->valid)
		return info;

	info->valid = false;
	id_attnum = outbox_columns(rel, "outbox_insert_statement")->id;
	info->seqrelid = outbox_identity_sequence(rel, id_attnum);
	if (!OidIsValid(info->seqrelid))
	{
		/* a serial column: its sequence is owned by it */
		List	   *seqs = getOwnedSequences(relid);

		foreach(lc, seqs)
		{
			Oid			owner;
			int32		column;

			if (sequenceIsOwned(lfirst_oid(lc), DEPENDENCY_AUTO, &owner, &column) &&
				owner == relid && column == id_attnum)
				info->seqrelid = lfirst_oid(lc);
		}
		list_free(seqs);
	}
	info->open_index = InvalidOid;
	info->delivered_index = InvalidOid;
	info->in_flight_index = InvalidOid;
	/* outbox_configure invalidates the table when the setting changes */
	info->ordered = outbox_is_ordered != NULL && outbox_is_ordered(relid);
	indexes = RelationGetIndexList(rel);
	foreach(lc, indexes)
	{
		Oid			indexoid = lfirst_oid(lc);
		char	   *def = pg_get_indexdef_string(indexoid);
		size_t		len = strlen(def);
		Relation	index = index_open(indexoid, AccessShareLock);
		bool		usable = index->rd_index->indisvalid &&
			index->rd_index->indisready && index->rd_rel->relam == BTREE_AM_OID;

		index_close(index, AccessShareLock);
		if (usable && len > strlen(OUTBOX_OPEN_INDEX_DEF) &&
			strcmp(def + len - strlen(OUTBOX_OPEN_INDEX_DEF), OUTBOX_OPEN_INDEX_DEF) == 0)
			info->open_index = indexoid;
		else if (usable && len > strlen(OUTBOX_DELIVERED_INDEX_DEF) &&
				 strcmp(def + len - strlen(OUTBOX_DELIVERED_INDEX_DEF),
						OUTBOX_DELIVERED_INDEX_DEF) == 0)
			info->delivered_index = indexoid;
		else if (usable && len > strlen(OUTBOX_IN_FLIGHT_INDEX_DEF) &&
				 strcmp(def + len - strlen(OUTBOX_IN_FLIGHT_INDEX_DEF),
						OUTBOX_IN_FLIGHT_INDEX_DEF) == 0)
			info->in_flight_index = indexoid;
		pfree(def);
	}
	list_free(indexes);
	info->valid = true;
	return info;
}
