/*-------------------------------------------------------------------------
 *
 * outbox_table.c
 *		Finding outbox tables, by OID, and what the statements on them need.
 *
 * The C code never finds a table through search_path: the extension's own
 * table (the default outbox) is the plain table recorded in pg_depend as a
 * member of the extension, and every other outbox is named by OID.  Each
 * table's schema-qualified, quoted name is built from the catalogs and
 * quoted into the statements prepared on it (outbox_statements.c), whose
 * operators and functions are all qualified too.
 *
 * Each table this backend has used has an OutboxTable entry, which keeps
 * that name, the expression turning one of its rows into the default
 * outbox's row type (the type the claim and replay functions return), and
 * the statements prepared on it, per user.  An invalidation of the table,
 * or of any schema, marks the entry for a re-check at next use; a changed
 * name or row shape drops its statements.
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
#include "access/relation.h"
#include "access/table.h"
#include "catalog/dependency.h"
#include "catalog/indexing.h"
#include "catalog/pg_attribute.h"
#include "catalog/pg_class.h"
#include "catalog/pg_depend.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "delivery_outbox.h"
#include "outbox_owner.h"
#include "outbox_registry.h"
#include "outbox_table.h"

/* The names of the extension's table and of its registry of outboxes. */
#define OUTBOX_TABLE_NAME		"delivery_outbox"
#define OUTBOX_DEAD_NAME		"delivery_outbox_dead"

/* The statements of one table, prepared for one user. */
typedef struct OutboxPlanSet
{
	Oid			userid;
	SPIPlanPtr	plans[OUTBOX_NUM_PLANS_MAX];
} OutboxPlanSet;

struct OutboxTable
{
	Oid			relid;			/* hash key */
	bool		valid;			/* false: re-check at next use */
	MemoryContext cxt;			/* the strings and plan sets below */
	char	   *name;			/* quoted "schema"."table" */
	char	   *row_expr;		/* its row o as the default outbox's columns */
	Oid			owner;			/* whose rights its code runs with, or
								 * InvalidOid: the default outbox's, the
								 * caller's (see outbox_owner.c) */
	bool		utc;			/* timestamps are "timestamp", read as UTC */
	bool		has_policy;		/* has the delivery policy's columns (1.2) */
	bool		registered;		/* made or attached: in the registry */
	bool		partitioned;	/* a partitioned table */
	bool		distributed;	/* hash-distributed by Citus: rows in shards */
	char	   *channel;		/* its own channel, or NULL: the GUC's */
	OutboxPolicy policy;		/* its delivery policy */
	Oid			dead_relid;		/* its dead-letter table, or InvalidOid */
	char	   *dead_name;		/* quoted "schema"."table", or NULL */
	List	   *plan_sets;		/* OutboxPlanSet, one per user */
	OutboxPlanSet *plan_set;	/* the one last used */
	uint64		last_used;		/* outbox_plans_clock at its last use */
};

static OutboxTable *outbox_table_entry(Oid relid);
static bool outbox_table_check(OutboxTable *table);
static void outbox_table_forget(OutboxTable *table);
static void outbox_table_clear(OutboxTable *table);
static char *outbox_row_expr(Oid relid, Oid defrelid, bool *utc);
static Oid	outbox_member_table(Oid ext_oid);
static Oid	outbox_extension_table(void);
static void outbox_retire_plan(SPIPlanPtr plan);
static void outbox_table_free_plans(OutboxTable *table);
static void outbox_table_evict(OutboxTable *keep);

/* An outbox is a table, or a table partitioned by id (docs/partitions.md). */
#define outbox_relkind_ok(relkind) \
	((relkind) == RELKIND_RELATION || (relkind) == RELKIND_PARTITIONED_TABLE)

/* The tables this backend knows, by OID (in TopMemoryContext). */
static HTAB *outbox_tables = NULL;

/* The extension and its own table, found once per backend. */
static Oid	outbox_ext_oid = InvalidOid;
static Oid	outbox_default_relid = InvalidOid;
static bool outbox_default_stale = false;

/*
 * Statements running now (outbox_table_plans_pin), and the plans of
 * entries cleared meanwhile: a table renamed by a trigger of a statement
 * that runs one of its plans must not have that plan freed under it.
 */
static int	outbox_plans_pinned = 0;
static List *outbox_retired_plans = NIL;

/*
 * The entries holding prepared statements, and a clock of their uses: past
 * delivery_outbox.max_cached_outboxes of them, the least recently used
 * gives its statements up (outbox_table_evict).
 */
static int	outbox_tables_with_plans = 0;
static uint64 outbox_plans_clock = 0;


/*
 * outbox_table_relcache_callback
 *
 * An invalidation of a table (or of every relation) marks its entry for a
 * re-check at next use, and the default outbox's for a look at whether the
 * extension is still the one it belonged to.  Nothing is freed here: this
 * can run at almost any point.
 */
void
outbox_table_relcache_callback(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == outbox_default_relid)
		outbox_default_stale = true;
	if (outbox_tables == NULL)
		return;
	if (OidIsValid(relid))
	{
		OutboxTable *table = hash_search(outbox_tables, &relid, HASH_FIND, NULL);
		HASH_SEQ_STATUS status;

		if (table != NULL)
			table->valid = false;
		/* a dead-letter table renamed or dropped: its outbox's statements */
		hash_seq_init(&status, outbox_tables);
		while ((table = hash_seq_search(&status)) != NULL)
		{
			if (table->dead_relid == relid)
				table->valid = false;
		}
	}
	else
		outbox_table_syscache_callback(arg, 0, 0);
}

/*
 * outbox_table_syscache_callback
 *
 * A schema was renamed (or otherwise changed): re-check every table's
 * qualified name at next use.
 */
void
outbox_table_syscache_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	HASH_SEQ_STATUS status;
	OutboxTable *table;

	outbox_default_stale = true;
	if (outbox_tables == NULL)
		return;
	hash_seq_init(&status, outbox_tables);
	while ((table = hash_seq_search(&status)) != NULL)
		table->valid = false;
}

/*
 * outbox_default_table
 *
 * The extension's own table.  Raises 42704 when the extension is not
 * installed in this database, 42P01 when its table is gone.  The table is
 * found again after the extension was dropped and recreated.
 */
OutboxTable *
outbox_default_table(void)
{
	if (OidIsValid(outbox_default_relid) && outbox_default_stale)
	{
		outbox_default_stale = false;
		if (get_extension_oid(OUTBOX_EXTENSION_NAME, true) != outbox_ext_oid ||
			get_rel_name(outbox_default_relid) == NULL)
		{
			OutboxTable *table = NULL;

			if (outbox_tables != NULL)
				table = hash_search(outbox_tables, &outbox_default_relid,
									HASH_FIND, NULL);
			if (table != NULL)
				outbox_table_forget(table);
			outbox_default_relid = InvalidOid;
			outbox_ext_oid = InvalidOid;
		}
	}

	if (!OidIsValid(outbox_default_relid))
	{
		Oid			ext_oid = get_extension_oid(OUTBOX_EXTENSION_NAME, true);
		Oid			relid;

		if (!OidIsValid(ext_oid))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("extension \"%s\" is not installed in this database",
							OUTBOX_EXTENSION_NAME),
					 errhint("Run CREATE EXTENSION %s.", OUTBOX_EXTENSION_NAME)));
		relid = outbox_member_table(ext_oid);
		if (!OidIsValid(relid) || get_rel_name(relid) == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_TABLE),
					 errmsg("table \"%s\" of extension \"%s\" does not exist",
							OUTBOX_TABLE_NAME, OUTBOX_EXTENSION_NAME),
					 errhint("Recreate the extension with DROP EXTENSION and CREATE EXTENSION.")));
		outbox_ext_oid = ext_oid;
		outbox_default_relid = relid;
		outbox_default_stale = false;
	}

	return outbox_table_entry(outbox_default_relid);
}

/*
 * outbox_find_table
 *
 * The outbox with OID relid: the default one, or a table made by
 * outbox_create() or taken over by outbox_attach(); NULL when relid is no
 * outbox (or no longer exists).
 */
OutboxTable *
outbox_find_table(Oid relid)
{
	OutboxTable *table = outbox_default_table();

	if (relid == table->relid)
		return table;
	if (!outbox_relkind_ok(get_rel_relkind(relid)))
		return NULL;
	table = outbox_table_entry(relid);
	return table->registered ? table : NULL;
}

/*
 * outbox_default_channel
 *
 * For outbox_wake (outbox_channel_lookup): the default outbox's own
 * channel, which outbox_configure() keeps in the registry (and in the
 * triggers, but a restored dump gets the extension's triggers from CREATE
 * EXTENSION, without it); NULL for any other table, whose triggers carry
 * its channel.
 */
const char *
outbox_default_channel(Oid relid)
{
	OutboxTable *table;

	if (!OidIsValid(outbox_default_relid) && !outbox_installed())
		return NULL;
	table = outbox_default_table();
	return relid == table->relid ? table->channel : NULL;
}

/*
 * outbox_table_is_ordered
 *
 * For the triggers (outbox_is_ordered): whether relid is an ordered
 * outbox.  Its setting is in the registry, which a dump keeps, and not in
 * the triggers, which a restored default outbox gets from CREATE EXTENSION.
 */
bool
outbox_table_is_ordered(Oid relid)
{
	OutboxTable *table;

	if (!OidIsValid(outbox_default_relid) && !outbox_installed())
		return false;
	table = outbox_find_table(relid);
	return table != NULL && table->policy.ordered;
}

/*
 * outbox_channel_of
 *
 * Whether relid is an outbox, and its own channel (palloc'd; NULL: the
 * default one), from the catalogs and the registry only: no lock on the
 * table itself is taken.
 */
bool
outbox_channel_of(Oid relid, char **channel)
{
	bool		in_registry;

	*channel = NULL;
	(void) outbox_default_table();
	in_registry = outbox_registry_row(get_rel_namespace(outbox_default_relid), relid, channel, NULL, NULL);
	return relid == outbox_default_relid ||
		(in_registry && outbox_relkind_ok(get_rel_relkind(relid)));
}

/*
 * outbox_table_list
 *
 * The OIDs of every outbox of this database, the default one first, then
 * the registry's in the order of its primary key (in CurrentMemoryContext).
 * A table distributed by Citus is left out: its rows are in its shards,
 * which are the outboxes the worker nodes list.  Needs a transaction; the
 * default outbox must exist.
 */
List *
outbox_table_list(void)
{
	List	   *result = list_make1_oid(outbox_default_table()->relid);
	Relation	reg = outbox_registry_open(get_rel_namespace(outbox_default_relid));
	SysScanDesc scan;
	HeapTuple	tup;
	AttrNumber	origin;

	if (reg == NULL)
		return result;
	origin = get_attnum(RelationGetRelid(reg), "origin");
	scan = systable_beginscan(reg, outbox_primary_key_index(reg), true,
							  NULL, 0, NULL);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, origin, RelationGetDescr(reg), &isnull);

		if (!isnull && strcmp(TextDatumGetCString(d), "default") == 0)
			continue;
		d = heap_getattr(tup, 1, RelationGetDescr(reg), &isnull);
		if (!isnull && !outbox_relation_distributed(DatumGetObjectId(d)))
			result = lappend_oid(result, DatumGetObjectId(d));
	}
	systable_endscan(scan);
	table_close(reg, AccessShareLock);
	return result;
}

/*
 * outbox_table_entry
 *
 * The entry of the table with OID relid, made or re-checked as needed.
 * Raises 42P01 when the table no longer exists.
 */
static OutboxTable *
outbox_table_entry(Oid relid)
{
	OutboxTable *table;
	bool		found;

	if (outbox_tables == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(OutboxTable);
		outbox_tables = hash_create("delivery_outbox tables", 16, &ctl,
									HASH_ELEM | HASH_BLOBS);
	}
	table = hash_search(outbox_tables, &relid, HASH_ENTER, &found);
	if (!found)
	{
		/* what outbox_table_clear() frees, then what it resets */
		table->cxt = NULL;
		table->plan_sets = NIL;
		table->plan_set = NULL;
		table->last_used = 0;
		outbox_table_clear(table);
		table->utc = false;
		table->registered = false;
		table->distributed = false;
	}
	if (!table->valid && !outbox_table_check(table))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("outbox table with OID %u does not exist", relid)));
	return table;
}

/*
 * outbox_table_check
 *
 * Re-read a table's name and row shape from the catalogs; when either
 * changed, drop the statements prepared on the old ones.  Returns false, the
 * entry gone, when the table no longer exists.
 */
static bool
outbox_table_check(OutboxTable *table)
{
	char	   *relname = get_rel_name(table->relid);
	char	   *nspname;
	char	   *name;
	char	   *row_expr;
	bool		utc = false;
	bool		registered;
	char	   *channel = NULL;
	OutboxPolicy policy;
	bool		has_policy = get_attnum(table->relid, "not_before") != InvalidAttrNumber;
	bool		distributed;
	Oid			dead = InvalidOid;
	char	   *dead_name = NULL;
	MemoryContext old;

	if (relname == NULL ||
		(nspname = get_namespace_name(get_rel_namespace(table->relid))) == NULL)
	{
		outbox_table_forget(table);
		return false;
	}
	name = quote_qualified_identifier(nspname, relname);
	distributed = outbox_relation_distributed(table->relid);

	registered = outbox_registry_row(get_rel_namespace(outbox_default_relid), table->relid,
									 &channel, &policy, &dead) &&
		table->relid != outbox_default_relid;
	/* the default outbox keeps its dead letters in the extension's table */
	if (!OidIsValid(dead) && table->relid == outbox_default_relid)
		dead = get_relname_relid(OUTBOX_DEAD_NAME,
								 get_rel_namespace(outbox_default_relid));
	if (OidIsValid(dead))
	{
		char	   *dead_rel = get_rel_name(dead);
		char	   *dead_nsp = dead_rel != NULL ?
			get_namespace_name(get_rel_namespace(dead)) : NULL;

		if (dead_nsp != NULL)
			dead_name = quote_qualified_identifier(dead_nsp, dead_rel);
		else
			dead = InvalidOid;
	}
	row_expr = outbox_row_expr(table->relid,
							   table->relid == outbox_default_relid ?
							   table->relid : outbox_default_table()->relid,
							   &utc);

	/* a changed name or shape: drop everything built on the old one */
	if (table->name != NULL &&
		(strcmp(table->name, name) != 0 ||
		 strcmp(table->row_expr, row_expr) != 0 || table->utc != utc ||
		 table->has_policy != has_policy ||
		 table->distributed != distributed ||
		 (table->dead_name == NULL) != (dead_name == NULL) ||
		 (dead_name != NULL && strcmp(table->dead_name, dead_name) != 0)))
		outbox_table_clear(table);
	if (table->cxt == NULL)
	{
		table->cxt = AllocSetContextCreate(TopMemoryContext,
										   "delivery_outbox table",
										   ALLOCSET_SMALL_SIZES);
		old = MemoryContextSwitchTo(table->cxt);
		table->name = pstrdup(name);
		table->row_expr = pstrdup(row_expr);
		table->utc = utc;
		table->has_policy = has_policy;
		table->distributed = distributed;
		table->dead_name = dead_name != NULL ? pstrdup(dead_name) : NULL;
		MemoryContextSwitchTo(old);
	}
	/* the settings, re-read at every check */
	table->registered = registered;
	table->owner = table->relid == outbox_default_relid ? InvalidOid :
		outbox_rel_owner(table->relid);
	table->partitioned = get_rel_relkind(table->relid) == RELKIND_PARTITIONED_TABLE;
	table->channel = channel != NULL ?
		MemoryContextStrdup(table->cxt, channel) : NULL;
	table->policy = policy;
	table->dead_relid = dead;
	table->valid = true;
	return true;
}

/*
 * outbox_table_forget
 *
 * Free a table's statements and remove its entry.
 */
static void
outbox_table_forget(OutboxTable *table)
{
	Oid			relid = table->relid;

	outbox_table_clear(table);
	hash_search(outbox_tables, &relid, HASH_REMOVE, NULL);
}

/*
 * outbox_table_clear
 *
 * Free a table's statements and strings, keeping the entry.
 */
static void
outbox_table_clear(OutboxTable *table)
{
	outbox_table_free_plans(table);
	if (table->cxt != NULL)
		MemoryContextDelete(table->cxt);
	table->cxt = NULL;
	table->name = NULL;
	table->row_expr = NULL;
	table->channel = NULL;
	table->dead_name = NULL;
	table->dead_relid = InvalidOid;
	table->valid = false;
}

/*
 * outbox_table_free_plans
 *
 * Give up a table's prepared statements (retired: freed once no statement
 * runs), keeping the rest of the entry.
 */
static void
outbox_table_free_plans(OutboxTable *table)
{
	ListCell   *lc;
	int			i;

	if (table->plan_sets == NIL)
		return;
	foreach(lc, table->plan_sets)
	{
		OutboxPlanSet *set = lfirst(lc);

		for (i = 0; i < OUTBOX_NUM_PLANS_MAX; i++)
		{
			if (set->plans[i] != NULL)
				outbox_retire_plan(set->plans[i]);
		}
		pfree(set);
	}
	list_free(table->plan_sets);
	table->plan_sets = NIL;
	table->plan_set = NULL;
	outbox_tables_with_plans--;
}

/*
 * outbox_table_evict
 *
 * More entries than delivery_outbox.max_cached_outboxes hold statements:
 * the least recently used ones (but keep) give theirs up, and entries of
 * tables that no longer exist go altogether.  A linear pass, run only when
 * the bound is crossed.
 */
static void
outbox_table_evict(OutboxTable *keep)
{
	while (outbox_tables_with_plans >= outbox_max_cached_outboxes)
	{
		HASH_SEQ_STATUS status;
		OutboxTable *table;
		OutboxTable *oldest = NULL;

		hash_seq_init(&status, outbox_tables);
		while ((table = hash_seq_search(&status)) != NULL)
		{
			if (table == keep || table->plan_sets == NIL)
				continue;
			if (oldest == NULL || table->last_used < oldest->last_used)
				oldest = table;
		}
		if (oldest == NULL)
			break;
		outbox_table_free_plans(oldest);
	}
}

/*
 * outbox_row_expr
 *
 * The select list, on alias o for a row of relid, of the default outbox's
 * columns (defrelid's, the type the claim and replay functions return):
 * each of its columns that is not dropped, by name and in its order, a
 * missing one NULL, a "timestamp" column (UTC) made timestamptz.
 * outbox_put_rows() forms the rows of the default outbox's type from it in
 * C, so that a statement run as the table's owner needs no privilege on
 * the extension's schema.  Sets *utc when relid's created_at is a
 * "timestamp".  From the catalog caches only: no lock is taken on either
 * table, so that a lock on one outbox never holds up another.
 */
static char *
outbox_row_expr(Oid relid, Oid defrelid, bool *utc)
{
	HeapTuple	tup;
	int			natts;
	StringInfoData buf;
	AttrNumber	i;
	bool		first = true;

	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(defrelid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for relation %u", defrelid);
	natts = ((Form_pg_class) GETSTRUCT(tup))->relnatts;
	ReleaseSysCache(tup);

	initStringInfo(&buf);
	for (i = 1; i <= natts; i++)
	{
		HeapTuple	atttup = SearchSysCache2(ATTNUM, ObjectIdGetDatum(defrelid),
											 Int16GetDatum(i));
		Form_pg_attribute att;
		char	   *name;
		Oid			want_type;
		int32		want_typmod;
		AttrNumber	have;

		if (!HeapTupleIsValid(atttup))
			continue;
		att = (Form_pg_attribute) GETSTRUCT(atttup);
		if (att->attisdropped)
		{
			ReleaseSysCache(atttup);
			continue;
		}
		name = pstrdup(NameStr(att->attname));
		want_type = att->atttypid;
		want_typmod = att->atttypmod;
		ReleaseSysCache(atttup);
		if (!first)
			appendStringInfoString(&buf, ", ");
		first = false;
		have = get_attnum(relid, name);
		if (have == InvalidAttrNumber)
			appendStringInfo(&buf, "NULL::%s",
							 format_type_with_typemod(want_type, want_typmod));
		else if (get_atttype(relid, have) == TIMESTAMPOID &&
				 want_type == TIMESTAMPTZOID)
		{
			appendStringInfo(&buf, "pg_catalog.timezone('UTC'::pg_catalog.text, o.%s)",
							 quote_identifier(name));
			if (strcmp(name, "created_at") == 0)
				*utc = true;
		}
		else
			appendStringInfo(&buf, "o.%s", quote_identifier(name));
		appendStringInfo(&buf, " AS %s", quote_identifier(name));
	}
	return buf.data;
}

/*
 * outbox_extension_namespace
 *
 * The extension's schema: its own table's.  Needs a transaction; the
 * extension must be installed.
 */
Oid
outbox_extension_namespace(void)
{
	return get_rel_namespace(outbox_default_table()->relid);
}

/*
 * Accessors.
 */
Oid
outbox_table_relid(OutboxTable *table)
{
	return table->relid;
}

Oid
outbox_table_owner(OutboxTable *table)
{
	return table->owner;
}

const char *
outbox_table_name(OutboxTable *table)
{
	return table->name;
}

const char *
outbox_table_row_expr(OutboxTable *table)
{
	return table->row_expr;
}

bool
outbox_table_utc(OutboxTable *table)
{
	return table->utc;
}

const char *
outbox_table_channel(OutboxTable *table)
{
	return table->channel;
}

bool
outbox_table_has_policy(OutboxTable *table)
{
	return table->has_policy;
}

const OutboxPolicy *
outbox_table_policy(OutboxTable *table)
{
	return &table->policy;
}

bool
outbox_table_partitioned(OutboxTable *table)
{
	return table->partitioned && table->policy.partition_rows > 0;
}

/*
 * Whether the table is distributed by Citus (docs/scale-out.md, Level 2):
 * the table itself is an empty shell, its rows are in its shards, each an
 * outbox of its own on the node that holds it.
 */
bool
outbox_table_distributed(OutboxTable *table)
{
	return table->distributed;
}

const char *
outbox_table_dead_name(OutboxTable *table)
{
	return table->dead_name;
}

Oid
outbox_table_dead_relid(OutboxTable *table)
{
	return table->dead_relid;
}

/*
 * outbox_table_plans
 *
 * The statements of a table prepared for the current user (NULL where not
 * prepared yet), to be filled by outbox_statements.c.  The planner inlines a SQL
 * function (a column default, say) only for a user who may execute it, so a
 * plan made for one user is not run for another; the functions are
 * SECURITY DEFINER, so there is normally one user.
 */
SPIPlanPtr *
outbox_table_plans(OutboxTable *table)
{
	Oid			userid = GetUserId();
	ListCell   *lc;
	MemoryContext old;

	table->last_used = ++outbox_plans_clock;
	if (table->plan_set != NULL && table->plan_set->userid == userid)
		return table->plan_set->plans;
	foreach(lc, table->plan_sets)
	{
		OutboxPlanSet *set = lfirst(lc);

		if (set->userid == userid)
		{
			table->plan_set = set;
			return set->plans;
		}
	}
	/* a first set for this table: within the bound of tables with sets */
	if (table->plan_sets == NIL)
	{
		outbox_table_evict(table);
		outbox_tables_with_plans++;
	}
	table->last_used = ++outbox_plans_clock;
	old = MemoryContextSwitchTo(table->cxt);
	table->plan_set = palloc0(sizeof(OutboxPlanSet));
	table->plan_set->userid = userid;
	table->plan_sets = lappend(table->plan_sets, table->plan_set);
	MemoryContextSwitchTo(old);
	return table->plan_set->plans;
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
 * outbox_table_plans_pin
 *
 * A statement prepared on some outbox starts running: no plan is freed
 * until every statement started has ended (outbox_table_plans_unpin, on
 * every path).  A trigger of the running statement may rename the table
 * (or otherwise make its entry drop its plans), and the plan running must
 * not go under it.
 */
void
outbox_table_plans_pin(void)
{
	outbox_plans_pinned++;
}

/*
 * outbox_table_plans_unpin
 *
 * A statement ended: the last one frees the plans retired meanwhile.
 */
void
outbox_table_plans_unpin(void)
{
	Assert(outbox_plans_pinned > 0);
	if (--outbox_plans_pinned > 0 || outbox_retired_plans == NIL)
		return;
	while (outbox_retired_plans != NIL)
	{
		SPIPlanPtr	plan = linitial(outbox_retired_plans);

		outbox_retired_plans = list_delete_first(outbox_retired_plans);
		SPI_freeplan(plan);
	}
}

/*
 * outbox_retire_plan
 *
 * Free a kept plan now, or once no statement is running (see above).
 */
static void
outbox_retire_plan(SPIPlanPtr plan)
{
	MemoryContext old;

	if (outbox_plans_pinned == 0)
	{
		SPI_freeplan(plan);
		return;
	}
	old = MemoryContextSwitchTo(TopMemoryContext);
	outbox_retired_plans = lappend(outbox_retired_plans, plan);
	MemoryContextSwitchTo(old);
}
