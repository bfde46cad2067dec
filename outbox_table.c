/*-------------------------------------------------------------------------
 *
 * outbox_table.c
 *		Finding the outbox table, its prepared statements, and the row
 *		operations shared by the SQL functions and the worker.
 *
 * The C code never finds its table through search_path: the extension's
 * table is found by OID (the plain table that is a member of the extension
 * in pg_depend), its schema-qualified name is quoted into every statement,
 * and every operator and function in those statements is qualified.
 *
 * Every statement that touches several rows either skips locked rows
 * (claim, reclaim, purge) or locks its rows in ascending id order before
 * changing them (ack, release, resync, reassign), so no two of them can
 * deadlock each other.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_table.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/dependency.h"
#include "catalog/indexing.h"
#include "catalog/pg_class.h"
#include "catalog/pg_depend.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "delivery_outbox.h"
#include "outbox_shmem.h"
#include "outbox_table.h"
#include "outbox_xact.h"

/* The name of the extension's table. */
#define OUTBOX_TABLE_NAME		"delivery_outbox"

static Oid	outbox_member_table(Oid ext_oid);
static Oid	outbox_extension_table(void);
static void outbox_reset_cache(void);
static SPIPlanPtr outbox_plan(OutboxPlanId id);
static uint64 outbox_cutoff_rows(OutboxPlanId id, int expected,
								 TimestampTz cutoff, int64 max_rows);

/* Where the extension's table is, resolved once per backend. */
static Oid	outbox_ext_oid = InvalidOid;
static Oid	outbox_rel_oid = InvalidOid;
static char *outbox_qualified_table = NULL;
static bool outbox_cache_stale = false;
static MemoryContext OutboxCacheContext = NULL;

/*
 * The kept statements, one set per user they were planned as (see
 * outbox_plan), in OutboxCacheContext; the set last used.
 */
typedef struct OutboxPlanSet
{
	Oid			userid;
	SPIPlanPtr	plans[OUTBOX_NUM_PLANS];
} OutboxPlanSet;

static List *outbox_plan_sets = NIL;
static OutboxPlanSet *outbox_plan_set = NULL;

/*
 * The statements, one entry per OutboxPlanId: the text, in which %1$s is the
 * table's qualified name, and the parameter types.  Every operator and
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
	" RETURNING o)" \
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
	"SELECT o FROM %1$s o" \
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
 * outbox_table_relcache_callback
 *
 * Any invalidation of the outbox table (or of everything) makes us re-check,
 * at next use, that the cached OIDs still name the extension's table.
 * Nothing is freed here: this can run at almost any point.
 */
void
outbox_table_relcache_callback(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == outbox_rel_oid)
		outbox_cache_stale = true;
}

/*
 * outbox_table_syscache_callback
 *
 * A schema was renamed (or otherwise changed): re-check the table's
 * qualified name at next use.
 */
void
outbox_table_syscache_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	outbox_cache_stale = true;
}

/*
 * outbox_reset_cache
 *
 * Forget the table's location and the statements built on it.
 */
static void
outbox_reset_cache(void)
{
	ListCell   *lc;
	int			i;

	foreach(lc, outbox_plan_sets)
	{
		OutboxPlanSet *set = lfirst(lc);

		for (i = 0; i < OUTBOX_NUM_PLANS; i++)
		{
			if (set->plans[i] != NULL)
				SPI_freeplan(set->plans[i]);
		}
	}
	outbox_plan_sets = NIL;
	outbox_plan_set = NULL;
	if (OutboxCacheContext != NULL)
		MemoryContextReset(OutboxCacheContext);
	outbox_qualified_table = NULL;
	outbox_ext_oid = InvalidOid;
	outbox_rel_oid = InvalidOid;
	outbox_cache_stale = false;
}

/*
 * outbox_table
 *
 * The schema-qualified, quoted name of the extension's table.  The table is
 * found by OID, as the plain table that is a member of the extension
 * (pg_depend), and its schema and name are read from the catalogs; nothing
 * goes through search_path.  The name is rebuilt (and the statements built on
 * it dropped) when the table, its schema or the extension changes, so a
 * renamed schema or a same-named table elsewhere cannot redirect us.  Raises
 * 42704 when the extension is not installed in this database.
 */
const char *
outbox_table(void)
{
	if (OidIsValid(outbox_rel_oid) && outbox_cache_stale)
	{
		char	   *relname = get_rel_name(outbox_rel_oid);
		char	   *nspname = get_namespace_name(get_rel_namespace(outbox_rel_oid));
		char	   *current = NULL;

		if (relname != NULL && nspname != NULL &&
			get_extension_oid(OUTBOX_EXTENSION_NAME, true) == outbox_ext_oid)
			current = quote_qualified_identifier(nspname, relname);
		if (current == NULL || strcmp(current, outbox_qualified_table) != 0)
			outbox_reset_cache();
		outbox_cache_stale = false;
	}

	if (!OidIsValid(outbox_rel_oid))
	{
		Oid			ext_oid;
		Oid			rel_oid;
		char	   *relname;
		char	   *nspname;

		ext_oid = get_extension_oid(OUTBOX_EXTENSION_NAME, true);
		if (!OidIsValid(ext_oid))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("extension \"%s\" is not installed in this database",
							OUTBOX_EXTENSION_NAME),
					 errhint("Run CREATE EXTENSION %s.", OUTBOX_EXTENSION_NAME)));

		rel_oid = outbox_member_table(ext_oid);
		relname = OidIsValid(rel_oid) ? get_rel_name(rel_oid) : NULL;
		nspname = OidIsValid(rel_oid) ?
			get_namespace_name(get_rel_namespace(rel_oid)) : NULL;
		if (relname == NULL || nspname == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_TABLE),
					 errmsg("table \"%s\" of extension \"%s\" does not exist",
							OUTBOX_TABLE_NAME, OUTBOX_EXTENSION_NAME),
					 errhint("Recreate the extension with DROP EXTENSION and CREATE EXTENSION.")));

		if (OutboxCacheContext == NULL)
			OutboxCacheContext = AllocSetContextCreate(TopMemoryContext,
													   "delivery_outbox cache",
													   ALLOCSET_SMALL_SIZES);
		outbox_qualified_table =
			MemoryContextStrdup(OutboxCacheContext,
								quote_qualified_identifier(nspname, relname));
		outbox_ext_oid = ext_oid;
		outbox_rel_oid = rel_oid;
		outbox_cache_stale = false;
	}

	return outbox_qualified_table;
}

/*
 * outbox_table_oid
 *
 * The OID of the extension's table, found as outbox_table() finds it.
 */
Oid
outbox_table_oid(void)
{
	(void) outbox_table();
	return outbox_rel_oid;
}

/*
 * outbox_member_table
 *
 * The OID of the extension's table: the plain table recorded in pg_depend as
 * a member of the extension (the one named delivery_outbox, should more
 * tables have been added to it), or InvalidOid.
 */
static Oid
outbox_member_table(Oid ext_oid)
{
	Relation	deprel;
	SysScanDesc scan;
	ScanKeyData key[3];
	HeapTuple	tup;
	Oid			result = InvalidOid;

	deprel = table_open(DependRelationId, AccessShareLock);
	ScanKeyInit(&key[0], Anum_pg_depend_refclassid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(ExtensionRelationId));
	ScanKeyInit(&key[1], Anum_pg_depend_refobjid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(ext_oid));
	ScanKeyInit(&key[2], Anum_pg_depend_refobjsubid, BTEqualStrategyNumber,
				F_INT4EQ, Int32GetDatum(0));
	scan = systable_beginscan(deprel, DependReferenceIndexId, true,
							  NULL, 3, key);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Form_pg_depend dep = (Form_pg_depend) GETSTRUCT(tup);
		char	   *relname;

		if (dep->classid != RelationRelationId ||
			dep->deptype != DEPENDENCY_EXTENSION ||
			get_rel_relkind(dep->objid) != RELKIND_RELATION)
			continue;
		relname = get_rel_name(dep->objid);
		if (!OidIsValid(result) ||
			(relname != NULL && strcmp(relname, OUTBOX_TABLE_NAME) == 0))
			result = dep->objid;
	}
	systable_endscan(scan);
	table_close(deprel, AccessShareLock);

	return result;
}

/*
 * outbox_installed
 *
 * Whether the extension exists in the current database (and its table can
 * be found).  Needs a transaction.
 */
bool
outbox_installed(void)
{
	return OidIsValid(outbox_extension_table());
}

/*
 * outbox_extension_table
 *
 * The OID of the extension's table in the current database, or InvalidOid
 * when the extension is not installed.  Needs a transaction.
 */
static Oid
outbox_extension_table(void)
{
	Oid			ext_oid = get_extension_oid(OUTBOX_EXTENSION_NAME, true);

	return OidIsValid(ext_oid) ? outbox_member_table(ext_oid) : InvalidOid;
}

/*
 * outbox_lock_table
 *
 * For the sweeper: lock the extension's table in RowExclusiveLock mode for
 * the rest of the transaction, so that a concurrent DROP EXTENSION waits for
 * the sweep instead of pulling the table from under it.  Returns false when
 * the extension is not installed, or was dropped while we waited for the
 * lock.  Needs a transaction.
 */
bool
outbox_lock_table(void)
{
	Oid			relid = outbox_extension_table();

	if (!OidIsValid(relid))
		return false;

	LockRelationOid(relid, RowExclusiveLock);

	/* locking processed invalidations: is it still the extension's table? */
	if (outbox_extension_table() == relid)
		return true;

	UnlockRelationOid(relid, RowExclusiveLock);
	return false;
}

/*
 * outbox_plan
 *
 * The prepared, kept plan of one statement.  It is prepared once per backend
 * and user (and again only after the extension was dropped and recreated):
 * the planner inlines a SQL function (a column default, say) only for a user
 * who may execute it, so a plan made for one user is not run for another.
 * The functions are SECURITY DEFINER, so there is normally one user.  Safety
 * from a caller's search_path comes from every name in the statements being
 * qualified, so the plan cache may re-parse them under any path; the path is
 * also forced to pg_catalog for the first parse, as a second line.
 */
static SPIPlanPtr
outbox_plan(OutboxPlanId id)
{
	const OutboxPlanDef *def = &outbox_plan_defs[id];
	const char *table = outbox_table();	/* may drop stale plans */
	Oid			userid = GetUserId();
	int			nargs;
	char	   *sql;
	int			save_nestlevel;
	SPIPlanPtr	plan;

	if (outbox_plan_set == NULL || outbox_plan_set->userid != userid)
	{
		ListCell   *lc;

		outbox_plan_set = NULL;
		foreach(lc, outbox_plan_sets)
		{
			if (((OutboxPlanSet *) lfirst(lc))->userid == userid)
				outbox_plan_set = lfirst(lc);
		}
		if (outbox_plan_set == NULL)
		{
			MemoryContext old = MemoryContextSwitchTo(OutboxCacheContext);

			outbox_plan_set = palloc0(sizeof(OutboxPlanSet));
			outbox_plan_set->userid = userid;
			outbox_plan_sets = lappend(outbox_plan_sets, outbox_plan_set);
			MemoryContextSwitchTo(old);
		}
	}
	if (outbox_plan_set->plans[id] != NULL)
		return outbox_plan_set->plans[id];

	if (def->sql == NULL)
		elog(ERROR, "unrecognized outbox statement %d", (int) id);
	for (nargs = 0;
		 nargs < OUTBOX_PLAN_MAX_ARGS && OidIsValid(def->argtypes[nargs]);
		 nargs++)
		;
	sql = psprintf(def->sql, table);

	save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	plan = SPI_prepare(sql, nargs, (Oid *) def->argtypes);
	AtEOXact_GUC(true, save_nestlevel);

	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s",
			 sql, SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	pfree(sql);

	outbox_plan_set->plans[id] = plan;
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
outbox_execute(OutboxPlanId id, Datum *values, const char *nulls, int expected)
{
	SPIPlanPtr	plan = outbox_plan(id);
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
outbox_run(OutboxPlanId id, Datum *values, const char *nulls, int expected)
{
	uint64		count;

	outbox_spi_connect();
	count = outbox_execute(id, values, nulls, expected);
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
outbox_cutoff_rows(OutboxPlanId id, int expected, TimestampTz cutoff,
				   int64 max_rows)
{
	Datum		values[2];
	char		nulls[2] = {' ', ' '};

	values[0] = TimestampTzGetDatum(cutoff);
	values[1] = Int64GetDatum(max_rows);
	if (max_rows <= 0)
		nulls[1] = 'n';
	return outbox_run(id, values, nulls, expected);
}

/*
 * outbox_reclaim_rows
 *
 * The C path of outbox_reclaim(), shared with the sweeper: rows delivered
 * before cutoff back to pending, at most max_rows (all when <= 0), skipping
 * locked rows.  Returns the number reclaimed.
 */
uint64
outbox_reclaim_rows(TimestampTz cutoff, int64 max_rows)
{
	return outbox_cutoff_rows(OUTBOX_PLAN_RECLAIM, SPI_OK_UPDATE, cutoff,
							  max_rows);
}

/*
 * outbox_purge_rows
 *
 * The C path of outbox_purge(), shared with the sweeper: delete acked rows
 * acked before cutoff, at most max_rows (all when <= 0), skipping locked
 * rows.  Returns the number deleted.
 */
uint64
outbox_purge_rows(TimestampTz cutoff, int64 max_rows)
{
	return outbox_cutoff_rows(OUTBOX_PLAN_PURGE, SPI_OK_DELETE, cutoff,
							  max_rows);
}

/*
 * outbox_sync_backlog
 *
 * Count the open rows per state (from the open-row index, O(open rows)) and
 * make the counts the backlog gauges.  Transactions committing meanwhile may
 * leave the gauges off by their own rows until the next count; the sweeper
 * re-counts at every pass.
 */
void
outbox_sync_backlog(OutboxDatabase *db)
{
	bool		isnull;

	if (db == NULL)
		return;
	outbox_spi_connect();
	outbox_execute(OUTBOX_PLAN_BACKLOG, NULL, NULL, SPI_OK_SELECT);
	pg_atomic_write_u64(&db->counters[OUTBOX_COUNT_BACKLOG_PENDING],
						(uint64) DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
															 SPI_tuptable->tupdesc,
															 1, &isnull)));
	pg_atomic_write_u64(&db->counters[OUTBOX_COUNT_BACKLOG_DELIVERED],
						(uint64) DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
															 SPI_tuptable->tupdesc,
															 2, &isnull)));
	pg_atomic_write_u32(&db->backlog_valid, 1);
	pg_atomic_write_u64(&db->backlog_counted_at, (uint64) GetCurrentTimestamp());
	SPI_finish();

	/*
	 * The count saw this transaction's own changes: they must not be added
	 * again when it commits.
	 */
	outbox_xact_forget_gauges();
}
