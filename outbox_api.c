/*-------------------------------------------------------------------------
 *
 * outbox_api.c
 *		The SQL-callable functions that change an outbox's rows (claim, ack,
 *		release, reclaim, resync, reassign, replay, purge, the dead letters'
 *		reject, redrive and expiry), and the SQL helpers of the functions
 *		written in SQL.  The enqueues are in outbox_enqueue.c, those that
 *		only look in outbox_monitor.c.
 *
 * Every function runs in the caller's transaction.  None silently does
 * nothing on a NULL argument: a required argument that is NULL raises
 * 22004, and every bad argument raises an error before anything is written.
 * The functions change rows only through the statements of outbox_statements.c
 * (so the state guard sees every change) and never write the bookkeeping
 * columns themselves.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_api.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "delivery_outbox.h"
#include "outbox_args.h"
#include "outbox_insert.h"
#include "outbox_owner.h"
#include "outbox_partitions.h"
#include "outbox_rows.h"
#include "outbox_shmem.h"
#include "outbox_table.h"
#include "outbox_trigger.h"
#include "outbox_xact.h"

static uint64 outbox_ack_finish(OutboxTable *t, Datum *values);
static bool outbox_ack_all_delivered(OutboxTable *t, Datum *values, uint64 n);
static bool outbox_ack_all_work(void *arg);
static uint64 outbox_ack_internal(OutboxTable *t, Datum ids, Datum recipient,
								  char recipient_null);


PG_FUNCTION_INFO_V1(outbox_claim);
PG_FUNCTION_INFO_V1(outbox_ack);
PG_FUNCTION_INFO_V1(outbox_ack_array);
PG_FUNCTION_INFO_V1(outbox_ack_claim);
PG_FUNCTION_INFO_V1(outbox_release);
PG_FUNCTION_INFO_V1(outbox_reject);
PG_FUNCTION_INFO_V1(outbox_redrive);
PG_FUNCTION_INFO_V1(outbox_expire);
PG_FUNCTION_INFO_V1(outbox_reclaim);
PG_FUNCTION_INFO_V1(outbox_reclaim_recipient);
PG_FUNCTION_INFO_V1(outbox_reassign);
PG_FUNCTION_INFO_V1(outbox_replay);
PG_FUNCTION_INFO_V1(outbox_purge);
PG_FUNCTION_INFO_V1(outbox_calling_role);
PG_FUNCTION_INFO_V1(outbox_invalidate);
PG_FUNCTION_INFO_V1(outbox_run_as_owner);

/* outbox_run_as_owner's command, for outbox_command_work */
typedef struct OutboxCommandRun
{
	const char *command;
	MemoryContext result_cxt;	/* where the result goes */
	char	   *result;			/* first column of the first row, or NULL */
} OutboxCommandRun;

static void outbox_command_work(void *arg);

/*
 * outbox_claim_into
 *
 * The claim of outbox_claim and outbox_ack_claim: max_rows, recipient and
 * tenant_id are the call's arguments argno, argno + 1 and argno + 2; the
 * rows go to the call's result set.  Call it connected to SPI.
 */
static void
outbox_claim_into(FunctionCallInfo fcinfo, OutboxTable *t, int argno,
				  Tuplestorestate *tupstore)
{
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	int			variant = 0;
	TimestampTz now;

	values[0] = Int64GetDatum(outbox_check_max_rows(fcinfo, argno));
	values[1] = outbox_null_text(fcinfo, argno + 1, &nulls[1]);
	values[2] = outbox_null_text(fcinfo, argno + 2, &nulls[2]);
	if (nulls[1] == ' ')
		variant += 1;
	if (nulls[2] == ' ')
		variant += 2;

	now = GetCurrentTimestamp();
	values[3] = TimestampTzGetDatum(now);
	values[4] = outbox_ttl_cutoff(t, now, &nulls[4]);

	if (outbox_table_policy(t)->ordered)
		outbox_claim_ordered(t, DatumGetInt64(values[0]),
							 nulls[1] == ' ' ? DatumGetTextPP(values[1]) : NULL,
							 nulls[2] == ' ' ? DatumGetTextPP(values[2]) : NULL,
							 now, false);
	else if (outbox_table_partitioned(t))
		outbox_claim_locked(t, OUTBOX_PLAN_CLAIM_LOCK + variant, values, nulls);
	else
		outbox_execute(t, OUTBOX_PLAN_CLAIM + variant, values, nulls,
					   SPI_OK_SELECT);
	outbox_put_rows(tupstore, ((ReturnSetInfo *) fcinfo->resultinfo)->setDesc);
}

/*
 * outbox_claim
 *
 * Move up to max_rows pending rows (optionally one recipient's and/or one
 * tenant's) to delivered, skipping rows that other sessions hold locked and
 * rows not due yet or expired, and return them as updated, in id order:
 * scheduled rows that fell due first, then the others oldest id first.
 */
Datum
outbox_claim(PG_FUNCTION_ARGS)
{
	OutboxTable *t;
	Tuplestorestate *tupstore;

	(void) outbox_check_max_rows(fcinfo, 0);
	outbox_check_text(fcinfo, 1, "recipient", false);

	t = outbox_target(fcinfo, 3, ACL_UPDATE);
	tupstore = outbox_begin_srf(fcinfo, 0);

	outbox_spi_connect();
	outbox_claim_into(fcinfo, t, 0, tupstore);
	SPI_finish();

	return (Datum) 0;
}

/*
 * outbox_ack_claim
 *
 * A relay's round in one call: ack the rows of ids (as outbox_ack(ids,
 * recipient)), then claim up to max_rows (as outbox_claim(max_rows,
 * recipient, tenant_id)), in the caller's transaction, so that a relay
 * commits once per batch.  The ack comes first: on an ordered outbox it
 * frees the recipient's next row for the claim.  Every argument is checked
 * before anything is acked.
 */
Datum
outbox_ack_claim(PG_FUNCTION_ARGS)
{
	Datum		ids = outbox_check_ids(fcinfo, 0);
	char		recipient_null;
	Datum		recipient;
	OutboxTable *t;
	Tuplestorestate *tupstore;

	(void) outbox_check_max_rows(fcinfo, 1);
	outbox_check_text(fcinfo, 2, "recipient", false);
	recipient = outbox_null_text(fcinfo, 2, &recipient_null);

	t = outbox_target(fcinfo, 4, ACL_UPDATE);
	tupstore = outbox_begin_srf(fcinfo, 0);

	if (ArrayGetNItems(ARR_NDIM(DatumGetArrayTypeP(ids)),
					   ARR_DIMS(DatumGetArrayTypeP(ids))) > 0)
		(void) outbox_ack_internal(t, ids, recipient, recipient_null);

	outbox_spi_connect();
	outbox_claim_into(fcinfo, t, 1, tupstore);
	SPI_finish();

	return (Datum) 0;
}

/*
 * outbox_ack
 *
 * Ack one row; true if this call acked it.
 */
Datum
outbox_ack(PG_FUNCTION_ARGS)
{
	Datum		id;
	Datum		ids;
	char		recipient_null;
	Datum		recipient;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("id must not be null")));
	outbox_check_text(fcinfo, 1, "recipient", false);
	recipient = outbox_null_text(fcinfo, 1, &recipient_null);

	id = PG_GETARG_DATUM(0);
	ids = PointerGetDatum(construct_array(&id, 1, INT8OID, sizeof(int64),
										  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));

	PG_RETURN_BOOL(outbox_ack_internal(outbox_target(fcinfo, 2, ACL_UPDATE),
									   ids, recipient, recipient_null) == 1);
}

/*
 * outbox_ack_array
 *
 * SQL outbox_ack(bigint[], text): ack many rows; the number acked by this
 * call.
 */
Datum
outbox_ack_array(PG_FUNCTION_ARGS)
{
	Datum		ids = outbox_check_ids(fcinfo, 0);
	char		recipient_null;
	Datum		recipient;

	outbox_check_text(fcinfo, 1, "recipient", false);
	recipient = outbox_null_text(fcinfo, 1, &recipient_null);

	return outbox_count_result(outbox_ack_internal(outbox_target(fcinfo, 2,
																 ACL_UPDATE),
												   ids, recipient,
												   recipient_null));
}

/*
 * outbox_release
 *
 * Give claimed rows back after a failed push: delivered -> pending, in id
 * order, not claimable before retry_after from now (NULL: the outbox's
 * backoff), with error kept as last_error; a row out of attempts or expired
 * goes to the dead letters instead.  Returns the number taken back.
 */
Datum
outbox_release(PG_FUNCTION_ARGS)
{
	OutboxTable *t;
	Datum		own[3];
	char		own_nulls[3] = {' ', ' ', ' '};

	own[0] = outbox_check_ids(fcinfo, 0);
	if (!OUTBOX_ARG_IS_NULL(1))
	{
		Interval	limit;

		outbox_check_interval(fcinfo, 1, "retry_after");
		memset(&limit, 0, sizeof(limit));
		limit.month = 100 * MONTHS_PER_YEAR;
		if (DatumGetBool(DirectFunctionCall2(interval_gt, PG_GETARG_DATUM(1),
											 IntervalPGetDatum(&limit))))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("retry_after must not exceed 100 years")));
	}
	own[1] = OUTBOX_ARG_IS_NULL(1) ? (Datum) 0 : PG_GETARG_DATUM(1);
	own_nulls[1] = OUTBOX_ARG_IS_NULL(1) ? 'n' : ' ';
	own[2] = outbox_null_text(fcinfo, 2, &own_nulls[2]);

	t = outbox_target(fcinfo, 3, ACL_UPDATE);
	return outbox_count_result(outbox_requeue(t, OUTBOX_PLAN_RELEASE, own,
											  own_nulls, 3,
											  OUTBOX_COUNT_RELEASED));
}

/*
 * outbox_reject
 *
 * Delivered rows the recipient can never take go to the dead letters now
 * ('rejected'), with error as last_error.  Returns the number moved.
 */
Datum
outbox_reject(PG_FUNCTION_ARGS)
{
	OutboxTable *t;
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};

	values[1] = outbox_check_ids(fcinfo, 0);
	values[2] = outbox_null_text(fcinfo, 1, &nulls[2]);
	t = outbox_target(fcinfo, 2, ACL_UPDATE);
	values[0] = TimestampTzGetDatum(GetCurrentTimestamp());
	return outbox_count_result(outbox_move_rows(t, OUTBOX_PLAN_REJECT, values,
												nulls, OUTBOX_NUM_COUNTERS));
}

/*
 * outbox_redrive
 *
 * Dead letters back into the outbox as pending rows with their ids, zero
 * attempts and a new created_at, notified.  One whose dedup_key another row
 * took meanwhile stays dead.  Returns the number put back.
 */
Datum
outbox_redrive(PG_FUNCTION_ARGS)
{
	OutboxTable *t;
	Datum		values[2];
	int64		count;
	bool		isnull;

	values[1] = outbox_check_ids(fcinfo, 0);
	t = outbox_target(fcinfo, 1, ACL_INSERT | ACL_UPDATE);
	/* a dead letter whose partition was dropped since gets it back */
	if (outbox_table_partitioned(t))
	{
		Datum	   *elems;
		int64	   *ids;
		int			n;
		int			i;

		deconstruct_array(DatumGetArrayTypeP(values[1]), INT8OID, sizeof(int64),
						  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elems, NULL, &n);
		ids = palloc(sizeof(int64) * Max(n, 1));
		for (i = 0; i < n; i++)
			ids[i] = DatumGetInt64(elems[i]);
		(void) outbox_partitions_make_for(t, ids, n);
	}
	values[0] = TimestampTzGetDatum(GetCurrentTimestamp());
	outbox_spi_connect();
	outbox_execute(t, OUTBOX_PLAN_REDRIVE, values, NULL, SPI_OK_SELECT);
	count = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
										SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();
	if (count > 0)
		outbox_count(outbox_table_relid(t), OUTBOX_COUNT_REDRIVEN, count);
	return outbox_count_result((uint64) count);
}

/*
 * outbox_expire
 *
 * The worker's expiry sweep, by call (for a database no worker serves):
 * pending rows past their expires_at or the outbox's ttl go to the dead
 * letters ('expired'), at most about max_rows of each kind (all when
 * NULL), skipping locked rows.  Returns the number moved.
 */
Datum
outbox_expire(PG_FUNCTION_ARGS)
{
	int64		max_rows = OUTBOX_ARG_IS_NULL(0) ? 0 : outbox_check_max_rows(fcinfo, 0);

	return outbox_count_result(outbox_expire_rows(outbox_target(fcinfo, 1, ACL_UPDATE),
												  max_rows));
}


/*
 * outbox_reclaim
 *
 * The sweeper: rows delivered longer ago than older_than go back to pending,
 * at most max_rows of them (all when NULL), skipping locked rows.
 */
Datum
outbox_reclaim(PG_FUNCTION_ARGS)
{
	TimestampTz cutoff = DatumGetTimestampTz(outbox_cutoff(fcinfo, 0));
	int64		max_rows = PG_ARGISNULL(1) ? 0 : outbox_check_max_rows(fcinfo, 1);

	return outbox_count_result(outbox_reclaim_rows(outbox_target(fcinfo, 2, ACL_UPDATE),
												   cutoff, max_rows));
}

/*
 * outbox_reclaim_recipient
 *
 * Reconnect resync: every delivered row of the recipient, in the given tenant
 * (a NULL tenant matches NULL only), back to pending.
 */
Datum
outbox_reclaim_recipient(PG_FUNCTION_ARGS)
{
	OutboxTable *t;
	Datum		values[2];
	char		nulls[2] = {' ', ' '};

	outbox_check_text(fcinfo, 0, "recipient", true);
	values[0] = PG_GETARG_DATUM(0);
	values[1] = outbox_null_text(fcinfo, 1, &nulls[1]);

	t = outbox_target(fcinfo, 2, ACL_UPDATE);
	return outbox_count_result(
							   outbox_requeue(t, nulls[1] == 'n' ?
											  OUTBOX_PLAN_RESYNC_NULL_TENANT : OUTBOX_PLAN_RESYNC,
											  values, nulls, 2, OUTBOX_COUNT_RECLAIMED));
}

/*
 * outbox_reassign
 *
 * Re-address every non-acked row of from_recipient to to_recipient, as
 * pending.
 */
Datum
outbox_reassign(PG_FUNCTION_ARGS)
{
	OutboxTable *t;
	Datum		values[2];

	outbox_check_text(fcinfo, 0, "from_recipient", true);
	outbox_check_text(fcinfo, 1, "to_recipient", true);
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);

	t = outbox_target(fcinfo, 2, ACL_UPDATE);
	return outbox_count_result(outbox_run(t, OUTBOX_PLAN_REASSIGN, values, NULL,
										  SPI_OK_UPDATE));
}

/*
 * outbox_replay
 *
 * Read, without changing anything, the recipient's open rows with
 * id > after_id in id order.  A NULL tenant_id means any tenant.
 */
Datum
outbox_replay(PG_FUNCTION_ARGS)
{
	OutboxTable *t;
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	Tuplestorestate *tupstore;

	outbox_check_text(fcinfo, 0, "recipient", true);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("after_id must not be null")));
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);
	values[2] = Int64GetDatum(outbox_check_max_rows(fcinfo, 2));
	values[3] = outbox_null_text(fcinfo, 3, &nulls[3]);

	t = outbox_target(fcinfo, 4, ACL_SELECT);
	tupstore = outbox_begin_srf(fcinfo, 0);

	outbox_spi_connect();
	outbox_execute(t, nulls[3] == 'n' ? OUTBOX_PLAN_REPLAY : OUTBOX_PLAN_REPLAY_T,
				   values, nulls, SPI_OK_SELECT);
	outbox_put_rows(tupstore, ((ReturnSetInfo *) fcinfo->resultinfo)->setDesc);
	SPI_finish();

	return (Datum) 0;
}

/*
 * outbox_purge
 *
 * Delete acked rows acked longer ago than older_than, skipping locked rows.
 */
Datum
outbox_purge(PG_FUNCTION_ARGS)
{
	TimestampTz cutoff = DatumGetTimestampTz(outbox_cutoff(fcinfo, 0));
	OutboxTable *t = outbox_target(fcinfo, 1, ACL_DELETE);
	int64		dropped = 0;

	int64		deleted = 0;
	OutboxPartitionSweep *sw;
	int			i;

	if (!outbox_table_partitioned(t))
		PG_RETURN_INT64((int64) outbox_purge_rows(t, cutoff, 0));

	/*
	 * A partitioned outbox: the acked rows of the partitions that stay are
	 * deleted, partitions are made ahead, and those that qualify are dropped
	 * last, so that the drops' lock is held for no more than the end of the
	 * transaction.
	 */
	sw = outbox_partitions_sweep(t, cutoff);
	for (i = 0; i < sw->nkept; i++)
		deleted += (int64) outbox_purge_range(t, cutoff, sw->kept_lower[i],
											  sw->kept_upper[i]);
	(void) outbox_partitions_make(t, 0);
	(void) outbox_partitions_drop(t, sw, INT_MAX, &dropped);
	PG_RETURN_INT64(dropped + deleted);
}


/*
 * outbox_calling_role
 *
 * For outbox_create() and the other SECURITY DEFINER functions written in
 * SQL: the role that called them, the current role outside any SECURITY
 * DEFINER function (SET ROLE's), which they check privileges for.
 */
Datum
outbox_calling_role(PG_FUNCTION_ARGS)
{
	PG_RETURN_OID(GetOuterUserId());
}

/*
 * outbox_invalidate
 *
 * An outbox's settings changed: make every session re-read them (a relcache
 * invalidation of the table, sent at commit).
 */
Datum
outbox_invalidate(PG_FUNCTION_ARGS)
{
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("outbox must not be null")));
	/* a relation that does not exist has nothing to re-read: 42P01, not XX000 */
	if (!SearchSysCacheExists1(RELOID, PG_GETARG_DATUM(0)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", PG_GETARG_OID(0))));
	CacheInvalidateRelcacheByRelid(PG_GETARG_OID(0));
	PG_RETURN_VOID();
}

/*
 * outbox_run_as_owner
 *
 * For the functions written in SQL (not for direct use; granted to
 * nobody): run one SQL command as the owner of table tbl, as the C
 * functions run their statements on an outbox (outbox_owner.c), and
 * return the first column of its first row as text (NULL without one).
 * The steps of outbox_attach(), outbox_partition() and the others that
 * read or build over a table's rows go through it, so that the table's
 * code never runs with the rights of their definer.
 */
Datum
outbox_run_as_owner(PG_FUNCTION_ARGS)
{
	OutboxCommandRun run;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", PG_ARGISNULL(0) ? "tbl" : "command")));
	run.command = text_to_cstring(PG_GETARG_TEXT_PP(1));
	run.result_cxt = CurrentMemoryContext;
	run.result = NULL;
	outbox_as_rel_owner(PG_GETARG_OID(0), outbox_command_work, &run);
	if (run.result == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(run.result));
}

/*
 * outbox_command_work
 *
 * outbox_run_as_owner's command, through SPI, as whoever runs it.
 */
static void
outbox_command_work(void *arg)
{
	OutboxCommandRun *run = (OutboxCommandRun *) arg;
	int			rc;

	outbox_spi_connect();
	rc = SPI_execute(run->command, false, 0);
	if (rc < 0)
		elog(ERROR, "SPI_execute failed for \"%s\": %s", run->command,
			 SPI_result_code_string(rc));
	if (SPI_tuptable != NULL && SPI_processed > 0 &&
		SPI_tuptable->tupdesc->natts > 0)
	{
		char	   *value = SPI_getvalue(SPI_tuptable->vals[0],
										 SPI_tuptable->tupdesc, 1);

		if (value != NULL)
			run->result = MemoryContextStrdup(run->result_cxt, value);
	}
	SPI_finish();
}

/*
 * outbox_ack_internal
 *
 * Ack the rows named by the int8[] ids (only the recipient's, unless
 * recipient_null is 'n').  The open rows are first locked in id order; a row
 * found pending (a late ack after a reclaim) is moved through delivered, so
 * the trigger's rules and bookkeeping hold; then every locked row goes to
 * acked.  Returns the number of rows this call acked.
 *
 * On an outbox that keeps no acked row (its retain_acked is 0), the last
 * step deletes the rows instead: the purge would delete them at the next
 * sweep anyway, and an UPDATE now would write a tuple and its index
 * entries only for VACUUM to remove.  The guard sees the DELETE and counts
 * it as an ack (outbox_delete_counter).
 */
static uint64
outbox_ack_internal(OutboxTable *t, Datum ids, Datum recipient,
					char recipient_null)
{
	Datum		values[2];
	char		nulls[2] = {' ', recipient_null};
	uint64		nlocked;
	uint64		npending = 0;
	uint64		count;
	Datum	   *locked;
	Datum	   *pending;
	uint64		i;

	values[0] = ids;
	values[1] = recipient;

	outbox_spi_connect();

	/*
	 * Without a recipient filter, the common case, a relay acking the rows it
	 * was handed: ack them in one statement when every id is a delivered row.
	 * When it falls short (a row pending again, acked, gone, an id given
	 * twice, a row another transaction holds), the general path below takes
	 * every id again, locking them in id order from the lowest: for several
	 * ids, only after the rows the one statement acked are unlocked again,
	 * which it ran in a subtransaction for, never waiting for a lock in it
	 * (outbox_ack_all_delivered), so that this call never holds a higher id
	 * while it waits for a lower one.  (One id locks nothing when it falls
	 * short.)
	 */
	if (recipient_null == 'n')
	{
		int			n = ArrayGetNItems(ARR_NDIM(DatumGetArrayTypeP(ids)),
									   ARR_DIMS(DatumGetArrayTypeP(ids)));

		if (n == 1 && outbox_ack_finish(t, values) == 1)
		{
			SPI_finish();
			return 1;
		}
		if (n > 1 && outbox_ack_all_delivered(t, values, (uint64) n))
		{
			SPI_finish();
			return (uint64) n;
		}
	}

	nlocked = outbox_execute(t, recipient_null == 'n' ?
							 OUTBOX_PLAN_ACK_LOCK : OUTBOX_PLAN_ACK_LOCK_R,
							 values, nulls, SPI_OK_SELECT);
	if (nlocked == 0)
	{
		SPI_finish();
		return 0;
	}

	locked = palloc(sizeof(Datum) * nlocked);
	pending = palloc(sizeof(Datum) * nlocked);
	for (i = 0; i < nlocked; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		bool		isnull;

		locked[i] = SPI_getbinval(tup, SPI_tuptable->tupdesc, 1, &isnull);
		if (DatumGetBool(SPI_getbinval(tup, SPI_tuptable->tupdesc, 2, &isnull)))
			pending[npending++] = locked[i];
	}

	if (npending > 0)
	{
		values[0] = PointerGetDatum(construct_array(pending, (int) npending,
													INT8OID, sizeof(int64),
													FLOAT8PASSBYVAL,
													TYPALIGN_DOUBLE));
		outbox_execute(t, OUTBOX_PLAN_ACK_DELIVER, values, NULL, SPI_OK_UPDATE);
	}

	values[0] = PointerGetDatum(construct_array(locked, (int) nlocked,
												INT8OID, sizeof(int64),
												FLOAT8PASSBYVAL,
												TYPALIGN_DOUBLE));
	count = outbox_ack_finish(t, values);
	SPI_finish();

	return count;
}

/*
 * Subtransactions an ack keeps in one transaction, at most.  Each kept one
 * holds its own transaction id until the transaction ends, and past 64 of
 * them (PGPROC_MAX_CACHED_SUBXIDS, the caller's own included) every snapshot
 * taken anywhere must look the transaction's up in pg_subtrans: a relay
 * acking batch after batch in one transaction takes the lock-then-ack path
 * after this many.  (One rolled back leaves nothing behind.)
 */
#define OUTBOX_ACK_SUBXACTS_MAX 16

/* outbox_ack_all_delivered's statement, for outbox_ack_all_work */
typedef struct OutboxAckAll
{
	OutboxTable *t;
	Datum	   *values;
	uint64		n;
} OutboxAckAll;

/* the (local) transaction that kept them, and how many */
static LocalTransactionId outbox_ack_subxacts_lxid = InvalidLocalTransactionId;
static int	outbox_ack_subxacts = 0;

/*
 * outbox_ack_all_delivered
 *
 * outbox_ack_finish of the n ids of values[0] in a subtransaction, kept when
 * it acked n rows (each id a delivered row), rolled back otherwise, its row
 * locks and changes gone.  True if kept; false, without trying, once this
 * transaction kept OUTBOX_ACK_SUBXACTS_MAX.
 *
 * It never waits for a lock while it may hold another: the order in which
 * its statement locks the rows is its plan's (ascending on an outbox of our
 * own making, but not on one with a descending unique index on id, a
 * default partition or partitions of partitions), so a row another
 * transaction holds makes it give up at once (lock_timeout 1 ms, 55P03),
 * and the lock-then-ack path then waits for it holding nothing.  Any other
 * error is the caller's, the subtransaction closed first
 * (outbox_subxact_try).
 */
static bool
outbox_ack_all_delivered(OutboxTable *t, Datum *values, uint64 n)
{
	OutboxAckAll ack = {t, values, n};
	LocalTransactionId lxid = OUTBOX_PROC_LXID(MyProc);
	ErrorData  *edata;
	bool		kept;

	if (lxid != outbox_ack_subxacts_lxid)
	{
		outbox_ack_subxacts_lxid = lxid;
		outbox_ack_subxacts = 0;
	}
	if (outbox_ack_subxacts >= OUTBOX_ACK_SUBXACTS_MAX)
		return false;

	edata = outbox_subxact_try(outbox_ack_all_work, &ack, "1", &kept);
	if (edata != NULL)
	{
		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			ReThrowError(edata);
		FreeErrorData(edata);
		return false;
	}
	if (kept)
		outbox_ack_subxacts++;
	return kept;
}

/* outbox_subxact_try's work for outbox_ack_all_delivered: keep if all */
static bool
outbox_ack_all_work(void *arg)
{
	OutboxAckAll *ack = arg;

	return outbox_ack_finish(ack->t, ack->values) == ack->n;
}

/*
 * outbox_ack_finish
 *
 * The last step of an ack: the delivered rows of the int8[] values[0] to
 * acked, or, on an outbox whose own retain_acked is 0, deleted (counted as
 * acks by the guard).  Returns the number of rows.
 */
static uint64
outbox_ack_finish(OutboxTable *t, Datum *values)
{
	const OutboxPolicy *policy = outbox_table_policy(t);
	OutboxCounter save_delete = outbox_delete_counter;
	volatile uint64 count = 0;

	if (!policy->has_retain_acked ||
		policy->retain_acked.month != 0 || policy->retain_acked.day != 0 ||
		policy->retain_acked.time != 0)
		return outbox_execute(t, OUTBOX_PLAN_ACK_FINISH, values, NULL,
							  SPI_OK_UPDATE);

	outbox_delete_counter = OUTBOX_COUNT_ACKED;
	PG_TRY();
	{
		count = outbox_execute(t, OUTBOX_PLAN_ACK_DELETE, values, NULL,
							   SPI_OK_DELETE);
	}
	PG_FINALLY();
	{
		outbox_delete_counter = save_delete;
	}
	PG_END_TRY();

	return count;
}


/* ---------------------------------------------------------------------
 * Argument checks and result helpers
 * ---------------------------------------------------------------------
 */
