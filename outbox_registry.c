/*-------------------------------------------------------------------------
 *
 * outbox_registry.c
 *		The catalogs an outbox's settings come from, read directly: the
 *		extension's registry (delivery_outbox_registry) and, on a Citus
 *		node, Citus's pg_dist_partition; and the registration of a node's
 *		shards of distributed outboxes.
 *
 * Below outbox_table.c, which caches what is read here per table; nothing
 * here keeps any state.  Each function takes the extension's schema.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_registry.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "nodes/makefuncs.h"
#include "parser/parse_func.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "outbox_compat.h"
#include "outbox_registry.h"

/* the registry, in the extension's schema */
#define OUTBOX_REGISTRY_NAME	"delivery_outbox_registry"

/*
 * outbox_registry_open
 *
 * The registry of the extension's schema, opened with AccessShareLock, or
 * NULL: an extension still at version 1.1 has none, and only its own table
 * is an outbox.  It is read directly, as a catalog: no privilege on it is
 * needed (the SQL functions may run as any user), and a renamed schema
 * cannot mislead a kept statement.
 */
Relation
outbox_registry_open(Oid extnsp)
{
	Oid			regid;

	regid = get_relname_relid(OUTBOX_REGISTRY_NAME, extnsp);
	return OidIsValid(regid) ? table_open(regid, AccessShareLock) : NULL;
}

/*
 * outbox_registry_row
 *
 * Whether the registry has a row for relid (made or attached, or the
 * default outbox once configured), and, where asked for, its channel
 * (palloc'd, or NULL), its delivery policy (the defaults without a row) and
 * its dead-letter table (InvalidOid if none is recorded).
 */
bool
outbox_registry_row(Oid extnsp, Oid relid, char **channel,
					OutboxPolicy *policy, Oid *dead)
{
	Relation	reg;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;
	bool		found = false;

	if (policy != NULL)
		outbox_policy_defaults(policy);
	if (dead != NULL)
		*dead = InvalidOid;
	reg = outbox_registry_open(extnsp);
	if (reg == NULL)
		return false;
	ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(relid));
	scan = systable_beginscan(reg, outbox_primary_key_index(reg), true,
							  NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		TupleDesc	desc = RelationGetDescr(reg);
		Oid			regid = RelationGetRelid(reg);
		bool		isnull;
		Datum		d;
		AttrNumber	attnum;

		found = true;
		d = heap_getattr(tup, get_attnum(regid, "channel"), desc, &isnull);
		if (!isnull)
			*channel = TextDatumGetCString(d);

		/* the policy's columns: a registry of an older 1.2 build lacks them */
		if (policy != NULL &&
			(attnum = get_attnum(regid, "max_attempts")) != InvalidAttrNumber)
		{
			d = heap_getattr(tup, attnum, desc, &isnull);
			policy->max_attempts = isnull ? 0 : DatumGetInt32(d);
			d = heap_getattr(tup, get_attnum(regid, "backoff_base"), desc, &isnull);
			if (!isnull)
				policy->backoff_base = *DatumGetIntervalP(d);
			d = heap_getattr(tup, get_attnum(regid, "backoff_max"), desc, &isnull);
			if (!isnull)
				policy->backoff_max = *DatumGetIntervalP(d);
			d = heap_getattr(tup, get_attnum(regid, "ttl"), desc, &isnull);
			policy->has_ttl = !isnull;
			if (!isnull)
				policy->ttl = *DatumGetIntervalP(d);
			if ((attnum = get_attnum(regid, "ordered")) != InvalidAttrNumber)
			{
				d = heap_getattr(tup, attnum, desc, &isnull);
				policy->ordered = !isnull && DatumGetBool(d);
			}
			if ((attnum = get_attnum(regid, "retain_acked")) != InvalidAttrNumber)
			{
				d = heap_getattr(tup, attnum, desc, &isnull);
				policy->has_retain_acked = !isnull;
				if (!isnull)
					policy->retain_acked = *DatumGetIntervalP(d);
				d = heap_getattr(tup, get_attnum(regid, "partition_rows"), desc, &isnull);
				policy->partition_rows = isnull ? 0 : DatumGetInt64(d);
			}
		}
		if (dead != NULL &&
			(attnum = get_attnum(regid, "dead")) != InvalidAttrNumber)
		{
			d = heap_getattr(tup, attnum, desc, &isnull);
			if (!isnull && get_rel_relkind(DatumGetObjectId(d)) == RELKIND_RELATION)
				*dead = DatumGetObjectId(d);
		}
	}
	systable_endscan(scan);
	table_close(reg, AccessShareLock);
	return found;
}

/*
 * outbox_policy_defaults
 *
 * The policy of an outbox nobody configured: 1.1's behaviour.
 */
void
outbox_policy_defaults(OutboxPolicy *policy)
{
	memset(policy, 0, sizeof(OutboxPolicy));
	policy->backoff_max.time = USECS_PER_HOUR;
}

/*
 * outbox_relation_distributed
 *
 * Whether Citus's catalog pg_dist_partition has relid as a hash-distributed
 * table (partmethod 'h').  Read directly, so that the library needs no
 * symbol of Citus's and works unchanged where Citus is not installed (no
 * such catalog: false).  Reference tables and Citus's local tables are
 * left alone: their one shard is queried through Citus like any table.
 */
bool
outbox_relation_distributed(Oid relid)
{
	Oid			catalog = get_relname_relid("pg_dist_partition",
											PG_CATALOG_NAMESPACE);
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tuple;
	bool		result = false;

	if (!OidIsValid(catalog))
		return false;
	rel = table_open(catalog, AccessShareLock);
	/* its first column, logicalrelid, a regclass */
	if (RelationGetDescr(rel)->natts < 2 ||
		TupleDescAttr(RelationGetDescr(rel), 0)->atttypid != REGCLASSOID ||
		TupleDescAttr(RelationGetDescr(rel), 1)->atttypid != CHAROID)
	{
		table_close(rel, AccessShareLock);
		return false;
	}
	ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(relid));
	/* a handful of rows, one per distributed table: no index needed */
	scan = systable_beginscan(rel, InvalidOid, false, NULL, 1, &key);
	if (HeapTupleIsValid(tuple = systable_getnext(scan)))
	{
		bool		isnull;
		Datum		method = heap_getattr(tuple, 2, RelationGetDescr(rel),
										  &isnull);

		result = !isnull && DatumGetChar(method) == 'h';
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return result;
}

/*
 * outbox_register_local_shards
 *
 * On a Citus node, have outbox_register_local_shards() (1.3) in the
 * extension's schema extnsp make this node's shards of distributed outboxes
 * outboxes (docs/scale-out.md).  A no-op without Citus, or with an older
 * version of the extension.  Needs a
 * transaction; raises what the function raises.
 */
void
outbox_register_local_shards(Oid extnsp)
{
	char	   *nsp = get_namespace_name(extnsp);
	Oid			argtype = REGCLASSOID;
	char	   *sql;

	if (nsp == NULL ||
		!OidIsValid(get_relname_relid("pg_dist_local_group", PG_CATALOG_NAMESPACE)) ||
		!OidIsValid(LookupFuncName(list_make2(makeString(nsp),
											  makeString("outbox_register_local_shards")),
								   1, &argtype, true)))
		return;
	sql = psprintf("SELECT %s.outbox_register_local_shards(NULL)",
				   quote_identifier(nsp));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute(sql, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not register this node's shards");
	SPI_finish();
}
