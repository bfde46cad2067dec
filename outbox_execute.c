/*-------------------------------------------------------------------------
 *
 * outbox_execute.c
 *		The statements of outbox_statements.c prepared and kept per table
 *		and user (outbox_table_plans), and their execution through SPI, as
 *		the table's owner.
 *
 * A table whose timestamps are "timestamp" (without time zone: the seed
 * system's) holds UTC wall-clock times: the statements' timestamp
 * parameters are passed to it as "timestamp", with the same value, which
 * is the UTC wall-clock time of the timestamptz.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_execute.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/guc.h"

#include "delivery_outbox.h"
#include "outbox_owner.h"
#include "outbox_statements.h"
#include "outbox_statements_int.h"
#include "outbox_table.h"

/* one statement to run, for outbox_execute_work */
typedef struct OutboxStatementRun
{
	OutboxTable *table;
	OutboxPlanId id;
	Datum	   *values;
	const char *nulls;
	int			rc;				/* SPI_execute_plan's result */
} OutboxStatementRun;

static SPIPlanPtr outbox_plan(OutboxTable *table, OutboxPlanId id);
static void outbox_execute_work(void *arg);
static char *outbox_plan_text(const char *template, const char *name,
							  const char *row_expr, const char *dead, int ids,
							  bool partitioned, bool distributed);
static Datum outbox_sorted_ids(Datum ids);

/*
 * outbox_plan_text
 *
 * A statement's text for one table: %1$s replaced by its name, %2$s by its
 * row's select list, %3$s by its dead-letter table's name, %K by the ON
 * CONFLICT clause of a dedup_key, %T by nothing, or on a table
 * distributed by Citus by the tenant of a key lookup ($3), and %P by
 * nothing, or on a partitioned table by the range of the ids of the array
 * parameter number ids.  (Not printf: a statement need not use every one
 * of them.)
 */
static char *
outbox_plan_text(const char *template, const char *name, const char *row_expr,
				 const char *dead, int ids, bool partitioned, bool distributed)
{
	StringInfoData buf;
	const char *p;

	initStringInfo(&buf);
	for (p = template; *p != '\0'; p++)
	{
		if (p[0] == '%' && p[1] >= '1' && p[1] <= '3' &&
			p[2] == '$' && p[3] == 's')
		{
			appendStringInfoString(&buf, p[1] == '1' ? name :
								   p[1] == '2' ? row_expr : dead);
			p += 3;
		}
		else if (p[0] == '%' && p[1] == 'T')
		{
			/* a distributed outbox's keys are its tenants' own */
			if (distributed)
				appendStringInfoString(&buf, " AND tenant_id OPERATOR(pg_catalog.=) $3");
			p++;
		}
		else if (p[0] == '%' && p[1] == 'K')
		{
			/*
			 * Partitioned and distributed outboxes have no unique index on
			 * (recipient, dedup_key) to infer: any conflict is the key's
			 */
			appendStringInfoString(&buf, partitioned || distributed ?
								   OUTBOX_PARTITIONED_KEY_CONFLICT :
								   OUTBOX_KEY_CONFLICT);
			p++;
		}
		else if (p[0] == '%' && p[1] == 'P')
		{
			/*
			 * Rows by id of a partitioned outbox: the range of the ids too,
			 * from the array's first and last elements (outbox_execute sorts
			 * it), which prunes at executor start, so that the partitions
			 * holding none of the ids are neither opened nor scanned.  "id =
			 * ANY ($n)" alone prunes only at plan time, never in a kept
			 * generic plan; a range from subqueries of the array prunes only
			 * during the run, after every partition's scan is set up.
			 */
			Assert(ids >= 1 && ids <= OUTBOX_PLAN_MAX_ARGS);
			if (partitioned)
				appendStringInfo(&buf,
								 " AND id OPERATOR(pg_catalog.>=) $%d[1]"
								 " AND id OPERATOR(pg_catalog.<=)"
								 " $%d[pg_catalog.array_upper($%d, 1)]",
								 ids, ids, ids);
			p++;
		}
		else
			appendStringInfoChar(&buf, *p);
	}
	return buf.data;
}

/*
 * outbox_plan
 *
 * The prepared, kept plan of one statement on a table, for the current user
 * (see outbox_table_plans).  Safety
 * from a caller's search_path comes from every name in the statements being
 * qualified, so the plan cache may re-parse them under any path; the path is
 * also forced to pg_catalog for the first parse, as a second line.
 */
static SPIPlanPtr
outbox_plan(OutboxTable *table, OutboxPlanId id)
{
	const OutboxPlanDef *def = &outbox_plan_defs[id];
	SPIPlanPtr *plans = outbox_table_plans(table);
	Oid			argtypes[OUTBOX_PLAN_MAX_ARGS];
	int			nargs;
	const char *sql_text;
	char	   *sql;
	int			save_nestlevel;
	int			cursor_options = 0;
	SPIPlanPtr	plan;

	if (plans[id] != NULL)
		return plans[id];

	if (def->sql == NULL)
		elog(ERROR, "unrecognized outbox statement %d", (int) id);
	if (!outbox_table_has_policy(table))
	{
		if (def->legacy == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("outbox %s has no delivery policy columns",
							outbox_table_name(table)),
					 errhint("Update the extension: ALTER EXTENSION %s UPDATE.",
							 OUTBOX_EXTENSION_NAME)));
		sql_text = def->legacy == OUTBOX_SAME_SQL ? def->sql : def->legacy;
	}
	else
		sql_text = def->sql;
	for (nargs = 0;
		 nargs < OUTBOX_PLAN_MAX_ARGS && OidIsValid(def->argtypes[nargs]);
		 nargs++)
		argtypes[nargs] = def->argtypes[nargs] != TABLE_TIME ? def->argtypes[nargs] :
			outbox_table_utc(table) ? TIMESTAMPOID : TIMESTAMPTZOID;
	if (strstr(sql_text, "%3$s") != NULL && outbox_table_dead_name(table) == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("outbox %s has no dead-letter table",
						outbox_table_name(table)),
				 errhint("Its dead-letter table was dropped: detach the outbox and attach it again to recreate it.")));
	sql = outbox_plan_text(sql_text, outbox_table_name(table),
						   outbox_table_row_expr(table),
						   outbox_table_dead_name(table), def->ids,
						   outbox_table_partitioned(table),
						   outbox_table_distributed(table));

	/*
	 * Rows by id (ids), and the claim: the plan is the primary key's (the
	 * claim's, its indexes' walk), whatever the ids, but a custom plan's
	 * estimate for the few ids of one call always beats the generic plan's
	 * (which assumes ten), so the plan cache would plan the statement afresh
	 * at each call: a tenth of a relay's time in its backend, and on a
	 * partitioned outbox, where a custom plan prunes the partitions at
	 * planning, every partition of it (half of an ack's time with eight
	 * partitions).  The generic plan (pruned at executor start, from the
	 * range of the ids) is the one kept.  Not for a 1.0 or 1.1 table's own
	 * statements (its claim joins the locked rows back: planned as it comes,
	 * as it always was).
	 */
	if ((def->ids > 0 || def->generic) && sql_text == def->sql)
		cursor_options |= CURSOR_OPT_GENERIC_PLAN;

	save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	plan = SPI_prepare_cursor(sql, nargs, argtypes, cursor_options);
	AtEOXact_GUC(true, save_nestlevel);

	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s",
			 sql, SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	pfree(sql);

	plans[id] = plan;
	return plan;
}

/*
 * outbox_spi_connect
 *
 * SPI_connect, checked.
 */
void
outbox_spi_connect(void)
{
	int			rc = SPI_connect();

	if (rc != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed: %s", SPI_result_code_string(rc));
}

/*
 * outbox_execute
 *
 * Run one kept statement; the caller is connected to SPI.  On any outbox
 * but the default one the statement is prepared and run as the table's
 * owner (outbox_owner.c), on a distributed one as the calling role: the
 * table's triggers, constraints and defaults never run with the rights of
 * the function's definer or the worker's.
 * Anything but the expected SPI result is a can't-happen error.  Returns
 * SPI_processed.
 */
uint64
outbox_execute(OutboxTable *table, OutboxPlanId id, Datum *values,
			   const char *nulls, int expected)
{
	OutboxStatementRun run;
	int			ids = outbox_plan_defs[id].ids;
	Datum		sorted[OUTBOX_PLAN_MAX_ARGS];

	/*
	 * A partitioned outbox's statement of rows by id takes its ids' range
	 * from the first and last elements of their array (%P): the array is
	 * passed sorted.
	 */
	if (ids > 0 && outbox_table_partitioned(table) &&
		(nulls == NULL || nulls[ids - 1] != 'n'))
	{
		int			nargs = 0;

		while (nargs < OUTBOX_PLAN_MAX_ARGS &&
			   OidIsValid(outbox_plan_defs[id].argtypes[nargs]))
			nargs++;
		Assert(ids <= nargs);
		memcpy(sorted, values, sizeof(Datum) * nargs);
		sorted[ids - 1] = outbox_sorted_ids(values[ids - 1]);
		values = sorted;
	}

	run.table = table;
	run.id = id;
	run.values = values;
	run.nulls = nulls;
	run.rc = 0;
	outbox_table_plans_pin();
	PG_TRY();
	{
		/*
		 * A distributed outbox's enqueues (nothing else runs on one) run as
		 * the calling role, as a plain INSERT would: Citus writes a tenant's
		 * co-located shards over one connection per user, and refuses a
		 * second user's statement on placements the transaction modified (the
		 * producer's orders).  The caller's INSERT privilege was checked
		 * (outbox_target); the table's code gets its rights, never the
		 * definer's.  Never a superuser's either: a superuser's enqueue runs
		 * as the owner, as everywhere else (Citus then refuses it in a
		 * transaction where the superuser wrote the tenant's rows itself).
		 */
		if (OidIsValid(outbox_table_owner(table)) && outbox_table_distributed(table) &&
			!superuser_arg(GetOuterUserId()))
			outbox_as_owner(GetOuterUserId(), outbox_execute_work, &run);
		else if (OidIsValid(outbox_table_owner(table)))
			outbox_as_owner(outbox_table_owner(table), outbox_execute_work, &run);
		else
			outbox_execute_work(&run);
	}
	PG_FINALLY();
	{
		outbox_table_plans_unpin();
	}
	PG_END_TRY();
	if (run.rc != expected)
		elog(ERROR, "outbox statement %d returned %s, expected %s",
			 (int) id, SPI_result_code_string(run.rc),
			 SPI_result_code_string(expected));
	return SPI_processed;
}

/*
 * outbox_sorted_ids
 *
 * An int8[] of ids, sorted, one-dimensional from 1, without its NULLs (which
 * "id = ANY (...)" never matches): its first and last elements are then its
 * least and greatest, NULL when it is empty.
 */
static Datum
outbox_sorted_ids(Datum ids)
{
	ArrayType  *array = DatumGetArrayTypeP(ids);
	Datum	   *elems;
	bool	   *elem_nulls;
	int64	   *vals;
	int			nelems;
	int			n = 0;
	int			i;

	deconstruct_array(array, INT8OID, sizeof(int64), FLOAT8PASSBYVAL,
					  TYPALIGN_DOUBLE, &elems, &elem_nulls, &nelems);
	vals = palloc(Max(nelems, 1) * sizeof(int64));
	for (i = 0; i < nelems; i++)
		if (!elem_nulls[i])
			vals[n++] = DatumGetInt64(elems[i]);
	qsort(vals, n, sizeof(int64), outbox_int64_cmp);
	for (i = 0; i < n; i++)
		elems[i] = Int64GetDatum(vals[i]);
	return PointerGetDatum(construct_array(elems, n, INT8OID, sizeof(int64),
										   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/*
 * outbox_execute_work
 *
 * outbox_execute's statement, as whoever runs it.
 */
static void
outbox_execute_work(void *arg)
{
	OutboxStatementRun *run = (OutboxStatementRun *) arg;
	int			save_nestlevel;

	if (outbox_plan_defs[run->id].walk == OUTBOX_WALK_NONE)
	{
		run->rc = SPI_execute_plan(outbox_plan(run->table, run->id),
								   run->values, run->nulls, false, 0);
		return;
	}

	/*
	 * A scan of the open rows by one of the partial indexes, which must cost
	 * its batch whatever the statistics say: a queue's are stale by nature
	 * (never analyzed after a burst or a restore, analyzed while empty, or
	 * analyzed full and drained since), and with them the planner would take
	 * a bitmap scan of every pending row and a sort, or a hash join over the
	 * whole table, for a dozen rows.  So it is planned, and run (the plan
	 * cache re-plans inside the execution after an ANALYZE or any
	 * invalidation, and a custom plan is made at each run), with every path
	 * but the index scans (and, for a statement with joins, nested loops)
	 * disabled: the walk of the index in its order, stopped by the LIMIT, is
	 * then the only plan left (and no JIT compiling, which the disabled
	 * paths' costs would otherwise call for).  The settings end with the nest
	 * level, errors included.
	 */
	save_nestlevel = NewGUCNestLevel();
	PG_TRY();
	{
		static const char *const scan_off[] = {
			"enable_seqscan", "enable_bitmapscan", "enable_sort", "jit"
		};
		static const char *const join_off[] = {
			"enable_hashjoin", "enable_mergejoin", "enable_hashagg",
			"enable_material"
		};
		bool		joins = outbox_plan_defs[run->id].walk == OUTBOX_WALK_JOINS;
		int			i;

		for (i = 0; i < (int) lengthof(scan_off); i++)
			(void) set_config_option(scan_off[i], "off", PGC_USERSET,
									 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0,
									 false);
		for (i = 0; joins && i < (int) lengthof(join_off); i++)
			(void) set_config_option(join_off[i], "off", PGC_USERSET,
									 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0,
									 false);
		run->rc = SPI_execute_plan(outbox_plan(run->table, run->id),
								   run->values, run->nulls, false, 0);
	}
	PG_FINALLY();
	{
		AtEOXact_GUC(false, save_nestlevel);
	}
	PG_END_TRY();
}

/*
 * outbox_run
 *
 * Run one kept statement in its own SPI connection (the "lock ORDER BY id,
 * then UPDATE" and skip-locked statements, purge's DELETE, outbox_wait's
 * probe) and return the number of rows it processed.
 */
uint64
outbox_run(OutboxTable *table, OutboxPlanId id, Datum *values,
		   const char *nulls, int expected)
{
	uint64		count;

	outbox_spi_connect();
	count = outbox_execute(table, id, values, nulls, expected);
	SPI_finish();
	return count;
}
