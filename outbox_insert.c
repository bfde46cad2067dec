/*-------------------------------------------------------------------------
 *
 * outbox_insert.c
 *		outbox_enqueue's insert without SQL.
 *
 * outbox_enqueue inserts its row through the executor's row-level calls
 * (the steps of ExecSimpleRelationInsert, with which logical replication
 * applies rows) instead of parsing, planning and running an INSERT
 * statement; triggers, constraints and indexes apply exactly as for the
 * statement.  What a plain INSERT re-derives from the catalogs for every
 * statement (column defaults, CHECK constraints, partial-index predicates)
 * is kept here, for one table at a time, as *planned* expression trees,
 * with each index's IndexInfo as BuildIndexInfo makes it from the catalogs
 * (its predicate the planned one, no state in it), the OID of the dedup
 * index, and what the trees depend on: the functions and types the planner
 * records for a cached plan (invalidated as it would be), the table and its
 * indexes (relcache invalidations), the user they were planned as and the
 * search_path they were planned under.  That is all that is kept: every
 * ExprState, expression context and function cache (fn_extra, fn_mcxt) is
 * built for each row in that row's EState, as a plain INSERT builds them at
 * each execution of its cached plan, and freed with it; so an EXECUTE
 * privilege is checked at each enqueue, a state that failed half-way is
 * never seen again, and nothing of one row's per-query memory survives
 * into the next (as the type cache keeps a domain's constraint trees and
 * leaves their states to each query).  Indexes with the same predicate
 * share one state in a row.
 *
 * An enqueue with a dedup_key inserts as INSERT ... ON CONFLICT (recipient,
 * dedup_key) DO NOTHING does: a speculative insertion, arbitrated by the
 * table's unique (recipient, dedup_key) index.
 *
 * The direct path is taken only where it cannot differ from the statement:
 * delivery_outbox.direct_insert is on, no other loaded module hooks the
 * parser, planner or executor (pg_stat_statements, pgaudit, Citus and the
 * like must see, or route, every insert), the table is a plain heap table
 * that is not a partition, and it has no rules, row security, INSTEAD OF
 * triggers, transition tables, domain-typed columns, or statement triggers
 * but the insert markers' own (outbox_order.c), whose work is done here
 * where the statement would fire them.
 * Otherwise outbox_insert_row() returns false and the caller runs the SQL
 * statement.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_insert.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_index.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "executor/nodeModifyTable.h"
#include "miscadmin.h"
#include "nodes/plannodes.h"
#include "optimizer/optimizer.h"
#include "optimizer/planner.h"
#include "parser/analyze.h"
#include "rewrite/rewriteHandler.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "delivery_outbox.h"
#include "outbox_insert.h"
#include "outbox_order.h"
#include "outbox_table.h"
#include "outbox_trigger.h"

/*
 * The planned expressions of one table, built once per backend and kept
 * until the table, one of its indexes, or a function or type they use
 * changes, or another user or search_path needs them: defaults, CHECK
 * constraints and partial-index predicates, after expression_planner (as
 * ExecPrepareExpr would plan them), with the functions and types they
 * depend on, and its indexes' IndexInfos.  Nothing executable is kept:
 * no ExprState, no FmgrInfo, no expression context; each row builds its
 * own in its EState, with a copy of each IndexInfo.
 */
typedef struct OutboxInsertCache
{
	MemoryContext cxt;			/* holds everything below; NULL if never built */
	Oid			relid;			/* the table it was built for */
	Oid			userid;			/* the user it was planned as */
	OutboxSearchPath *search_path;	/* search_path it was planned under */
	uint64		generation;		/* outbox_insert_generation when built */
	bool		direct;			/* false: the table needs a real INSERT */
	int			in_use;			/* inserts running on its trees */
	List	   *inval_items;	/* PlanInvalItems: functions and types used */
	Expr	  **defaults;		/* per attribute, NULL: no default (NULL) */
	int			ncheck;
	Expr	  **checks;			/* in the order of constr->check */
	int			nindexes;		/* as ExecOpenIndices would open them */
	Oid		   *index_oids;		/* in the order of RelationGetIndexList */
	IndexInfo **index_infos;	/* BuildIndexInfo's, or NULL: built per row */
	int		   *index_pred;		/* its predicate in preds[], or -1 */
	int			npreds;			/* distinct partial-index predicates */
	List	  **preds;			/* implicit-AND lists, for ExecInitQual */
	Oid			dedup_index;	/* unique (recipient, dedup_key), or
								 * InvalidOid */
} OutboxInsertCache;

static bool outbox_insert_intercepted(void);
static OutboxInsertCache *outbox_insert_prepare(Relation rel);
static void outbox_insert_open_indices(OutboxInsertCache *cache,
									   ResultRelInfo *rri, bool speculative);
static bool outbox_insert_plain_table(Relation rel);
static Expr *outbox_plan_expr(Expr *expr);
static Oid	outbox_dedup_index(Relation rel, const OutboxColumns *cols);
static void outbox_check_conflict_visible(EState *estate, Relation rel,
										  ItemPointer tid);

/*
 * The cache, and a counter of the invalidations that concern it (the table,
 * a function or type its expressions use): it is valid while the counter
 * has not moved since it was built, so one arriving during the build is not
 * lost either.
 */
static OutboxInsertCache outbox_insert_cache;
static uint64 outbox_insert_generation = 1;

/*
 * outbox_insert_row
 *
 * outbox_enqueue's insert into table without SQL: values/nulls are
 * recipient, kind, payload, tenant_id, not_before, expires_at and dedup_key
 * (the last three only into a table that has them).  With a dedup_key the
 * insert is that of INSERT ... ON CONFLICT (recipient, dedup_key) DO
 * NOTHING: *conflict is set, and nothing inserted, when the recipient's
 * rows already hold the key.  The row goes through the
 * executor's row-level insert: BEFORE ROW triggers (the state guard), stored generated columns,
 * NOT NULL and CHECK constraints, heap and index insert, AFTER ROW triggers
 * (the wake-up), fired at the end as for a statement.
 *
 * Returns false, having changed nothing, when the insert must be a real
 * INSERT statement (see the file header, and a missing INSERT privilege):
 * the caller then runs the SQL statement.  Snapshots and command ids are
 * handled as SPI handles a statement of a volatile function: a fresh
 * snapshot, a new command before and after, so that defaults, CHECKs and
 * triggers see what an INSERT would.  Raises what the INSERT would raise.
 */
bool
outbox_insert_row(OutboxTable *table, Datum *values, const char *nulls,
				  int64 *id, bool *conflict)
{
	Relation	rel;
	const OutboxColumns *cols;
	OutboxInsertCache *cache;
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *slot;
	ExprContext *econtext;
	TupleDesc	tupdesc;
	bool		inserted;
	bool		keyed = nulls[6] != 'n';
	int			i;

	*conflict = false;
	if (!outbox_direct_insert || outbox_insert_intercepted())
		return false;

	/* what the executor checks before any INSERT (ExecCheckXactReadOnly) */
	if (XactReadOnly)
		PreventCommandIfReadOnly("INSERT");
	PreventCommandIfParallelMode("INSERT");

	rel = table_open(outbox_table_relid(table), RowExclusiveLock);
	cols = outbox_columns(rel, "outbox_enqueue");
	cache = outbox_insert_prepare(rel);
	if (cache == NULL ||
		(keyed && !OidIsValid(cache->dedup_index)) ||
		pg_class_aclcheck(RelationGetRelid(rel), GetUserId(),
						  ACL_INSERT) != ACLCHECK_OK)
	{
		table_close(rel, NoLock);
		return false;
	}

	/* as SPI runs a statement: a fresh snapshot, a new command */
	PushActiveSnapshot(GetTransactionSnapshot());
	CommandCounterIncrement();
	UpdateActiveSnapshotCommandId();

	/* the trees stay put while states built from them are alive */
	cache->in_use++;
	PG_TRY();
	{
		MemoryContext oldcxt;
		List	   *arbiters = NIL;

		/* everything below, states included, goes with the EState */
		estate = CreateExecutorState();
		oldcxt = MemoryContextSwitchTo(estate->es_query_cxt);
		estate->es_output_cid = GetCurrentCommandId(true);
		estate->es_snapshot = GetActiveSnapshot();
		rri = makeNode(ResultRelInfo);
		InitResultRelInfo(rri, rel, 0, NULL, 0);
		/* where the AFTER trigger queue looks the relation up */
		estate->es_opened_result_relations = list_make1(rri);

		/*
		 * CHECK constraints, as ExecRelCheck would build them from the trees
		 * it plans (ExecPrepareExpr), here from the planned ones
		 */
		if (cache->ncheck > 0)
		{
			OUTBOX_RRI_CHECK_EXPRS(rri) = palloc(sizeof(ExprState *) * cache->ncheck);
			for (i = 0; i < cache->ncheck; i++)
				OUTBOX_RRI_CHECK_EXPRS(rri)[i] = ExecInitExpr(cache->checks[i], NULL);
		}

		/*
		 * The indexes, as ExecOpenIndices opens them; with a dedup_key, the
		 * unique indexes' information for a speculative insertion too, its
		 * arbiter the (recipient, dedup_key) index.
		 */
		outbox_insert_open_indices(cache, rri, keyed);
		if (keyed)
			arbiters = list_make1_oid(cache->dedup_index);

		/*
		 * The statement's start: what the BEFORE STATEMENT trigger (the
		 * insert markers', the only statement trigger allowed here, see
		 * outbox_insert_plain_table) does, before the id default draws from
		 * the sequence, as ExecModifyTable fires it; its AFTER twin's work
		 * follows the AFTER ROW triggers.
		 */
		AfterTriggerBeginQuery();
		if (rri->ri_TrigDesc != NULL &&
			rri->ri_TrigDesc->trig_insert_before_statement)
			outbox_order_statement_start(rel);

		tupdesc = RelationGetDescr(rel);
		slot = table_slot_create(rel, &estate->es_tupleTable);
		ExecClearTuple(slot);
		econtext = GetPerTupleExprContext(estate);
		for (i = 0; i < tupdesc->natts; i++)
		{
			AttrNumber	attnum = i + 1;
			int			given = attnum == cols->recipient ? 0 :
				attnum == cols->kind ? 1 :
				attnum == cols->payload ? 2 :
				attnum == cols->tenant_id ? 3 :
				attnum == cols->not_before ? 4 :
				attnum == cols->expires_at ? 5 :
				attnum == cols->dedup_key ? 6 : -1;

			if (given >= 0)
			{
				slot->tts_values[i] = values[given];
				slot->tts_isnull[i] = nulls[given] == 'n';
			}
			else if (cache->defaults[i] != NULL &&
					 IsA(cache->defaults[i], Const))
			{
				/* a constant needs no state: its value, as it would yield */
				slot->tts_values[i] = ((Const *) cache->defaults[i])->constvalue;
				slot->tts_isnull[i] = ((Const *) cache->defaults[i])->constisnull;
			}
			else if (cache->defaults[i] != NULL)
				slot->tts_values[i] =
					ExecEvalExprSwitchContext(ExecInitExpr(cache->defaults[i], NULL),
											  econtext,
											  &slot->tts_isnull[i]);
			else
			{
				slot->tts_values[i] = (Datum) 0;
				slot->tts_isnull[i] = true;
			}
		}
		ExecStoreVirtualTuple(slot);
		ExecMaterializeSlot(slot);
		slot->tts_tableOid = RelationGetRelid(rel);

		/*
		 * The steps of ExecSimpleRelationInsert, with the BEFORE triggers'
		 * verdict kept: one returning NULL means no row.
		 */
		inserted = true;
		if (rri->ri_TrigDesc != NULL &&
			rri->ri_TrigDesc->trig_insert_before_row)
			inserted = ExecBRInsertTriggers(estate, rri, slot);
		if (inserted)
		{
			List	   *recheck = NIL;
			bool		isnull;

			/*
			 * A CHECK constraint or a generated column may read tableoid, and
			 * a row a trigger returned was stored with its own: set it again,
			 * as ExecInsert does before evaluating them.
			 */
			slot->tts_tableOid = RelationGetRelid(rel);
			if (tupdesc->constr != NULL &&
				tupdesc->constr->has_generated_stored)
				ExecComputeStoredGenerated(rri, estate, slot, CMD_INSERT);
			if (tupdesc->constr != NULL)
				ExecConstraints(rri, slot, estate);
			if (!keyed)
			{
				simple_table_tuple_insert(rel, slot);
				if (rri->ri_NumIndices > 0)
					recheck = outbox_insert_index_tuples(rri, slot, estate,
														 false, NULL, NIL);
			}
			else
			{
				/*
				 * INSERT ... ON CONFLICT (recipient, dedup_key) DO NOTHING,
				 * as ExecInsert runs it: look for a conflicting row (waiting
				 * for one being inserted); none, insert speculatively and let
				 * the index insertion confirm it, or start over when a
				 * concurrent insertion of the same key won the race.
				 */
				for (;;)
				{
					ItemPointerData conflict_tid;
					bool		spec_conflict = false;
					uint32		token;

					CHECK_FOR_INTERRUPTS();
					if (!outbox_check_index_constraints(rri, slot, estate,
														&conflict_tid, arbiters))
					{
						outbox_check_conflict_visible(estate, rel, &conflict_tid);
						*conflict = true;
						break;
					}
					token = SpeculativeInsertionLockAcquire(GetCurrentTransactionId());
					table_tuple_insert_speculative(rel, slot,
												   estate->es_output_cid,
												   0, NULL, token);
					recheck = outbox_insert_index_tuples(rri, slot, estate,
														 true, &spec_conflict,
														 arbiters);
					table_tuple_complete_speculative(rel, slot, token,
													 !spec_conflict);
					SpeculativeInsertionLockRelease(GetCurrentTransactionId());
					if (!spec_conflict)
						break;
					list_free(recheck);
					recheck = NIL;
				}
			}
			if (!*conflict)
			{
				ExecARInsertTriggers(estate, rri, slot, recheck, NULL);
				/* not NULL: the primary key's NOT NULL was checked above */
				*id = DatumGetInt64(slot_getattr(slot, cols->id, &isnull));
			}
		}
		AfterTriggerEndQuery(estate);
		if (rri->ri_TrigDesc != NULL &&
			rri->ri_TrigDesc->trig_insert_after_statement)
			outbox_order_statement_end(rel);

		/* indexes, and relations the AFTER triggers opened */
		ExecCloseResultRelations(estate);
		ExecResetTupleTable(estate->es_tupleTable, false);
		MemoryContextSwitchTo(oldcxt);
		FreeExecutorState(estate);
	}
	PG_FINALLY();
	{
		cache->in_use--;
	}
	PG_END_TRY();

	PopActiveSnapshot();
	CommandCounterIncrement();
	table_close(rel, NoLock);
	if (!inserted)
		outbox_no_row_inserted();
	return true;
}

/*
 * outbox_insert_intercepted
 *
 * Whether another loaded module hooks the parser, the planner or the
 * executor.  Such a module expects to see every statement (to count or
 * audit it, as pg_stat_statements and pgaudit do) or to route it elsewhere
 * (Citus plans an INSERT into a distributed table onto its shards, and its
 * coordinator table is an empty shell: a row inserted there directly would
 * be lost to every query).  The direct insert is none of these, so with any
 * such hook installed outbox_enqueue runs the SQL statement.
 */
static bool
outbox_insert_intercepted(void)
{
	return post_parse_analyze_hook != NULL ||
		planner_hook != NULL ||
		ExecutorStart_hook != NULL ||
		ExecutorRun_hook != NULL ||
		ExecutorFinish_hook != NULL ||
		ExecutorEnd_hook != NULL ||
		ExecutorCheckPerms_hook != NULL;
}

/*
 * outbox_insert_plain_table
 *
 * Whether rel is a table the direct insert can write exactly as an INSERT
 * would: a plain heap table, not a partition (nor partitioned, nor foreign,
 * nor a view), with nothing only the statement handles (rules, row
 * security, statement-level triggers other than the insert markers',
 * INSTEAD OF triggers, transition tables).
 * A domain's constraints are read when its expression state is built and
 * changing them does not invalidate the table, and an omitted domain column
 * needs a checked NULL: columns of a domain type keep the INSERT too.
 */
static bool
outbox_insert_plain_table(Relation rel)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	TriggerDesc *trig = rel->trigdesc;
	int			i;

	if (rel->rd_rel->relkind != RELKIND_RELATION ||
		rel->rd_rel->relispartition ||
		rel->rd_rel->relam != HEAP_TABLE_AM_OID ||
		rel->rd_rel->relrowsecurity ||
		rel->rd_rules != NULL)
		return false;
	if (trig != NULL &&
		(trig->trig_insert_instead_row || trig->trig_insert_new_table))
		return false;

	/*
	 * statement triggers: only the insert markers' own, whose work is done
	 * here
	 */
	for (i = 0; trig != NULL && i < trig->numtriggers; i++)
	{
		Trigger    *t = &trig->triggers[i];
		FmgrInfo	finfo;

		if (TRIGGER_FOR_ROW(t->tgtype) || !TRIGGER_FOR_INSERT(t->tgtype) ||
			t->tgenabled == TRIGGER_DISABLED)
			continue;
		fmgr_info(t->tgfoid, &finfo);
		if (finfo.fn_addr != outbox_insert_statement)
			return false;
	}
	for (i = 0; i < tupdesc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(tupdesc, i);

		if (!att->attisdropped && get_typtype(att->atttypid) == TYPTYPE_DOMAIN)
			return false;
	}
	return true;
}

/*
 * outbox_insert_prepare
 *
 * outbox_insert_cache for rel, built now if the table (or a function or type
 * its expressions use) changed since, or if it never was; NULL when the
 * direct insert may not be used for this table, or while an insert further
 * up the stack still runs on states built from the trees (a trigger or
 * default that enqueues: the nested call then takes the SQL path rather
 * than free trees in use).
 */
static OutboxInsertCache *
outbox_insert_prepare(Relation rel)
{
	OutboxInsertCache *cache = &outbox_insert_cache;
	TupleDesc	tupdesc = RelationGetDescr(rel);
	MemoryContext old;
	List	   *indexes;
	ListCell   *lc;
	uint64		generation;
	int			i;

	/*
	 * The planner inlines a SQL function only for a user who may execute it
	 * (ExecInitExpr checks the others' at each row): trees planned as one
	 * user are not used for another.  The function is SECURITY DEFINER, so
	 * the user is normally always its owner, or the table's (outbox_api.c
	 * runs the insert as the owner of an outbox other than the default one).
	 * An inlined function's body is parsed under the search_path of the
	 * planning, so the trees are planned again under another, as a cached
	 * plan is (the enqueue normally pins it: the function's SET search_path,
	 * or outbox_as_owner's, both pg_catalog, pg_temp; pg_temp becomes a
	 * namespace of its own once the session creates one). DISCARD ALL needs
	 * nothing more: what it drops (temporary objects, settings) reaches the
	 * trees through those invalidations and the search_path, and no state
	 * outlives a row.
	 */
	if (cache->generation == outbox_insert_generation &&
		cache->relid == RelationGetRelid(rel) &&
		cache->userid == GetUserId() &&
		outbox_search_path_matches(cache->search_path))
		return cache->direct ? cache : NULL;
	if (cache->in_use > 0)
		return NULL;

	/* valid only if the build completes with nothing invalidated meanwhile */
	cache->generation = 0;
	generation = outbox_insert_generation;

	if (cache->cxt == NULL)
		cache->cxt = AllocSetContextCreate(TopMemoryContext,
										   "delivery_outbox insert",
										   ALLOCSET_SMALL_SIZES);
	MemoryContextReset(cache->cxt);
	cache->inval_items = NIL;
	cache->ncheck = 0;
	cache->nindexes = 0;
	cache->npreds = 0;
	cache->direct = outbox_insert_plain_table(rel);
	cache->dedup_index = InvalidOid;

	if (cache->direct)
	{
		old = MemoryContextSwitchTo(cache->cxt);

		/* defaults, as the rewriter adds them to an INSERT */
		cache->defaults = palloc0(sizeof(Expr *) * Max(tupdesc->natts, 1));
		for (i = 0; i < tupdesc->natts; i++)
		{
			Form_pg_attribute att = TupleDescAttr(tupdesc, i);
			Node	   *expr;

			if (att->attisdropped || att->attgenerated)
				continue;
			expr = build_column_default(rel, att->attnum);
			if (expr != NULL)
				cache->defaults[i] = outbox_plan_expr((Expr *) expr);
		}

		/* CHECK constraints, as ExecRelCheck plans them, in the same order */
		if (tupdesc->constr != NULL && tupdesc->constr->num_check > 0)
		{
			ConstrCheck *check = tupdesc->constr->check;

			cache->ncheck = tupdesc->constr->num_check;
			cache->checks = palloc(sizeof(Expr *) * cache->ncheck);
			for (i = 0; i < cache->ncheck; i++)
				cache->checks[i] = outbox_plan_expr(stringToNode(check[i].ccbin));
		}

		/*
		 * The indexes ExecOpenIndices would open, with their IndexInfos and
		 * partial-index predicates (as ExecPrepareQual plans them; equal ones
		 * once).  An index with expressions or an exclusion constraint has
		 * its IndexInfo built per row, as ExecOpenIndices builds it.
		 */
		indexes = rel->rd_rel->relhasindex ? RelationGetIndexList(rel) : NIL;
		cache->nindexes = list_length(indexes);
		i = Max(cache->nindexes, 1);
		cache->index_oids = palloc0(sizeof(Oid) * i);
		cache->index_infos = palloc0(sizeof(IndexInfo *) * i);
		cache->index_pred = palloc0(sizeof(int) * i);
		cache->preds = palloc0(sizeof(List *) * i);
		i = 0;
		foreach(lc, indexes)
		{
			Relation	index = index_open(lfirst_oid(lc), RowExclusiveLock);
			IndexInfo  *ii = BuildIndexInfo(index);
			int			p = -1;

			if (ii->ii_Predicate != NIL)
			{
				List	   *pred = (List *) outbox_plan_expr((Expr *) ii->ii_Predicate);

				for (p = 0; p < cache->npreds; p++)
					if (equal(cache->preds[p], pred))
						break;
				if (p == cache->npreds)
					cache->preds[cache->npreds++] = pred;
				ii->ii_Predicate = cache->preds[p];
			}
			cache->index_oids[i] = RelationGetRelid(index);
			cache->index_pred[i] = p;
			if (ii->ii_Expressions == NIL && ii->ii_ExclusionOps == NULL)
				cache->index_infos[i] = ii;
			index_close(index, NoLock);
			i++;
		}
		list_free(indexes);

		MemoryContextSwitchTo(old);
		cache->dedup_index = outbox_dedup_index(rel,
												outbox_columns(rel, "outbox_enqueue"));
	}

	if (outbox_insert_generation != generation)
		return NULL;			/* changed under us: rebuild next time */
	cache->relid = RelationGetRelid(rel);
	cache->userid = GetUserId();
	cache->search_path = outbox_get_search_path(cache->cxt);
	cache->generation = generation;
	return cache->direct ? cache : NULL;
}

/*
 * outbox_insert_open_indices
 *
 * ExecOpenIndices(rri, speculative) for the table cache was built for, from
 * what it keeps: each index opened and locked, a copy of its IndexInfo (or
 * one built now), and the state of its predicate, one per distinct
 * predicate, in the current memory context (the row's EState's).
 */
static void
outbox_insert_open_indices(OutboxInsertCache *cache, ResultRelInfo *rri,
						   bool speculative)
{
	int			n = cache->nindexes;
	ExprState **predstates;
	int			i;

	rri->ri_NumIndices = 0;
	if (n == 0)
		return;
	rri->ri_IndexRelationDescs = palloc(sizeof(Relation) * n);
	rri->ri_IndexRelationInfo = palloc(sizeof(IndexInfo *) * n);
	rri->ri_NumIndices = n;
	predstates = palloc0(sizeof(ExprState *) * Max(cache->npreds, 1));
	for (i = 0; i < n; i++)
	{
		Relation	index = index_open(cache->index_oids[i], RowExclusiveLock);
		IndexInfo  *ii;
		int			p = cache->index_pred[i];

		if (cache->index_infos[i] != NULL)
		{
			ii = palloc(sizeof(IndexInfo));
			memcpy(ii, cache->index_infos[i], sizeof(IndexInfo));
			ii->ii_Context = CurrentMemoryContext;
		}
		else
			ii = BuildIndexInfo(index);
		if (speculative && ii->ii_Unique)
			BuildSpeculativeIndexInfo(index, ii);
		if (p >= 0)
		{
			if (predstates[p] == NULL)
				predstates[p] = ExecInitQual(cache->preds[p], NULL);
			ii->ii_PredicateState = predstates[p];
		}
		rri->ri_IndexRelationDescs[i] = index;
		rri->ri_IndexRelationInfo[i] = ii;
	}
}

/*
 * outbox_dedup_index
 *
 * The unique index of rel on (recipient, dedup_key) WHERE dedup_key IS NOT
 * NULL, which a keyed enqueue's ON CONFLICT infers, or InvalidOid (the
 * enqueue then runs its INSERT through SPI).
 */
static Oid
outbox_dedup_index(Relation rel, const OutboxColumns *cols)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	Oid			result = InvalidOid;

	if (cols->dedup_key == InvalidAttrNumber)
		return InvalidOid;
	foreach(lc, indexes)
	{
		Relation	index = index_open(lfirst_oid(lc), RowExclusiveLock);
		Form_pg_index form = index->rd_index;
		List	   *pred = RelationGetIndexPredicate(index);
		NullTest   *test = list_length(pred) == 1 && IsA(linitial(pred), NullTest) ?
			(NullTest *) linitial(pred) : NULL;

		if (form->indisunique && form->indisvalid && form->indimmediate &&
			form->indnkeyatts == 2 && form->indnatts == 2 &&
			form->indkey.values[0] == cols->recipient &&
			form->indkey.values[1] == cols->dedup_key &&
			RelationGetIndexExpressions(index) == NIL &&
			test != NULL && test->nulltesttype == IS_NOT_NULL &&
			IsA(test->arg, Var) &&
			((Var *) test->arg)->varattno == cols->dedup_key)
			result = RelationGetRelid(index);
		index_close(index, NoLock);
		if (OidIsValid(result))
			break;
	}
	return result;
}

/*
 * outbox_check_conflict_visible
 *
 * ON CONFLICT DO NOTHING found the row at tid: under REPEATABLE READ or
 * SERIALIZABLE it must be one our snapshot sees (or our own), else 40001,
 * as ExecInsert raises it.
 */
static void
outbox_check_conflict_visible(EState *estate, Relation rel, ItemPointer tid)
{
	TupleTableSlot *slot;

	if (!IsolationUsesXactSnapshot())
		return;
	slot = table_slot_create(rel, &estate->es_tupleTable);
	if (!table_tuple_fetch_row_version(rel, tid, SnapshotAny, slot))
		elog(ERROR, "failed to fetch conflicting tuple for ON CONFLICT");
	if (!table_tuple_satisfies_snapshot(rel, slot, estate->es_snapshot))
	{
		bool		isnull;
		TransactionId xmin = DatumGetTransactionId(slot_getsysattr(slot,
																   MinTransactionIdAttributeNumber,
																   &isnull));

		if (!TransactionIdIsCurrentTransactionId(xmin))
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to concurrent update")));
	}
	ExecClearTuple(slot);
}

/*
 * outbox_plan_expr
 *
 * expression_planner, keeping the functions and types the expression
 * depends on in outbox_insert_cache.inval_items (in its memory context,
 * which is current).
 */
static Expr *
outbox_plan_expr(Expr *expr)
{
	List	   *relation_oids = NIL;
	List	   *inval_items = NIL;
	Expr	   *planned;

	planned = expression_planner_with_deps(expr, &relation_oids, &inval_items);
	outbox_insert_cache.inval_items =
		list_concat(outbox_insert_cache.inval_items, inval_items);
	return planned;
}

/*
 * outbox_no_row_inserted
 *
 * An enqueue must insert its row: a BEFORE INSERT trigger on the table that
 * returned NULL (or a rule that replaced the INSERT) gets 09000.
 */
void
outbox_no_row_inserted(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_TRIGGERED_ACTION_EXCEPTION),
			 errmsg("outbox_enqueue inserted no row"),
			 errdetail("A BEFORE INSERT trigger on the outbox table returned NULL, or a rule replaced the INSERT."),
			 errhint("An enqueue that inserts nothing would lose the message: let such triggers raise an error instead.")));
}

/*
 * outbox_insert_relcache_callback
 *
 * An invalidation of the table the expressions were planned for, of one of
 * its indexes (or of every relation): build them again at next use.
 */
void
outbox_insert_relcache_callback(Datum arg, Oid relid)
{
	OutboxInsertCache *cache = &outbox_insert_cache;
	int			i;

	if (!OidIsValid(relid) || relid == cache->relid)
	{
		outbox_insert_generation++;
		return;
	}
	for (i = 0; i < cache->nindexes; i++)
	{
		if (cache->index_oids[i] == relid)
		{
			outbox_insert_generation++;
			return;
		}
	}
}

/*
 * outbox_insert_syscache_callback
 *
 * A function or type changed: if the planned expressions use it (a SQL
 * function inlined into a default, say), plan them again at next use.  The
 * dependencies are those the plan cache tracks for a statement
 * (expression_planner_with_deps), matched the way it matches them.
 */
void
outbox_insert_syscache_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	ListCell   *lc;

	if (hashvalue == 0)
	{
		outbox_insert_generation++;
		return;
	}
	foreach(lc, outbox_insert_cache.inval_items)
	{
		PlanInvalItem *item = lfirst_node(PlanInvalItem, lc);

		if (item->cacheId == cacheid && item->hashValue == hashvalue)
		{
			outbox_insert_generation++;
			return;
		}
	}
}
