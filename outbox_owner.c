/*-------------------------------------------------------------------------
 *
 * outbox_owner.c
 *		Running what touches a table as that table's owner.
 *
 * The code of a table (its row triggers, CHECK constraints, column
 * defaults, index expressions and predicates: anything its owner can put
 * there) runs with the rights of the role that runs the statement.  The
 * extension's functions are SECURITY DEFINER, owned by whoever created the
 * extension (normally a superuser), and its background workers connect as
 * the bootstrap superuser: a statement they ran on a tenant's table would
 * run the tenant's code with those rights.  So every statement the
 * extension runs on an outbox other than its own default one (the
 * statements of outbox_statements.c, the direct insert, the partition
 * maker's DDL, the steps of the SQL functions that read or write the
 * table) runs through outbox_as_owner(): as the table's owner, under
 * SECURITY_RESTRICTED_OPERATION, with search_path = pg_catalog, pg_temp
 * in a GUC nest level of its own, as VACUUM, ANALYZE, CLUSTER, REINDEX and
 * REFRESH MATERIALIZED VIEW run a table's code (CVE-2022-1552).  The owner
 * gains nothing it did not have: a table's code can do no more than its
 * owner may.
 *
 * The restricted operation also keeps the table's code from changing the
 * session's state for the caller (SET ROLE, temporary tables, LISTEN,
 * cursors left open), and the GUC nest level ends every setting it made.
 * Both are undone on every path: on return, and on error before the error
 * goes on (a caller that catches it and goes on without aborting a
 * subtransaction gets its own user and settings back too).
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_owner.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_class.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/syscache.h"

#include "outbox_owner.h"

/* the search_path a table's code runs with (as a maintenance command's) */
#define OUTBOX_OWNER_SEARCH_PATH	"pg_catalog, pg_temp"

/*
 * outbox_rel_owner
 *
 * The owner of relation relid.  Raises 42P01 when it no longer exists.
 */
Oid
outbox_rel_owner(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	return owner;
}

/*
 * outbox_as_owner
 *
 * Run work(arg) as role owner, under SECURITY_RESTRICTED_OPERATION, with
 * search_path = pg_catalog, pg_temp; the caller's user, security context
 * and settings come back afterwards, also when work raises an error (which
 * then goes on).  The caller has checked that the calling role may do what
 * work does: this only decides whose rights the table's own code gets.
 */
void
outbox_as_owner(Oid owner, OutboxOwnerWork work, void *arg)
{
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(owner,
						   save_sec_context | SECURITY_RESTRICTED_OPERATION);
	save_nestlevel = NewGUCNestLevel();
	PG_TRY();
	{
		(void) set_config_option("search_path", OUTBOX_OWNER_SEARCH_PATH,
								 PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
		work(arg);
	}
	PG_FINALLY();
	{
		/* every setting made in the nest level goes, SET or SET LOCAL */
		AtEOXact_GUC(false, save_nestlevel);
		SetUserIdAndSecContext(save_userid, save_sec_context);
	}
	PG_END_TRY();
}

/*
 * outbox_as_rel_owner
 *
 * outbox_as_owner() as the owner of relation relid.
 */
void
outbox_as_rel_owner(Oid relid, OutboxOwnerWork work, void *arg)
{
	outbox_as_owner(outbox_rel_owner(relid), work, arg);
}
