/*-------------------------------------------------------------------------
 *
 * delivery_outbox.c
 *		A durable, ack-tracked, recipient-addressed push-delivery outbox.
 *
 * One table, "delivery_outbox", holds the messages.  A producer inserts a
 * row in its own transaction; a relay claims pending rows, pushes them to the
 * addressed recipient, and the recipient acks.
 *
 * Invariants:
 *
 * - The state machine is pending -> delivered -> acked, plus
 *	 delivered -> pending (reclaim/release).  The BEFORE ROW trigger
 *	 outbox_state_guard() is the single authority on it: it rejects every
 *	 other transition with SQLSTATE 23514, whoever writes, and it alone
 *	 maintains delivery_attempts, delivered_at and acked_at.  The SQL-callable
 *	 functions below only ever UPDATE delivery_state (and recipient); they
 *	 never write the bookkeeping columns themselves.
 *
 * - Whenever a row becomes pending for a recipient (insert as pending, or
 *	 delivered -> pending, or re-addressing) the trigger queues a NOTIFY on
 *	 the channel named by delivery_outbox.channel whose payload is the row id
 *	 in decimal and nothing else.  async.c sends it at commit, never on
 *	 rollback.  Above delivery_outbox.notify_queue_limit of queue usage the
 *	 NOTIFY is skipped (a full queue would make the producer's COMMIT fail);
 *	 relays find such rows by draining the table.
 *
 * - Every function that touches several rows either skips locked rows
 *	 (claim, reclaim, purge) or locks its rows in ascending id order before
 *	 changing them (ack, release, resync, reassign), so no two of them can
 *	 deadlock each other.
 *
 * - The C code never finds its table through search_path: the extension's
 *	 schema is resolved by OID from pg_extension, quoted into every statement,
 *	 and every operator and function in those statements is qualified.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		delivery_outbox.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/detoast.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/indexing.h"
#include "catalog/pg_class.h"
#include "catalog/pg_depend.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "executor/execExpr.h"
#include "executor/executor.h"
#include "executor/nodeModifyTable.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "optimizer/optimizer.h"
#include "pgstat.h"
#include "rewrite/rewriteHandler.h"
#include "storage/lmgr.h"
#include "storage/proclist.h"
#include "storage/proc.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "delivery_outbox.h"

PG_MODULE_MAGIC;

/* Names of the extension, its table and the table's columns. */
#define OUTBOX_TABLE_NAME		"delivery_outbox"

#define COL_ID					"id"
#define COL_RECIPIENT			"recipient"
#define COL_KIND				"kind"
#define COL_TENANT_ID			"tenant_id"
#define COL_PAYLOAD				"payload"
#define COL_STATE				"delivery_state"
#define COL_ATTEMPTS			"delivery_attempts"
#define COL_CREATED_AT			"created_at"
#define COL_DELIVERED_AT		"delivered_at"
#define COL_ACKED_AT			"acked_at"

/* Each statement the functions run; see outbox_plan_sql(). */
typedef enum OutboxPlanId
{
	OUTBOX_PLAN_ENQUEUE,
	OUTBOX_PLAN_CLAIM,			/* four filter variants, in this order */
	OUTBOX_PLAN_CLAIM_R,
	OUTBOX_PLAN_CLAIM_T,
	OUTBOX_PLAN_CLAIM_RT,
	OUTBOX_PLAN_ACK_LOCK,
	OUTBOX_PLAN_ACK_LOCK_R,
	OUTBOX_PLAN_ACK_DELIVER,
	OUTBOX_PLAN_ACK_FINISH,
	OUTBOX_PLAN_RELEASE,
	OUTBOX_PLAN_RECLAIM,
	OUTBOX_PLAN_RESYNC,
	OUTBOX_PLAN_RESYNC_NULL_TENANT,
	OUTBOX_PLAN_REASSIGN,
	OUTBOX_PLAN_REPLAY,
	OUTBOX_PLAN_REPLAY_T,
	OUTBOX_PLAN_PURGE,
	OUTBOX_PLAN_STATS,
	OUTBOX_PLAN_ENQUEUE_BATCH,
	OUTBOX_PLAN_EXISTS,
	OUTBOX_PLAN_EXISTS_R,
	OUTBOX_PLAN_BACKLOG,
	OUTBOX_NUM_PLANS
} OutboxPlanId;

/* The three delivery states. */
typedef enum OutboxState
{
	OUTBOX_PENDING,
	OUTBOX_DELIVERED,
	OUTBOX_ACKED
} OutboxState;

static const char *const outbox_state_names[] = {"pending", "delivered", "acked"};

/* Attribute numbers of the guarded table's columns, cached per relation. */
typedef struct OutboxColumns
{
	Oid			relid;			/* InvalidOid when the cache is empty */
	AttrNumber	id;
	AttrNumber	recipient;
	AttrNumber	kind;
	AttrNumber	tenant_id;
	AttrNumber	payload;
	AttrNumber	state;
	AttrNumber	attempts;
	AttrNumber	created_at;
	AttrNumber	delivered_at;
	AttrNumber	acked_at;
} OutboxColumns;

/*
 * What the current transaction did, kept per (sub)transaction level and
 * published only when the top-level transaction commits: counter deltas for
 * shared memory, whether rows became pending (outbox_wait() sleepers are
 * woken), and how many of the deferred wake-up ids belong to the levels
 * below this one.
 */
typedef struct OutboxXactLevel
{
	int			nest_level;
	int64		deltas[OUTBOX_NUM_COUNTERS];
	bool		made_pending;
	int			nids_at_start;
	struct OutboxXactLevel *parent;
} OutboxXactLevel;

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

void		_PG_init(void);

static void outbox_spi_connect(void);
static void outbox_relcache_callback(Datum arg, Oid relid);
static void outbox_syscache_callback(Datum arg, int cacheid, uint32 hashvalue);
static void outbox_insert_callback(Datum arg, int cacheid, uint32 hashvalue);
static Oid	outbox_member_table(Oid ext_oid);
static Oid	outbox_extension_table(void);
static const char *outbox_table(void);
static void outbox_reset_cache(void);
static SPIPlanPtr outbox_plan(OutboxPlanId id);
static char *outbox_plan_sql(OutboxPlanId id, const char *table);
static uint64 outbox_execute(OutboxPlanId id, Datum *values, const char *nulls,
							 int expected);
static const OutboxColumns *outbox_columns(Relation rel, const char *funcname);
static AttrNumber outbox_column(Relation rel, const char *name, Oid typid);
static OutboxState outbox_parse_state(Relation rel, AttrNumber attnum,
									  Datum value, int64 id);
static void outbox_wake(int64 id);
static OutboxXactLevel *outbox_level(void);
static void outbox_xact_callback(XactEvent event, void *arg);
static void outbox_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
									SubTransactionId parentSubid, void *arg);
static void outbox_count_state(OutboxState state, int64 delta);
static OutboxDatabase *outbox_my_database(bool create);
static int	outbox_int64_cmp(const void *a, const void *b);
static void outbox_publish(OutboxDatabase *db, const int64 *deltas,
						   bool made_pending);
#if PG_VERSION_NUM >= 140000
static void outbox_stash_prepared(OutboxXactLevel *level);
static void outbox_finish_prepared(const char *gid, bool commit);
static void outbox_process_utility(PlannedStmt *pstmt, const char *queryString,
								   bool readOnlyTree,
								   ProcessUtilityContext context,
								   ParamListInfo params,
								   QueryEnvironment *queryEnv,
								   DestReceiver *dest, QueryCompletion *qc);
#endif
static Datum outbox_text_array(FunctionCallInfo fcinfo, int argno,
							   const char *name, bool required,
							   bool elements_required, int *nitems);
static bool outbox_datum_equal(Datum a, bool a_null, Datum b, bool b_null,
							   Form_pg_attribute att);
static HeapTuple outbox_guard_insert(Relation rel, HeapTuple tuple,
									 const OutboxColumns *cols, bool wake);
static void outbox_inserted_row(Relation rel, HeapTuple tuple,
								const OutboxColumns *cols);
static HeapTuple outbox_guard_update(Relation rel, HeapTuple oldtuple,
									 HeapTuple newtuple,
									 const OutboxColumns *cols);
static bool outbox_insert_row(Datum *values, const char *nulls, int64 *id);
static void outbox_no_row_inserted(void) pg_attribute_noreturn();
#if OUTBOX_DIRECT_INSERT
static OutboxInsertCache *outbox_insert_prepare(Relation rel);
static bool outbox_reusable_state(ExprState *state);
static Expr *outbox_plan_expr(Expr *expr);
#endif
static void outbox_check_text(FunctionCallInfo fcinfo, int argno,
							  const char *name, bool required);
static int64 outbox_check_max_rows(FunctionCallInfo fcinfo, int argno);
static Datum outbox_check_ids(FunctionCallInfo fcinfo, int argno);
static Datum outbox_cutoff(FunctionCallInfo fcinfo, int argno);
static void outbox_check_interval(FunctionCallInfo fcinfo, int argno,
								  const char *name);
static Datum outbox_null_text(FunctionCallInfo fcinfo, int argno, char *null);
static Tuplestorestate *outbox_begin_srf(FunctionCallInfo fcinfo);
static void outbox_put_rows(Tuplestorestate *tupstore);
static Datum outbox_count_result(uint64 count);
static uint64 outbox_ack_internal(Datum ids, Datum recipient, char recipient_null);
static uint64 outbox_run(OutboxPlanId id, Datum *values, const char *nulls,
						 int expected);
static uint64 outbox_cutoff_rows(OutboxPlanId id, int expected,
								 TimestampTz cutoff, int64 max_rows);

PG_FUNCTION_INFO_V1(outbox_state_guard);
PG_FUNCTION_INFO_V1(outbox_inserted);
PG_FUNCTION_INFO_V1(outbox_enqueue);
PG_FUNCTION_INFO_V1(outbox_claim);
PG_FUNCTION_INFO_V1(outbox_ack);
PG_FUNCTION_INFO_V1(outbox_ack_array);
PG_FUNCTION_INFO_V1(outbox_release);
PG_FUNCTION_INFO_V1(outbox_reclaim);
PG_FUNCTION_INFO_V1(outbox_reclaim_recipient);
PG_FUNCTION_INFO_V1(outbox_reassign);
PG_FUNCTION_INFO_V1(outbox_replay);
PG_FUNCTION_INFO_V1(outbox_purge);
PG_FUNCTION_INFO_V1(outbox_stats);
PG_FUNCTION_INFO_V1(outbox_enqueue_batch);
PG_FUNCTION_INFO_V1(outbox_wait);
PG_FUNCTION_INFO_V1(outbox_activity);

static const struct config_enum_entry outbox_notify_options[] = {
	{"commit", OUTBOX_NOTIFY_COMMIT, false},
	{"deferred", OUTBOX_NOTIFY_DEFERRED, false},
	{"off", OUTBOX_NOTIFY_OFF, false},
	{NULL, 0, false}
};

/* GUC variables */
static char *outbox_channel = NULL;
static int	outbox_max_payload_size = 1024 * 1024;
static double outbox_notify_queue_limit = 0.5;
static int	outbox_notify_mode = OUTBOX_NOTIFY_COMMIT;

/* Where the extension's table is, resolved once per backend. */
static Oid	outbox_ext_oid = InvalidOid;
static Oid	outbox_rel_oid = InvalidOid;
static char *outbox_qualified_table = NULL;
static bool outbox_cache_stale = false;
static MemoryContext OutboxCacheContext = NULL;
static SPIPlanPtr outbox_plans[OUTBOX_NUM_PLANS];

/* The trigger's column map. */
static OutboxColumns outbox_cols;

/*
 * outbox_enqueue's prepared expressions, see OutboxInsertCache, and a
 * counter of the invalidations that concern them (the table, a function or
 * type they use): they are valid while it has not moved since they were
 * built, so one arriving during the build is not lost either.
 */
static OutboxInsertCache outbox_insert_cache;
static uint64 outbox_insert_generation = 1;

/* This transaction's bookkeeping (in TopTransactionContext), see above. */
static OutboxXactLevel *outbox_xact = NULL;
static int64 *outbox_deferred_ids = NULL;
static int	outbox_deferred_count = 0;
static int	outbox_deferred_space = 0;

/* GID of the PREPARE TRANSACTION this transaction ends with, if any. */
static char outbox_prepare_gid[GIDSIZE];

#if PG_VERSION_NUM >= 140000
static ProcessUtility_hook_type prev_process_utility_hook = NULL;
#endif

/* Which counter a delivered -> pending move feeds: release or reclaim. */
static OutboxCounter outbox_requeue_counter = OUTBOX_COUNT_RECLAIMED;

static bool
outbox_channel_check(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL || (*newval)[0] == '\0')
	{
		GUC_check_errdetail("The notification channel must not be empty.");
		return false;
	}
	if (strlen(*newval) >= NAMEDATALEN)
	{
		GUC_check_errdetail("The notification channel must be shorter than %d bytes.",
							NAMEDATALEN);
		return false;
	}
	return true;
}

/*
 * _PG_init
 *
 * Define the GUCs and the invalidation callback.  Nothing here needs
 * shared_preload_libraries: the library is loaded on first use.
 */
void
_PG_init(void)
{
	DefineCustomStringVariable(OUTBOX_GUC_PREFIX ".channel",
							   "Channel on which a row id is notified when the row becomes pending.",
							   "Relays LISTEN on this channel; the payload is the row id only.",
							   &outbox_channel,
							   "delivery_outbox",
							   PGC_SUSET,
							   0,
							   outbox_channel_check, NULL, NULL);

	DefineCustomIntVariable(OUTBOX_GUC_PREFIX ".max_payload_size",
							"Largest payload, in bytes, that the outbox accepts.",
							NULL,
							&outbox_max_payload_size,
							1024 * 1024,
							0, (int) MaxAllocSize,
							PGC_SUSET,
							GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	DefineCustomRealVariable(OUTBOX_GUC_PREFIX ".notify_queue_limit",
							 "Notification queue usage above which wake-ups are skipped.",
							 "Rows are kept either way; relays find them by draining the table.",
							 &outbox_notify_queue_limit,
							 0.5,
							 0.0, 1.0,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomEnumVariable(OUTBOX_GUC_PREFIX ".notify",
							 "How relays are woken when rows become pending.",
							 "commit: NOTIFY in the producer's transaction; deferred: hand the ids to the background worker at commit; off: no NOTIFY.",
							 &outbox_notify_mode,
							 OUTBOX_NOTIFY_COMMIT,
							 outbox_notify_options,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	outbox_sweeper_init();

#if PG_VERSION_NUM >= 150000
	MarkGUCPrefixReserved(OUTBOX_GUC_PREFIX);
#else
	EmitWarningsOnPlaceholders(OUTBOX_GUC_PREFIX);
#endif

	CacheRegisterRelcacheCallback(outbox_relcache_callback, (Datum) 0);
	CacheRegisterSyscacheCallback(NAMESPACEOID, outbox_syscache_callback,
								  (Datum) 0);
	CacheRegisterSyscacheCallback(PROCOID, outbox_insert_callback, (Datum) 0);
	CacheRegisterSyscacheCallback(TYPEOID, outbox_insert_callback, (Datum) 0);
	RegisterXactCallback(outbox_xact_callback, NULL);
	RegisterSubXactCallback(outbox_subxact_callback, NULL);

#if PG_VERSION_NUM >= 140000
	/* counting two-phase work needs the shared memory of the preload */
	if (process_shared_preload_libraries_in_progress)
	{
		prev_process_utility_hook = ProcessUtility_hook;
		ProcessUtility_hook = outbox_process_utility;
	}
#endif
}

/*
 * outbox_state_guard
 *
 * BEFORE INSERT OR UPDATE OR DELETE ... FOR EACH ROW trigger enforcing the
 * state machine and maintaining the bookkeeping columns (deletes are only
 * counted).  Works on any table that has the outbox's columns (looked up by
 * name), raises 39P01 when not fired as a BEFORE ROW INSERT/UPDATE/DELETE
 * trigger, 42703 for a missing column, 09000 for a column of the wrong type,
 * and 23514 for any illegal row.
 */
Datum
outbox_state_guard(PG_FUNCTION_ARGS)
{
	const char *funcname = "outbox_state_guard";
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	const OutboxColumns *cols;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" was not called by trigger manager",
						funcname)));

	if (!TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" must be fired BEFORE ROW", funcname)));

	if (!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event) &&
		!TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) &&
		!TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" must be fired for INSERT, UPDATE or DELETE",
						funcname)));

	cols = outbox_columns(trigdata->tg_relation, funcname);

	if (TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
	{
		Datum		d;
		bool		isnull;

		d = heap_getattr(trigdata->tg_trigtuple, cols->state,
						 RelationGetDescr(trigdata->tg_relation), &isnull);
		if (!isnull)
			outbox_count_state(outbox_parse_state(trigdata->tg_relation,
												  cols->state, d, 0), -1);
		outbox_count(OUTBOX_COUNT_PURGED, 1);
		return PointerGetDatum(trigdata->tg_trigtuple);
	}

	/*
	 * Since 1.1 an AFTER INSERT trigger (outbox_inserted) wakes and counts
	 * inserted rows, so that a row an ON CONFLICT clause did not insert does
	 * neither; the guard is then created with the argument 'after_insert'.
	 */
	if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		return PointerGetDatum(outbox_guard_insert(trigdata->tg_relation,
												   trigdata->tg_trigtuple,
												   cols,
												   trigdata->tg_trigger->tgnargs == 0 ||
												   strcmp(trigdata->tg_trigger->tgargs[0],
														  "after_insert") != 0));

	return PointerGetDatum(outbox_guard_update(trigdata->tg_relation,
											   trigdata->tg_trigtuple,
											   trigdata->tg_newtuple,
											   cols));
}

/*
 * outbox_enqueue
 *
 * Insert one pending row and return its id.  The trigger validates the row
 * (payload size included) and queues the wake-up.
 */
Datum
outbox_enqueue(PG_FUNCTION_ARGS)
{
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	bool		isnull;
	int64		id;

	outbox_check_text(fcinfo, 0, "recipient", true);
	outbox_check_text(fcinfo, 1, "kind", true);
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("payload must not be null")));

	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);
	values[2] = PG_GETARG_DATUM(2);
	values[3] = outbox_null_text(fcinfo, 3, &nulls[3]);

	if (outbox_insert_row(values, nulls, &id))
		PG_RETURN_INT64(id);

	outbox_spi_connect();
	outbox_execute(OUTBOX_PLAN_ENQUEUE, values, nulls, SPI_OK_INSERT_RETURNING);
	if (SPI_processed != 1)
		outbox_no_row_inserted();
	id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
									 SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();

	PG_RETURN_INT64(id);
}

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
static bool
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

	(void) outbox_table();		/* find (or re-check) the table */
	rel = table_open(outbox_rel_oid, RowExclusiveLock);
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
static void
outbox_no_row_inserted(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_TRIGGERED_ACTION_EXCEPTION),
			 errmsg("outbox_enqueue inserted no row"),
			 errdetail("A BEFORE INSERT trigger on the outbox table returned NULL, or a rule replaced the INSERT."),
			 errhint("An enqueue that inserts nothing would lose the message: let such triggers raise an error instead.")));
}

/*
 * outbox_claim
 *
 * Move up to max_rows pending rows (optionally one recipient's and/or one
 * tenant's) to delivered, oldest id first, skipping rows that other sessions
 * hold locked, and return them as updated, in id order.
 */
Datum
outbox_claim(PG_FUNCTION_ARGS)
{
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	Tuplestorestate *tupstore;
	int			variant = 0;

	values[0] = Int64GetDatum(outbox_check_max_rows(fcinfo, 0));
	outbox_check_text(fcinfo, 1, "recipient", false);
	values[1] = outbox_null_text(fcinfo, 1, &nulls[1]);
	values[2] = outbox_null_text(fcinfo, 2, &nulls[2]);
	if (nulls[1] == ' ')
		variant += 1;
	if (nulls[2] == ' ')
		variant += 2;

	tupstore = outbox_begin_srf(fcinfo);

	outbox_spi_connect();
	outbox_execute(OUTBOX_PLAN_CLAIM + variant, values, nulls, SPI_OK_SELECT);
	outbox_put_rows(tupstore);
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

	PG_RETURN_BOOL(outbox_ack_internal(ids, recipient, recipient_null) == 1);
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

	return outbox_count_result(outbox_ack_internal(ids, recipient,
												   recipient_null));
}

/*
 * outbox_release
 *
 * Give claimed rows back: delivered -> pending, in id order.
 */
Datum
outbox_release(PG_FUNCTION_ARGS)
{
	Datum		values[1];

	uint64		count;

	values[0] = outbox_check_ids(fcinfo, 0);

	/* the trigger counts these delivered -> pending moves as releases */
	outbox_requeue_counter = OUTBOX_COUNT_RELEASED;
	PG_TRY();
	{
		count = outbox_run(OUTBOX_PLAN_RELEASE, values, NULL, SPI_OK_UPDATE);
	}
	PG_FINALLY();
	{
		outbox_requeue_counter = OUTBOX_COUNT_RECLAIMED;
	}
	PG_END_TRY();

	return outbox_count_result(count);
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

	return outbox_count_result(outbox_reclaim_rows(cutoff, max_rows));
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
 * outbox_reclaim_recipient
 *
 * Reconnect resync: every delivered row of the recipient, in the given tenant
 * (a NULL tenant matches NULL only), back to pending.
 */
Datum
outbox_reclaim_recipient(PG_FUNCTION_ARGS)
{
	Datum		values[2];
	char		nulls[2] = {' ', ' '};

	outbox_check_text(fcinfo, 0, "recipient", true);
	values[0] = PG_GETARG_DATUM(0);
	values[1] = outbox_null_text(fcinfo, 1, &nulls[1]);

	return outbox_count_result(
		outbox_run(nulls[1] == 'n' ?
				   OUTBOX_PLAN_RESYNC_NULL_TENANT : OUTBOX_PLAN_RESYNC,
				   values, nulls, SPI_OK_UPDATE));
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
	Datum		values[2];

	outbox_check_text(fcinfo, 0, "from_recipient", true);
	outbox_check_text(fcinfo, 1, "to_recipient", true);
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);

	return outbox_count_result(outbox_run(OUTBOX_PLAN_REASSIGN, values, NULL,
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

	tupstore = outbox_begin_srf(fcinfo);

	outbox_spi_connect();
	outbox_execute(nulls[3] == 'n' ? OUTBOX_PLAN_REPLAY : OUTBOX_PLAN_REPLAY_T,
				   values, nulls, SPI_OK_SELECT);
	outbox_put_rows(tupstore);
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

	PG_RETURN_INT64((int64) outbox_purge_rows(cutoff, 0));
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
 * outbox_stats
 *
 * One row: rows per state, the age of the oldest pending row (since
 * enqueue) and of the oldest delivered row (since delivery), and the number
 * of recipients with open rows.
 */
Datum
outbox_stats(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		now = TimestampTzGetDatum(GetCurrentTimestamp());
	Datum		values[6];
	bool		nulls[6];
	HeapTuple	result;
	int			i;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	tupdesc = BlessTupleDesc(tupdesc);
	if (tupdesc->natts != lengthof(values))
		elog(ERROR, "outbox_stats() is declared with %d columns, expected %d",
			 tupdesc->natts, (int) lengthof(values));

	outbox_spi_connect();
	outbox_execute(OUTBOX_PLAN_STATS, &now, NULL, SPI_OK_SELECT);
	if (SPI_processed != 1)
		elog(ERROR, "outbox statistics query returned " UINT64_FORMAT " rows",
			 SPI_processed);
	for (i = 0; i < tupdesc->natts; i++)
	{
		Datum		v = SPI_getbinval(SPI_tuptable->vals[0],
									  SPI_tuptable->tupdesc, i + 1, &nulls[i]);

		/* copy by-reference values (the intervals) out of SPI memory */
		values[i] = nulls[i] ? (Datum) 0 :
			SPI_datumTransfer(v, TupleDescAttr(tupdesc, i)->attbyval,
							  TupleDescAttr(tupdesc, i)->attlen);
	}
	SPI_finish();

	result = heap_form_tuple(tupdesc, values, nulls);
	PG_RETURN_DATUM(HeapTupleGetDatum(result));
}

/*
 * outbox_enqueue_batch
 *
 * Insert one pending row per array position and return the ids in input
 * order.  The arrays must have equal lengths (tenant_ids may be NULL: no
 * tenant for any row); every element is validated as outbox_enqueue()
 * validates its arguments, and the trigger checks and wakes each row.
 */
Datum
outbox_enqueue_batch(PG_FUNCTION_ARGS)
{
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	int			n[4] = {0, 0, 0, 0};
	Tuplestorestate *tupstore;
	TupleDesc	tupdesc;
	int64	   *ids;
	uint64		i;
	int			a;

	values[0] = outbox_text_array(fcinfo, 0, "recipients", true, true, &n[0]);
	values[1] = outbox_text_array(fcinfo, 1, "kinds", true, true, &n[1]);
	values[2] = outbox_text_array(fcinfo, 2, "payloads", true, true, &n[2]);
	values[3] = outbox_text_array(fcinfo, 3, "tenant_ids", false, false, &n[3]);
	if (PG_ARGISNULL(3))
		nulls[3] = 'n';
	for (a = 1; a < 4; a++)
	{
		if (a == 3 && PG_ARGISNULL(3))
			continue;
		if (n[a] != n[0])
			ereport(ERROR,
					(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
					 errmsg("outbox batch arrays must have equal lengths"),
					 errdetail("Array recipients has length %d; array %s has length %d.",
							   n[0], a == 1 ? "kinds" : a == 2 ? "payloads" : "tenant_ids",
							   n[a])));
	}

	tupstore = outbox_begin_srf(fcinfo);
	if (n[0] == 0)
		return (Datum) 0;

	outbox_spi_connect();
	outbox_execute(OUTBOX_PLAN_ENQUEUE_BATCH, values, nulls,
				   SPI_OK_INSERT_RETURNING);
	if (SPI_processed != (uint64) n[0])
		elog(ERROR, "outbox batch insert returned " UINT64_FORMAT " rows, expected %d",
			 SPI_processed, n[0]);
	ids = palloc(sizeof(int64) * n[0]);
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		ids[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
											 SPI_tuptable->tupdesc, 1, &isnull));
	}

	/*
	 * The rows were inserted in input order and each took the next value of
	 * the sequence, so ascending ids are input order, whatever order
	 * RETURNING used.
	 */
	qsort(ids, n[0], sizeof(int64), outbox_int64_cmp);
	tupdesc = ((ReturnSetInfo *) fcinfo->resultinfo)->setDesc;
	for (a = 0; a < n[0]; a++)
	{
		Datum		v = Int64GetDatum(ids[a]);
		bool		isnull = false;

		tuplestore_putvalues(tupstore, tupdesc, &v, &isnull);
	}
	SPI_finish();

	return (Datum) 0;
}

/*
 * outbox_wait
 *
 * Block until there is a pending row (for recipient, if given) or timeout
 * has passed; true if there is one.  With the library preloaded the wait
 * sleeps on the database's condition variable, which every transaction that
 * made rows pending broadcasts at commit; without it, it polls every
 * OUTBOX_WAIT_POLL_MS.  Interruptible (statement_timeout, cancel).  Each
 * check takes a new snapshot, so call it in READ COMMITTED (autocommit).
 */
#define OUTBOX_WAIT_POLL_MS		100
#define OUTBOX_WAIT_RECHECK_MS	1000

Datum
outbox_wait(PG_FUNCTION_ARGS)
{
	Datum		values[1];
	char		nulls[1] = {' '};
	OutboxPlanId plan;
	TimestampTz deadline;
	OutboxDatabase *db = outbox_my_database(true);
	bool		found = false;

	outbox_check_interval(fcinfo, 0, "timeout");
	outbox_check_text(fcinfo, 1, "recipient", false);
	values[0] = outbox_null_text(fcinfo, 1, &nulls[0]);
	plan = nulls[0] == 'n' ? OUTBOX_PLAN_EXISTS : OUTBOX_PLAN_EXISTS_R;

	/* the deadline is "now + timeout"; a huge timeout is capped at a day */
	{
		Interval   *timeout = PG_GETARG_INTERVAL_P(0);
		Interval	day;

		memset(&day, 0, sizeof(day));
		day.day = 1;
		if (DatumGetBool(DirectFunctionCall2(interval_gt,
											 IntervalPGetDatum(timeout),
											 IntervalPGetDatum(&day))))
			timeout = &day;
		deadline = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
														   TimestampTzGetDatum(GetCurrentTimestamp()),
														   IntervalPGetDatum(timeout)));
	}

	for (;;)
	{
		long		remaining;

		/* get on the wait list before looking, so no commit is missed */
		if (db != NULL)
			ConditionVariablePrepareToSleep(&db->pending_cv);

		found = outbox_run(plan, values, nulls, SPI_OK_SELECT) > 0;

		remaining = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
													deadline);
		if (found || remaining <= 0)
			break;

		if (db != NULL)
			(void) ConditionVariableTimedSleep(&db->pending_cv,
											   Min(remaining, OUTBOX_WAIT_RECHECK_MS),
											   PG_WAIT_EXTENSION);
		else
		{
			(void) WaitLatch(MyLatch,
							 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 Min(remaining, OUTBOX_WAIT_POLL_MS),
							 PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
		CHECK_FOR_INTERRUPTS();
	}
	if (db != NULL)
		ConditionVariableCancelSleep();

	PG_RETURN_BOOL(found);
}

/*
 * outbox_activity
 *
 * One row per database that shared memory tracks: the counters since server
 * start and the open backlog.  Reading them is O(1); only when this
 * database's backlog has not been counted since the server started (or, in
 * a database no worker serves, not for OUTBOX_RECOUNT_MS) is it counted
 * here, from the open-row index.  Needs shared_preload_libraries (55000
 * otherwise).
 */
#define OUTBOX_RECOUNT_MS		60000

Datum
outbox_activity(PG_FUNCTION_ARGS)
{
	Tuplestorestate *tupstore;
	TupleDesc	tupdesc;
	int			i;

	if (outbox_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("delivery_outbox activity counters are not available"),
				 errdetail("The counters live in shared memory, which needs the library preloaded."),
				 errhint("Add delivery_outbox to shared_preload_libraries and restart the server.")));

	tupstore = outbox_begin_srf(fcinfo);
	tupdesc = ((ReturnSetInfo *) fcinfo->resultinfo)->setDesc;
	if (tupdesc->natts != OUTBOX_NUM_COUNTERS + 2)
		elog(ERROR, "outbox_activity() is declared with %d columns, expected %d",
			 tupdesc->natts, OUTBOX_NUM_COUNTERS + 2);

	{
		OutboxDatabase *mine = outbox_my_database(true);

		/*
		 * Count when never counted since the start; where no worker
		 * re-counts at every sweep, also when the last count is older than
		 * OUTBOX_RECOUNT_MS, so that drift (TRUNCATE, a dropped extension)
		 * does not last.
		 */
		if (mine != NULL &&
			(pg_atomic_read_u32(&mine->backlog_valid) == 0 ||
			 (mine->worker_pid == 0 &&
			  TimestampDifferenceExceeds((TimestampTz) pg_atomic_read_u64(&mine->backlog_counted_at),
										 GetCurrentTimestamp(),
										 OUTBOX_RECOUNT_MS))) &&
			outbox_installed())
			outbox_sync_backlog(mine);
	}

	for (i = 0; i < OUTBOX_MAX_DATABASES; i++)
	{
		OutboxDatabase *db = &outbox_shared->databases[i];
		Datum		values[OUTBOX_NUM_COUNTERS + 2];
		bool		nulls[OUTBOX_NUM_COUNTERS + 2];
		char	   *datname;
		int			c;

		if (!OidIsValid(db->dboid))
			continue;
		datname = get_database_name(db->dboid);
		if (datname == NULL)
			continue;			/* dropped */

		memset(nulls, 0, sizeof(nulls));
		values[0] = CStringGetTextDatum(datname);
		for (c = 0; c < OUTBOX_NUM_COUNTERS; c++)
			values[c + 1] = Int64GetDatum((int64) pg_atomic_read_u64(&db->counters[c]));
		if (pg_atomic_read_u32(&db->backlog_valid) == 0)
		{
			for (c = OUTBOX_FIRST_GAUGE; c < OUTBOX_NUM_COUNTERS; c++)
				nulls[c + 1] = true;
		}
		values[OUTBOX_NUM_COUNTERS + 1] = TimestampTzGetDatum(outbox_shared->started);
		tuplestore_putvalues(tupstore, tupdesc, values, nulls);
	}

	return (Datum) 0;
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
	{
		OutboxXactLevel *level;

		for (level = outbox_xact; level != NULL; level = level->parent)
		{
			int			c;

			for (c = OUTBOX_FIRST_GAUGE; c < OUTBOX_NUM_COUNTERS; c++)
				level->deltas[c] = 0;
		}
	}
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

static int
outbox_int64_cmp(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return (x > y) - (x < y);
}

/* ---------------------------------------------------------------------
 * The trigger's helpers
 * ---------------------------------------------------------------------
 */

/*
 * outbox_guard_insert
 *
 * A new row is accepted as it is or not at all: a plain insert is pending
 * with zero attempts and no delivery timestamps; a row inserted in another
 * state (a dump restore) must have bookkeeping that agrees with it.  NULLs in
 * NOT NULL columns are left for the table's constraints to report.
 */
static HeapTuple
outbox_guard_insert(Relation rel, HeapTuple tuple, const OutboxColumns *cols,
					bool wake)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	Datum		d;
	bool		isnull;
	int64		id;
	OutboxState state;
	int32		attempts;
	bool		has_delivered_at;
	bool		has_acked_at;
	const char *problem = NULL;

	d = heap_getattr(tuple, cols->id, tupdesc, &isnull);
	if (isnull)
		return tuple;
	id = DatumGetInt64(d);

	d = heap_getattr(tuple, cols->payload, tupdesc, &isnull);
	if (!isnull)
	{
		Size		size = toast_raw_datum_size(d) - VARHDRSZ;

		if (size > (Size) outbox_max_payload_size)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("outbox payload of %zu bytes exceeds the limit of %d bytes",
							size, outbox_max_payload_size),
					 errhint("Raise \"%s.max_payload_size\", or send a reference to the data instead of the data.",
							 OUTBOX_GUC_PREFIX)));
	}

	d = heap_getattr(tuple, cols->state, tupdesc, &isnull);
	if (isnull)
		return tuple;
	state = outbox_parse_state(rel, cols->state, d, id);

	d = heap_getattr(tuple, cols->attempts, tupdesc, &isnull);
	if (isnull)
		return tuple;
	attempts = DatumGetInt32(d);
	has_delivered_at = !heap_attisnull(tuple, cols->delivered_at, tupdesc);
	has_acked_at = !heap_attisnull(tuple, cols->acked_at, tupdesc);

	if (attempts < 0)
		problem = "delivery_attempts must not be negative.";
	else if (state == OUTBOX_PENDING && has_acked_at)
		problem = "A \"pending\" row must not have acked_at.";
	else if (state == OUTBOX_PENDING && (attempts == 0) != !has_delivered_at)
		problem = "A \"pending\" row has delivered_at exactly when delivery_attempts >= 1.";
	else if (state == OUTBOX_DELIVERED &&
			 (!has_delivered_at || attempts < 1 || has_acked_at))
		problem = "A \"delivered\" row needs delivered_at, delivery_attempts >= 1 and no acked_at.";
	else if (state == OUTBOX_ACKED && !has_acked_at)
		problem = "An \"acked\" row needs acked_at.";

	if (problem != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("outbox row " INT64_FORMAT " cannot be inserted as \"%s\": its bookkeeping disagrees with its state",
						id, outbox_state_names[state]),
				 errdetail_internal("%s", problem),
				 errtablecol(rel, cols->state)));

	if (wake)
		outbox_inserted_row(rel, tuple, cols);

	return tuple;
}

/*
 * outbox_inserted_row
 *
 * A row was inserted: count it, and wake relays when it is pending.
 */
static void
outbox_inserted_row(Relation rel, HeapTuple tuple, const OutboxColumns *cols)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	bool		isnull;
	Datum		id = heap_getattr(tuple, cols->id, tupdesc, &isnull);
	Datum		d = heap_getattr(tuple, cols->state, tupdesc, &isnull);
	OutboxState state;

	if (isnull)
		return;
	state = outbox_parse_state(rel, cols->state, d, DatumGetInt64(id));
	outbox_count_state(state, 1);
	if (state == OUTBOX_PENDING)
	{
		outbox_count(OUTBOX_COUNT_ENQUEUED, 1);
		outbox_wake(DatumGetInt64(id));
	}
}

/*
 * outbox_inserted
 *
 * AFTER INSERT ... FOR EACH ROW trigger: count the row that was really
 * inserted and wake relays when it is pending (an INSERT ... ON CONFLICT that
 * did not insert never gets here).  Raises 39P01 when misused.
 */
Datum
outbox_inserted(PG_FUNCTION_ARGS)
{
	const char *funcname = "outbox_inserted";
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" was not called by trigger manager",
						funcname)));
	if (!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function \"%s\" must be fired AFTER INSERT FOR EACH ROW",
						funcname)));

	outbox_inserted_row(trigdata->tg_relation, trigdata->tg_trigtuple,
						outbox_columns(trigdata->tg_relation, funcname));

	return PointerGetDatum(NULL);
}

/*
 * outbox_guard_update
 *
 * Allowed: pending -> delivered, delivered -> acked, delivered -> pending,
 * and pending/delivered staying where they are (re-addressing).  The
 * bookkeeping columns are always recomputed from the old row, whatever the
 * caller wrote into them.
 */
static HeapTuple
outbox_guard_update(Relation rel, HeapTuple oldtuple, HeapTuple newtuple,
					const OutboxColumns *cols)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	static const struct
	{
		size_t		offset;
		const char *name;
	}			immutable[] =
	{
		{offsetof(OutboxColumns, id), COL_ID},
		{offsetof(OutboxColumns, kind), COL_KIND},
		{offsetof(OutboxColumns, tenant_id), COL_TENANT_ID},
		{offsetof(OutboxColumns, payload), COL_PAYLOAD},
		{offsetof(OutboxColumns, created_at), COL_CREATED_AT},
	};
	Datum		d;
	bool		isnull;
	int64		id;
	OutboxState from;
	OutboxState to;
	bool		allowed;
	int			replace_cols[3];
	Datum		replace_values[3];
	bool		replace_nulls[3];
	Datum		old_recipient;
	Datum		new_recipient;
	bool		old_recipient_null;
	bool		new_recipient_null;
	int			i;

	d = heap_getattr(oldtuple, cols->id, tupdesc, &isnull);
	id = isnull ? 0 : DatumGetInt64(d);

	d = heap_getattr(oldtuple, cols->state, tupdesc, &isnull);
	if (isnull)
		elog(ERROR, "outbox row " INT64_FORMAT " has no delivery_state", id);
	from = outbox_parse_state(rel, cols->state, d, id);

	d = heap_getattr(newtuple, cols->state, tupdesc, &isnull);
	if (isnull)
		return newtuple;		/* the NOT NULL constraint reports it */
	to = outbox_parse_state(rel, cols->state, d, id);

	switch (from)
	{
		case OUTBOX_PENDING:
			allowed = (to == OUTBOX_PENDING || to == OUTBOX_DELIVERED);
			break;
		case OUTBOX_DELIVERED:
			allowed = true;
			break;
		default:
			allowed = false;	/* acked rows never change again */
			break;
	}
	if (!allowed)
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("illegal delivery_state transition from \"%s\" to \"%s\" for outbox row " INT64_FORMAT,
						outbox_state_names[from], outbox_state_names[to], id),
				 errdetail("Row " INT64_FORMAT " is \"%s\" and cannot become \"%s\": allowed transitions are pending to delivered, delivered to acked and delivered to pending, and acked rows never change.",
						   id, outbox_state_names[from], outbox_state_names[to]),
				 errtablecol(rel, cols->state)));

	for (i = 0; i < (int) lengthof(immutable); i++)
	{
		AttrNumber	attnum = *(const AttrNumber *)
			((const char *) cols + immutable[i].offset);
		Datum		a;
		Datum		b;
		bool		a_null;
		bool		b_null;

		a = heap_getattr(oldtuple, attnum, tupdesc, &a_null);
		b = heap_getattr(newtuple, attnum, tupdesc, &b_null);
		if (!outbox_datum_equal(a, a_null, b, b_null,
								TupleDescAttr(tupdesc, attnum - 1)))
			ereport(ERROR,
					(errcode(ERRCODE_CHECK_VIOLATION),
					 errmsg("column \"%s\" of outbox row " INT64_FORMAT " cannot be changed (update from \"%s\" to \"%s\")",
							immutable[i].name, id,
							outbox_state_names[from], outbox_state_names[to]),
					 errdetail("Only delivery_state and recipient may be updated; id, kind, tenant_id, payload and created_at are fixed at insert."),
					 errtablecol(rel, attnum)));
	}

	/* the bookkeeping is the trigger's, never the caller's */
	d = heap_getattr(oldtuple, cols->attempts, tupdesc, &isnull);
	if (isnull)
		elog(ERROR, "outbox row " INT64_FORMAT " has no delivery_attempts", id);
	replace_cols[0] = cols->attempts;
	replace_nulls[0] = false;
	replace_values[0] = d;
	replace_cols[1] = cols->delivered_at;
	replace_values[1] = heap_getattr(oldtuple, cols->delivered_at, tupdesc,
									 &replace_nulls[1]);
	replace_cols[2] = cols->acked_at;
	replace_values[2] = heap_getattr(oldtuple, cols->acked_at, tupdesc,
									 &replace_nulls[2]);

	if (to == OUTBOX_DELIVERED && from != OUTBOX_DELIVERED)
	{
		int32		attempts = DatumGetInt32(d);

		if (attempts == PG_INT32_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("delivery_attempts of outbox row " INT64_FORMAT " is out of range",
							id)));
		replace_values[0] = Int32GetDatum(attempts + 1);
		replace_values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
		replace_nulls[1] = false;
	}
	else if (to == OUTBOX_ACKED)
	{
		replace_values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
		replace_nulls[2] = false;
	}

	newtuple = heap_modify_tuple_by_cols(newtuple, tupdesc, 3, replace_cols,
										 replace_values, replace_nulls);

	if (from != to)
	{
		outbox_count_state(from, -1);
		outbox_count_state(to, 1);
		if (to == OUTBOX_DELIVERED)
			outbox_count(OUTBOX_COUNT_CLAIMED, 1);
		else if (to == OUTBOX_ACKED)
			outbox_count(OUTBOX_COUNT_ACKED, 1);
		else
			outbox_count(outbox_requeue_counter, 1);
	}

	/*
	 * Wake relays when the row becomes pending for its recipient: back from
	 * delivered, or re-addressed while pending.
	 */
	if (to == OUTBOX_PENDING)
	{
		old_recipient = heap_getattr(oldtuple, cols->recipient, tupdesc,
									 &old_recipient_null);
		new_recipient = heap_getattr(newtuple, cols->recipient, tupdesc,
									 &new_recipient_null);
		if (from != OUTBOX_PENDING ||
			!outbox_datum_equal(old_recipient, old_recipient_null,
								new_recipient, new_recipient_null,
								TupleDescAttr(tupdesc, cols->recipient - 1)))
			outbox_wake(id);
	}

	return newtuple;
}

/*
 * outbox_parse_state
 *
 * Map a delivery_state value to its enum; an unknown string is an illegal row
 * (23514), reported before the CHECK constraint would see it.
 */
static OutboxState
outbox_parse_state(Relation rel, AttrNumber attnum, Datum value, int64 id)
{
	text	   *t = DatumGetTextPP(value);
	const char *s = VARDATA_ANY(t);
	int			len = VARSIZE_ANY_EXHDR(t);
	int			i;

	for (i = 0; i < (int) lengthof(outbox_state_names); i++)
	{
		if (strlen(outbox_state_names[i]) == (size_t) len &&
			memcmp(outbox_state_names[i], s, len) == 0)
			return (OutboxState) i;
	}

	ereport(ERROR,
			(errcode(ERRCODE_CHECK_VIOLATION),
			 errmsg("invalid delivery_state \"%s\" for outbox row " INT64_FORMAT,
					text_to_cstring(t), id),
			 errdetail("delivery_state is one of \"pending\", \"delivered\" and \"acked\"."),
			 errtablecol(rel, attnum)));
	pg_unreachable();
}

/*
 * outbox_datum_equal
 *
 * Binary equality of two column values.  Identical bytes (the common case:
 * an UPDATE that did not touch the column carries the same datum, TOAST
 * pointer included) are decided without detoasting.
 */
static bool
outbox_datum_equal(Datum a, bool a_null, Datum b, bool b_null,
				   Form_pg_attribute att)
{
	if (a_null || b_null)
		return a_null == b_null;
	if (att->attlen == -1)
	{
		Size		la = VARSIZE_ANY(DatumGetPointer(a));
		Size		lb = VARSIZE_ANY(DatumGetPointer(b));

		if (la == lb && memcmp(DatumGetPointer(a), DatumGetPointer(b), la) == 0)
			return true;
	}
	return datum_image_eq(a, b, att->attbyval, att->attlen);
}

/*
 * outbox_wake
 *
 * A row became pending: wake relays as delivery_outbox.notify says.  In
 * deferred mode the id waits in this transaction's list and is handed to
 * the database's worker at commit; where no worker serves the database, it
 * falls back to commit mode.
 */
static void
outbox_wake(int64 id)
{
	OutboxDatabase *db;

	if (outbox_shared != NULL)
		outbox_level()->made_pending = true;

	if (outbox_notify_mode == OUTBOX_NOTIFY_OFF)
		return;

	if (outbox_notify_mode == OUTBOX_NOTIFY_DEFERRED &&
		(db = outbox_my_database(false)) != NULL && db->ring >= 0)
	{
		if (outbox_deferred_count == outbox_deferred_space)
		{
			int			space = Max(64, outbox_deferred_space * 2);

			if (outbox_deferred_ids == NULL)
				outbox_deferred_ids =
					MemoryContextAlloc(TopTransactionContext,
									   sizeof(int64) * space);
			else
				outbox_deferred_ids = repalloc(outbox_deferred_ids,
											   sizeof(int64) * space);
			outbox_deferred_space = space;
		}
		outbox_deferred_ids[outbox_deferred_count++] = id;
		return;
	}

	outbox_notify(id);
}

/*
 * outbox_notify
 *
 * Queue the wake-up for a row that became pending: the id, nothing else.
 * async.c sends it when the transaction commits and drops it on rollback.
 * When the notification queue is fuller than notify_queue_limit the NOTIFY
 * is skipped, since a full queue makes a notifying COMMIT fail; the row is
 * kept, and the skip is logged once until the queue drains again.  Also used
 * by the worker for deferred wake-ups.
 */
void
outbox_notify(int64 id)
{
	static LocalTransactionId checked_in = InvalidLocalTransactionId;
	static double usage = 0.0;
	static bool skip_logged = false;	/* until the queue drains again */
	char		payload[32];
#if PG_VERSION_NUM >= 170000
	LocalTransactionId lxid = MyProc->vxid.lxid;
#else
	LocalTransactionId lxid = MyProc->lxid;
#endif

	/*
	 * The queue fills slowly and only at commits: read its usage once per
	 * transaction, not once per row (it takes NotifyQueueLock).
	 */
	if (lxid != checked_in)
	{
		LOCAL_FCINFO(usage_fcinfo, 0);

		InitFunctionCallInfoData(*usage_fcinfo, NULL, 0, InvalidOid, NULL, NULL);
		usage = DatumGetFloat8(pg_notification_queue_usage(usage_fcinfo));
		checked_in = lxid;
	}

	if (usage >= outbox_notify_queue_limit)
	{
		if (!skip_logged)
		{
			ereport(LOG,
					(errmsg("delivery_outbox: notification queue is %.1f%% full, skipping wake-ups for new rows",
							usage * 100.0),
					 errdetail("The rows are kept; relays find them by draining the table."),
					 errhint("Find the session that LISTENs without consuming its notifications (often one idle in a long transaction, see pg_stat_activity), or raise \"%s.notify_queue_limit\" (now %g).",
							 OUTBOX_GUC_PREFIX, outbox_notify_queue_limit)));
			skip_logged = true;
		}
		outbox_count(OUTBOX_COUNT_NOTIFY_SKIPPED, 1);
		return;
	}
	skip_logged = false;

	snprintf(payload, sizeof(payload), INT64_FORMAT, id);
	Async_Notify(outbox_channel, payload);
	outbox_count(OUTBOX_COUNT_NOTIFIED, 1);
}

/* ---------------------------------------------------------------------
 * Per-transaction bookkeeping, published at commit
 * ---------------------------------------------------------------------
 */

/*
 * outbox_count
 *
 * Add delta to one of this database's counters when (and if) the current
 * transaction commits.  A no-op without shared memory.
 */
void
outbox_count(OutboxCounter counter, int64 delta)
{
	if (outbox_shared == NULL)
		return;
	outbox_level()->deltas[counter] += delta;
}

/*
 * outbox_count_state
 *
 * A row entered (delta 1) or left (-1) a state: the open backlog gauges.
 */
static void
outbox_count_state(OutboxState state, int64 delta)
{
	if (state == OUTBOX_PENDING)
		outbox_count(OUTBOX_COUNT_BACKLOG_PENDING, delta);
	else if (state == OUTBOX_DELIVERED)
		outbox_count(OUTBOX_COUNT_BACKLOG_DELIVERED, delta);
}

/*
 * outbox_my_database
 *
 * This database's shared slot (allocated when create is true), or NULL.
 * Slots never move, so the pointer is kept for the life of the backend.
 */
static OutboxDatabase *
outbox_my_database(bool create)
{
	static OutboxDatabase *mine = NULL;
	static bool full_logged = false;

	if (mine == NULL && outbox_shared != NULL)
	{
		mine = outbox_database(MyDatabaseId, create);
		if (mine == NULL && create && !full_logged)
		{
			ereport(LOG,
					(errmsg("delivery_outbox tracks at most %d databases: no counters, commit wake-ups for outbox_wait() or deferred wake-ups in this one",
							OUTBOX_MAX_DATABASES)));
			full_logged = true;
		}
	}
	return mine;
}

/*
 * outbox_level
 *
 * The bookkeeping of the current (sub)transaction level, created on first
 * use.
 */
static OutboxXactLevel *
outbox_level(void)
{
	int			nest_level = GetCurrentTransactionNestLevel();

	if (outbox_xact == NULL || outbox_xact->nest_level < nest_level)
	{
		OutboxXactLevel *level;

		level = MemoryContextAllocZero(TopTransactionContext,
									   sizeof(OutboxXactLevel));
		level->nest_level = nest_level;
		level->nids_at_start = outbox_deferred_count;
		level->parent = outbox_xact;
		outbox_xact = level;
	}
	return outbox_xact;
}

/*
 * outbox_subxact_callback
 *
 * A committed subtransaction's bookkeeping joins its parent's; an aborted
 * one's is forgotten, deferred ids included.
 */
static void
outbox_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	OutboxXactLevel *level = outbox_xact;
	int			nest_level = GetCurrentTransactionNestLevel();

	if (level == NULL || level->nest_level != nest_level)
		return;

	if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		OutboxXactLevel *parent = level->parent;
		int			c;

		if (parent != NULL && parent->nest_level == nest_level - 1)
		{
			for (c = 0; c < OUTBOX_NUM_COUNTERS; c++)
				parent->deltas[c] += level->deltas[c];
			parent->made_pending |= level->made_pending;
			outbox_xact = parent;
		}
		else
			level->nest_level = nest_level - 1;
	}
	else if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		outbox_deferred_count = level->nids_at_start;
		outbox_xact = level->parent;
	}
}

/*
 * outbox_xact_callback
 *
 * At commit, publish: add the counter deltas to shared memory, hand the
 * deferred wake-ups to the worker, and wake outbox_wait() sleepers.  The
 * transaction is already committed here, so nothing may fail or wait.  At
 * PREPARE the deltas are stashed until COMMIT PREPARED (the deferred
 * wake-ups are dropped: relays drain).  On abort, forget.
 */
static void
outbox_xact_callback(XactEvent event, void *arg)
{
	OutboxXactLevel *level = outbox_xact;

	if (level != NULL &&
		(event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT))
	{
		OutboxDatabase *db = outbox_my_database(true);

		if (db != NULL)
		{
			if (outbox_deferred_count > 0)
				outbox_handover(db, outbox_deferred_ids, outbox_deferred_count);
			outbox_publish(db, level->deltas, level->made_pending);
		}
	}
#if PG_VERSION_NUM >= 140000
	else if (level != NULL && event == XACT_EVENT_PREPARE)
		outbox_stash_prepared(level);
#endif

	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			/* the memory goes with TopTransactionContext */
			outbox_xact = NULL;
			outbox_deferred_ids = NULL;
			outbox_deferred_count = 0;
			outbox_deferred_space = 0;
			outbox_prepare_gid[0] = '\0';
			break;
		default:
			break;
	}
}

/*
 * outbox_publish
 *
 * Add committed deltas to a database's counters and wake its
 * outbox_wait() sleepers when rows became pending.  Never fails.
 */
static void
outbox_publish(OutboxDatabase *db, const int64 *deltas, bool made_pending)
{
	int			c;

	for (c = 0; c < OUTBOX_NUM_COUNTERS; c++)
	{
		if (deltas[c] != 0)
			pg_atomic_fetch_add_u64(&db->counters[c], deltas[c]);
	}
	/*
	 * Skip the CV's spinlock when nobody waits.  The unlocked look is safe:
	 * our commit is already visible, and a waiter checks the table after
	 * putting itself on the list, so after the barrier either we see the
	 * waiter or the waiter sees our rows.
	 */
	if (made_pending)
	{
		pg_memory_barrier();
		if (!proclist_is_empty(&db->pending_cv.wakeup))
			ConditionVariableBroadcast(&db->pending_cv);
	}
}

#if PG_VERSION_NUM >= 140000
/*
 * outbox_stash_prepared
 *
 * The transaction was prepared: keep its deltas in shared memory under its
 * GID until COMMIT PREPARED (or ROLLBACK PREPARED) decides.  With every
 * entry taken, the work goes uncounted (the gauges are repaired by the next
 * count).
 */
static void
outbox_stash_prepared(OutboxXactLevel *level)
{
	int			i;

	if (outbox_shared == NULL || outbox_prepare_gid[0] == '\0')
		return;

	SpinLockAcquire(&outbox_shared->mutex);
	for (i = 0; i < OUTBOX_MAX_PREPARED; i++)
	{
		OutboxPrepared *p = &outbox_shared->prepared[i];

		if (OidIsValid(p->dboid))
			continue;
		p->dboid = MyDatabaseId;
		strlcpy(p->gid, outbox_prepare_gid, GIDSIZE);
		memcpy(p->deltas, level->deltas, sizeof(p->deltas));
		p->made_pending = level->made_pending;
		break;
	}
	SpinLockRelease(&outbox_shared->mutex);
}

/*
 * outbox_finish_prepared
 *
 * COMMIT PREPARED (commit = true) or ROLLBACK PREPARED of gid succeeded in
 * this database: publish or drop what was stashed for it.
 */
static void
outbox_finish_prepared(const char *gid, bool commit)
{
	OutboxPrepared found;
	bool		have = false;
	int			i;

	if (outbox_shared == NULL)
		return;

	SpinLockAcquire(&outbox_shared->mutex);
	for (i = 0; i < OUTBOX_MAX_PREPARED && !have; i++)
	{
		OutboxPrepared *p = &outbox_shared->prepared[i];

		if (p->dboid == MyDatabaseId && strcmp(p->gid, gid) == 0)
		{
			found = *p;
			p->dboid = InvalidOid;
			have = true;
		}
	}
	SpinLockRelease(&outbox_shared->mutex);

	if (have && commit)
	{
		OutboxDatabase *db = outbox_my_database(true);

		if (db != NULL)
			outbox_publish(db, found.deltas, found.made_pending);
	}
}

/*
 * outbox_process_utility
 *
 * Follow two-phase commit: note the GID a transaction is prepared under, and
 * settle its stashed counters once COMMIT/ROLLBACK PREPARED has succeeded.
 * Also give a dropped database's shared slot back.
 */
static void
outbox_process_utility(PlannedStmt *pstmt, const char *queryString,
					   bool readOnlyTree, ProcessUtilityContext context,
					   ParamListInfo params, QueryEnvironment *queryEnv,
					   DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	TransactionStmt *stmt = NULL;
	Oid			dropped = InvalidOid;

	if (IsA(parsetree, TransactionStmt))
		stmt = (TransactionStmt *) parsetree;
	if (IsA(parsetree, DropdbStmt))
		dropped = get_database_oid(((DropdbStmt *) parsetree)->dbname, true);
	if (stmt != NULL && stmt->kind == TRANS_STMT_PREPARE)
		strlcpy(outbox_prepare_gid, stmt->gid, GIDSIZE);

	if (prev_process_utility_hook)
		prev_process_utility_hook(pstmt, queryString, readOnlyTree, context,
								  params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);

	if (stmt != NULL && (stmt->kind == TRANS_STMT_COMMIT_PREPARED ||
						 stmt->kind == TRANS_STMT_ROLLBACK_PREPARED))
		outbox_finish_prepared(stmt->gid,
							   stmt->kind == TRANS_STMT_COMMIT_PREPARED);
	if (OidIsValid(dropped))
		outbox_forget_database(dropped);
}
#endif

/*
 * outbox_columns
 *
 * The attribute numbers of the outbox columns in rel, looked up by name and
 * type once and kept until the relation is invalidated.
 */
static const OutboxColumns *
outbox_columns(Relation rel, const char *funcname)
{
	OutboxColumns c;

	if (outbox_cols.relid == RelationGetRelid(rel))
		return &outbox_cols;

	c.relid = RelationGetRelid(rel);
	c.id = outbox_column(rel, COL_ID, INT8OID);
	c.recipient = outbox_column(rel, COL_RECIPIENT, TEXTOID);
	c.kind = outbox_column(rel, COL_KIND, TEXTOID);
	c.tenant_id = outbox_column(rel, COL_TENANT_ID, TEXTOID);
	c.payload = outbox_column(rel, COL_PAYLOAD, BYTEAOID);
	c.state = outbox_column(rel, COL_STATE, TEXTOID);
	c.attempts = outbox_column(rel, COL_ATTEMPTS, INT4OID);
	c.created_at = outbox_column(rel, COL_CREATED_AT, TIMESTAMPTZOID);
	c.delivered_at = outbox_column(rel, COL_DELIVERED_AT, TIMESTAMPTZOID);
	c.acked_at = outbox_column(rel, COL_ACKED_AT, TIMESTAMPTZOID);

	outbox_cols = c;
	return &outbox_cols;
}

static AttrNumber
outbox_column(Relation rel, const char *name, Oid typid)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	int			i;

	for (i = 0; i < tupdesc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(tupdesc, i);

		if (att->attisdropped || strcmp(NameStr(att->attname), name) != 0)
			continue;
		if (att->atttypid != typid)
			ereport(ERROR,
					(errcode(ERRCODE_TRIGGERED_ACTION_EXCEPTION),
					 errmsg("column \"%s\" of table \"%s\" must be of type %s",
							name, RelationGetRelationName(rel),
							format_type_be(typid))));
		return att->attnum;
	}

	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_COLUMN),
			 errmsg("column \"%s\" not found in table \"%s\"",
					name, RelationGetRelationName(rel))));
	pg_unreachable();
}

/* ---------------------------------------------------------------------
 * Finding the table, and the prepared statements
 * ---------------------------------------------------------------------
 */

/*
 * outbox_relcache_callback
 *
 * Any invalidation of the outbox table (or of everything) makes us re-check,
 * at next use, that the cached OIDs still name the extension's table, and
 * drops the trigger's column map.  Nothing is freed here: this can run at
 * almost any point.
 */
static void
outbox_relcache_callback(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == outbox_rel_oid)
		outbox_cache_stale = true;
	if (!OidIsValid(relid) || relid == outbox_cols.relid)
		outbox_cols.relid = InvalidOid;
	if (!OidIsValid(relid) || relid == outbox_insert_cache.relid ||
		relid == outbox_rel_oid)
		outbox_insert_generation++;
}

/*
 * outbox_insert_callback
 *
 * A function or type changed: if outbox_enqueue's prepared expressions use
 * it (a SQL function inlined into a default, say), rebuild them at next use.
 * The dependencies are those the plan cache tracks for a statement
 * (expression_planner_with_deps), matched the way it matches them.
 */
static void
outbox_insert_callback(Datum arg, int cacheid, uint32 hashvalue)
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

/*
 * outbox_syscache_callback
 *
 * A schema was renamed (or otherwise changed): re-check the table's
 * qualified name at next use.
 */
static void
outbox_syscache_callback(Datum arg, int cacheid, uint32 hashvalue)
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
	int			i;

	for (i = 0; i < OUTBOX_NUM_PLANS; i++)
	{
		if (outbox_plans[i] != NULL)
			SPI_freeplan(outbox_plans[i]);
		outbox_plans[i] = NULL;
	}
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
static const char *
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
 * outbox_plan_sql
 *
 * The text of each statement.  Every operator and function is qualified, the
 * state literals stay literal (so the partial indexes' predicates are proven
 * from the query text, whatever the parameter values), and each multi-row
 * change either skips locked rows or first locks its rows ORDER BY id.
 *
 * Where rows are found by id (acks, release, the UPDATE half of every
 * lock-then-update), the state is re-checked in function form,
 * pg_catalog.texteq(): the same test, but one no partial index predicate can
 * be proven from, so the planner cannot trade the primary key lookup for a
 * scan of a whole partial index, with or without statistics.
 */
static char *
outbox_plan_sql(OutboxPlanId id, const char *t)
{
	switch (id)
	{
		case OUTBOX_PLAN_ENQUEUE:
			return psprintf("INSERT INTO %s (recipient, kind, payload, tenant_id)"
							" VALUES ($1, $2, $3, $4) RETURNING id", t);

		case OUTBOX_PLAN_CLAIM:
		case OUTBOX_PLAN_CLAIM_R:
		case OUTBOX_PLAN_CLAIM_T:
		case OUTBOX_PLAN_CLAIM_RT:
			{
				int			variant = id - OUTBOX_PLAN_CLAIM;

				return psprintf("WITH c AS ("
								"SELECT id FROM %1$s"
								" WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'%2$s%3$s"
								" ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED),"
								" u AS ("
								"UPDATE %1$s o SET delivery_state = 'delivered' FROM c"
								" WHERE o.id OPERATOR(pg_catalog.=) c.id"
								" AND pg_catalog.texteq(o.delivery_state, 'pending')"
								" RETURNING o)"
								" SELECT u.o FROM u ORDER BY (u.o).id",
								t,
								(variant & 1) ? " AND recipient OPERATOR(pg_catalog.=) $2" : "",
								(variant & 2) ? " AND tenant_id OPERATOR(pg_catalog.=) $3" : "");
			}

		case OUTBOX_PLAN_ACK_LOCK:
		case OUTBOX_PLAN_ACK_LOCK_R:
			return psprintf("SELECT id, delivery_state OPERATOR(pg_catalog.=) 'pending'"
							" FROM %s"
							" WHERE id OPERATOR(pg_catalog.=) ANY ($1)"
							" AND NOT pg_catalog.texteq(delivery_state, 'acked')%s"
							" ORDER BY id FOR UPDATE",
							t,
							id == OUTBOX_PLAN_ACK_LOCK_R ?
							" AND recipient OPERATOR(pg_catalog.=) $2" : "");

		case OUTBOX_PLAN_ACK_DELIVER:
			return psprintf("UPDATE %s SET delivery_state = 'delivered'"
							" WHERE id OPERATOR(pg_catalog.=) ANY ($1)"
							" AND pg_catalog.texteq(delivery_state, 'pending')", t);

		case OUTBOX_PLAN_ACK_FINISH:
			return psprintf("UPDATE %s SET delivery_state = 'acked'"
							" WHERE id OPERATOR(pg_catalog.=) ANY ($1)"
							" AND pg_catalog.texteq(delivery_state, 'delivered')", t);

		case OUTBOX_PLAN_RELEASE:
			return psprintf("WITH l AS ("
							"SELECT id FROM %1$s"
							" WHERE id OPERATOR(pg_catalog.=) ANY ($1)"
							" AND pg_catalog.texteq(delivery_state, 'delivered')"
							" ORDER BY id FOR UPDATE)"
							" UPDATE %1$s o SET delivery_state = 'pending' FROM l"
							" WHERE o.id OPERATOR(pg_catalog.=) l.id"
							" AND pg_catalog.texteq(o.delivery_state, 'delivered')", t);

		case OUTBOX_PLAN_RECLAIM:
			return psprintf("WITH c AS ("
							"SELECT id FROM %1$s"
							" WHERE delivery_state OPERATOR(pg_catalog.=) 'delivered'"
							" AND delivered_at OPERATOR(pg_catalog.<) $1"
							" ORDER BY delivered_at LIMIT $2 FOR UPDATE SKIP LOCKED)"
							" UPDATE %1$s o SET delivery_state = 'pending' FROM c"
							" WHERE o.id OPERATOR(pg_catalog.=) c.id"
							" AND pg_catalog.texteq(o.delivery_state, 'delivered')", t);

		case OUTBOX_PLAN_RESYNC:
		case OUTBOX_PLAN_RESYNC_NULL_TENANT:
			return psprintf("WITH l AS ("
							"SELECT id FROM %1$s"
							" WHERE recipient OPERATOR(pg_catalog.=) $1"
							" AND delivery_state OPERATOR(pg_catalog.=) 'delivered'"
							" AND %2$s"
							" ORDER BY id FOR UPDATE)"
							" UPDATE %1$s o SET delivery_state = 'pending' FROM l"
							" WHERE o.id OPERATOR(pg_catalog.=) l.id"
							" AND pg_catalog.texteq(o.delivery_state, 'delivered')",
							t,
							id == OUTBOX_PLAN_RESYNC ?
							"tenant_id OPERATOR(pg_catalog.=) $2" :
							"tenant_id IS NULL");

		case OUTBOX_PLAN_REASSIGN:
			return psprintf("WITH l AS ("
							"SELECT id FROM %1$s"
							" WHERE recipient OPERATOR(pg_catalog.=) $1"
							" AND delivery_state OPERATOR(pg_catalog.=) ANY ('{pending,delivered}'::pg_catalog.text[])"
							" ORDER BY id FOR UPDATE)"
							" UPDATE %1$s o SET recipient = $2, delivery_state = 'pending'"
							" FROM l WHERE o.id OPERATOR(pg_catalog.=) l.id"
							" AND NOT pg_catalog.texteq(o.delivery_state, 'acked')", t);

		case OUTBOX_PLAN_REPLAY:
		case OUTBOX_PLAN_REPLAY_T:
			return psprintf("SELECT o FROM %s o"
							" WHERE recipient OPERATOR(pg_catalog.=) $1"
							" AND delivery_state OPERATOR(pg_catalog.=) ANY ('{pending,delivered}'::pg_catalog.text[])"
							" AND id OPERATOR(pg_catalog.>) $2%s"
							" ORDER BY id LIMIT $3",
							t,
							id == OUTBOX_PLAN_REPLAY_T ?
							" AND tenant_id OPERATOR(pg_catalog.=) $4" : "");

		case OUTBOX_PLAN_PURGE:
			return psprintf("WITH d AS ("
							"SELECT id FROM %1$s"
							" WHERE delivery_state OPERATOR(pg_catalog.=) 'acked'"
							" AND acked_at OPERATOR(pg_catalog.<) $1"
							" ORDER BY acked_at LIMIT $2 FOR UPDATE SKIP LOCKED)"
							" DELETE FROM %1$s o USING d"
							" WHERE o.id OPERATOR(pg_catalog.=) d.id", t);

		case OUTBOX_PLAN_STATS:
			return psprintf("SELECT"
							" pg_catalog.count(*) FILTER (WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'),"
							" pg_catalog.count(*) FILTER (WHERE delivery_state OPERATOR(pg_catalog.=) 'delivered'),"
							" pg_catalog.count(*) FILTER (WHERE delivery_state OPERATOR(pg_catalog.=) 'acked'),"
							" $1 OPERATOR(pg_catalog.-) pg_catalog.min(created_at)"
							" FILTER (WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'),"
							" $1 OPERATOR(pg_catalog.-) pg_catalog.min(delivered_at)"
							" FILTER (WHERE delivery_state OPERATOR(pg_catalog.=) 'delivered'),"
							" pg_catalog.count(DISTINCT recipient)"
							" FILTER (WHERE delivery_state OPERATOR(pg_catalog.=) ANY ('{pending,delivered}'::pg_catalog.text[]))"
							" FROM %s", t);

		case OUTBOX_PLAN_ENQUEUE_BATCH:
			return psprintf("INSERT INTO %s (recipient, kind, payload, tenant_id)"
							" SELECT r, k, p, t"
							" FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2),"
							" pg_catalog.unnest($3), pg_catalog.unnest($4))"
							" WITH ORDINALITY AS u(r, k, p, t, n)"
							" ORDER BY n RETURNING id", t);

		case OUTBOX_PLAN_EXISTS:
		case OUTBOX_PLAN_EXISTS_R:
			return psprintf("SELECT 1 FROM %s"
							" WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'%s"
							" LIMIT 1",
							t,
							id == OUTBOX_PLAN_EXISTS_R ?
							" AND recipient OPERATOR(pg_catalog.=) $1" : "");

		case OUTBOX_PLAN_BACKLOG:
			return psprintf("SELECT"
							" pg_catalog.count(*) FILTER (WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'),"
							" pg_catalog.count(*) FILTER (WHERE delivery_state OPERATOR(pg_catalog.=) 'delivered')"
							" FROM %s"
							" WHERE delivery_state OPERATOR(pg_catalog.=) ANY ('{pending,delivered}'::pg_catalog.text[])",
							t);

		case OUTBOX_NUM_PLANS:
			break;
	}
	elog(ERROR, "unrecognized outbox statement %d", (int) id);
	return NULL;				/* keep compiler quiet */
}

/*
 * outbox_plan
 *
 * The prepared, kept plan of one statement.  It is prepared once per backend
 * (and again only after the extension was dropped and recreated).  Safety
 * from a caller's search_path comes from every name in the statements being
 * qualified, so the plan cache may re-parse them under any path; the path is
 * also forced to pg_catalog for the first parse, as a second line.
 */
static SPIPlanPtr
outbox_plan(OutboxPlanId id)
{
	static const Oid argtypes[OUTBOX_NUM_PLANS][4] = {
		[OUTBOX_PLAN_ENQUEUE] = {TEXTOID, TEXTOID, BYTEAOID, TEXTOID},
		[OUTBOX_PLAN_CLAIM] = {INT8OID, TEXTOID, TEXTOID},
		[OUTBOX_PLAN_CLAIM_R] = {INT8OID, TEXTOID, TEXTOID},
		[OUTBOX_PLAN_CLAIM_T] = {INT8OID, TEXTOID, TEXTOID},
		[OUTBOX_PLAN_CLAIM_RT] = {INT8OID, TEXTOID, TEXTOID},
		[OUTBOX_PLAN_ACK_LOCK] = {INT8ARRAYOID, TEXTOID},
		[OUTBOX_PLAN_ACK_LOCK_R] = {INT8ARRAYOID, TEXTOID},
		[OUTBOX_PLAN_ACK_DELIVER] = {INT8ARRAYOID},
		[OUTBOX_PLAN_ACK_FINISH] = {INT8ARRAYOID},
		[OUTBOX_PLAN_RELEASE] = {INT8ARRAYOID},
		[OUTBOX_PLAN_RECLAIM] = {TIMESTAMPTZOID, INT8OID},
		[OUTBOX_PLAN_RESYNC] = {TEXTOID, TEXTOID},
		[OUTBOX_PLAN_RESYNC_NULL_TENANT] = {TEXTOID, TEXTOID},
		[OUTBOX_PLAN_REASSIGN] = {TEXTOID, TEXTOID},
		[OUTBOX_PLAN_REPLAY] = {TEXTOID, INT8OID, INT8OID, TEXTOID},
		[OUTBOX_PLAN_REPLAY_T] = {TEXTOID, INT8OID, INT8OID, TEXTOID},
		[OUTBOX_PLAN_PURGE] = {TIMESTAMPTZOID, INT8OID},
		[OUTBOX_PLAN_STATS] = {TIMESTAMPTZOID},
		[OUTBOX_PLAN_ENQUEUE_BATCH] = {TEXTARRAYOID, TEXTARRAYOID, BYTEAARRAYOID, TEXTARRAYOID},
		[OUTBOX_PLAN_EXISTS] = {TEXTOID},
		[OUTBOX_PLAN_EXISTS_R] = {TEXTOID},
		[OUTBOX_PLAN_BACKLOG] = {InvalidOid},
	};
	const char *table = outbox_table();
	int			nargs;
	char	   *sql;
	int			save_nestlevel;
	SPIPlanPtr	plan;

	if (outbox_plans[id] != NULL)
		return outbox_plans[id];

	for (nargs = 0; nargs < 4 && OidIsValid(argtypes[id][nargs]); nargs++)
		;
	sql = outbox_plan_sql(id, table);

	save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	plan = SPI_prepare(sql, nargs, (Oid *) argtypes[id]);
	AtEOXact_GUC(true, save_nestlevel);

	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s",
			 sql, SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	pfree(sql);

	outbox_plans[id] = plan;
	return plan;
}

/*
 * outbox_spi_connect
 *
 * SPI_connect, checked.
 */
static void
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
static uint64
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
static uint64
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
 * outbox_ack_internal
 *
 * Ack the rows named by the int8[] ids (only the recipient's, unless
 * recipient_null is 'n').  The open rows are first locked in id order; a row
 * found pending (a late ack after a reclaim) is moved through delivered, so
 * the trigger's rules and bookkeeping hold; then every locked row goes to
 * acked.  Returns the number of rows this call acked.
 */
static uint64
outbox_ack_internal(Datum ids, Datum recipient, char recipient_null)
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
	 * One id without a recipient filter, the common case: ack a delivered
	 * row in one statement.  (Only several rows need locking in id order
	 * first; a row found otherwise takes the general path below.)
	 */
	if (recipient_null == 'n' &&
		ArrayGetNItems(ARR_NDIM(DatumGetArrayTypeP(ids)),
					   ARR_DIMS(DatumGetArrayTypeP(ids))) == 1 &&
		outbox_execute(OUTBOX_PLAN_ACK_FINISH, values, NULL, SPI_OK_UPDATE) == 1)
	{
		SPI_finish();
		return 1;
	}

	nlocked = outbox_execute(recipient_null == 'n' ?
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
		outbox_execute(OUTBOX_PLAN_ACK_DELIVER, values, NULL, SPI_OK_UPDATE);
	}

	values[0] = PointerGetDatum(construct_array(locked, (int) nlocked,
												INT8OID, sizeof(int64),
												FLOAT8PASSBYVAL,
												TYPALIGN_DOUBLE));
	count = outbox_execute(OUTBOX_PLAN_ACK_FINISH, values, NULL, SPI_OK_UPDATE);
	SPI_finish();

	return count;
}

/* ---------------------------------------------------------------------
 * Argument checks and result helpers
 * ---------------------------------------------------------------------
 */

/*
 * outbox_check_text
 *
 * A recipient or kind argument: NULL is an error when required (22004), and
 * an empty string is always one (22023).
 */
static void
outbox_check_text(FunctionCallInfo fcinfo, int argno, const char *name,
				  bool required)
{
	if (PG_ARGISNULL(argno))
	{
		if (required)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not be null", name)));
		return;
	}
	if (VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(argno)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", name)));
}

/*
 * outbox_null_text
 *
 * An optional text argument as an SPI parameter: its value, and 'n' in *null
 * when it is NULL.
 */
static Datum
outbox_null_text(FunctionCallInfo fcinfo, int argno, char *null)
{
	*null = PG_ARGISNULL(argno) ? 'n' : ' ';
	return PG_ARGISNULL(argno) ? (Datum) 0 : PG_GETARG_DATUM(argno);
}

/*
 * outbox_text_array
 *
 * A one-dimensional array argument of the batch enqueue: NULL is an error
 * when required; with elements_required, so is a NULL element (22004) and an
 * empty text element (22023).  Sets *nitems.
 */
static Datum
outbox_text_array(FunctionCallInfo fcinfo, int argno, const char *name,
				  bool required, bool elements_required, int *nitems)
{
	ArrayType  *array;
	Datum	   *elems;
	bool	   *elem_nulls;
	int			n;
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			i;

	*nitems = 0;
	if (PG_ARGISNULL(argno))
	{
		if (required)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not be null", name)));
		return (Datum) 0;
	}
	array = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s must be a one-dimensional array", name)));

	get_typlenbyvalalign(ARR_ELEMTYPE(array), &typlen, &typbyval, &typalign);
	deconstruct_array(array, ARR_ELEMTYPE(array), typlen, typbyval, typalign,
					  &elems, &elem_nulls, &n);
	for (i = 0; i < n && elements_required; i++)
	{
		if (elem_nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not contain null elements", name),
					 errdetail("Element %d is null.", i + 1)));
		if (ARR_ELEMTYPE(array) == TEXTOID &&
			VARSIZE_ANY_EXHDR(DatumGetPointer(elems[i])) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s must not contain empty elements", name),
					 errdetail("Element %d is empty.", i + 1)));
	}
	*nitems = n;
	return PointerGetDatum(array);
}

/*
 * outbox_check_max_rows
 *
 * max_rows must be given and at least 1.
 */
static int64
outbox_check_max_rows(FunctionCallInfo fcinfo, int argno)
{
	int32		max_rows;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("max_rows must not be null")));
	max_rows = PG_GETARG_INT32(argno);
	if (max_rows < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_rows must be at least 1, not %d", max_rows)));
	return (int64) max_rows;
}

/*
 * outbox_check_ids
 *
 * An ids array must be given and hold no NULLs.
 */
static Datum
outbox_check_ids(FunctionCallInfo fcinfo, int argno)
{
	ArrayType  *ids;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ids must not be null")));
	ids = PG_GETARG_ARRAYTYPE_P(argno);
	if (array_contains_nulls(ids))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("ids must not contain null elements")));
	return PointerGetDatum(ids);
}

/*
 * outbox_check_interval
 *
 * An interval argument must be given and not negative: 22004 or 22023.
 */
static void
outbox_check_interval(FunctionCallInfo fcinfo, int argno, const char *name)
{
	Interval	zero;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name)));
	memset(&zero, 0, sizeof(zero));
	if (DatumGetBool(DirectFunctionCall2(interval_lt, PG_GETARG_DATUM(argno),
										 IntervalPGetDatum(&zero))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be negative", name)));
}

/*
 * outbox_cutoff
 *
 * older_than (a non-NULL, non-negative interval) turned into the timestamp
 * before which rows count as old: the current time minus older_than.  The
 * bookkeeping timestamps are wall-clock times of the change, so the cutoff is
 * too.
 */
static Datum
outbox_cutoff(FunctionCallInfo fcinfo, int argno)
{
	Interval	limit;
	Datum		older_than;

	outbox_check_interval(fcinfo, argno, "older_than");
	older_than = PG_GETARG_DATUM(argno);

	/*
	 * Subtracting thousands of years would fall off the start of the
	 * timestamp range; nothing is that old, so such a cutoff matches nothing.
	 */
	memset(&limit, 0, sizeof(limit));
	limit.month = 5000 * MONTHS_PER_YEAR;
	if (DatumGetBool(DirectFunctionCall2(interval_gt, older_than,
										 IntervalPGetDatum(&limit))))
	{
		TimestampTz cutoff;

		TIMESTAMP_NOBEGIN(cutoff);
		return TimestampTzGetDatum(cutoff);
	}

	return DirectFunctionCall2(timestamptz_mi_interval,
							   TimestampTzGetDatum(GetCurrentTimestamp()),
							   older_than);
}

/*
 * outbox_count_result
 *
 * A row count as the SQL integer these functions return.
 */
static Datum
outbox_count_result(uint64 count)
{
	if (count > (uint64) PG_INT32_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many rows changed in one call: " UINT64_FORMAT,
						count),
				 errhint("Use max_rows to work in batches.")));
	return Int32GetDatum((int32) count);
}

/*
 * outbox_begin_srf
 *
 * Set up materialize mode for a set-returning function: SETOF
 * delivery_outbox, SETOF record, or SETOF a scalar.
 */
static Tuplestorestate *
outbox_begin_srf(FunctionCallInfo fcinfo)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext oldcontext;
	TupleDesc	tupdesc;
	Oid			result_type;
	Tuplestorestate *tupstore;

	if (rsinfo == NULL || !IsA(rsinfo, ReturnSetInfo))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("set-valued function called in context that cannot accept a set")));
	if (!(rsinfo->allowedModes & SFRM_Materialize))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("materialize mode required, but it is not allowed in this context")));

	oldcontext = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
	switch (get_call_result_type(fcinfo, &result_type, &tupdesc))
	{
		case TYPEFUNC_COMPOSITE:
			break;
		case TYPEFUNC_SCALAR:
			tupdesc = CreateTemplateTupleDesc(1);
			TupleDescInitEntry(tupdesc, (AttrNumber) 1, "id", result_type, -1, 0);
			break;
		default:
			elog(ERROR, "return type must be a row type or a scalar");
	}
	tupstore = tuplestore_begin_heap((rsinfo->allowedModes & SFRM_Materialize_Random) != 0,
									 false, work_mem);
	rsinfo->returnMode = SFRM_Materialize;
	rsinfo->setResult = tupstore;
	rsinfo->setDesc = tupdesc;
	MemoryContextSwitchTo(oldcontext);

	return tupstore;
}

/*
 * outbox_put_rows
 *
 * Copy the whole-row values in the first column of the last SPI result into
 * the tuplestore, before SPI_finish frees them.
 */
static void
outbox_put_rows(Tuplestorestate *tupstore)
{
	uint64		i;

	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[i],
									  SPI_tuptable->tupdesc, 1, &isnull);
		HeapTupleHeader hdr;
		HeapTupleData tuple;

		if (isnull)
			elog(ERROR, "outbox statement returned a null row");
		hdr = DatumGetHeapTupleHeader(d);
		tuple.t_len = HeapTupleHeaderGetDatumLength(hdr);
		ItemPointerSetInvalid(&tuple.t_self);
		tuple.t_tableOid = InvalidOid;
		tuple.t_data = hdr;
		tuplestore_puttuple(tupstore, &tuple);
	}
}
