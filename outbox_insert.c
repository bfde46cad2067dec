/*-------------------------------------------------------------------------
 *
 * outbox_insert.c
 *		outbox_enqueue's insert without SQL.
 *
 * outbox_enqueue inserts its row through the executor's row-level calls
 * (the steps of ExecSimpleRelationInsert) instead of planning and running
 * an INSERT statement; the triggers, constraints and indexes apply exactly
 * as for the statement.  Where the table needs what only a real INSERT does,
 * the caller runs the SQL statement instead.
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
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/execExpr.h"
#include "executor/executor.h"
#include "executor/nodeModifyTable.h"
#include "miscadmin.h"
#include "nodes/plannodes.h"
#include "optimizer/optimizer.h"
#include "rewrite/rewriteHandler.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "delivery_outbox.h"
#include "outbox_insert.h"
#include "outbox_table.h"
#include "outbox_trigger.h"

/*
 * outbox_enqueue's direct insert is built and tested on PostgreSQL 15 and
 * uses executor calls that are the same from 14 to 17; elsewhere the
 * function runs its INSERT through SPI.
 */
#define OUTBOX_DIRECT_INSERT \
	(PG_VERSION_NUM >= 140000 && PG_VERSION_NUM < 180000)

/*
 * What outbox_enqueue's direct insert (outbox_insert_row) prepares once per
 * backend instead of once per row: the table's column defaults, CHECK
 * constraints and partial-index predicates, as expression states built from
 * the relcache entry.  Kept until the table's relcache entry, or a function
 * or type they use, is invalidated.
 */
typedef struct OutboxInsertCache
{
	MemoryContext cxt;			/* holds everything below; NULL if never built */
	Oid			relid;			/* the table it was built for */
	Oid			userid;			/* whose privileges the states were built with */
	uint64		generation;		/* outbox_insert_generation when built */
	bool		direct;			/* false: the table needs a real INSERT */
	int			in_use;			/* inserts running on these states */
	List	   *inval_items;	/* PlanInvalItems: functions and types used */
	ExprState **defaults;		/* per attribute, NULL: no default (NULL) */
	int			ncheck;
	ExprState **checks;			/* in the order of constr->check */
	int			npreds;
	Oid		   *pred_index;		/* partial indexes, and their predicates */
	ExprState **preds;
} OutboxInsertCache;

#if OUTBOX_DIRECT_INSERT
static OutboxInsertCache *outbox_insert_prepare(Relation rel);
static bool outbox_reusable_state(ExprState *state);
static Expr *outbox_plan_expr(Expr *expr);
#endif


/*
 * outbox_enqueue's prepared expressions, see OutboxInsertCache, and a
 * counter of the invalidations that concern them (the table, a function or
 * type they use): they are valid while it has not moved since they were
 * built, so one arriving during the build is not lost either.
 */
static OutboxInsertCache outbox_insert_cache;
static uint64 outbox_insert_generation = 1;

/*
 * outbox_insert_row
 *
 * outbox_enqueue's insert without SQL: values/nulls are recipient, kind,
 * payload and tenant_id.  The row goes through the executor's row-level
 * insert (the steps of ExecSimpleRelationInsert, which logical replication
 * applies rows with):
 * BEFORE ROW triggers (the state guard), stored generated columns, NOT NULL
 * and CHECK constraints, heap and index insert, AFTER ROW triggers (the
 * wake-up), fired at the end as for a statement.  What a plain INSERT
 * re-derives from the catalogs for every statement (defaults, CHECK
 * expressions, partial-index predicates) comes prepared from
 * outbox_insert_cache.
 *
 * Returns false, having changed nothing, when the table needs what only a
 * real INSERT does (rules, statement triggers, row security, a missing
 * privilege, another column type): the caller then runs the SQL statement.
 * Snapshots and command ids are handled as SPI handles a statement of a
 * volatile function: a fresh snapshot, a new command before and after, so
 * that defaults, CHECKs and triggers see what an INSERT would.
 */
bool
outbox_insert_row(Datum *values, const char *nulls, int64 *id)
{
#if OUTBOX_DIRECT_INSERT
	Relation	rel;
	const OutboxColumns *cols;
	OutboxInsertCache *cache;
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *slot;
	ExprContext *econtext;
	TupleDesc	tupdesc;
	bool		inserted;
	int			i;

	/* what the executor checks before any INSERT (ExecCheckXactReadOnly) */
	if (XactReadOnly)
		PreventCommandIfReadOnly("INSERT");
	PreventCommandIfParallelMode("INSERT");

	rel = table_open(outbox_table_oid(), RowExclusiveLock);
	cols = outbox_columns(rel, "outbox_enqueue");
	cache = outbox_insert_prepare(rel);
	if (cache == NULL ||
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

	cache->in_use++;
	PG_TRY();
	{
		MemoryContext oldcxt;

		/* everything below goes with the EState */
		estate = CreateExecutorState();
		oldcxt = MemoryContextSwitchTo(estate->es_query_cxt);
		estate->es_output_cid = GetCurrentCommandId(true);
		rri = makeNode(ResultRelInfo);
		InitResultRelInfo(rri, rel, 0, NULL, 0);
		/* where the AFTER trigger queue looks the relation up */
		estate->es_opened_result_relations = list_make1(rri);
		if (cache->ncheck > 0)
			rri->ri_ConstraintExprs = cache->checks;

		ExecOpenIndices(rri, false);
		for (i = 0; i < rri->ri_NumIndices; i++)
		{
			IndexInfo  *ii = rri->ri_IndexRelationInfo[i];
			Oid			indexoid = RelationGetRelid(rri->ri_IndexRelationDescs[i]);
			int			p;

			if (ii->ii_Predicate == NIL)
				continue;
			for (p = 0; p < cache->npreds; p++)
			{
				if (cache->pred_index[p] == indexoid)
				{
					ii->ii_PredicateState = cache->preds[p];
					break;
				}
			}
		}

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
				attnum == cols->tenant_id ? 3 : -1;

			if (given >= 0)
			{
				slot->tts_values[i] = values[given];
				slot->tts_isnull[i] = nulls[given] == 'n';
			}
			else if (cache->defaults[i] != NULL)
				slot->tts_values[i] =
					ExecEvalExprSwitchContext(cache->defaults[i], econtext,
											  &slot->tts_isnull[i]);
			else
			{
				slot->tts_values[i] = (Datum) 0;
				slot->tts_isnull[i] = true;
			}
		}
		ExecStoreVirtualTuple(slot);
		ExecMaterializeSlot(slot);

		/*
		 * The steps of ExecSimpleRelationInsert (logical replication's row
		 * insert), with the BEFORE triggers' verdict kept: one returning
		 * NULL means no row.
		 */
		AfterTriggerBeginQuery();
		inserted = true;
		if (rri->ri_TrigDesc != NULL &&
			rri->ri_TrigDesc->trig_insert_before_row)
			inserted = ExecBRInsertTriggers(estate, rri, slot);
		if (inserted)
		{
			List	   *recheck = NIL;
			bool		isnull;

			if (tupdesc->constr != NULL &&
				tupdesc->constr->has_generated_stored)
				ExecComputeStoredGenerated(rri, estate, slot, CMD_INSERT);
			if (tupdesc->constr != NULL)
				ExecConstraints(rri, slot, estate);
			simple_table_tuple_insert(rel, slot);
			if (rri->ri_NumIndices > 0)
#if PG_VERSION_NUM >= 160000
				recheck = ExecInsertIndexTuples(rri, slot, estate, false,
												false, NULL, NIL, false);
#else
				recheck = ExecInsertIndexTuples(rri, slot, estate, false,
												false, NULL, NIL);
#endif
			ExecARInsertTriggers(estate, rri, slot, recheck, NULL);
			/* not NULL: the primary key's NOT NULL was checked above */
			*id = DatumGetInt64(slot_getattr(slot, cols->id, &isnull));
		}
		AfterTriggerEndQuery(estate);

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
#else
	return false;
#endif
}

#if OUTBOX_DIRECT_INSERT
/*
 * outbox_reusable_state
 *
 * Whether an expression state may be kept and evaluated again in later
 * calls, each with an EState of its own.  Some steps cache what they build
 * in the evaluating EState's per-query memory (hashed ScalarArrayOp tables,
 * row-type conversion maps, ...), which would dangle after the first call:
 * only the steps below, which keep nothing there, are accepted.  Anything
 * else is prepared per call as a plain INSERT would.
 */
static bool
outbox_reusable_state(ExprState *state)
{
	int			i;

	for (i = 0; i < state->steps_len; i++)
	{
		switch (ExecEvalStepOp(state, &state->steps[i]))
		{
			case EEOP_DONE:
			case EEOP_INNER_FETCHSOME:
			case EEOP_OUTER_FETCHSOME:
			case EEOP_SCAN_FETCHSOME:
			case EEOP_INNER_VAR:
			case EEOP_OUTER_VAR:
			case EEOP_SCAN_VAR:
			case EEOP_ASSIGN_INNER_VAR:
			case EEOP_ASSIGN_OUTER_VAR:
			case EEOP_ASSIGN_SCAN_VAR:
			case EEOP_ASSIGN_TMP:
			case EEOP_ASSIGN_TMP_MAKE_RO:
			case EEOP_CONST:
			case EEOP_FUNCEXPR:
			case EEOP_FUNCEXPR_STRICT:
			case EEOP_FUNCEXPR_FUSAGE:
			case EEOP_FUNCEXPR_STRICT_FUSAGE:
			case EEOP_BOOL_AND_STEP_FIRST:
			case EEOP_BOOL_AND_STEP:
			case EEOP_BOOL_AND_STEP_LAST:
			case EEOP_BOOL_OR_STEP_FIRST:
			case EEOP_BOOL_OR_STEP:
			case EEOP_BOOL_OR_STEP_LAST:
			case EEOP_BOOL_NOT_STEP:
			case EEOP_QUAL:
			case EEOP_JUMP:
			case EEOP_JUMP_IF_NULL:
			case EEOP_JUMP_IF_NOT_NULL:
			case EEOP_JUMP_IF_NOT_TRUE:
			case EEOP_NULLTEST_ISNULL:
			case EEOP_NULLTEST_ISNOTNULL:
			case EEOP_BOOLTEST_IS_TRUE:
			case EEOP_BOOLTEST_IS_NOT_TRUE:
			case EEOP_BOOLTEST_IS_FALSE:
			case EEOP_BOOLTEST_IS_NOT_FALSE:
			case EEOP_CASE_TESTVAL:
			case EEOP_MAKE_READONLY:
			case EEOP_IOCOERCE:
			case EEOP_DISTINCT:
			case EEOP_NOT_DISTINCT:
			case EEOP_NULLIF:
			case EEOP_SQLVALUEFUNCTION:
			case EEOP_NEXTVALUEEXPR:
			case EEOP_ARRAYEXPR:
			case EEOP_MINMAX:
			case EEOP_SCALARARRAYOP:
				break;
			default:
				return false;
		}
	}
	return true;
}

/*
 * outbox_insert_prepare
 *
 * outbox_insert_cache for rel, built now if the table changed since (or if
 * it never was); NULL when the direct insert may not be used for this table,
 * or while an insert further up the stack still runs on the states (a
 * trigger or default that enqueues: the nested call then takes the SQL
 * path rather than rebuilding states in use).
 */
static OutboxInsertCache *
outbox_insert_prepare(Relation rel)
{
	OutboxInsertCache *cache = &outbox_insert_cache;
	TupleDesc	tupdesc = RelationGetDescr(rel);
	TriggerDesc *trig = rel->trigdesc;
	MemoryContext old;
	List	   *indexes;
	ListCell   *lc;
	uint64		generation;
	int			i;

	/*
	 * ExecInitExpr checks EXECUTE on the functions it meets: states built
	 * for one user are not reused for another (the function is SECURITY
	 * DEFINER, so the user is normally always its owner).
	 */
	if (cache->generation == outbox_insert_generation &&
		cache->relid == RelationGetRelid(rel) &&
		cache->userid == GetUserId())
		return cache->direct && cache->in_use == 0 ? cache : NULL;
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
	cache->npreds = 0;

	/* what only the SQL INSERT handles */
	cache->direct =
		rel->rd_rel->relkind == RELKIND_RELATION &&
		!rel->rd_rel->relispartition &&
		!rel->rd_rel->relrowsecurity &&
		rel->rd_rules == NULL &&
		(trig == NULL ||
		 (!trig->trig_insert_before_statement &&
		  !trig->trig_insert_after_statement &&
		  !trig->trig_insert_instead_row &&
		  !trig->trig_insert_new_table));

	/*
	 * A domain's constraints are read when a default is prepared, and
	 * changing them does not invalidate the table: columns of a domain type
	 * keep the INSERT.
	 */
	for (i = 0; cache->direct && i < tupdesc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(tupdesc, i);

		if (!att->attisdropped && get_typtype(att->atttypid) == TYPTYPE_DOMAIN)
			cache->direct = false;
	}

	if (cache->direct)
	{
		old = MemoryContextSwitchTo(cache->cxt);

		/* defaults, as the rewriter adds them to an INSERT */
		cache->defaults = palloc0(sizeof(ExprState *) * Max(tupdesc->natts, 1));
		for (i = 0; i < tupdesc->natts && cache->direct; i++)
		{
			Form_pg_attribute att = TupleDescAttr(tupdesc, i);
			Node	   *expr;

			if (att->attisdropped || att->attgenerated)
				continue;
			expr = build_column_default(rel, att->attnum);
			if (expr == NULL)
				continue;
			cache->defaults[i] = ExecInitExpr(outbox_plan_expr((Expr *) expr),
											  NULL);
			if (!outbox_reusable_state(cache->defaults[i]))
				cache->direct = false;
		}

		/*
		 * CHECK constraints, as ExecRelCheck builds them, in the same order;
		 * all or none (with one that cannot be kept, ExecConstraints builds
		 * them all per call).
		 */
		if (cache->direct && tupdesc->constr != NULL &&
			tupdesc->constr->num_check > 0)
		{
			ConstrCheck *check = tupdesc->constr->check;

			cache->ncheck = tupdesc->constr->num_check;
			cache->checks = palloc(sizeof(ExprState *) * cache->ncheck);
			for (i = 0; i < cache->ncheck; i++)
			{
				cache->checks[i] =
					ExecInitExpr(outbox_plan_expr(stringToNode(check[i].ccbin)),
								 NULL);
				if (!outbox_reusable_state(cache->checks[i]))
					cache->ncheck = 0;
			}
		}

		/* partial-index predicates, each kept or left to the executor */
		indexes = RelationGetIndexList(rel);
		cache->pred_index = palloc0(sizeof(Oid) * Max(list_length(indexes), 1));
		cache->preds = palloc0(sizeof(ExprState *) * Max(list_length(indexes), 1));
		foreach(lc, indexes)
		{
			Oid			indexoid = lfirst_oid(lc);
			Relation	index;
			List	   *pred;
			ExprState  *state;

			if (!cache->direct)
				break;
			index = index_open(indexoid, RowExclusiveLock);
			pred = RelationGetIndexPredicate(index);
			if (pred != NIL)
			{
				state = ExecInitQual((List *) outbox_plan_expr((Expr *) pred),
									 NULL);
				if (outbox_reusable_state(state))
				{
					cache->pred_index[cache->npreds] = indexoid;
					cache->preds[cache->npreds] = state;
					cache->npreds++;
				}
			}
			index_close(index, NoLock);
		}

		MemoryContextSwitchTo(old);
		if (!cache->direct)
		{
			MemoryContextReset(cache->cxt);
			cache->inval_items = NIL;
			cache->ncheck = 0;
			cache->npreds = 0;
		}
	}

	if (outbox_insert_generation != generation)
		return NULL;			/* changed under us: rebuild next time */
	cache->relid = RelationGetRelid(rel);
	cache->userid = GetUserId();
	cache->generation = generation;
	return cache->direct ? cache : NULL;
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
#endif							/* OUTBOX_DIRECT_INSERT */

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
 * An invalidation of the table the expressions were prepared for (or of
 * every relation): rebuild them at next use.
 */
void
outbox_insert_relcache_callback(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == outbox_insert_cache.relid)
		outbox_insert_generation++;
}

/*
 * outbox_insert_syscache_callback
 *
 * A function or type changed: if outbox_enqueue's prepared expressions use
 * it (a SQL function inlined into a default, say), rebuild them at next use.
 * The dependencies are those the plan cache tracks for a statement
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
