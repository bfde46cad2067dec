/*-------------------------------------------------------------------------
 *
 * outbox_trigger.c
 *		The triggers that make a table an outbox.
 *
 * The state machine is pending -> delivered -> acked, plus delivered ->
 * pending (reclaim/release).  The BEFORE ROW trigger outbox_state_guard() is
 * the single authority on it: it rejects every other transition with
 * SQLSTATE 23514, whoever writes, and it alone maintains delivery_attempts,
 * delivered_at and acked_at.  The SQL-callable functions only ever UPDATE
 * delivery_state (and recipient); they never write the bookkeeping columns
 * themselves.
 *
 * Whenever a row becomes pending for a recipient (inserted as pending,
 * delivered -> pending, or re-addressed) the triggers queue its wake-up
 * (outbox_wake), and every change is counted for the activity counters.
 * The AFTER INSERT trigger outbox_inserted() counts and wakes inserted rows,
 * so that a row an ON CONFLICT clause did not insert does neither.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_trigger.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/htup_details.h"
#include "catalog/partition.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "delivery_outbox.h"
#include "outbox_markers.h"
#include "outbox_owner.h"
#include "outbox_shmem.h"
#include "outbox_trigger.h"
#include "outbox_xact.h"

static const char *const outbox_state_names[] = {"pending", "delivered", "acked"};

static AttrNumber outbox_column(Relation rel, const char *name, Oid typid,
								bool required);
static bool outbox_check_dedup_key(Relation rel, HeapTuple oldtuple,
								   HeapTuple tuple, const OutboxColumns *cols,
								   int64 id);
static bool outbox_partition_key_taken(Relation rel, const OutboxColumns *cols,
									   Datum recipient, Datum key, int64 id);
static void outbox_key_lookup(void *arg);
static bool outbox_key_holder(SPIPlanPtr plan, Datum *values,
							  Snapshot snapshot);
static bool outbox_row_due(HeapTuple tuple, TupleDesc tupdesc,
						   const OutboxColumns *cols, TimestampTz *not_before);
static OutboxState outbox_parse_state(Relation rel, AttrNumber attnum,
									  Datum value, int64 id);
static bool outbox_datum_equal(Datum a, bool a_null, Datum b, bool b_null,
							   Form_pg_attribute att);
static HeapTuple outbox_guard_insert(Relation rel, HeapTuple tuple,
									 const OutboxColumns *cols, bool wake,
									 const char *channel);
static void outbox_inserted_row(Relation rel, HeapTuple tuple,
								const OutboxColumns *cols,
								const char *channel);
static bool outbox_trigger_ordered(Relation rel);
static HeapTuple outbox_guard_update(Relation rel, HeapTuple oldtuple,
									 HeapTuple newtuple,
									 const OutboxColumns *cols,
									 const char *channel);
static const char *outbox_trigger_channel(Trigger *trigger, int argno);
static void outbox_count_state(Oid relid, OutboxState state, int64 delta);

PG_FUNCTION_INFO_V1(outbox_state_guard);
PG_FUNCTION_INFO_V1(outbox_inserted);

/*
 * The advisory lock a partitioned outbox's dedup_key is taken under:
 * (database, outbox, slot, OUTBOX_KEY_LOCK), the slot being the hash of
 * recipient and key modulo OUTBOX_KEY_SLOTS (see
 * outbox_partition_key_taken), apart from pg_advisory_lock()'s (1 and 2
 * in the last field) and the insert markers' (outbox_marker_locks.c).
 */
#define OUTBOX_KEY_LOCK		0x0100
#define OUTBOX_KEY_SLOTS	1024

static uint32 outbox_key_slot(text *recipient, text *key);
static int	outbox_uint32_cmp(const void *a, const void *b);

/* What outbox_key_lookup() works on, as the outbox's owner. */
typedef struct OutboxKeyLookup
{
	const OutboxColumns *cols;
	Datum		values[3];		/* recipient, key, the row's id */
	bool		taken;			/* out: another row holds the key */
} OutboxKeyLookup;

/*
 * The look-up of a partitioned outbox's dedup keys, by its name, and the
 * outbox it was prepared for; invalid once that outbox changed.
 */
static SPIPlanPtr outbox_key_plan = NULL;
static Oid	outbox_key_plan_relid = InvalidOid;
static bool outbox_key_plan_valid = false;

/* The column map of the table the triggers last fired on. */
static OutboxColumns outbox_cols;

OutboxCounter outbox_requeue_counter = OUTBOX_COUNT_RECLAIMED;

/* Set by _PG_init: wake an ordered outbox's group when its run ended. */
outbox_wake_next_type outbox_wake_next = NULL;
outbox_is_ordered_type outbox_is_ordered = NULL;
outbox_rel_ordered_type outbox_rel_ordered = NULL;
OutboxCounter outbox_delete_counter = OUTBOX_COUNT_PURGED;

/*
 * outbox_state_guard
 *
 * BEFORE INSERT OR UPDATE OR DELETE ... FOR EACH ROW trigger enforcing the
 * state machine and maintaining the bookkeeping columns (deletes are only
 * counted).  Works on any table that has the outbox's columns (looked up by
 * name), raises 39P01 when not fired as a BEFORE ROW INSERT/UPDATE/DELETE
 * trigger, 42703 for a missing column, 42804 for a column of the wrong type,
 * and 23514 for any illegal row.
 */
Datum
outbox_state_guard(PG_FUNCTION_ARGS)
{
	const char *funcname = "outbox_state_guard";
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	const OutboxColumns *cols;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" was not called by trigger manager",
						funcname)));

	if (!TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" must be fired BEFORE ROW", funcname)));

	if (!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event) &&
		!TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) &&
		!TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" must be fired for INSERT, UPDATE or DELETE",
						funcname)));

	cols = outbox_columns(trigdata->tg_relation, funcname);

	if (TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
	{
		Datum		d;
		bool		isnull;

		d = heap_getattr(trigdata->tg_trigtuple, cols->state,
						 RelationGetDescr(trigdata->tg_relation), &isnull);
		if (!isnull)
			outbox_count_state(cols->outbox,
							   outbox_parse_state(trigdata->tg_relation,
												  cols->state, d, 0), -1);
		if (outbox_delete_counter < OUTBOX_NUM_COUNTERS)
			outbox_count(cols->outbox,
						 outbox_delete_counter, 1);
		/* a dead-lettered run of an ordered outbox lets the next row go */
		if (!isnull &&
			outbox_parse_state(trigdata->tg_relation, cols->state, d, 0) ==
			OUTBOX_DELIVERED &&
			outbox_trigger_ordered(trigdata->tg_relation))
			outbox_wake_next(trigdata->tg_relation, cols,
							 trigdata->tg_trigtuple,
							 outbox_trigger_channel(trigdata->tg_trigger, 1));
		return PointerGetDatum(trigdata->tg_trigtuple);
	}

	/*
	 * Since 1.1 an AFTER INSERT trigger (outbox_inserted) wakes and counts
	 * inserted rows, so that a row an ON CONFLICT clause did not insert does
	 * neither; the guard is then created with the argument 'after_insert'.
	 */
	if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		return PointerGetDatum(outbox_guard_insert(trigdata->tg_relation,
												   trigdata->tg_trigtuple,
												   cols,
												   trigdata->tg_trigger->tgnargs == 0 ||
												   strcmp(trigdata->tg_trigger->tgargs[0],
														  "after_insert") != 0,
												   outbox_trigger_channel(trigdata->tg_trigger, 1)));

	return PointerGetDatum(outbox_guard_update(trigdata->tg_relation,
											   trigdata->tg_trigtuple,
											   trigdata->tg_newtuple,
											   cols,
											   outbox_trigger_channel(trigdata->tg_trigger, 1)));
}

/*
 * outbox_inserted
 *
 * AFTER INSERT ... FOR EACH ROW trigger: count the row that was really
 * inserted and wake relays when it is pending (an INSERT ... ON CONFLICT that
 * did not insert never gets here).  Raises 39P01 when misused.
 */
Datum
outbox_inserted(PG_FUNCTION_ARGS)
{
	const char *funcname = "outbox_inserted";
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" was not called by trigger manager",
						funcname)));
	if (!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" must be fired AFTER INSERT FOR EACH ROW",
						funcname)));

	outbox_inserted_row(trigdata->tg_relation, trigdata->tg_trigtuple,
						outbox_columns(trigdata->tg_relation, funcname),
						outbox_trigger_channel(trigdata->tg_trigger, 0));

	return PointerGetDatum(NULL);
}

/*
 * outbox_guard_insert
 *
 * A new row is accepted as it is or not at all: a plain insert is pending
 * with zero attempts and no delivery timestamps; a row inserted in another
 * state (a dump restore) must have bookkeeping that agrees with it.  NULLs in
 * NOT NULL columns are left for the table's constraints to report.
 */
static HeapTuple
outbox_guard_insert(Relation rel, HeapTuple tuple, const OutboxColumns *cols,
					bool wake, const char *channel)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	Datum		d;
	bool		isnull;
	int64		id;
	OutboxState state;
	int32		attempts;
	bool		has_delivered_at;
	bool		has_acked_at;
	const char *problem = NULL;

	d = heap_getattr(tuple, cols->id, tupdesc, &isnull);
	if (isnull)
		return tuple;
	id = DatumGetInt64(d);

	/*
	 * The row's id is drawn; everything the statement inserted before is in.
	 * A row below the ids drawn (one that brings its own) may land below a
	 * recipient's open rows: the ordered claims must look again.
	 */
	if (outbox_marker_row(cols->outbox, id) &&
		outbox_trigger_ordered(rel))
		outbox_note_order_change(cols->outbox);

	d = heap_getattr(tuple, cols->payload, tupdesc, &isnull);
	if (!isnull)
	{
		Size		size = toast_raw_datum_size(d) - VARHDRSZ;

		if (size > (Size) outbox_max_payload_size)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("outbox payload of %zu bytes exceeds the limit of %d bytes",
							size, outbox_max_payload_size),
					 errhint("Raise \"%s.max_payload_size\", or send a reference to the data instead of the data.",
							 OUTBOX_GUC_PREFIX)));
	}

	/* a key another row of a partitioned outbox holds: the row is skipped */
	if (outbox_check_dedup_key(rel, NULL, tuple, cols, id))
		return NULL;

	d = heap_getattr(tuple, cols->state, tupdesc, &isnull);
	if (isnull)
		return tuple;
	state = outbox_parse_state(rel, cols->state, d, id);

	d = heap_getattr(tuple, cols->attempts, tupdesc, &isnull);
	if (isnull)
		return tuple;
	attempts = DatumGetInt32(d);
	has_delivered_at = !heap_attisnull(tuple, cols->delivered_at, tupdesc);
	has_acked_at = !heap_attisnull(tuple, cols->acked_at, tupdesc);

	if (attempts < 0)
		problem = "delivery_attempts must not be negative.";
	else if (state == OUTBOX_PENDING && has_acked_at)
		problem = "A \"pending\" row must not have acked_at.";
	else if (state == OUTBOX_PENDING && (attempts == 0) != !has_delivered_at)
		problem = "A \"pending\" row has delivered_at exactly when delivery_attempts >= 1.";
	else if (state == OUTBOX_DELIVERED &&
			 (!has_delivered_at || attempts < 1 || has_acked_at))
		problem = "A \"delivered\" row needs delivered_at, delivery_attempts >= 1 and no acked_at.";
	else if (state == OUTBOX_ACKED && !has_acked_at)
		problem = "An \"acked\" row needs acked_at.";

	if (problem != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("outbox row " INT64_FORMAT " cannot be inserted as \"%s\": its bookkeeping disagrees with its state",
						id, outbox_state_names[state]),
				 errdetail_internal("%s", problem),
				 errtablecol(rel, cols->state)));

	if (wake)
		outbox_inserted_row(rel, tuple, cols, channel);

	return tuple;
}

/*
 * outbox_inserted_row
 *
 * A row was inserted: count it, and wake relays when it is pending.
 */
static void
outbox_inserted_row(Relation rel, HeapTuple tuple, const OutboxColumns *cols,
					const char *channel)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	bool		isnull;
	Datum		id = heap_getattr(tuple, cols->id, tupdesc, &isnull);
	Datum		d = heap_getattr(tuple, cols->state, tupdesc, &isnull);
	OutboxState state;

	if (isnull)
		return;
	state = outbox_parse_state(rel, cols->state, d, DatumGetInt64(id));
	outbox_count_state(cols->outbox, state, 1);
	if (state == OUTBOX_PENDING)
	{
		TimestampTz not_before;

		outbox_count(cols->outbox, OUTBOX_COUNT_ENQUEUED, 1);
		/* a row scheduled for later is woken when due, by the worker */
		if (outbox_row_due(tuple, tupdesc, cols, &not_before))
			outbox_wake(DatumGetInt64(id), cols->outbox, channel);
		else
			outbox_note_scheduled(not_before);
	}
}

/*
 * outbox_guard_update
 *
 * Allowed: pending -> delivered, delivered -> acked, delivered -> pending,
 * and pending/delivered staying where they are (re-addressing).  The
 * bookkeeping columns are always recomputed from the old row, whatever the
 * caller wrote into them.
 */
static HeapTuple
outbox_guard_update(Relation rel, HeapTuple oldtuple, HeapTuple newtuple,
					const OutboxColumns *cols, const char *channel)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	static const struct
	{
		size_t		offset;
		const char *name;
	}			immutable[] =
	{
		{offsetof(OutboxColumns, id), COL_ID},
		{offsetof(OutboxColumns, kind), COL_KIND},
		{offsetof(OutboxColumns, tenant_id), COL_TENANT_ID},
		{offsetof(OutboxColumns, payload), COL_PAYLOAD},
		{offsetof(OutboxColumns, created_at), COL_CREATED_AT},
	};
	Datum		d;
	bool		isnull;
	int64		id;
	OutboxState from;
	OutboxState to;
	bool		allowed;
	int			replace_cols[3];
	Datum		replace_values[3];
	bool		replace_nulls[3];
	Datum		old_recipient;
	Datum		new_recipient;
	bool		old_recipient_null;
	bool		new_recipient_null;
	TimestampTz not_before;
	int			i;

	d = heap_getattr(oldtuple, cols->id, tupdesc, &isnull);
	id = isnull ? 0 : DatumGetInt64(d);

	d = heap_getattr(oldtuple, cols->state, tupdesc, &isnull);
	if (isnull)
		elog(ERROR, "outbox row " INT64_FORMAT " has no delivery_state", id);
	from = outbox_parse_state(rel, cols->state, d, id);

	d = heap_getattr(newtuple, cols->state, tupdesc, &isnull);
	if (isnull)
		return newtuple;		/* the NOT NULL constraint reports it */
	to = outbox_parse_state(rel, cols->state, d, id);

	switch (from)
	{
		case OUTBOX_PENDING:
			allowed = (to == OUTBOX_PENDING || to == OUTBOX_DELIVERED);
			break;
		case OUTBOX_DELIVERED:
			allowed = true;
			break;
		default:
			allowed = false;	/* acked rows never change again */
			break;
	}
	if (!allowed)
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("illegal delivery_state transition from \"%s\" to \"%s\" for outbox row " INT64_FORMAT,
						outbox_state_names[from], outbox_state_names[to], id),
				 errdetail("Row " INT64_FORMAT " is \"%s\" and cannot become \"%s\": allowed transitions are pending to delivered, delivered to acked and delivered to pending, and acked rows never change.",
						   id, outbox_state_names[from], outbox_state_names[to]),
				 errtablecol(rel, cols->state)));

	for (i = 0; i < (int) lengthof(immutable); i++)
	{
		AttrNumber	attnum = *(const AttrNumber *)
			((const char *) cols + immutable[i].offset);
		Datum		a;
		Datum		b;
		bool		a_null;
		bool		b_null;

		a = heap_getattr(oldtuple, attnum, tupdesc, &a_null);
		b = heap_getattr(newtuple, attnum, tupdesc, &b_null);
		if (!outbox_datum_equal(a, a_null, b, b_null,
								TupleDescAttr(tupdesc, attnum - 1)))
			ereport(ERROR,
					(errcode(ERRCODE_CHECK_VIOLATION),
					 errmsg("column \"%s\" of outbox row " INT64_FORMAT " cannot be changed (update from \"%s\" to \"%s\")",
							immutable[i].name, id,
							outbox_state_names[from], outbox_state_names[to]),
					 errdetail("Only delivery_state and recipient may be updated; id, kind, tenant_id, payload and created_at are fixed at insert."),
					 errtablecol(rel, attnum)));
	}

	(void) outbox_check_dedup_key(rel, oldtuple, newtuple, cols, id);

	/* the bookkeeping is the trigger's, never the caller's */
	d = heap_getattr(oldtuple, cols->attempts, tupdesc, &isnull);
	if (isnull)
		elog(ERROR, "outbox row " INT64_FORMAT " has no delivery_attempts", id);
	replace_cols[0] = cols->attempts;
	replace_nulls[0] = false;
	replace_values[0] = d;
	replace_cols[1] = cols->delivered_at;
	replace_values[1] = heap_getattr(oldtuple, cols->delivered_at, tupdesc,
									 &replace_nulls[1]);
	replace_cols[2] = cols->acked_at;
	replace_values[2] = heap_getattr(oldtuple, cols->acked_at, tupdesc,
									 &replace_nulls[2]);

	if (to == OUTBOX_DELIVERED && from != OUTBOX_DELIVERED)
	{
		int32		attempts = DatumGetInt32(d);

		if (attempts == PG_INT32_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("delivery_attempts of outbox row " INT64_FORMAT " is out of range",
							id)));
		replace_values[0] = Int32GetDatum(attempts + 1);
		replace_values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
		replace_nulls[1] = false;
	}
	else if (to == OUTBOX_ACKED)
	{
		replace_values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
		replace_nulls[2] = false;
	}

	newtuple = heap_modify_tuple_by_cols(newtuple, tupdesc, 3, replace_cols,
										 replace_values, replace_nulls);

	if (from != to)
	{
		Oid			relid = cols->outbox;

		outbox_count_state(relid, from, -1);
		outbox_count_state(relid, to, 1);
		if (to == OUTBOX_DELIVERED)
			outbox_count(relid, OUTBOX_COUNT_CLAIMED, 1);
		else if (to == OUTBOX_ACKED)
			outbox_count(relid, OUTBOX_COUNT_ACKED, 1);
		else
			outbox_count(relid, outbox_requeue_counter, 1);
	}

	/*
	 * Wake relays when the row becomes claimable for its recipient: back from
	 * delivered, re-addressed while pending, or its not_before moved to now
	 * or earlier; a row scheduled for later is woken when due, by the worker.
	 */
	if (outbox_trigger_ordered(rel))
	{
		/* the end of an ordered outbox's run lets its group's next row go */
		if (from == OUTBOX_DELIVERED && to == OUTBOX_ACKED)
			outbox_wake_next(rel, cols, newtuple, channel);

		/* a row joining a recipient may land below its open rows */
		old_recipient = heap_getattr(oldtuple, cols->recipient, tupdesc,
									 &old_recipient_null);
		new_recipient = heap_getattr(newtuple, cols->recipient, tupdesc,
									 &new_recipient_null);
		if (to != OUTBOX_ACKED &&
			!outbox_datum_equal(old_recipient, old_recipient_null,
								new_recipient, new_recipient_null,
								TupleDescAttr(tupdesc, cols->recipient - 1)))
			outbox_note_order_change(cols->outbox);
	}

	if (to == OUTBOX_PENDING && !outbox_row_due(newtuple, tupdesc, cols, &not_before))
		outbox_note_scheduled(not_before);
	else if (to == OUTBOX_PENDING)
	{
		old_recipient = heap_getattr(oldtuple, cols->recipient, tupdesc,
									 &old_recipient_null);
		new_recipient = heap_getattr(newtuple, cols->recipient, tupdesc,
									 &new_recipient_null);
		if (from != OUTBOX_PENDING ||
			!outbox_row_due(oldtuple, tupdesc, cols, &not_before) ||
			!outbox_datum_equal(old_recipient, old_recipient_null,
								new_recipient, new_recipient_null,
								TupleDescAttr(tupdesc, cols->recipient - 1)))
			outbox_wake(id, cols->outbox, channel);
	}

	return newtuple;
}

/*
 * outbox_trigger_channel
 *
 * The notification channel a trigger was created with, its argument argno
 * (outbox_create/attach/configure give an outbox's own channel so), or NULL:
 * delivery_outbox.channel.
 */
static const char *
outbox_trigger_channel(Trigger *trigger, int argno)
{
	const char *channel;

	if (trigger->tgnargs <= argno)
		return NULL;
	channel = trigger->tgargs[argno];
	return channel[0] != '\0' && strlen(channel) < NAMEDATALEN ? channel : NULL;
}

/*
 * outbox_trigger_ordered
 *
 * Whether rel is an ordered outbox, and the hooks to act on it are set.
 */
static bool
outbox_trigger_ordered(Relation rel)
{
	return outbox_rel_ordered != NULL && outbox_wake_next != NULL &&
		outbox_rel_ordered(rel);
}

/*
 * outbox_parse_state
 *
 * Map a delivery_state value to its enum; an unknown string is an illegal row
 * (23514), reported before the CHECK constraint would see it.
 */
static OutboxState
outbox_parse_state(Relation rel, AttrNumber attnum, Datum value, int64 id)
{
	text	   *t = DatumGetTextPP(value);
	const char *s = VARDATA_ANY(t);
	int			len = VARSIZE_ANY_EXHDR(t);
	int			i;

	for (i = 0; i < (int) lengthof(outbox_state_names); i++)
	{
		if (strlen(outbox_state_names[i]) == (size_t) len &&
			memcmp(outbox_state_names[i], s, len) == 0)
			return (OutboxState) i;
	}

	ereport(ERROR,
			(errcode(ERRCODE_CHECK_VIOLATION),
			 errmsg("invalid delivery_state \"%s\" for outbox row " INT64_FORMAT,
					text_to_cstring(t), id),
			 errdetail("delivery_state is one of \"pending\", \"delivered\" and \"acked\"."),
			 errtablecol(rel, attnum)));
	pg_unreachable();
}

/*
 * outbox_datum_equal
 *
 * Binary equality of two column values.  Identical bytes (the common case:
 * an UPDATE that did not touch the column carries the same datum, TOAST
 * pointer included) are decided without detoasting.
 */
static bool
outbox_datum_equal(Datum a, bool a_null, Datum b, bool b_null,
				   Form_pg_attribute att)
{
	if (a_null || b_null)
		return a_null == b_null;
	if (att->attlen == -1)
	{
		Size		la = VARSIZE_ANY(DatumGetPointer(a));
		Size		lb = VARSIZE_ANY(DatumGetPointer(b));

		if (la == lb && memcmp(DatumGetPointer(a), DatumGetPointer(b), la) == 0)
			return true;
	}
	return datum_image_eq(a, b, att->attbyval, att->attlen);
}

/*
 * outbox_count_state
 *
 * A row entered (delta 1) or left (-1) a state: the open backlog gauges.
 */
static void
outbox_count_state(Oid relid, OutboxState state, int64 delta)
{
	if (state == OUTBOX_PENDING)
		outbox_count(relid, OUTBOX_COUNT_BACKLOG_PENDING, delta);
	else if (state == OUTBOX_DELIVERED)
		outbox_count(relid, OUTBOX_COUNT_BACKLOG_DELIVERED, delta);
}

/*
 * outbox_columns
 *
 * The attribute numbers of the outbox columns in rel, looked up by name and
 * type once and kept until the relation is invalidated.
 */
const OutboxColumns *
outbox_columns(Relation rel, const char *funcname)
{
	OutboxColumns c;

	if (outbox_cols.relid == RelationGetRelid(rel))
		return &outbox_cols;

	c.relid = RelationGetRelid(rel);
	/* a partition's rows are its partitioned outbox's */
	c.partition = rel->rd_rel->relispartition;
	c.outbox = c.partition ?
		llast_oid(get_partition_ancestors(c.relid)) : c.relid;
	c.outbox_owner = c.partition ? outbox_rel_owner(c.outbox) :
		rel->rd_rel->relowner;
	c.id = outbox_column(rel, COL_ID, INT8OID, true);
	c.recipient = outbox_column(rel, COL_RECIPIENT, TEXTOID, true);
	c.kind = outbox_column(rel, COL_KIND, TEXTOID, true);
	c.tenant_id = outbox_column(rel, COL_TENANT_ID, TEXTOID, true);
	c.payload = outbox_column(rel, COL_PAYLOAD, BYTEAOID, true);
	c.state = outbox_column(rel, COL_STATE, TEXTOID, true);
	c.attempts = outbox_column(rel, COL_ATTEMPTS, INT4OID, true);
	c.created_at = outbox_column(rel, COL_CREATED_AT, TIMESTAMPTZOID, true);
	c.delivered_at = outbox_column(rel, COL_DELIVERED_AT, TIMESTAMPTZOID, true);
	c.acked_at = outbox_column(rel, COL_ACKED_AT, TIMESTAMPTZOID, true);
	c.not_before = outbox_column(rel, COL_NOT_BEFORE, TIMESTAMPTZOID, false);
	c.expires_at = outbox_column(rel, COL_EXPIRES_AT, TIMESTAMPTZOID, false);
	c.dedup_key = outbox_column(rel, COL_DEDUP_KEY, TEXTOID, false);

	outbox_cols = c;
	return &outbox_cols;
}

/*
 * outbox_column
 *
 * The attribute number of column name, of type typid (for a timestamptz,
 * also "timestamp": see below); a missing column is an error (42703) when
 * required, else InvalidAttrNumber.  A column of another type is 42804.
 */
static AttrNumber
outbox_column(Relation rel, const char *name, Oid typid, bool required)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	int			i;

	for (i = 0; i < tupdesc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(tupdesc, i);

		if (att->attisdropped || strcmp(NameStr(att->attname), name) != 0)
			continue;

		/*
		 * A timestamp column may also be "timestamp" without time zone (the
		 * seed system's tables): it then holds UTC wall-clock times, which
		 * have the same representation as the timestamptz written into it.
		 */
		if (att->atttypid != typid &&
			!(typid == TIMESTAMPTZOID && att->atttypid == TIMESTAMPOID))
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("column \"%s\" of table \"%s\" must be of type %s",
							name, RelationGetRelationName(rel),
							format_type_be(typid))));
		return att->attnum;
	}

	if (!required)
		return InvalidAttrNumber;
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_COLUMN),
			 errmsg("column \"%s\" not found in table \"%s\"",
					name, RelationGetRelationName(rel))));
	pg_unreachable();
}

/*
 * outbox_check_dedup_key
 *
 * A row's dedup_key is NULL or not empty.  In a partition of an outbox,
 * which cannot have a unique (recipient, dedup_key) index across its
 * partitions, the key is also taken here: true when another row holds it,
 * for an insert (oldtuple NULL), which is then skipped as ON CONFLICT DO
 * NOTHING would; an update onto a taken key is 23505.
 */
static bool
outbox_check_dedup_key(Relation rel, HeapTuple oldtuple, HeapTuple tuple,
					   const OutboxColumns *cols, int64 id)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	bool		isnull;
	bool		recipient_null;
	Datum		d;
	Datum		recipient;

	if (cols->dedup_key == InvalidAttrNumber)
		return false;
	d = heap_getattr(tuple, cols->dedup_key, tupdesc, &isnull);
	if (!isnull && VARSIZE_ANY_EXHDR(DatumGetPointer(d)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("dedup_key of outbox row " INT64_FORMAT " cannot be empty", id),
				 errdetail("A dedup_key is NULL (none) or a non-empty string."),
				 errtablecol(rel, cols->dedup_key)));
	if (isnull || !cols->partition)
		return false;
	recipient = heap_getattr(tuple, cols->recipient, tupdesc, &recipient_null);
	if (recipient_null)
		return false;			/* the NOT NULL constraint reports it */
	if (oldtuple != NULL)
	{
		bool		old_null;
		bool		old_key_null;
		Datum		old_recipient = heap_getattr(oldtuple, cols->recipient,
												 tupdesc, &old_null);
		Datum		old_key = heap_getattr(oldtuple, cols->dedup_key,
										   tupdesc, &old_key_null);

		if (outbox_datum_equal(old_recipient, old_null, recipient, false,
							   TupleDescAttr(tupdesc, cols->recipient - 1)) &&
			outbox_datum_equal(old_key, old_key_null, d, false,
							   TupleDescAttr(tupdesc, cols->dedup_key - 1)))
			return false;
	}
	if (!outbox_partition_key_taken(rel, cols, recipient, d, id))
		return false;
	if (oldtuple != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNIQUE_VIOLATION),
				 errmsg("dedup_key \"%s\" of recipient \"%s\" is taken by another row of outbox %s",
						TextDatumGetCString(d), TextDatumGetCString(recipient),
						get_rel_name(cols->outbox)),
				 errdetail("Outbox row " INT64_FORMAT " cannot take it.", id),
				 errtablecol(rel, cols->dedup_key)));
	return true;
}

/*
 * outbox_partition_key_taken
 *
 * Whether a row of the partitioned outbox cols->outbox (rel one of its
 * partitions) other than id holds (recipient, key).  The key's lock is
 * taken first, until the transaction ends: a transaction inserting it is
 * waited for, as a unique index would, and the rows are then read with a
 * new snapshot, which sees it if it committed.  A transaction-snapshot
 * isolation level that cannot see that row fails as ON CONFLICT does
 * there (40001).  The rows are read as the outbox's owner (a producer may
 * only have INSERT on it), restored on every path.
 *
 * The lock is not the key's own but one of OUTBOX_KEY_SLOTS per outbox,
 * chosen by the key's hash, so that a transaction holds at most that many
 * of the server's shared lock table however many keys it inserts (one
 * lock per key made a large keyed batch exhaust the table for every
 * session).  It cannot be given back before the transaction ends: until
 * then the row is invisible to the others, and only the lock makes a
 * second inserter of the key wait for the first's outcome.  The price of
 * sharing: two transactions inserting different keys of one slot (about
 * one pair in OUTBOX_KEY_SLOTS for one key each) wait for each other as if
 * the keys were the same, and two that each insert many keys into one
 * outbox at the same time may deadlock (40P01, one of them rolled back)
 * where their keys differ; with its own lock per key a large batch would
 * instead fail for want of shared memory, and others with it.
 */
static uint32
outbox_key_slot(text *recipient, text *key)
{
	return hash_combine(hash_any((unsigned char *) VARDATA_ANY(recipient),
								 VARSIZE_ANY_EXHDR(recipient)),
						hash_any((unsigned char *) VARDATA_ANY(key),
								 VARSIZE_ANY_EXHDR(key))) % OUTBOX_KEY_SLOTS;
}

/*
 * outbox_key_lock_batch
 *
 * For a keyed batch into partitioned outbox relid: take the key locks of
 * all its (recipient, key) pairs (the arrays' positions; a NULL key takes
 * none) now, in ascending slot order, before any row is inserted.  Two
 * batches then never deadlock on the slots they share, whatever the order
 * of their keys; the state guard finds each lock already held.
 */
void
outbox_key_lock_batch(Oid relid, ArrayType *recipients, ArrayType *keys)
{
	Datum	   *r;
	Datum	   *k;
	bool	   *knulls;
	int			nr;
	int			nk;
	uint32	   *slots;
	int			n = 0;
	int			i;

	deconstruct_array(recipients, TEXTOID, -1, false, TYPALIGN_INT,
					  &r, NULL, &nr);
	deconstruct_array(keys, TEXTOID, -1, false, TYPALIGN_INT,
					  &k, &knulls, &nk);
	slots = palloc(sizeof(uint32) * Max(Min(nr, nk), 1));
	for (i = 0; i < nr && i < nk; i++)
	{
		if (!knulls[i])
			slots[n++] = outbox_key_slot(DatumGetTextPP(r[i]),
										 DatumGetTextPP(k[i]));
	}
	qsort(slots, n, sizeof(uint32), outbox_uint32_cmp);
	for (i = 0; i < n; i++)
	{
		LOCKTAG		tag;

		if (i > 0 && slots[i] == slots[i - 1])
			continue;
		SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, relid, slots[i],
							 OUTBOX_KEY_LOCK);
		(void) LockAcquire(&tag, ExclusiveLock, false, false);
	}
	pfree(slots);
}

static int
outbox_uint32_cmp(const void *a, const void *b)
{
	uint32		x = *(const uint32 *) a;
	uint32		y = *(const uint32 *) b;

	return (x > y) - (x < y);
}

static bool
outbox_partition_key_taken(Relation rel, const OutboxColumns *cols,
						   Datum recipient, Datum key, int64 id)
{
	text	   *r = DatumGetTextPP(recipient);
	text	   *k = DatumGetTextPP(key);
	uint32		hash;
	LOCKTAG		tag;
	OutboxKeyLookup lookup;

	hash = outbox_key_slot(r, k);
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, cols->outbox, hash,
						 OUTBOX_KEY_LOCK);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);

	lookup.cols = cols;
	lookup.values[0] = recipient;
	lookup.values[1] = key;
	lookup.values[2] = Int64GetDatum(id);
	lookup.taken = false;
	outbox_as_owner(cols->outbox_owner, outbox_key_lookup, &lookup);
	return lookup.taken;
}

/*
 * outbox_key_lookup
 *
 * outbox_partition_key_taken's look-up, run as the outbox's owner: sets
 * lookup->taken.  Raises 40001 as said there.
 */
static void
outbox_key_lookup(void *arg)
{
	OutboxKeyLookup *lookup = (OutboxKeyLookup *) arg;
	const OutboxColumns *cols = lookup->cols;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* made again after any change of the outbox (a rename, say) */
	if (outbox_key_plan != NULL &&
		(!outbox_key_plan_valid || outbox_key_plan_relid != cols->outbox))
	{
		SPI_freeplan(outbox_key_plan);
		outbox_key_plan = NULL;
	}
	if (outbox_key_plan == NULL)
	{
		Oid			argtypes[3] = {TEXTOID, TEXTOID, INT8OID};
		char	   *sql;
		SPIPlanPtr	p;

		sql = psprintf("SELECT 1 FROM %s WHERE recipient OPERATOR(pg_catalog.=) $1"
					   " AND dedup_key OPERATOR(pg_catalog.=) $2"
					   " AND id OPERATOR(pg_catalog.<>) $3 LIMIT 1",
					   quote_qualified_identifier(get_namespace_name(get_rel_namespace(cols->outbox)),
												  get_rel_name(cols->outbox)));
		p = SPI_prepare(sql, 3, argtypes);
		if (p == NULL)
			elog(ERROR, "SPI_prepare failed for \"%s\"", sql);
		if (SPI_keepplan(p) != 0)
			elog(ERROR, "SPI_keepplan failed");
		outbox_key_plan = p;
		outbox_key_plan_relid = cols->outbox;
		outbox_key_plan_valid = true;
	}
	lookup->taken = outbox_key_holder(outbox_key_plan, lookup->values,
									  GetLatestSnapshot());
	if (lookup->taken && IsolationUsesXactSnapshot())
	{
		if (!outbox_key_holder(outbox_key_plan, lookup->values,
							   GetTransactionSnapshot()))
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to concurrent insert of dedup_key \"%s\"",
							TextDatumGetCString(lookup->values[1]))));
	}
	SPI_finish();
}

/*
 * outbox_key_holder
 *
 * Whether plan (outbox_partition_key_taken's) finds a row under a copy of
 * snapshot that also sees the rows of the running command: an earlier row
 * of the same INSERT statement holds its key too.
 */
static bool
outbox_key_holder(SPIPlanPtr plan, Datum *values, Snapshot snapshot)
{
	Snapshot	snap = RegisterSnapshot(snapshot);
	int			rc;

	if (snap != snapshot)		/* a copy of ours: never a shared one */
		snap->curcid = GetCurrentCommandId(false) + 1;
	rc = SPI_execute_snapshot(plan, values, NULL, snap, InvalidSnapshot,
							  true, false, 1);
	UnregisterSnapshot(snap);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute_snapshot failed: %s", SPI_result_code_string(rc));
	return SPI_processed > 0;
}

/*
 * outbox_row_due
 *
 * Whether a row's not_before (if it has the column) is unset or not later
 * than now: a pending row that is claimable as far as time goes.  If not,
 * *not_before is when it falls due.
 */
static bool
outbox_row_due(HeapTuple tuple, TupleDesc tupdesc, const OutboxColumns *cols,
			   TimestampTz *not_before)
{
	bool		isnull;
	Datum		d;

	if (cols->not_before == InvalidAttrNumber)
		return true;
	d = heap_getattr(tuple, cols->not_before, tupdesc, &isnull);
	if (isnull)
		return true;
	*not_before = DatumGetTimestampTz(d);
	return *not_before <= GetCurrentTimestamp();
}

/*
 * outbox_trigger_relcache_callback
 *
 * An invalidation of the table whose columns are mapped (or of every
 * relation) drops the map.
 */
void
outbox_trigger_relcache_callback(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == outbox_cols.relid ||
		relid == outbox_cols.outbox)
		outbox_cols.relid = InvalidOid;
	if (!OidIsValid(relid) || relid == outbox_key_plan_relid)
		outbox_key_plan_valid = false;
}
