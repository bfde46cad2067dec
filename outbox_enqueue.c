/*-------------------------------------------------------------------------
 *
 * outbox_enqueue.c
 *		The SQL-callable enqueues: outbox_enqueue() and
 *		outbox_enqueue_batch(), the producer's side of an outbox.
 *
 * Each validates every argument before anything is written (22004 for a
 * required NULL, 22023 for a bad dedup_key or schedule, 23502 for a
 * distributed outbox's row without tenant_id) and inserts through the
 * direct insert (outbox_insert.c) or the statements of outbox_statements.c,
 * as the table's owner (a distributed outbox's: as the calling role, see
 * outbox_execute), so that the state guard and the after-insert trigger
 * see and wake every row.  A dedup_key the recipient's rows already hold
 * inserts nothing and returns the holder's id.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_enqueue.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "delivery_outbox.h"
#include "outbox_args.h"
#include "outbox_insert.h"
#include "outbox_owner.h"
#include "outbox_partitions.h"
#include "outbox_statements.h"
#include "outbox_table.h"
#include "outbox_trigger.h"

/* outbox_enqueue's direct insert, for outbox_insert_work */
typedef struct OutboxInsertRun
{
	OutboxTable *table;
	Datum	   *values;
	const char *nulls;
	int64		id;
	bool		conflict;
	bool		inserted;		/* outbox_insert_row's result */
} OutboxInsertRun;

static void outbox_check_schedule(Datum not_before, bool not_before_null,
								  Datum expires_at, bool expires_at_null,
								  Datum dedup_key, bool dedup_key_null,
								  int element);
static void outbox_no_tenant(OutboxTable *t);
static bool outbox_insert_as_owner(OutboxTable *t, Datum *values,
								   const char *nulls, int64 *id,
								   bool *conflict);
static void outbox_insert_work(void *arg);

PG_FUNCTION_INFO_V1(outbox_enqueue);
PG_FUNCTION_INFO_V1(outbox_enqueue_batch);

/*
 * outbox_check_schedule
 *
 * The delivery policy's arguments of an enqueue: a dedup_key is NULL or not
 * empty, and an expires_at is later than the not_before (22023).
 */
static void
outbox_check_schedule(Datum not_before, bool not_before_null,
					  Datum expires_at, bool expires_at_null,
					  Datum dedup_key, bool dedup_key_null, int element)
{
	char		where[32] = "";

	if (element > 0)
		snprintf(where, sizeof(where), " (element %d)", element);
	if (!dedup_key_null && VARSIZE_ANY_EXHDR(DatumGetPointer(dedup_key)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("dedup_key must not be empty%s", where),
				 errhint("Pass NULL for a row without a key.")));
	if (!not_before_null && !expires_at_null &&
		DatumGetTimestampTz(expires_at) <= DatumGetTimestampTz(not_before))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("expires_at must be later than not_before%s", where),
				 errdetail("A row that expires before it falls due could never be delivered.")));
}

/*
 * outbox_no_tenant
 *
 * A row for distributed outbox t without a tenant_id, by which Citus
 * places it: 23502, before anything is written.
 */
static void
outbox_no_tenant(OutboxTable *t)
{
	ereport(ERROR,
			(errcode(ERRCODE_NOT_NULL_VIOLATION),
			 errmsg("tenant_id must not be null in distributed outbox %s",
					outbox_table_name(t)),
			 errdetail("Citus places each row of a distributed outbox on the node of its tenant_id.")));
}

/*
 * outbox_enqueue
 *
 * Insert one pending row and return its id; with a dedup_key that the
 * recipient's rows already hold, insert nothing and return that row's id.
 * The trigger validates the row (payload size included) and queues the
 * wake-up (for a row scheduled for later, the worker sends it when due).
 */
Datum
outbox_enqueue(PG_FUNCTION_ARGS)
{
	OutboxTable *t;
	Datum		values[7];
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};
	bool		isnull;
	bool		conflict;
	int64		id;
	int			i;

	outbox_check_text(fcinfo, 0, "recipient", true);
	outbox_check_text(fcinfo, 1, "kind", true);
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("payload must not be null")));

	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);
	values[2] = PG_GETARG_DATUM(2);
	for (i = 3; i < 7; i++)
	{
		values[i] = OUTBOX_ARG_IS_NULL(i) ? (Datum) 0 : PG_GETARG_DATUM(i);
		nulls[i] = OUTBOX_ARG_IS_NULL(i) ? 'n' : ' ';
	}
	outbox_check_schedule(values[4], nulls[4] == 'n', values[5], nulls[5] == 'n',
						  values[6], nulls[6] == 'n', 0);

	t = outbox_target(fcinfo, 7, ACL_INSERT);
	if (outbox_table_distributed(t) && nulls[3] == 'n')
		outbox_no_tenant(t);
	if (outbox_table_partitioned(t))
		(void) outbox_partitions_make(t, 1);
	if (outbox_insert_as_owner(t, values, nulls, &id, &conflict) && !conflict)
		PG_RETURN_INT64(id);
	/* a key already taken: its holder's id comes from the loop below */

	outbox_spi_connect();
	if (nulls[6] == 'n')
	{
		outbox_execute(t, OUTBOX_PLAN_ENQUEUE, values, nulls, SPI_OK_INSERT_RETURNING);
		if (SPI_processed != 1)
			outbox_no_row_inserted();
	}
	else
	{
		/*
		 * INSERT ... ON CONFLICT DO NOTHING waits for a transaction inserting
		 * the same key; when that one commits, nothing is inserted and the
		 * row is read (by a new snapshot, which sees it); when it rolls back,
		 * this one inserts.  A row that holds the key and is purged in
		 * between frees it: try again.
		 */
		Datum		key[3];
		char		key_nulls[3] = {' ', ' ', nulls[3]};
		int			attempt;

		key[0] = values[0];
		key[1] = values[6];
		key[2] = values[3];
		for (attempt = 0;; attempt++)
		{
			CHECK_FOR_INTERRUPTS();
			/* the direct insert found the key taken: read the holder first */
			if (!(attempt == 0 && conflict) &&
				outbox_execute(t, OUTBOX_PLAN_ENQUEUE_DEDUP, values, nulls,
							   SPI_OK_INSERT_RETURNING) == 1)
				break;
			CommandCounterIncrement();
			if (outbox_execute(t, OUTBOX_PLAN_DEDUP_LOOKUP, key, key_nulls,
							   SPI_OK_SELECT) == 1)
				break;
			/* neither inserted nor held, again and again: a trigger's NULL */
			if (attempt >= 3)
				outbox_no_row_inserted();
			CommandCounterIncrement();
		}
	}
	id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
									 SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();

	PG_RETURN_INT64(id);
}

/*
 * outbox_enqueue_batch
 *
 * Insert one pending row per array position and return the ids in input
 * order.  The arrays must have equal lengths (tenant_ids, not_befores,
 * expires_ats and dedup_keys may be NULL: none for any row, or hold NULLs);
 * every element is validated as outbox_enqueue() validates its arguments,
 * and the trigger checks and wakes each row.  A position whose dedup_key the
 * recipient's rows already hold (or an earlier position of the batch took)
 * inserts nothing and returns that row's id.
 */
Datum
outbox_enqueue_batch(PG_FUNCTION_ARGS)
{
	static const char *const names[7] = {
		"recipients", "kinds", "payloads", "tenant_ids",
		"not_befores", "expires_ats", "dedup_keys"
	};
	OutboxTable *t;
	Datum		values[7];
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};
	int			n[7] = {0, 0, 0, 0, 0, 0, 0};
	Tuplestorestate *tupstore;
	TupleDesc	tupdesc;
	int64	   *ids;
	int64	   *inserted;
	uint64		ninserted;
	bool		keyed = false;
	uint64		i;
	int			a;

	for (a = 0; a < 7; a++)
	{
		values[a] = outbox_text_array(fcinfo, a, names[a], a < 3, a < 3, &n[a]);
		if (OUTBOX_ARG_IS_NULL(a))
			nulls[a] = 'n';
	}
	for (a = 1; a < 7; a++)
	{
		if (nulls[a] == 'n')
			continue;
		if (n[a] != n[0])
			ereport(ERROR,
					(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
					 errmsg("outbox batch arrays must have equal lengths"),
					 errdetail("Array recipients has length %d; array %s has length %d.",
							   n[0], names[a], n[a])));
	}

	/* the policy's elements, position by position */
	if (nulls[4] == ' ' || nulls[5] == ' ' || nulls[6] == ' ')
	{
		Datum	   *e[3] = {NULL, NULL, NULL};
		bool	   *en[3] = {NULL, NULL, NULL};
		int			k;

		for (a = 4; a < 7; a++)
		{
			if (nulls[a] == 'n')
				continue;
			deconstruct_array(DatumGetArrayTypeP(values[a]),
							  a == 6 ? TEXTOID : TIMESTAMPTZOID,
							  a == 6 ? -1 : (int) sizeof(TimestampTz),
							  a == 6 ? false : FLOAT8PASSBYVAL,
							  a == 6 ? TYPALIGN_INT : TYPALIGN_DOUBLE,
							  &e[a - 4], &en[a - 4], &k);
		}
		for (k = 0; k < n[0]; k++)
		{
			bool		nb_null = e[0] == NULL || en[0][k];
			bool		ea_null = e[1] == NULL || en[1][k];
			bool		dk_null = e[2] == NULL || en[2][k];

			outbox_check_schedule(nb_null ? 0 : e[0][k], nb_null,
								  ea_null ? 0 : e[1][k], ea_null,
								  dk_null ? 0 : e[2][k], dk_null, k + 1);
			keyed |= !dk_null;
		}
	}

	t = outbox_target(fcinfo, 7, ACL_INSERT);
	if (outbox_table_distributed(t))
	{
		if (nulls[3] == 'n' || array_contains_nulls(DatumGetArrayTypeP(values[3])))
			outbox_no_tenant(t);

		/*
		 * Citus counts the rows an INSERT ... SELECT ... ON CONFLICT DO
		 * NOTHING skipped among those it returns, so the ids of a keyed batch
		 * could not be told apart
		 */
		if (keyed)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("a batch with dedup_keys cannot be enqueued into distributed outbox %s",
							outbox_table_name(t)),
					 errhint("Enqueue its keyed rows one by one with outbox_enqueue().")));
	}
	tupstore = outbox_begin_srf(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	if (n[0] == 0)
		return (Datum) 0;
	if (outbox_table_partitioned(t))
	{
		(void) outbox_partitions_make(t, n[0]);
		/* the batch's key locks in one order: no deadlock between batches */
		if (keyed)
			outbox_key_lock_batch(outbox_table_relid(t),
								  DatumGetArrayTypeP(values[0]),
								  DatumGetArrayTypeP(values[6]));
	}

	outbox_spi_connect();
	outbox_execute(t, keyed ? OUTBOX_PLAN_ENQUEUE_BATCH_DEDUP : OUTBOX_PLAN_ENQUEUE_BATCH,
				   values, nulls, SPI_OK_INSERT_RETURNING);
	ninserted = SPI_processed;
	if (!keyed && ninserted != (uint64) n[0])
		elog(ERROR, "outbox batch insert returned " UINT64_FORMAT " rows, expected %d",
			 ninserted, n[0]);
	inserted = palloc(sizeof(int64) * Max(ninserted, 1));
	for (i = 0; i < ninserted; i++)
	{
		bool		isnull;

		inserted[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
												  SPI_tuptable->tupdesc, 1, &isnull));
	}

	/*
	 * The rows were inserted in input order and each took the next value of
	 * the sequence, so ascending ids are input order, whatever order
	 * RETURNING used.
	 */
	qsort(inserted, ninserted, sizeof(int64), outbox_int64_cmp);
	ids = palloc0(sizeof(int64) * n[0]);
	if (!keyed)
		memcpy(ids, inserted, sizeof(int64) * n[0]);
	else
	{
		bool	   *has_key = palloc0(sizeof(bool) * n[0]);
		int64	   *keyed_ids = palloc(sizeof(int64) * n[0]);
		Datum		lookup[2];
		uint64		nkeyed;
		uint64		next = 0;
		int			pos;

		/*
		 * Keyed positions get the id of the row holding their key (inserted
		 * now or before); the inserted rows left, in ascending order, are the
		 * unkeyed positions', in input order.
		 */
		CommandCounterIncrement();
		lookup[0] = values[0];
		lookup[1] = values[6];
		nkeyed = outbox_execute(t, OUTBOX_PLAN_DEDUP_LOOKUP_BATCH, lookup,
								NULL, SPI_OK_SELECT);
		for (i = 0; i < nkeyed; i++)
		{
			bool		isnull;
			int64		ord = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
														  SPI_tuptable->tupdesc, 1, &isnull));

			if (ord < 1 || ord > n[0])
				elog(ERROR, "outbox batch key lookup returned position " INT64_FORMAT, ord);
			ids[ord - 1] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
													   SPI_tuptable->tupdesc, 2, &isnull));
			has_key[ord - 1] = true;
			keyed_ids[i] = ids[ord - 1];
		}
		qsort(keyed_ids, nkeyed, sizeof(int64), outbox_int64_cmp);
		for (pos = 0; pos < n[0]; pos++)
		{
			if (has_key[pos])
				continue;
			while (next < ninserted &&
				   bsearch(&inserted[next], keyed_ids, nkeyed, sizeof(int64),
						   outbox_int64_cmp) != NULL)
				next++;
			if (next >= ninserted)
				ereport(ERROR,
						(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						 errmsg("outbox batch: the row holding a dedup_key of element %d was removed meanwhile",
								pos + 1),
						 errhint("Retry the transaction.")));
			ids[pos] = inserted[next++];
		}
	}
	/* ids live in SPI's memory: into the result before it goes */
	tupdesc = ((ReturnSetInfo *) fcinfo->resultinfo)->setDesc;
	for (a = 0; a < n[0]; a++)
	{
		Datum		v = Int64GetDatum(ids[a]);
		bool		isnull = false;

		tuplestore_putvalues(tupstore, tupdesc, &v, &isnull);
	}
	SPI_finish();

	return (Datum) 0;
}




/*
 * outbox_insert_as_owner
 *
 * outbox_insert_row(), as the table's owner on any outbox but the default
 * one (outbox_owner.c): its defaults, CHECK constraints and triggers run
 * with the owner's rights, as the SQL statement's would.
 */
static bool
outbox_insert_as_owner(OutboxTable *t, Datum *values, const char *nulls,
					   int64 *id, bool *conflict)
{
	OutboxInsertRun run;

	run.table = t;
	run.values = values;
	run.nulls = nulls;
	run.id = 0;
	run.conflict = false;
	run.inserted = false;
	if (OidIsValid(outbox_table_owner(t)))
		outbox_as_owner(outbox_table_owner(t), outbox_insert_work, &run);
	else
		outbox_insert_work(&run);
	*id = run.id;
	*conflict = run.conflict;
	return run.inserted;
}

static void
outbox_insert_work(void *arg)
{
	OutboxInsertRun *run = (OutboxInsertRun *) arg;

	run->inserted = outbox_insert_row(run->table, (Datum *) run->values,
									  run->nulls, &run->id, &run->conflict);
}
