/*-------------------------------------------------------------------------
 *
 * outbox_compat.h
 *		Every difference between the PostgreSQL majors delivery_outbox is
 *		built on, in one place.
 *
 * Built and tested on PostgreSQL 15 and 18 from one source tree; the
 * guards are written by the release that changed a call, so 16 and 17
 * compile too (docs/development.md says how to try them).  No other file
 * tests PG_VERSION_NUM: each uses the names defined here.  Depends on
 * nothing of ours.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_compat.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_COMPAT_H
#define OUTBOX_COMPAT_H

#if PG_VERSION_NUM < 150000
#error "delivery_outbox needs PostgreSQL 15 or later"
#endif

#include "catalog/namespace.h"

/*
 * 18: pg_noreturn (C11's _Noreturn) before a declaration replaces
 * pg_attribute_noreturn() after it; before 18, the attribute goes first
 * (GCC and Clang take it there).
 */
#if PG_VERSION_NUM < 180000
#define pg_noreturn pg_attribute_noreturn()
#endif

/*
 * The backend's slot among MaxBackends, from 0: 17 numbers processes from
 * 0 (ProcNumber, MyProcNumber, storage/procnumber.h), where 15 numbered
 * backends from 1 (BackendId, MyBackendId, storage/backendid.h).
 */
#if PG_VERSION_NUM >= 170000
#include "storage/procnumber.h"
#define OUTBOX_MY_BACKEND_INDEX		((int) MyProcNumber)
#else
#include "storage/backendid.h"
#define OUTBOX_MY_BACKEND_INDEX		((int) MyBackendId - 1)
#endif

/* 17: the local transaction id of a PGPROC moved into its vxid */
#if PG_VERSION_NUM >= 170000
#define OUTBOX_PROC_LXID(proc)		((proc)->vxid.lxid)
#else
#define OUTBOX_PROC_LXID(proc)		((proc)->lxid)
#endif

/*
 * 17: a search_path to compare with the current one is a SearchPathMatcher
 * (it was an OverrideSearchPath).
 */
#if PG_VERSION_NUM >= 170000
typedef SearchPathMatcher OutboxSearchPath;
#define outbox_get_search_path(cxt)		GetSearchPathMatcher(cxt)
#define outbox_search_path_matches(p)	SearchPathMatchesCurrentEnvironment(p)
#else
typedef OverrideSearchPath OutboxSearchPath;
#define outbox_get_search_path(cxt)		GetOverrideSearchPath(cxt)
#define outbox_search_path_matches(p)	OverrideSearchPathMatchesCurrent(p)
#endif

/* 17: getIdentitySequence takes the relation, not its OID */
#if PG_VERSION_NUM >= 170000
#define outbox_identity_sequence(rel, attnum) \
	getIdentitySequence((rel), (attnum), true)
#else
#define outbox_identity_sequence(rel, attnum) \
	getIdentitySequence(RelationGetRelid(rel), (attnum), true)
#endif

/*
 * 18: index_beginscan takes where to report instrumentation (none here),
 * and RelationGetPrimaryKeyIndex whether a deferrable key will do (ours are
 * immediate).
 */
#if PG_VERSION_NUM >= 180000
#define outbox_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), (norderbys))
#define outbox_primary_key_index(rel)	RelationGetPrimaryKeyIndex((rel), false)
#else
#define outbox_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), (nkeys), (norderbys))
#define outbox_primary_key_index(rel)	RelationGetPrimaryKeyIndex(rel)
#endif

/*
 * The executor's row-level insert (outbox_insert.c): 16 added whether only
 * summarizing indexes are to be updated to ExecInsertIndexTuples (never,
 * for an insert), 18 the tuple being updated to ExecCheckIndexConstraints
 * (none, for an insert) and renamed a result relation's CHECK constraint
 * states.
 */
#if PG_VERSION_NUM >= 160000
#define outbox_insert_index_tuples(rri, slot, estate, noDupErr, specConflict, arbiters) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, (noDupErr), \
						  (specConflict), (arbiters), false)
#else
#define outbox_insert_index_tuples(rri, slot, estate, noDupErr, specConflict, arbiters) \
	ExecInsertIndexTuples((rri), (slot), (estate), false, (noDupErr), \
						  (specConflict), (arbiters))
#endif
#if PG_VERSION_NUM >= 180000
#define outbox_check_index_constraints(rri, slot, estate, conflictTid, arbiters) \
	ExecCheckIndexConstraints((rri), (slot), (estate), (conflictTid), NULL, \
							  (arbiters))
#define OUTBOX_RRI_CHECK_EXPRS(rri)	((rri)->ri_CheckConstraintExprs)
#else
#define outbox_check_index_constraints(rri, slot, estate, conflictTid, arbiters) \
	ExecCheckIndexConstraints((rri), (slot), (estate), (conflictTid), (arbiters))
#define OUTBOX_RRI_CHECK_EXPRS(rri)	((rri)->ri_ConstraintExprs)
#endif

/* 18: a module's magic block may name it and its version */
#if PG_VERSION_NUM >= 180000
#define OUTBOX_MODULE_MAGIC \
	PG_MODULE_MAGIC_EXT(.name = "delivery_outbox", .version = "1.2")
#else
#define OUTBOX_MODULE_MAGIC PG_MODULE_MAGIC
#endif

#endif							/* OUTBOX_COMPAT_H */
