/*-------------------------------------------------------------------------
 *
 * outbox_plans.c
 *		The statements run on outbox tables, and the row operations shared
 *		by the SQL functions and the worker.
 *
 * Every statement that touches several rows either skips locked rows
 * (claim, reclaim, purge) or locks its rows in ascending id order before
 * changing them (ack, release, resync, reassign), so no two of them can
 * deadlock each other.  Statements are prepared once per table and user
 * (outbox_table_plans) and kept.
 *
 * A table whose timestamps are "timestamp" (without time zone: the seed
 * system's) holds UTC wall-clock times: the statements' timestamp
 * parameters are passed to it as "timestamp", with the same value, which
 * is the UTC wall-clock time of the timestamptz.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_plans.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/guc.h"

#include "delivery_outbox.h"
#include "outbox_plans.h"
#include "outbox_shmem.h"
#include "outbox_table.h"
#include "outbox_xact.h"

static SPIPlanPtr outbox_plan(OutboxTable *table, OutboxPlanId id);
static uint64 outbox_cutoff_rows(OutboxTable *table, OutboxPlanId id,
								 int expected, TimestampTz cutoff,
								 int64 max_rows);

StaticAssertDecl(OUTBOX_NUM_PLANS <= OUTBOX_NUM_PLANS_MAX,
				 "OUTBOX_NUM_PLANS_MAX is too small");

/*
 * The statements, one entry per OutboxPlanId: the text, in which %1$s is the
 * table's qualified name and %2$s the expression that makes its row o one of
 * the default outbox's type, and the parameter types.  Every operator and
 * function is qualified, the state literals stay literal (so the partial
 * indexes' predicates are proven from the query text, whatever the
 * parameter values), and each multi-row change either skips locked rows or
 * first locks its rows ORDER BY id.
 *
 * Where rows are found by id (acks, release, the UPDATE half of every
 * lock-then-update), the state is re-checked in function form,
 * pg_catalog.texteq(): the same test, but one no partial index predicate can
 * be proven from, so the planner cannot trade the primary key lookup for a
 * scan of a whole partial index, with or without statistics.
 */
typedef struct OutboxPlanDef
{
	const char *sql;
	Oid			argtypes[OUTBOX_PLAN_MAX_ARGS];	/* InvalidOid-terminated */
} OutboxPlanDef;

#define OUTBOX_OPEN_STATES \
	"ANY ('{pending,delivered}'::pg_catalog.text[])"

/* the claim: pending rows in id order, optionally one recipient's/tenant's */
#define OUTBOX_CLAIM_SQL(filter) \
	"WITH c AS (" \
	"SELECT id FROM %1$s" \
	" WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'" filter \
	" ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)," \
	" u AS (" \
	"UPDATE %1$s o SET delivery_state = 'delivered' FROM c" \
	" WHERE o.id OPERATOR(pg_catalog.=) c.id" \
	" AND pg_catalog.texteq(o.delivery_state, 'pending')" \
	" RETURNING (%2$s) AS o)" \
	" SELECT u.o FROM u ORDER BY (u.o).id"
#define OUTBOX_BY_RECIPIENT	" AND recipient OPERATOR(pg_catalog.=) $2"
#define OUTBOX_BY_TENANT	" AND tenant_id OPERATOR(pg_catalog.=) $3"

/* the acks' lock: open rows by id, in id order */
#define OUTBOX_ACK_LOCK_SQL(filter) \
	"SELECT id, delivery_state OPERATOR(pg_catalog.=) 'pending'" \
	" FROM %1$s" \
	" WHERE id OPERATOR(pg_catalog.=) ANY ($1)" \
	" AND NOT pg_catalog.texteq(delivery_state, 'acked')" filter \
	" ORDER BY id FOR UPDATE"

/* the reconnect resync: a recipient's delivered rows back to pending */
#define OUTBOX_RESYNC_SQL(tenant) \
	"WITH l AS (" \
	"SELECT id FROM %1$s" \
	" WHERE recipient OPERATOR(pg_catalog.=) $1" \
	" AND delivery_state OPERATOR(pg_catalog.=) 'delivered'" \
	" AND " tenant \
	" ORDER BY id FOR UPDATE)" \
	" UPDATE %1$s o SET delivery_state = 'pending' FROM l" \
	" WHERE o.id OPERATOR(pg_catalog.=) l.id" \
	" AND pg_catalog.texteq(o.delivery_state, 'delivered')"

/* the replay: a recipient's open rows after an id */
#define OUTBOX_REPLAY_SQL(filter) \
	"SELECT %2$s FROM %1$s o" \
	" WHERE recipient OPERATOR(pg_catalog.=) $1" \
	" AND delivery_state OPERATOR(pg_catalog.=) " OUTBOX_OPEN_STATES \
	" AND id OPERATOR(pg_catalog.>) $2" filter \
	" ORDER BY id LIMIT $3"

/* outbox_wait's probe: is there a pending row (of a recipient)? */
#define OUTBOX_EXISTS_SQL(filter) \
	"SELECT 1 FROM %1$s" \
	" WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'" filter \
	" LIMIT 1"

#define OUTBOX_CLAIM_ARGS	{INT8OID, TEXTOID, TEXTOID}
#define OUTBOX_REPLAY_ARGS	{TEXTOID, INT8OID, INT8OID, TEXTOID}

static const OutboxPlanDef outbox_plan_defs[OUTBOX_NUM_PLANS] = {
	[OUTBOX_PLAN_ENQUEUE] = {
		"INSERT INTO %1$s (recipient, kind, payload, tenant_id)"
		" VALUES ($1, $2, $3, $4) RETURNING id",
		{TEXTOID, TEXTOID, BYTEAOID, TEXTOID}
	},
	[OUTBOX_PLAN_CLAIM] = {OUTBOX_CLAIM_SQL(""), OUTBOX_CLAIM_ARGS},
	[OUTBOX_PLAN_CLAIM_R] = {OUTBOX_CLAIM_SQL(OUTBOX_BY_RECIPIENT), OUTBOX_CLAIM_ARGS},
	[OUTBOX_PLAN_CLAIM_T] = {OUTBOX_CLAIM_SQL(OUTBOX_BY_TENANT), OUTBOX_CLAIM_ARGS},
	[OUTBOX_PLAN_CLAIM_RT] = {
		OUTBOX_CLAIM_SQL(OUTBOX_BY_RECIPIENT OUTBOX_BY_TENANT),
		OUTBOX_CLAIM_ARGS
	},
	[OUTBOX_PLAN_ACK_LOCK] = {OUTBOX_ACK_LOCK_SQL(""), {INT8ARRAYOID, TEXTOID}},
	[OUTBOX_PLAN_ACK_LOCK_R] = {
		OUTBOX_ACK_LOCK_SQL(OUTBOX_BY_RECIPIENT),
		{INT8ARRAYOID, TEXTOID}
	},
	[OUTBOX_PLAN_ACK_DELIVER] = {
		"UPDATE %1$s SET delivery_state = 'delivered'"
		" WHERE id OPERATOR(pg_catalog.=) ANY ($1)"
		" AND pg_catalog.texteq(delivery_state, 'pending')",
		{INT8ARRAYOID}
	},
	[OUTBOX_PLAN_ACK_FINISH] = {
		"UPDATE %1$s SET delivery_state = 'acked'"
		" WHERE id OPERATOR(pg_catalog.=) ANY ($1)"
		" AND pg_catalog.texteq(delivery_state, 'delivered')",
		{INT8ARRAYOID}
	},
	[OUTBOX_PLAN_RELEASE] = {
		"WITH l AS ("
		"SELECT id FROM %1$s"
		" WHERE id OPERATOR(pg_catalog.=) ANY ($1)"
		" AND pg_catalog.texteq(delivery_state, 'delivered')"
		" ORDER BY id FOR UPDATE)"
		" UPDATE %1$s o SET delivery_state = 'pending' FROM l"
		" WHERE o.id OPERATOR(pg_catalog.=) l.id"
		" AND pg_catalog.texteq(o.delivery_state, 'delivered')",
		{INT8ARRAYOID}
	},
	[OUTBOX_PLAN_RECLAIM] = {
		"WITH c AS ("
		"SELECT id FROM %1$s"
		" WHERE delivery_state OPERATOR(pg_catalog.=) 'delivered'"
		" AND delivered_at OPERATOR(pg_catalog.<) $1"
		" ORDER BY delivered_at LIMIT $2 FOR UPDATE SKIP LOCKED)"
		" UPDATE %1$s o SET delivery_state = 'pending' FROM c"
		" WHERE o.id OPERATOR(pg_catalog.=) c.id"
		" AND pg_catalog.texteq(o.delivery_state, 'delivered')",
		{TIMESTAMPTZOID, INT8OID}
	},
	[OUTBOX_PLAN_RESYNC] = {
		OUTBOX_RESYNC_SQL("tenant_id OPERATOR(pg_catalog.=) $2"),
		{TEXTOID, TEXTOID}
	},
	[OUTBOX_PLAN_RESYNC_NULL_TENANT] = {
		OUTBOX_RESYNC_SQL("tenant_id IS NULL"),
		{TEXTOID, TEXTOID}
	},
	[OUTBOX_PLAN_REASSIGN] = {
		"WITH l AS ("
		"SELECT id FROM %1$s"
		" WHERE recipient OPERATOR(pg_catalog.=) $1"
		" AND delivery_state OPERATOR(pg_catalog.=) " OUTBOX_OPEN_STATES
		" ORDER BY id FOR UPDATE)"
		" UPDATE %1$s o SET recipient = $2, delivery_state = 'pending'"
		" FROM l WHERE o.id OPERATOR(pg_catalog.=) l.id"
		" AND NOT pg_catalog.texteq(o.delivery_state, 'acked')",
		{TEXTOID, TEXTOID}
	},
	[OUTBOX_PLAN_REPLAY] = {OUTBOX_REPLAY_SQL(""), OUTBOX_REPLAY_ARGS},
	[OUTBOX_PLAN_REPLAY_T] = {
		OUTBOX_REPLAY_SQL(" AND tenant_id OPERATOR(pg_catalog.=) $4"),
		OUTBOX_REPLAY_ARGS
	},
	[OUTBOX_PLAN_PURGE] = {
		"WITH d AS ("
		"SELECT id FROM %1$s"
		" WHERE delivery_state OPERATOR(pg_catalog.=) 'acked'"
		" AND acked_at OPERATOR(pg_catalog.<) $1"
		" ORDER BY acked_at LIMIT $2 FOR UPDATE SKIP LOCKED)"
		" DELETE FROM %1$s o USING d"
		" WHERE o.id OPERATOR(pg_catalog.=) d.id",
		{TIMESTAMPTZOID, INT8OID}
	},
	[OUTBOX_PLAN_STATS] = {
		"SELECT"
		" pg_catalog.count(*) FILTER (WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'),"
		" pg_catalog.count(*) FILTER (WHERE delivery_state OPERATOR(pg_catalog.=) 'delivered'),"
		" pg_catalog.count(*) FILTER (WHERE delivery_state OPERATOR(pg_catalog.=) 'acked'),"
		" $1 OPERATOR(pg_catalog.-) pg_catalog.min(created_at)"
		" FILTER (WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'),"
		" $1 OPERATOR(pg_catalog.-) pg_catalog.min(delivered_at)"
		" FILTER (WHERE delivery_state OPERATOR(pg_catalog.=) 'delivered'),"
		" pg_catalog.count(DISTINCT recipient)"
		" FILTER (WHERE delivery_state OPERATOR(pg_catalog.=) " OUTBOX_OPEN_STATES ")"
		" FROM %1$s",
		{TIMESTAMPTZOID}
	},
	[OUTBOX_PLAN_ENQUEUE_BATCH] = {
		"INSERT INTO %1$s (recipient, kind, payload, tenant_id)"
		" SELECT r, k, p, t"
		" FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2),"
		" pg_catalog.unnest($3), pg_catalog.unnest($4))"
		" WITH ORDINALITY AS u(r, k, p, t, n)"
		" ORDER BY n RETURNING id",
		{TEXTARRAYOID, TEXTARRAYOID, BYTEAARRAYOID, TEXTARRAYOID}
	},
	[OUTBOX_PLAN_EXISTS] = {OUTBOX_EXISTS_SQL(""), {TEXTOID}},
	[OUTBOX_PLAN_EXISTS_R] = {
		OUTBOX_EXISTS_SQL(" AND recipient OPERATOR(pg_catalog.=) $1"),
		{TEXTOID}
	},
	[OUTBOX_PLAN_BACKLOG] = {
		"SELECT"
		" pg_catalog.count(*) FILTER (WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'),"
		" pg_catalog.count(*) FILTER (WHERE delivery_state OPERATOR(pg_catalog.=) 'delivered')"
		" FROM %1$s"
		" WHERE delivery_state OPERATOR(pg_catalog.=) " OUTBOX_OPEN_STATES,
		{InvalidOid}
	},
};

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
	char	   *sql;
	int			save_nestlevel;
	SPIPlanPtr	plan;

	if (plans[id] != NULL)
		return plans[id];

	if (def->sql == NULL)
		elog(ERROR, "unrecognized outbox statement %d", (int) id);
	for (nargs = 0;
		 nargs < OUTBOX_PLAN_MAX_ARGS && OidIsValid(def->argtypes[nargs]);
		 nargs++)
		argtypes[nargs] = def->argtypes[nargs] == TIMESTAMPTZOID &&
			outbox_table_utc(table) ? TIMESTAMPOID : def->argtypes[nargs];
	sql = psprintf(def->sql, outbox_table_name(table),
				   outbox_table_row_expr(table));

	save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	plan = SPI_prepare(sql, nargs, argtypes);
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
 * Run one kept statement; the caller is connected to SPI.  Anything but the
 * expected SPI result is a can't-happen error.  Returns SPI_processed.
 */
uint64
outbox_execute(OutboxTable *table, OutboxPlanId id, Datum *values,
			   const char *nulls, int expected)
{
	SPIPlanPtr	plan = outbox_plan(table, id);
	int			rc;

	rc = SPI_execute_plan(plan, values, nulls, false, 0);
	if (rc != expected)
		elog(ERROR, "outbox statement %d returned %s, expected %s",
			 (int) id, SPI_result_code_string(rc),
			 SPI_result_code_string(expected));
	return SPI_processed;
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
 * outbox_reclaim_rows
 *
 * The C path of outbox_reclaim(), shared with the sweeper: rows delivered
 * before cutoff back to pending, at most max_rows (all when <= 0), skipping
 * locked rows.  Returns the number reclaimed.
 */
uint64
outbox_reclaim_rows(OutboxTable *table, TimestampTz cutoff, int64 max_rows)
{
	return outbox_cutoff_rows(table, OUTBOX_PLAN_RECLAIM, SPI_OK_UPDATE,
							  cutoff, max_rows);
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
