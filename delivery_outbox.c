/*-------------------------------------------------------------------------
 *
 * delivery_outbox.c
 *		A durable, ack-tracked, recipient-addressed push-delivery outbox:
 *		the module's entry point.
 *
 * One table, "delivery_outbox", holds the messages.  A producer inserts a
 * row in its own transaction; a relay claims pending rows, pushes them to the
 * addressed recipient, and the recipient acks.  The state machine pending ->
 * delivered -> acked (and delivered -> pending) is enforced by a trigger
 * (outbox_trigger.c); whenever a row becomes pending its id, and nothing
 * else, is notified at commit (outbox_xact.c).
 *
 * This file holds _PG_init: every GUC, the hooks and callbacks registered,
 * and, when the library is preloaded, the shared memory request and the
 * background workers (outbox_worker.c).  The other files, bottom up (each
 * includes only the headers of the files below it; docs/development.md has
 * the same map):
 *
 *	outbox_compat.h			every difference between PostgreSQL majors
 *	outbox_owner.c			running a table's code as the table's owner
 *	outbox_shmem.c			shared memory: database slots, rings, counters
 *	outbox_databases.c		the workers leave a database a command needs
 *	outbox_xact.c			per-transaction bookkeeping and wake-ups
 *	outbox_marker_locks.c	the insert markers without the preload
 *	outbox_markers.c		the insert markers (outbox_horizon, ordered claims)
 *	outbox_trigger.c		the state guard and the after-insert trigger
 *	outbox_order.c			what ordered delivery knows of an outbox
 *	outbox_table.c			finding an outbox; the statements kept on it
 *	outbox_partitions.c		partitions made ahead and dropped
 *	outbox_statements.c		the statements' texts, prepared and run
 *	outbox_heads.c			the ordered claims' reads
 *	outbox_rows.c			row operations shared by the API and the worker
 *	outbox_insert.c			outbox_enqueue's direct insert
 *	outbox_args.c			the SQL functions' argument checks
 *	outbox_api.c			the SQL functions that write rows
 *	outbox_monitor.c		the SQL functions that only look
 *	outbox_worker.c			the background worker loop (called by nobody)
 *
 * A few lower files call up through function pointers this file sets
 * (outbox_channel_lookup, outbox_wake_next, outbox_is_ordered,
 * outbox_rel_ordered): each is declared in the lower file's header with the
 * function _PG_init puts there, so the dependency is written down.
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

#include "commands/dbcommands.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "tcop/utility.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/varlena.h"

#include "delivery_outbox.h"
#include "outbox_databases.h"
#include "outbox_heads.h"
#include "outbox_insert.h"
#include "outbox_markers.h"
#include "outbox_order.h"
#include "outbox_partitions.h"
#include "outbox_shmem.h"
#include "outbox_table.h"
#include "outbox_trigger.h"
#include "outbox_worker.h"
#include "outbox_xact.h"

OUTBOX_MODULE_MAGIC;

void		_PG_init(void);

static void outbox_relcache_callback(Datum arg, Oid relid);
static bool outbox_channel_check(char **newval, void **extra, GucSource source);
static bool outbox_database_check(char **newval, void **extra,
								  GucSource source);
static List *outbox_database_list(void);
static void outbox_init_preloaded(void);
static void outbox_shmem_request(void);
static void outbox_shmem_startup(void);
static void outbox_process_utility(PlannedStmt *pstmt, const char *queryString,
								   bool readOnlyTree,
								   ProcessUtilityContext context,
								   ParamListInfo params,
								   QueryEnvironment *queryEnv,
								   DestReceiver *dest, QueryCompletion *qc);

static const struct config_enum_entry outbox_notify_options[] = {
	{"commit", OUTBOX_NOTIFY_COMMIT, false},
	{"deferred", OUTBOX_NOTIFY_DEFERRED, false},
	{"off", OUTBOX_NOTIFY_OFF, false},
	{NULL, 0, false}
};

/* GUC variables */
char	   *outbox_channel = NULL;
int			outbox_max_payload_size = 1024 * 1024;
double		outbox_notify_queue_limit = 0.5;
int			outbox_notify_mode = OUTBOX_NOTIFY_COMMIT;
bool		outbox_direct_insert = true;
int			outbox_max_cached_outboxes = 64;
static char *outbox_database_names = NULL;
int			outbox_sweep_interval = 30000;
int			outbox_reclaim_after = 60;
int			outbox_retain_acked = -1;
int			outbox_handover_size = 65536;
int			outbox_deferred_batch_delay = 2;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
static ProcessUtility_hook_type prev_process_utility_hook = NULL;

/*
 * _PG_init
 *
 * Define the GUCs, register the invalidation and transaction callbacks, and,
 * when preloaded, everything that needs shared_preload_libraries.  Without
 * the preload the library is loaded on first use and works without shared
 * memory and without a worker.
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

	DefineCustomBoolVariable(OUTBOX_GUC_PREFIX ".direct_insert",
							 "Lets outbox_enqueue insert its row without an INSERT statement.",
							 "off: outbox_enqueue runs a plain INSERT through SPI.  Either way the row, its triggers and its errors are the same; the direct path is also skipped whenever another module hooks the parser, planner or executor.",
							 &outbox_direct_insert,
							 true,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable(OUTBOX_GUC_PREFIX ".max_cached_outboxes",
							"Outboxes whose prepared statements a session keeps.",
							"Past it, the statements of the outbox used least recently are freed (and prepared again at its next use), so that a session that works many outboxes holds a bounded amount of memory.",
							&outbox_max_cached_outboxes,
							64, 1, 100000,
							PGC_USERSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable(OUTBOX_GUC_PREFIX ".sweep_interval",
							"Time between two sweeps of the background worker.",
							NULL,
							&outbox_sweep_interval,
							30000, 10, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable(OUTBOX_GUC_PREFIX ".reclaim_after",
							"Rows delivered longer ago than this go back to pending at each sweep.",
							"-1 disables reclaiming by the worker.",
							&outbox_reclaim_after,
							60, -1, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable(OUTBOX_GUC_PREFIX ".retain_acked",
							"Acked rows older than this are purged at each sweep.",
							"-1 keeps acked rows until outbox_purge() is called.",
							&outbox_retain_acked,
							-1, -1, INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable(OUTBOX_GUC_PREFIX ".partition_lock_timeout",
							"How long a partition drop waits for its lock on a partitioned outbox.",
							"Producers and relays queue behind a waiting drop for this long at most; a drop that does not get the lock in time is left for the next sweep.",
							&outbox_partition_lock_timeout,
							100, 1, 60000,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable(OUTBOX_GUC_PREFIX ".deferred_batch_delay",
							"In deferred mode, how long the worker lets wake-ups gather after sending a batch.",
							"0 sends each batch as soon as the previous one is out.  More delay means fewer, larger NOTIFY transactions, and that much more latency under load.",
							&outbox_deferred_batch_delay,
							2, 0, 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	/*
	 * One relcache callback for the whole library, dispatching to each
	 * cache's: PostgreSQL 15 has ten relcache-callback slots per backend for
	 * every loaded module together (Citus, TimescaleDB, pglogical take
	 * several), and running out of them is FATAL.
	 */
	CacheRegisterRelcacheCallback(outbox_relcache_callback, (Datum) 0);
	CacheRegisterSyscacheCallback(NAMESPACEOID, outbox_table_syscache_callback,
								  (Datum) 0);
	CacheRegisterSyscacheCallback(PROCOID, outbox_insert_syscache_callback,
								  (Datum) 0);
	CacheRegisterSyscacheCallback(TYPEOID, outbox_insert_syscache_callback,
								  (Datum) 0);
	RegisterXactCallback(outbox_xact_callback, NULL);
	RegisterSubXactCallback(outbox_subxact_callback, NULL);
	RegisterXactCallback(outbox_markers_xact_callback, NULL);
	RegisterSubXactCallback(outbox_markers_subxact_callback, NULL);
	RegisterResourceReleaseCallback(outbox_xact_release_callback, NULL);
	outbox_channel_lookup = outbox_default_channel;
	outbox_wake_next = outbox_order_wake_next;
	outbox_is_ordered = outbox_table_is_ordered;
	outbox_rel_ordered = outbox_order_is_ordered;

	if (process_shared_preload_libraries_in_progress)
		outbox_init_preloaded();

	/* after every definition: drops placeholders of unknown names */
	MarkGUCPrefixReserved(OUTBOX_GUC_PREFIX);
}

/*
 * outbox_init_preloaded
 *
 * What only a library in shared_preload_libraries may do: the
 * PGC_POSTMASTER settings, shared memory, the ProcessUtility hook (counting
 * two-phase work needs the shared memory) and one worker per database in
 * delivery_outbox.database.
 */
static void
outbox_init_preloaded(void)
{
	List	   *names;
	int			i;

	DefineCustomStringVariable(OUTBOX_GUC_PREFIX ".database",
							   "Databases the delivery_outbox background worker serves.",
							   "A comma-separated list; empty means no worker.  Needs shared_preload_libraries.",
							   &outbox_database_names,
							   "",
							   PGC_POSTMASTER,
							   GUC_LIST_INPUT,
							   outbox_database_check, NULL, NULL);

	DefineCustomIntVariable(OUTBOX_GUC_PREFIX ".handover_size",
							"Row ids each served database can hold for deferred wake-ups.",
							NULL,
							&outbox_handover_size,
							65536, 1024, 16 * 1024 * 1024,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = outbox_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = outbox_shmem_startup;
	prev_process_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = outbox_process_utility;
	RegisterXactCallback(outbox_sweepers_xact_callback, NULL);

	/*
	 * No worker in the servers pg_upgrade starts (binary-upgrade mode): the
	 * new cluster's databases are being restored, their data files copied in
	 * behind the server's back.
	 */
	names = IsBinaryUpgrade ? NIL : outbox_database_list();
	for (i = 0; i < list_length(names); i++)
	{
		BackgroundWorker worker;

		memset(&worker, 0, sizeof(worker));
		worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
			BGWORKER_BACKEND_DATABASE_CONNECTION;
		worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
		worker.bgw_restart_time = 5;
		snprintf(worker.bgw_library_name, BGW_MAXLEN, "delivery_outbox");
		snprintf(worker.bgw_function_name, BGW_MAXLEN, "outbox_sweeper_main");
		snprintf(worker.bgw_name, BGW_MAXLEN, "delivery_outbox sweeper %d", i);
		strlcpy(worker.bgw_extra, list_nth(names, i), BGW_EXTRALEN);
		snprintf(worker.bgw_type, BGW_MAXLEN, "delivery_outbox sweeper");
		worker.bgw_main_arg = Int32GetDatum(i);
		RegisterBackgroundWorker(&worker);
	}
}

/*
 * outbox_relcache_callback
 *
 * The library's one relcache callback: every cache that depends on a
 * relation hears of its invalidation (of every relation's, for
 * InvalidOid).
 */
static void
outbox_relcache_callback(Datum arg, Oid relid)
{
	outbox_table_relcache_callback(arg, relid);
	outbox_trigger_relcache_callback(arg, relid);
	outbox_insert_relcache_callback(arg, relid);
	outbox_order_relcache_callback(arg, relid);
	outbox_heads_relcache_callback(arg, relid);
}

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
 * outbox_database_check
 *
 * delivery_outbox.database must be a list of at most OUTBOX_MAX_WORKERS names.
 */
static bool
outbox_database_check(char **newval, void **extra, GucSource source)
{
	char	   *raw = pstrdup(*newval);
	List	   *names;
	bool		ok;

	ok = SplitIdentifierString(raw, ',', &names);
	if (!ok)
		GUC_check_errdetail("List syntax is invalid.");
	else if (list_length(names) > OUTBOX_MAX_WORKERS)
	{
		GUC_check_errdetail("At most %d databases can be served.",
							OUTBOX_MAX_WORKERS);
		ok = false;
	}
	else
	{
		ListCell   *a;
		ListCell   *b;

		foreach(a, names)
		{
			for_each_cell(b, names, lnext(names, a))
			{
				if (strcmp(lfirst(a), lfirst(b)) == 0)
				{
					GUC_check_errdetail("Database \"%s\" is listed twice.",
										(char *) lfirst(a));
					ok = false;
				}
			}
		}
	}
	list_free(names);
	pfree(raw);
	return ok;
}

/*
 * outbox_database_list
 *
 * The names in delivery_outbox.database (NIL when empty or malformed; the
 * check hook rejects malformed lists).
 */
static List *
outbox_database_list(void)
{
	char	   *raw = pstrdup(outbox_database_names ? outbox_database_names : "");
	List	   *names;

	if (!SplitIdentifierString(raw, ',', &names))
		return NIL;
	return names;
}

/*
 * outbox_shmem_request
 *
 * shmem_request_hook: ask for the shared state.
 */
static void
outbox_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(outbox_shmem_size());
	RequestAddinShmemSpace(outbox_markers_size());
	RequestAddinShmemSpace(outbox_sweepers_shmem_size());
}

/*
 * outbox_shmem_startup
 *
 * shmem_startup_hook: create (or attach to) the shared state.
 */
static void
outbox_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	outbox_shmem_init();
	outbox_markers_init();
	outbox_sweepers_shmem_init(outbox_database_list());
}

/*
 * outbox_process_utility
 *
 * Follow two-phase commit: note the GID a transaction is prepared under, and
 * settle its stashed counters once COMMIT/ROLLBACK PREPARED has succeeded.
 * Also give a dropped database's shared slot back, and have the workers
 * leave a database that DROP DATABASE and the like need to themselves
 * (outbox_worker.c).
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
		outbox_xact_note_prepare(stmt->gid);
	/* the workers leave a database the command needs to itself */
	outbox_sweepers_before_utility(parsetree);

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
