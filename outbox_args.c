/*-------------------------------------------------------------------------
 *
 * outbox_args.c
 *		Argument checks and result helpers of the SQL-callable functions.
 *
 * Every bad argument raises an error before anything is written: NULL
 * where a value is required is 22004, an empty or out-of-range value
 * 22023, a malformed array 2202E.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_args.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "delivery_outbox.h"
#include "outbox_args.h"
#include "outbox_registry.h"
#include "outbox_table.h"

static bool outbox_column_privileges(Oid relid, const char *const *columns);

/*
 * outbox_target
 *
 * The outbox a call works on: its argument argno, the trailing "outbox
 * regclass" of 1.2, when given and not NULL, else the default outbox (also
 * when the SQL declaration of an older version has no such argument).  For
 * the default outbox EXECUTE on the function is all it takes, as in 1.1;
 * for any other the calling role (outside SECURITY DEFINER functions) also
 * needs the privilege mode on that table.  Raises 42809 for a table that
 * is no outbox, 42501 for a missing privilege, 0A000 for a distributed
 * outbox unless mode is ACL_INSERT (an enqueue).
 */
OutboxTable *
outbox_target(FunctionCallInfo fcinfo, int argno, AclMode mode)
{
	return outbox_target_columns(fcinfo, argno, mode, NULL);
}

/*
 * outbox_target_columns
 *
 * outbox_target, where SELECT on the given columns (a NULL-ended list)
 * does as well as SELECT on the table: a monitoring role that may read the
 * outbox's counts and ages needs no access to the payloads.
 */
OutboxTable *
outbox_target_columns(FunctionCallInfo fcinfo, int argno, AclMode mode,
					  const char *const *columns)
{
	OutboxTable *table;
	Oid			relid;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return outbox_default_table();
	relid = PG_GETARG_OID(argno);
	table = outbox_find_table(relid);

	/*
	 * A distributed outbox takes its rows through Citus, which routes each
	 * INSERT to the shard of its tenant_id; everything else works on rows
	 * already there, in one shard's outbox on the node that holds it (Citus
	 * cannot claim with SKIP LOCKED across shards, nor lock rows of many
	 * shards for an ack).  A worker node's copy of the table is in no
	 * registry, but it is the same table.
	 */
	if ((table != NULL ? outbox_table_distributed(table) :
		 outbox_relation_distributed(relid)) &&
		(table == NULL || mode != ACL_INSERT))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("outbox \"%s\" is distributed by Citus",
						DatumGetCString(DirectFunctionCall1(regclassout,
															ObjectIdGetDatum(relid)))),
				 errdetail("Its rows are in its shards, each an outbox of its own on the worker node that holds it; only enqueues go through the distributed table."),
				 errhint("On each worker node, name one of its shards: outbox => any of outbox_shards('%s').",
						 DatumGetCString(DirectFunctionCall1(regclassout,
															 ObjectIdGetDatum(relid))))));
	if (table == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("relation \"%s\" is not an outbox",
						DatumGetCString(DirectFunctionCall1(regclassout,
															ObjectIdGetDatum(relid)))),
				 errhint("Make it one with outbox_create() or outbox_attach().")));
	if (table != outbox_default_table() &&
		pg_class_aclcheck(relid, GetOuterUserId(), mode) != ACLCHECK_OK &&
		!(mode == ACL_SELECT && columns != NULL &&
		  outbox_column_privileges(relid, columns)))
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_TABLE, get_rel_name(relid));
	return table;
}

/*
 * outbox_column_privileges
 *
 * Whether the calling role may SELECT each of the columns (a NULL-ended
 * list) of relid.
 */
static bool
outbox_column_privileges(Oid relid, const char *const *columns)
{
	for (; *columns != NULL; columns++)
	{
		AttrNumber	attnum = get_attnum(relid, *columns);

		if (attnum == InvalidAttrNumber ||
			pg_attribute_aclcheck(relid, attnum, GetOuterUserId(),
								  ACL_SELECT) != ACLCHECK_OK)
			return false;
	}
	return true;
}

/*
 * outbox_check_text
 *
 * A recipient or kind argument: NULL is an error when required (22004), and
 * an empty string is always one (22023).
 */
void
outbox_check_text(FunctionCallInfo fcinfo, int argno, const char *name,
				  bool required)
{
	if (PG_ARGISNULL(argno))
	{
		if (required)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not be null", name)));
		return;
	}
	if (VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(argno)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", name)));
}

/*
 * outbox_null_text
 *
 * An optional text argument as an SPI parameter: its value, and 'n' in *null
 * when it is NULL.
 */
Datum
outbox_null_text(FunctionCallInfo fcinfo, int argno, char *null)
{
	*null = OUTBOX_ARG_IS_NULL(argno) ? 'n' : ' ';
	return OUTBOX_ARG_IS_NULL(argno) ? (Datum) 0 : PG_GETARG_DATUM(argno);
}

/*
 * outbox_text_array
 *
 * A one-dimensional array argument of the batch enqueue: NULL is an error
 * when required; with elements_required, so is a NULL element (22004) and an
 * empty text element (22023).  Sets *nitems.
 */
Datum
outbox_text_array(FunctionCallInfo fcinfo, int argno, const char *name,
				  bool required, bool elements_required, int *nitems)
{
	ArrayType  *array;
	Datum	   *elems;
	bool	   *elem_nulls;
	int			n;
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			i;

	*nitems = 0;
	if (OUTBOX_ARG_IS_NULL(argno))
	{
		if (required)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not be null", name)));
		return (Datum) 0;
	}
	array = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s must be a one-dimensional array", name)));

	get_typlenbyvalalign(ARR_ELEMTYPE(array), &typlen, &typbyval, &typalign);
	deconstruct_array(array, ARR_ELEMTYPE(array), typlen, typbyval, typalign,
					  &elems, &elem_nulls, &n);
	for (i = 0; i < n && elements_required; i++)
	{
		if (elem_nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not contain null elements", name),
					 errdetail("Element %d is null.", i + 1)));
		if (ARR_ELEMTYPE(array) == TEXTOID &&
			VARSIZE_ANY_EXHDR(DatumGetPointer(elems[i])) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s must not contain empty elements", name),
					 errdetail("Element %d is empty.", i + 1)));
	}
	*nitems = n;
	return PointerGetDatum(array);
}

/*
 * outbox_check_max_rows
 *
 * max_rows must be given and at least 1.
 */
int64
outbox_check_max_rows(FunctionCallInfo fcinfo, int argno)
{
	int32		max_rows;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("max_rows must not be null")));
	max_rows = PG_GETARG_INT32(argno);
	if (max_rows < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_rows must be at least 1, not %d", max_rows)));
	return (int64) max_rows;
}

/*
 * outbox_check_ids
 *
 * An ids array must be given and hold no NULLs.
 */
Datum
outbox_check_ids(FunctionCallInfo fcinfo, int argno)
{
	ArrayType  *ids;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ids must not be null")));
	ids = PG_GETARG_ARRAYTYPE_P(argno);
	if (array_contains_nulls(ids))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ids must not contain null elements")));
	return PointerGetDatum(ids);
}

/*
 * outbox_check_interval
 *
 * An interval argument must be given and not negative: 22004 or 22023.
 */
void
outbox_check_interval(FunctionCallInfo fcinfo, int argno, const char *name)
{
	Interval	zero;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name)));
	memset(&zero, 0, sizeof(zero));
	if (DatumGetBool(DirectFunctionCall2(interval_lt, PG_GETARG_DATUM(argno),
										 IntervalPGetDatum(&zero))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be negative", name)));
}

/*
 * outbox_cutoff
 *
 * older_than (a non-NULL, non-negative interval) turned into the timestamp
 * before which rows count as old: the current time minus older_than.  The
 * bookkeeping timestamps are wall-clock times of the change, so the cutoff is
 * too.
 */
Datum
outbox_cutoff(FunctionCallInfo fcinfo, int argno)
{
	Interval	limit;
	Datum		older_than;

	outbox_check_interval(fcinfo, argno, "older_than");
	older_than = PG_GETARG_DATUM(argno);

	/*
	 * Subtracting thousands of years would fall off the start of the
	 * timestamp range; nothing is that old, so such a cutoff matches nothing.
	 */
	memset(&limit, 0, sizeof(limit));
	limit.month = 5000 * MONTHS_PER_YEAR;
	if (DatumGetBool(DirectFunctionCall2(interval_gt, older_than,
										 IntervalPGetDatum(&limit))))
	{
		TimestampTz cutoff;

		TIMESTAMP_NOBEGIN(cutoff);
		return TimestampTzGetDatum(cutoff);
	}

	return DirectFunctionCall2(timestamptz_mi_interval,
							   TimestampTzGetDatum(GetCurrentTimestamp()),
							   older_than);
}

/*
 * outbox_count_result
 *
 * A row count as the SQL integer these functions return.
 */
Datum
outbox_count_result(uint64 count)
{
	if (count > (uint64) PG_INT32_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many rows changed in one call: " UINT64_FORMAT,
						count),
				 errhint("Use max_rows to work in batches.")));
	return Int32GetDatum((int32) count);
}

/*
 * outbox_begin_srf
 *
 * Materialize mode for a set-returning function (InitMaterializedSRF, which
 * also checks the calling context); the tuplestore to fill.
 */
Tuplestorestate *
outbox_begin_srf(FunctionCallInfo fcinfo, bits32 flags)
{
	InitMaterializedSRF(fcinfo, flags);
	return ((ReturnSetInfo *) fcinfo->resultinfo)->setResult;
}

/*
 * outbox_put_rows
 *
 * Put the rows of the last SPI result, the default outbox's columns that
 * are not dropped in their order (a statement's select list of
 * outbox_table_row_expr), into the tuplestore as rows of tupdesc (the
 * default outbox's row type), before SPI_finish frees them.
 */
void
outbox_put_rows(Tuplestorestate *tupstore, TupleDesc tupdesc)
{
	Datum	   *values = palloc(sizeof(Datum) * Max(tupdesc->natts, 1));
	bool	   *nulls = palloc(sizeof(bool) * Max(tupdesc->natts, 1));
	uint64		i;

	for (i = 0; i < SPI_processed; i++)
	{
		int			col = 0;
		int			a;

		for (a = 0; a < tupdesc->natts; a++)
		{
			if (TupleDescAttr(tupdesc, a)->attisdropped)
			{
				values[a] = (Datum) 0;
				nulls[a] = true;
				continue;
			}
			if (++col > SPI_tuptable->tupdesc->natts)
				elog(ERROR, "outbox statement returned %d columns, expected more",
					 SPI_tuptable->tupdesc->natts);
			values[a] = SPI_getbinval(SPI_tuptable->vals[i],
									  SPI_tuptable->tupdesc, col, &nulls[a]);
		}
		if (col != SPI_tuptable->tupdesc->natts)
			elog(ERROR, "outbox statement returned %d columns, expected %d",
				 SPI_tuptable->tupdesc->natts, col);
		tuplestore_putvalues(tupstore, tupdesc, values, nulls);
	}
	pfree(values);
	pfree(nulls);
}
