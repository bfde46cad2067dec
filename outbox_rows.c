/*-------------------------------------------------------------------------
 *
 * outbox_rows.c
 *		The row operations shared by the SQL functions and the worker:
 *		requeue (release, reclaim, resync) with the delivery policy, moves
 *		to the dead letters, expiry, purge, the wake-ups of scheduled rows
 *		and the backlog count, on the statements of outbox_statements.c.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_rows.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "delivery_outbox.h"
#include "outbox_heads.h"
#include "outbox_rows.h"
#include "outbox_shmem.h"
#include "outbox_table.h"
#include "outbox_trigger.h"
#include "outbox_xact.h"

static void outbox_end_run(OutboxHeads *heads, int i);
static uint64 outbox_cutoff_rows(OutboxTable *table, OutboxPlanId id,
								 int expected, TimestampTz cutoff,
								 int64 max_rows);


/*
 * outbox_cutoff_rows
 *
 * Reclaim's and purge's statement: rows older than cutoff, at most
 * max_rows (all when <= 0), skipping locked rows.
 */
static uint64
outbox_cutoff_rows(OutboxTable *table, OutboxPlanId id, int expected,
				   TimestampTz cutoff, int64 max_rows)
{
	Datum		values[2];
	char		nulls[2] = {' ', ' '};

	values[0] = TimestampTzGetDatum(cutoff);
	values[1] = Int64GetDatum(max_rows);
	if (max_rows <= 0)
		nulls[1] = 'n';
	return outbox_run(table, id, values, nulls, expected);
}

/*
 * outbox_ttl_cutoff
 *
 * The created_at before which a row of table has outlived its outbox's ttl,
 * as of now; *null set to 'n' when the outbox has no ttl.
 */
Datum
outbox_ttl_cutoff(OutboxTable *table, TimestampTz now, char *null)
{
	const OutboxPolicy *policy = outbox_table_policy(table);

	*null = policy->has_ttl ? ' ' : 'n';
	if (!policy->has_ttl)
		return (Datum) 0;
	return DirectFunctionCall2(timestamptz_mi_interval,
							   TimestampTzGetDatum(now),
							   IntervalPGetDatum(&policy->ttl));
}

/*
 * outbox_requeue
 *
 * Run one of the statements that take delivered rows back (release,
 * reclaim, resync: OUTBOX_REQUEUE_SQL): its first five parameters are the
 * outbox's policy, filled in here, followed by the statement's own nown
 * values (own and own_nulls).  The rows going back to pending are counted under counter, those
 * dead-lettered instead as dead letters.  Returns the number of rows taken
 * back, either way.
 */
uint64
outbox_requeue(OutboxTable *table, OutboxPlanId id, const Datum *own,
			   const char *own_nulls, int nown, OutboxCounter counter)
{
	const OutboxPolicy *policy = outbox_table_policy(table);
	Datum		values[OUTBOX_PLAN_MAX_ARGS];
	char		nulls[OUTBOX_PLAN_MAX_ARGS];
	TimestampTz now = GetCurrentTimestamp();
	int			i;

	Assert(nown <= OUTBOX_PLAN_MAX_ARGS - 5);
	values[0] = TimestampTzGetDatum(now);
	nulls[0] = ' ';
	values[1] = Int32GetDatum(policy->max_attempts);
	nulls[1] = policy->max_attempts > 0 ? ' ' : 'n';
	values[2] = outbox_ttl_cutoff(table, now, &nulls[2]);
	values[3] = IntervalPGetDatum(&policy->backoff_base);
	nulls[3] = ' ';
	values[4] = IntervalPGetDatum(&policy->backoff_max);
	nulls[4] = ' ';
	for (i = 0; i < nown; i++)
	{
		values[5 + i] = own[i];
		nulls[5 + i] = own_nulls != NULL ? own_nulls[i] : ' ';
	}
	return outbox_move_rows(table, id, values, nulls, counter);
}

/*
 * outbox_move_rows
 *
 * Run a statement that moves rows to the dead letters (and, for the
 * requeue statements, others back to pending, counted under counter, or
 * OUTBOX_NUM_COUNTERS for a statement that requeues nothing); it
 * returns the number requeued (if two columns) and the number
 * dead-lettered.  The DELETEs that move rows out are not counted as purges
 * but as dead letters.  Returns the total.
 */
uint64
outbox_move_rows(OutboxTable *table, OutboxPlanId id, Datum *values,
				 const char *nulls, OutboxCounter counter)
{
	OutboxCounter save_requeue = outbox_requeue_counter;
	OutboxCounter save_delete = outbox_delete_counter;
	volatile int64 requeued = 0;
	volatile int64 dead = 0;

	if (counter < OUTBOX_NUM_COUNTERS)
		outbox_requeue_counter = counter;
	outbox_delete_counter = OUTBOX_NUM_COUNTERS;
	PG_TRY();
	{
		TupleDesc	desc;
		HeapTuple	tup;
		bool		isnull;

		outbox_spi_connect();
		outbox_execute(table, id, values, nulls, SPI_OK_SELECT);
		desc = SPI_tuptable->tupdesc;
		tup = SPI_tuptable->vals[0];
		if (desc->natts == 2)
		{
			requeued = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
			dead = DatumGetInt64(SPI_getbinval(tup, desc, 2, &isnull));
		}
		else
			dead = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
		SPI_finish();
	}
	PG_FINALLY();
	{
		outbox_requeue_counter = save_requeue;
		outbox_delete_counter = save_delete;
	}
	PG_END_TRY();

	if (dead > 0)
		outbox_count(outbox_table_relid(table), OUTBOX_COUNT_DEAD_LETTERED, dead);
	return (uint64) (requeued + dead);
}

/*
 * outbox_reclaim_rows
 *
 * The C path of outbox_reclaim(), shared with the sweeper: rows delivered
 * before cutoff back to pending (after the backoff, or to the dead letters
 * when expired or out of attempts), at most max_rows (all when <= 0),
 * skipping locked rows.  Returns the number taken back.
 */
uint64
outbox_reclaim_rows(OutboxTable *table, TimestampTz cutoff, int64 max_rows)
{
	Datum		own[2];
	char		own_nulls[2] = {' ', ' '};

	own[0] = TimestampTzGetDatum(cutoff);
	own[1] = Int64GetDatum(max_rows);
	if (max_rows <= 0)
		own_nulls[1] = 'n';
	return outbox_requeue(table, OUTBOX_PLAN_RECLAIM, own, own_nulls, 2,
						  OUTBOX_COUNT_RECLAIMED);
}

/*
 * outbox_expire_rows
 *
 * The sweeper's expiry, and outbox_expire(): pending rows past their
 * expires_at or their outbox's ttl to the dead letters, at most about
 * max_rows of each kind (all when <= 0), skipping locked rows.  Returns the
 * number dead-lettered.
 */
uint64
outbox_expire_rows(OutboxTable *table, int64 max_rows)
{
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	TimestampTz now = GetCurrentTimestamp();

	values[0] = TimestampTzGetDatum(now);
	values[1] = outbox_ttl_cutoff(table, now, &nulls[1]);
	values[2] = Int64GetDatum(max_rows);
	if (max_rows <= 0)
		nulls[2] = 'n';
	return outbox_move_rows(table, OUTBOX_PLAN_EXPIRE, values, nulls,
							OUTBOX_NUM_COUNTERS);
}

/*
 * outbox_next_due_at
 *
 * When the first row of table scheduled after "after" falls due, or 0.
 */
TimestampTz
outbox_next_due_at(OutboxTable *table, TimestampTz after)
{
	Datum		values[2];
	char		nulls[2] = {' ', 'n'};
	Datum		d;
	bool		isnull;

	values[0] = TimestampTzGetDatum(after);
	values[1] = (Datum) 0;
	outbox_spi_connect();
	outbox_execute(table, OUTBOX_PLAN_NEXT_DUE, values, nulls, SPI_OK_SELECT);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	SPI_finish();
	return isnull ? 0 : DatumGetTimestampTz(d);
}

/*
 * outbox_due_rows
 *
 * The scheduled rows of table that fell due after the position
 * (*after, *after_id) and by now, at most max of them, into ids; the
 * position moves past them.  Returns how many.
 */
int
outbox_due_rows(OutboxTable *table, TimestampTz *after, int64 *after_id,
				int64 *ids, int max)
{
	Datum		values[4];
	uint64		n;
	uint64		i;

	values[0] = TimestampTzGetDatum(*after);
	values[1] = Int64GetDatum(*after_id);
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[3] = Int64GetDatum(max);
	outbox_spi_connect();
	n = outbox_execute(table, OUTBOX_PLAN_DUE, values, NULL, SPI_OK_SELECT);
	for (i = 0; i < n; i++)
	{
		bool		isnull;
		HeapTuple	tup = SPI_tuptable->vals[i];

		ids[i] = DatumGetInt64(SPI_getbinval(tup, SPI_tuptable->tupdesc, 1, &isnull));
		*after = DatumGetTimestampTz(SPI_getbinval(tup, SPI_tuptable->tupdesc, 2, &isnull));
		*after_id = ids[i];
	}
	SPI_finish();
	return (int) n;
}

/*
 * outbox_purge_rows
 *
 * The C path of outbox_purge(), shared with the sweeper: delete acked rows
 * acked before cutoff, at most max_rows (all when <= 0), skipping locked
 * rows.  Returns the number deleted.
 */
uint64
outbox_purge_rows(OutboxTable *table, TimestampTz cutoff, int64 max_rows)
{
	return outbox_cutoff_rows(table, OUTBOX_PLAN_PURGE, SPI_OK_DELETE,
							  cutoff, max_rows);
}

/*
 * outbox_purge_range
 *
 * outbox_purge_rows for the ids [lower, upper) only (one partition's).
 */
uint64
outbox_purge_range(OutboxTable *table, TimestampTz cutoff, int64 lower,
				   int64 upper)
{
	Datum		values[4];
	char		nulls[4] = {' ', 'n', ' ', ' '};

	values[0] = TimestampTzGetDatum(cutoff);
	values[1] = (Datum) 0;
	values[2] = Int64GetDatum(lower);
	values[3] = Int64GetDatum(upper);
	return outbox_run(table, OUTBOX_PLAN_PURGE_RANGE, values, nulls, SPI_OK_DELETE);
}

/*
 * outbox_sync_backlog
 *
 * Count the open rows per state of every outbox of the database (from the
 * open-row indexes, O(open rows)): each outbox's gauges, and the sums as the
 * database's.  The counter slots of outboxes that are gone are given back.
 * Transactions committing meanwhile may leave the gauges off by their own
 * rows until the next count; the sweeper re-counts at every pass.
 */
void
outbox_sync_backlog(OutboxDatabase *db)
{
	int64		pending = 0;
	int64		delivered = 0;
	ListCell   *lc;

	if (db == NULL)
		return;
	outbox_spi_connect();
	foreach(lc, outbox_table_list())
	{
		Oid			relid = lfirst_oid(lc);
		OutboxTable *table;
		OutboxTableSlot *slot;
		bool		isnull;
		int64		p;
		int64		d;

		/*
		 * A table someone holds locked (ALTER TABLE) is not waited for: it
		 * keeps its gauges until the next count, and they go into the sum.
		 */
		if (!ConditionalLockRelationOid(relid, AccessShareLock))
		{
			slot = outbox_table_slot(MyDatabaseId, relid, false);
			if (slot != NULL)
			{
				pending += (int64) pg_atomic_read_u64(&slot->counters[OUTBOX_COUNT_BACKLOG_PENDING]);
				delivered += (int64) pg_atomic_read_u64(&slot->counters[OUTBOX_COUNT_BACKLOG_DELIVERED]);
			}
			continue;
		}
		table = outbox_find_table(relid);
		if (table == NULL)
			continue;			/* dropped meanwhile */
		outbox_execute(table, OUTBOX_PLAN_BACKLOG, NULL, NULL, SPI_OK_SELECT);
		p = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
										SPI_tuptable->tupdesc, 1, &isnull));
		d = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
										SPI_tuptable->tupdesc, 2, &isnull));
		pending += p;
		delivered += d;
		slot = outbox_table_slot(MyDatabaseId, outbox_table_relid(table), true);
		if (slot != NULL)
		{
			pg_atomic_write_u64(&slot->counters[OUTBOX_COUNT_BACKLOG_PENDING],
								(uint64) p);
			pg_atomic_write_u64(&slot->counters[OUTBOX_COUNT_BACKLOG_DELIVERED],
								(uint64) d);
			pg_atomic_write_u32(&slot->backlog_valid, 1);
		}
	}
	SPI_finish();

	/* give back the slots of this database's outboxes that are gone */
	if (outbox_shared != NULL)
	{
		int			i;

		for (i = 0; i < OUTBOX_MAX_TABLES; i++)
		{
			OutboxTableSlot *slot = &outbox_shared->tables[i];

			if (slot->dboid == MyDatabaseId &&
				outbox_find_table(slot->relid) == NULL)
				outbox_forget_table_slot(slot);
		}
	}
	pg_atomic_write_u64(&db->counters[OUTBOX_COUNT_BACKLOG_PENDING],
						(uint64) pending);
	pg_atomic_write_u64(&db->counters[OUTBOX_COUNT_BACKLOG_DELIVERED],
						(uint64) delivered);
	pg_atomic_write_u32(&db->backlog_valid, 1);
	pg_atomic_write_u64(&db->backlog_counted_at, (uint64) GetCurrentTimestamp());

	/*
	 * The count saw this transaction's own changes: they must not be added
	 * again when it commits.
	 */
	outbox_xact_forget_gauges();
}

/*
 * outbox_end_run
 *
 * An ordered claim keeps nothing of the i'th row's run from that row on
 * (the rows of one run are not contiguous when tenants share a recipient).
 */
static void
outbox_end_run(OutboxHeads *heads, int i)
{
	int			group = heads->group[i];
	int			k;

	for (k = i; k < heads->n; k++)
		if (heads->group[k] == group)
			heads->group[k] = -2;
}

/*
 * outbox_claim_ordered
 *
 * The claim of an ordered outbox (docs/ordered-delivery.md): up to
 * max_rows rows as runs from the heads of their (recipient, tenant_id)
 * groups (of one recipient and/or tenant when not NULL), chosen by
 * outbox_order_heads(), locked skipping locked rows, and of each run the
 * rows locked from its head on moved to delivered.  With probe, only
 * whether there is any such row: nothing is locked or changed.  The caller
 * is connected to SPI; unless probing, the claimed rows are left in
 * SPI_tuptable, as the claim statement returns them.  Returns the number
 * of rows (found, when probing).
 */
uint64
outbox_claim_ordered(OutboxTable *table, int64 max_rows, text *recipient,
					 text *tenant, TimestampTz now, bool probe)
{
	const OutboxPolicy *policy = outbox_table_policy(table);
	Relation	rel;
	const OutboxColumns *cols;
	OutboxHeads heads;
	TimestampTz ttl_cutoff = 0;
	char		ttl_null;
	Datum		ids;
	Datum	   *keep;
	int64	   *locked;
	int64	   *run;
	int			nlocked = 0;
	int			nkeep = 0;
	int			i;

	if (policy->has_ttl)
		ttl_cutoff = DatumGetTimestampTz(outbox_ttl_cutoff(table, now, &ttl_null));
	rel = table_open(outbox_table_relid(table), RowExclusiveLock);
	cols = outbox_columns(rel, "outbox_claim");
	outbox_order_heads(rel, cols, recipient,
					   tenant != NULL, tenant, now, policy->has_ttl, ttl_cutoff,
					   probe ? 1 : (int) Min(max_rows, (int64) (MaxAllocSize / sizeof(int64))),
					   &heads);
	if (probe)
	{
		table_close(rel, NoLock);
		return heads.n;
	}

	keep = palloc(sizeof(Datum) * Max(heads.n, 1));
	if (heads.n > 0)
	{
		int			ngroups = 0;
		bool	   *checked;

		for (i = 0; i < heads.n; i++)
			ngroups = Max(ngroups, heads.group[i] + 1);
		checked = palloc0(sizeof(bool) * ngroups);
		for (i = 0; i < heads.n; i++)
			keep[i] = Int64GetDatum(heads.ids[i]);
		ids = PointerGetDatum(construct_array(keep, heads.n, INT8OID,
											  sizeof(int64), FLOAT8PASSBYVAL,
											  TYPALIGN_DOUBLE));
		outbox_execute(table, OUTBOX_PLAN_ORDERED_LOCK, &ids, NULL,
					   SPI_OK_SELECT);
		locked = palloc(sizeof(int64) * Max(SPI_processed, 1));
		for (i = 0; i < (int) SPI_processed; i++)
		{
			bool		isnull;

			locked[nlocked++] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
															SPI_tuptable->tupdesc,
															1, &isnull));
		}

		/*
		 * Each run's rows come in id order; one that could not be locked
		 * (another claim has it, or it changed) ends its run: nothing after
		 * it may go out before it.  The rows after it stay locked until the
		 * transaction ends, unclaimed.
		 */
		for (i = 0; i < heads.n; i++)
		{
			int			lo;
			int			hi;
			bool		got = false;

			if (heads.group[i] < 0)
				continue;		/* its run ended before this row */
			for (lo = 0, hi = nlocked; lo < hi && !got;)
			{
				int			mid = (lo + hi) / 2;

				if (locked[mid] == heads.ids[i])
					got = true;
				else if (locked[mid] < heads.ids[i])
					lo = mid + 1;
				else
					hi = mid;
			}
			if (!got)
				outbox_end_run(&heads, i);
		}

		/*
		 * Each run as locked, read again: nothing of its group between its
		 * rows, or below its head, may have slipped past the first scan while
		 * it changed (outbox_heads.c).
		 */
		run = palloc(sizeof(int64) * heads.n);
		for (i = 0; i < heads.n; i++)
		{
			int			group = heads.group[i];
			int			nrun = 0;
			int			ok;
			int			k;

			if (group < 0 || checked[group])
				continue;
			checked[group] = true;
			for (k = i; k < heads.n; k++)
				if (heads.group[k] == group)
					run[nrun++] = heads.ids[k];
			ok = outbox_order_locked_run(rel, cols, heads.recipient[i],
										 heads.tenant[i], heads.low[i], run,
										 nrun, now, policy->has_ttl, ttl_cutoff);
			for (k = i; k < heads.n; k++)
			{
				if (heads.group[k] != group)
					continue;
				if (ok-- > 0)
					keep[nkeep++] = Int64GetDatum(heads.ids[k]);
				else
					heads.group[k] = -2;
			}
		}
	}
	table_close(rel, NoLock);
	ids = PointerGetDatum(construct_array(keep, nkeep, INT8OID, sizeof(int64),
										  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	outbox_execute(table, OUTBOX_PLAN_CLAIM_IDS, &ids, NULL, SPI_OK_SELECT);
	return SPI_processed;
}

/*
 * outbox_claim_locked
 *
 * A partitioned outbox's claim (see OUTBOX_CLAIM_LOCK_SQL): the rows locked
 * by the statement lock (a variant of OUTBOX_PLAN_CLAIM_LOCK, with the
 * claim's values), then moved to delivered by their ids.  Returns the rows
 * claimed, in SPI_tuptable as the one-statement claim leaves them.
 */
uint64
outbox_claim_locked(OutboxTable *table, OutboxPlanId lock, Datum *values,
					const char *nulls)
{
	Datum	   *locked;
	Datum		ids;
	int			n;
	int			i;

	n = (int) outbox_execute(table, lock, values, nulls, SPI_OK_SELECT);
	if (n == 0)
		return 0;				/* nothing claimable: SPI_processed is 0 */
	locked = palloc(sizeof(Datum) * n);
	for (i = 0; i < n; i++)
	{
		bool		isnull;

		locked[i] = SPI_getbinval(SPI_tuptable->vals[i],
								  SPI_tuptable->tupdesc, 1, &isnull);
	}
	ids = PointerGetDatum(construct_array(locked, n, INT8OID, sizeof(int64),
										  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	outbox_execute(table, OUTBOX_PLAN_CLAIM_IDS, &ids, NULL, SPI_OK_SELECT);
	return SPI_processed;
}
