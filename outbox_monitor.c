/*-------------------------------------------------------------------------
 *
 * outbox_monitor.c
 *		The SQL-callable functions that look at an outbox without changing
 *		it: its statistics, the activity counters, when its next scheduled
 *		row falls due, and the wait for a row to claim.
 *
 * They read rows through the statements of outbox_statements.c, under the
 * privilege checks of outbox_args.c (column-level SELECT is enough for what
 * they read), and the counters in shared memory.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_monitor.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/condition_variable.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "delivery_outbox.h"
#include "outbox_args.h"
#include "outbox_markers.h"
#include "outbox_order.h"
#include "outbox_rows.h"
#include "outbox_shmem.h"
#include "outbox_table.h"
#include "outbox_xact.h"

/*
 * outbox_wait polls this often without the library preloaded, and looks
 * again at least this often with it; outbox_activity re-counts a backlog no
 * worker counts after OUTBOX_RECOUNT_MS.
 */
#define OUTBOX_WAIT_POLL_MS		100
#define OUTBOX_WAIT_RECHECK_MS	1000
#define OUTBOX_RECOUNT_MS		60000

/* The counters 1.1's outbox_activity() does not have. */
#define OUTBOX_COUNTERS_SINCE_1_2	2

static bool outbox_wait_probe(OutboxTable *t, OutboxPlanId plan, Datum *values,
							  char *nulls, TimestampTz *next_due);
static void outbox_activity_row(Tuplestorestate *tupstore, TupleDesc tupdesc,
								Oid dboid, Oid relid,
								pg_atomic_uint64 *counters, bool counted);

/* What outbox_stats, outbox_wait and outbox_next_due read: no payload. */
static const char *const outbox_stats_columns[] = {
	"recipient", "delivery_state", "created_at", "delivered_at", NULL
};
static const char *const outbox_wait_columns[] = {
	"recipient", "delivery_state", NULL
};
static const char *const outbox_next_due_columns[] = {
	"recipient", "delivery_state", "not_before", NULL
};

PG_FUNCTION_INFO_V1(outbox_stats);
PG_FUNCTION_INFO_V1(outbox_next_due);
PG_FUNCTION_INFO_V1(outbox_horizon);
PG_FUNCTION_INFO_V1(outbox_wait);
PG_FUNCTION_INFO_V1(outbox_activity);

/*
 * outbox_stats
 *
 * One row: rows per state, the age of the oldest pending row (since
 * enqueue) and of the oldest delivered row (since delivery), and the number
 * of recipients with open rows.
 */
Datum
outbox_stats(PG_FUNCTION_ARGS)
{
	OutboxTable *t;
	TupleDesc	tupdesc;
	Datum		now = TimestampTzGetDatum(GetCurrentTimestamp());
	Datum		values[7];
	bool		nulls[7];
	HeapTuple	result;
	int			i;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	tupdesc = BlessTupleDesc(tupdesc);
	/* 1.1's outbox_stats() has no "dead" */
	if (tupdesc->natts != lengthof(values) && tupdesc->natts != lengthof(values) - 1)
		elog(ERROR, "outbox_stats() is declared with %d columns, expected %d",
			 tupdesc->natts, (int) lengthof(values));

	t = outbox_target_columns(fcinfo, 0, ACL_SELECT, outbox_stats_columns);
	outbox_spi_connect();
	outbox_execute(t, OUTBOX_PLAN_STATS, &now, NULL, SPI_OK_SELECT);
	if (SPI_processed != 1)
		elog(ERROR, "outbox statistics query returned " UINT64_FORMAT " rows",
			 SPI_processed);
	for (i = 0; i < tupdesc->natts; i++)
	{
		Datum		v = SPI_getbinval(SPI_tuptable->vals[0],
									  SPI_tuptable->tupdesc, i + 1, &nulls[i]);

		/* copy by-reference values (the intervals) out of SPI memory */
		values[i] = nulls[i] ? (Datum) 0 :
			SPI_datumTransfer(v, TupleDescAttr(tupdesc, i)->attbyval,
							  TupleDescAttr(tupdesc, i)->attlen);
	}
	SPI_finish();

	result = heap_form_tuple(tupdesc, values, nulls);
	PG_RETURN_DATUM(HeapTupleGetDatum(result));
}


/*
 * outbox_next_due
 *
 * When the next row scheduled for later (of recipient, if given) falls due:
 * the earliest not_before in the future among pending rows, or NULL.  For
 * relays that run without the worker, which wakes such rows itself.
 */
Datum
outbox_next_due(PG_FUNCTION_ARGS)
{
	OutboxTable *t;
	Datum		values[2];
	char		nulls[2] = {' ', ' '};
	Datum		result;
	bool		isnull;

	outbox_check_text(fcinfo, 0, "recipient", false);
	values[1] = outbox_null_text(fcinfo, 0, &nulls[1]);
	t = outbox_target_columns(fcinfo, 1, ACL_SELECT, outbox_next_due_columns);
	values[0] = TimestampTzGetDatum(GetCurrentTimestamp());

	outbox_spi_connect();
	outbox_execute(t, nulls[1] == 'n' ? OUTBOX_PLAN_NEXT_DUE : OUTBOX_PLAN_NEXT_DUE_R,
				   values, nulls, SPI_OK_SELECT);
	result = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
						   &isnull);
	SPI_finish();
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}

/*
 * outbox_horizon
 *
 * The highest id H such that no row of the outbox with an id <= H can still
 * appear (commit): the id sequence's last value, read first, capped below
 * the bound of every transaction inserting into the outbox that the
 * caller's snapshot does not see as committed (outbox_markers.c).  Rows
 * with ids up to H read with this snapshot, or any later one, are all a
 * cursor will ever see there.  Raises 55000 when the outbox's id has no
 * sequence with an increment > 0 and CACHE 1.
 */
Datum
outbox_horizon(PG_FUNCTION_ARGS)
{
	OutboxTable *t = outbox_target(fcinfo, 0, ACL_SELECT);
	Oid			seqrelid;

	if (!outbox_order_sequence(outbox_table_relid(t), &seqrelid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("outbox %s has no horizon: its id column has no sequence",
						outbox_table_name(t)),
				 errhint("Give the id column an identity, or a sequence owned by it.")));
	if (!outbox_order_sequence_ok(seqrelid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("outbox %s has no horizon: its id sequence must count up with CACHE 1",
						outbox_table_name(t)),
				 errdetail("With a cache, a session may insert ids below the sequence's last value at any time."),
				 errhint("ALTER SEQUENCE %s CACHE 1, with a positive INCREMENT.",
						 quote_qualified_identifier(get_namespace_name(get_rel_namespace(seqrelid)),
													get_rel_name(seqrelid)))));

	PG_RETURN_INT64(outbox_marker_horizon(outbox_table_relid(t),
										  outbox_order_next_id(seqrelid) - 1,
										  GetActiveSnapshot()));
}

/*
 * outbox_wait_probe
 *
 * One look: is there a row a claim would hand out (the recipient's, if
 * values[0] is one)?  If not, *next_due is when the next row scheduled for
 * later falls due (0: none).
 */
static bool
outbox_wait_probe(OutboxTable *t, OutboxPlanId plan, Datum *values,
				  char *nulls, TimestampTz *next_due)
{
	TimestampTz now = GetCurrentTimestamp();
	bool		isnull;
	bool		found;

	values[1] = TimestampTzGetDatum(now);
	values[2] = outbox_ttl_cutoff(t, now, &nulls[2]);
	*next_due = 0;
	outbox_spi_connect();
	if (outbox_table_policy(t)->ordered)
		found = outbox_claim_ordered(t, 1,
									 nulls[0] == ' ' ? DatumGetTextPP(values[0]) : NULL,
									 NULL, now, true) > 0;
	else
	{
		outbox_execute(t, plan, values, nulls, SPI_OK_SELECT);
		found = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
										   SPI_tuptable->tupdesc, 1, &isnull));
	}
	if (!found && outbox_table_has_policy(t))
	{
		Datum		next[2];
		char		next_nulls[2] = {' ', nulls[0]};
		Datum		d;

		next[0] = values[1];
		next[1] = values[0];
		outbox_execute(t, nulls[0] == 'n' ? OUTBOX_PLAN_NEXT_DUE : OUTBOX_PLAN_NEXT_DUE_R,
					   next, next_nulls, SPI_OK_SELECT);
		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
						  &isnull);
		if (!isnull)
			*next_due = DatumGetTimestampTz(d);
	}
	SPI_finish();
	return found;
}

/*
 * outbox_wait
 *
 * Block until there is a pending row (for recipient, if given) or timeout
 * has passed; true if there is one.  With the library preloaded the wait
 * sleeps on the database's condition variable, which every transaction that
 * made rows pending broadcasts at commit; without it, it polls every
 * OUTBOX_WAIT_POLL_MS.  Interruptible (statement_timeout, cancel).  Each
 * check takes a new snapshot, so call it in READ COMMITTED (autocommit).
 */


Datum
outbox_wait(PG_FUNCTION_ARGS)
{
	OutboxTable *t;
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	OutboxPlanId plan;
	TimestampTz deadline;
	OutboxDatabase *db = outbox_my_database(true);
	bool		found = false;
	TimestampTz next_due = 0;

	outbox_check_interval(fcinfo, 0, "timeout");
	outbox_check_text(fcinfo, 1, "recipient", false);
	values[0] = outbox_null_text(fcinfo, 1, &nulls[0]);
	plan = nulls[0] == 'n' ? OUTBOX_PLAN_EXISTS : OUTBOX_PLAN_EXISTS_R;

	t = outbox_target_columns(fcinfo, 2, ACL_SELECT, outbox_wait_columns);
	/* the deadline is "now + timeout"; a huge timeout is capped at a day */
	{
		Interval   *timeout = PG_GETARG_INTERVAL_P(0);
		Interval	day;

		memset(&day, 0, sizeof(day));
		day.day = 1;
		if (DatumGetBool(DirectFunctionCall2(interval_gt,
											 IntervalPGetDatum(timeout),
											 IntervalPGetDatum(&day))))
			timeout = &day;
		deadline = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
														   TimestampTzGetDatum(GetCurrentTimestamp()),
														   IntervalPGetDatum(timeout)));
	}

	for (;;)
	{
		long		remaining;

		/* get on the wait list before looking, so no commit is missed */
		if (db != NULL)
			ConditionVariablePrepareToSleep(&db->pending_cv);

		found = outbox_wait_probe(t, plan, values, nulls, &next_due);

		remaining = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
													deadline);
		if (found || remaining <= 0)
			break;
		/* a row scheduled for later: wake when it falls due */
		if (next_due != 0)
			remaining = Min(remaining,
							Max(TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
																next_due), 1));

		if (db != NULL)
			(void) ConditionVariableTimedSleep(&db->pending_cv,
											   Min(remaining, OUTBOX_WAIT_RECHECK_MS),
											   PG_WAIT_EXTENSION);
		else
		{
			(void) WaitLatch(MyLatch,
							 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 Min(remaining, OUTBOX_WAIT_POLL_MS),
							 PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
		CHECK_FOR_INTERRUPTS();
	}
	if (db != NULL)
		ConditionVariableCancelSleep();

	PG_RETURN_BOOL(found);
}

/*
 * outbox_activity
 *
 * One row per database that shared memory tracks: the counters since server
 * start and the open backlog.  Reading them is O(1); only when this
 * database's backlog has not been counted since the server started (or, in
 * a database no worker serves, not for OUTBOX_RECOUNT_MS) is it counted
 * here, from the open-row index.  Needs shared_preload_libraries (55000
 * otherwise).
 */


Datum
outbox_activity(PG_FUNCTION_ARGS)
{
	Tuplestorestate *tupstore;
	TupleDesc	tupdesc;
	bool		per_outbox;
	int			i;

	if (outbox_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("delivery_outbox activity counters are not available"),
				 errdetail("The counters live in shared memory, which needs the library preloaded."),
				 errhint("Add delivery_outbox to shared_preload_libraries and restart the server.")));

	tupstore = outbox_begin_srf(fcinfo, 0);
	tupdesc = ((ReturnSetInfo *) fcinfo->resultinfo)->setDesc;

	/*
	 * 1.2: a row per outbox, with its OID; 1.1: a row per database, without
	 * the counters of dead letters.
	 */
	per_outbox = tupdesc->natts == OUTBOX_NUM_COUNTERS + 3;
	if (!per_outbox && tupdesc->natts != OUTBOX_NUM_COUNTERS + 2 - OUTBOX_COUNTERS_SINCE_1_2)
		elog(ERROR, "outbox_activity() is declared with %d columns, expected %d",
			 tupdesc->natts, OUTBOX_NUM_COUNTERS + 3);

	{
		OutboxDatabase *mine = outbox_my_database(true);
		bool		installed = outbox_installed();

		/*
		 * Count when never counted since the start; where no worker re-counts
		 * at every sweep, also when the last count is older than
		 * OUTBOX_RECOUNT_MS, so that drift (TRUNCATE, a dropped extension)
		 * does not last.
		 */
		if (mine != NULL && installed &&
			(pg_atomic_read_u32(&mine->backlog_valid) == 0 ||
			 (mine->worker_pid == 0 &&
			  TimestampDifferenceExceeds((TimestampTz) pg_atomic_read_u64(&mine->backlog_counted_at),
										 GetCurrentTimestamp(),
										 OUTBOX_RECOUNT_MS))))
			outbox_sync_backlog(mine);

		/* every outbox of this database has its row, used or not */
		if (per_outbox && installed)
		{
			ListCell   *lc;

			foreach(lc, outbox_table_list())
				(void) outbox_table_slot(MyDatabaseId, lfirst_oid(lc), true);
		}
	}

	if (per_outbox)
	{
		for (i = 0; i < OUTBOX_MAX_TABLES; i++)
		{
			OutboxTableSlot *slot = &outbox_shared->tables[i];

			if (OidIsValid(slot->dboid))
				outbox_activity_row(tupstore, tupdesc, slot->dboid,
									slot->relid, slot->counters,
									pg_atomic_read_u32(&slot->backlog_valid) != 0);
		}
	}
	else
	{
		for (i = 0; i < OUTBOX_MAX_DATABASES; i++)
		{
			OutboxDatabase *db = &outbox_shared->databases[i];

			if (OidIsValid(db->dboid))
				outbox_activity_row(tupstore, tupdesc, db->dboid, InvalidOid,
									db->counters,
									pg_atomic_read_u32(&db->backlog_valid) != 0);
		}
	}

	return (Datum) 0;
}

/*
 * outbox_activity_row
 *
 * One row of outbox_activity(): the database's name, the outbox (when
 * relid is valid: the 1.2 shape), the counters, the gauges (NULL until
 * counted) and the server's start.  Nothing for a dropped database.
 */
static void
outbox_activity_row(Tuplestorestate *tupstore, TupleDesc tupdesc, Oid dboid,
					Oid relid, pg_atomic_uint64 *counters, bool counted)
{
	Datum		values[OUTBOX_NUM_COUNTERS + 3];
	bool		nulls[OUTBOX_NUM_COUNTERS + 3];
	char	   *datname = get_database_name(dboid);
	int			col = 0;
	int			c;

	if (datname == NULL)
		return;					/* dropped */
	memset(nulls, 0, sizeof(nulls));
	values[col++] = CStringGetTextDatum(datname);
	if (OidIsValid(relid))
		values[col++] = ObjectIdGetDatum(relid);
	for (c = 0; c < OUTBOX_NUM_COUNTERS; c++)
	{
		if (!OidIsValid(relid) &&
			(c == OUTBOX_COUNT_DEAD_LETTERED || c == OUTBOX_COUNT_REDRIVEN))
			continue;			/* the 1.1 shape */
		values[col] = Int64GetDatum((int64) pg_atomic_read_u64(&counters[c]));
		nulls[col++] = !counted && c >= OUTBOX_FIRST_GAUGE;
	}
	values[col] = TimestampTzGetDatum(outbox_shared->started);
	tuplestore_putvalues(tupstore, tupdesc, values, nulls);
}
