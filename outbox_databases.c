/*-------------------------------------------------------------------------
 *
 * outbox_databases.c
 *		The workers leave a database that a command needs to itself.
 *
 * Databases come and go: DROP DATABASE, ALTER DATABASE ... RENAME and
 * SET TABLESPACE, and CREATE DATABASE ... TEMPLATE refuse to run while
 * another session is connected to the database.  The library's
 * ProcessUtility hook calls outbox_sweepers_before_utility() before such a
 * command: every worker connected to (or configured for) the database
 * named is held off it, leaves (exits, to be restarted by the postmaster),
 * and is waited for, so the command finds nobody there.  The hold ends
 * with the command's transaction (outbox_sweepers_xact_callback); a
 * restarted worker waits, before it connects, for every hold on its
 * database to end, and for a database of its configured name to exist
 * again after a committed DROP DATABASE or a RENAME away from that name
 * (a CREATE DATABASE or a RENAME to that name ends the wait).  A dropped
 * database's hand-over ring is emptied: its rows are gone, nothing is left
 * to wake.  A database renamed away from the name has its ring emptied and
 * detached too: nobody serves it any more, so its producers notify at
 * commit, as in any database without a worker.
 *
 * Shared state: a slot per configured database (its worker's pid, latch
 * and database, the holds on it, whether its name is missing), under the
 * slot's spinlock, which covers plain loads and stores only.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_databases.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "delivery_outbox.h"
#include "outbox_databases.h"
#include "outbox_shmem.h"

/*
 * Each worker's slot in shared memory, by the index of its database in
 * delivery_outbox.database; dbname is set at shared memory initialization
 * and never changes, the rest under mutex.
 */
typedef struct SweeperSlot
{
	char		dbname[NAMEDATALEN];	/* as configured; "" when unused */
	slock_t		mutex;
	int			pid;			/* the worker's, 0 when none runs */
	Oid			dboid;			/* the database it is connected to */
	Latch	   *latch;
	int			holds;			/* commands that need it out of its database */
	int			holder_pid;		/* the last backend to take a hold */
	bool		missing;		/* no database of its name: wait for one */
} SweeperSlot;

typedef struct SweeperShared
{
	SweeperSlot slots[OUTBOX_MAX_WORKERS];
} SweeperShared;

/* How long a command waits for a worker to leave its database, at most. */
#define SWEEPER_LEAVE_WAIT_MS	10000

static void sweeper_slot_detach(int code, Datum arg);
static void sweeper_wait_for_database(SweeperSlot *slot);
static bool sweeper_held(SweeperSlot *slot);
static void sweeper_empty_ring(Oid dboid);
static void sweeper_detach_ring(Oid dboid);

/* the workers' slots (NULL unless preloaded), and this worker's */
static SweeperShared *sweeper_shared = NULL;
static SweeperSlot *sweeper_slot = NULL;

/*
 * What the utility command of this transaction does to the workers: holds
 * it took (per slot), the database name it makes go and come at commit,
 * the database it drops.
 */
static int	sweeper_my_holds[OUTBOX_MAX_WORKERS];
static bool sweeper_pending = false;
static char sweeper_gone_name[NAMEDATALEN];
static char sweeper_come_name[NAMEDATALEN];
static Oid	sweeper_dropped_oid = InvalidOid;
static Oid	sweeper_renamed_oid = InvalidOid;


/*
 * outbox_sweeper_attach
 *
 * For the worker of the index-th database of delivery_outbox.database,
 * before it connects: take its slot (given back as the process exits), and
 * wait while a command holds it off its database or no database of its
 * name exists (sweeper_wait_for_database).
 */
void
outbox_sweeper_attach(int index)
{
	Assert(sweeper_shared != NULL && index >= 0 && index < OUTBOX_MAX_WORKERS);
	sweeper_slot = &sweeper_shared->slots[index];
	SpinLockAcquire(&sweeper_slot->mutex);
	sweeper_slot->pid = MyProcPid;
	sweeper_slot->latch = MyLatch;
	sweeper_slot->dboid = InvalidOid;
	SpinLockRelease(&sweeper_slot->mutex);
	on_shmem_exit(sweeper_slot_detach, (Datum) 0);
	sweeper_wait_for_database(sweeper_slot);
}

/*
 * outbox_sweeper_connected
 *
 * The worker is connected: commands naming its database by OID find it.
 */
void
outbox_sweeper_connected(void)
{
	SpinLockAcquire(&sweeper_slot->mutex);
	sweeper_slot->dboid = MyDatabaseId;
	SpinLockRelease(&sweeper_slot->mutex);
}

/*
 * outbox_sweeper_held
 *
 * Whether a command needs the worker out of its database now (it then
 * exits, to be restarted and wait in outbox_sweeper_attach).
 */
bool
outbox_sweeper_held(void)
{
	return sweeper_slot != NULL && sweeper_held(sweeper_slot);
}


/*
 * outbox_sweepers_shmem_size
 *
 * The workers' slots.
 */
Size
outbox_sweepers_shmem_size(void)
{
	return sizeof(SweeperShared);
}

/*
 * outbox_sweepers_shmem_init
 *
 * Create (or attach to) the workers' slots; names are the databases of
 * delivery_outbox.database, slot i for the i-th.
 */
void
outbox_sweepers_shmem_init(List *names)
{
	bool		found;
	int			i;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	sweeper_shared = ShmemInitStruct("delivery_outbox sweepers",
									 sizeof(SweeperShared), &found);
	if (!found)
	{
		memset(sweeper_shared, 0, sizeof(SweeperShared));
		for (i = 0; i < OUTBOX_MAX_WORKERS; i++)
		{
			SpinLockInit(&sweeper_shared->slots[i].mutex);
			if (i < list_length(names))
				strlcpy(sweeper_shared->slots[i].dbname, list_nth(names, i),
						NAMEDATALEN);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * outbox_sweepers_before_utility
 *
 * For the ProcessUtility hook, before the command runs: a command that
 * needs a database to itself (DROP DATABASE, ALTER DATABASE ... RENAME or
 * SET TABLESPACE, CREATE DATABASE ... TEMPLATE, the default template
 * template1 included) holds every worker connected to that database, or
 * configured for its name, off it until the command's transaction ends,
 * and waits (at most SWEEPER_LEAVE_WAIT_MS) for each to have left.  Also
 * notes the names the command makes go and come, applied at commit.
 */
void
outbox_sweepers_before_utility(Node *parsetree)
{
	const char *target = NULL;
	Oid			target_oid;
	ListCell   *lc;
	int			i;

	if (sweeper_shared == NULL)
		return;
	switch (nodeTag(parsetree))
	{
		case T_DropdbStmt:
			target = ((DropdbStmt *) parsetree)->dbname;
			strlcpy(sweeper_gone_name, target, NAMEDATALEN);
			sweeper_dropped_oid = get_database_oid(target, true);
			break;
		case T_RenameStmt:
			if (((RenameStmt *) parsetree)->renameType != OBJECT_DATABASE)
				return;
			target = ((RenameStmt *) parsetree)->subname;
			strlcpy(sweeper_gone_name, target, NAMEDATALEN);
			strlcpy(sweeper_come_name, ((RenameStmt *) parsetree)->newname,
					NAMEDATALEN);
			sweeper_renamed_oid = get_database_oid(target, true);
			break;
		case T_CreatedbStmt:
			target = "template1";
			foreach(lc, ((CreatedbStmt *) parsetree)->options)
			{
				DefElem    *opt = lfirst_node(DefElem, lc);

				if (strcmp(opt->defname, "template") == 0 && opt->arg != NULL)
					target = defGetString(opt);
			}
			strlcpy(sweeper_come_name, ((CreatedbStmt *) parsetree)->dbname,
					NAMEDATALEN);
			break;
		case T_AlterDatabaseStmt:
			foreach(lc, ((AlterDatabaseStmt *) parsetree)->options)
			{
				DefElem    *opt = lfirst_node(DefElem, lc);

				if (strcmp(opt->defname, "tablespace") == 0)
					target = ((AlterDatabaseStmt *) parsetree)->dbname;
			}
			break;
		default:
			return;
	}
	sweeper_pending = true;
	if (target == NULL)
		return;

	target_oid = get_database_oid(target, true);
	for (i = 0; i < OUTBOX_MAX_WORKERS; i++)
	{
		SweeperSlot *slot = &sweeper_shared->slots[i];
		int			pid;
		Latch	   *latch;
		bool		match;
		TimestampTz until;

		SpinLockAcquire(&slot->mutex);
		match = slot->dbname[0] != '\0' &&
			(strcmp(slot->dbname, target) == 0 ||
			 (OidIsValid(target_oid) && slot->dboid == target_oid));
		if (match)
		{
			slot->holds++;
			slot->holder_pid = MyProcPid;
		}
		pid = slot->pid;
		latch = slot->latch;
		SpinLockRelease(&slot->mutex);
		if (!match)
			continue;
		sweeper_my_holds[i]++;
		if (pid == 0)
			continue;
		if (latch != NULL)
			SetLatch(latch);

		/* until it is out of the process array (CountOtherDBBackends' view) */
		until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
											SWEEPER_LEAVE_WAIT_MS);
		while (BackendPidGetProc(pid) != NULL &&
			   GetCurrentTimestamp() < until)
		{
			CHECK_FOR_INTERRUPTS();
			pg_usleep(10 * 1000L);
		}
	}
}

/*
 * outbox_sweepers_xact_callback
 *
 * The end of a transaction that ran such a command: at commit, a worker
 * whose database name went waits for one of that name to come, one whose
 * name came goes on, and a dropped database's ring is emptied; whatever the
 * end, the holds it took end, and the workers held are woken.
 */
void
outbox_sweepers_xact_callback(XactEvent event, void *arg)
{
	int			i;

	if (!sweeper_pending)
		return;
	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT &&
		event != XACT_EVENT_PREPARE)
		return;
	for (i = 0; i < OUTBOX_MAX_WORKERS; i++)
	{
		SweeperSlot *slot = &sweeper_shared->slots[i];
		Latch	   *latch;
		bool		changed = false;
		bool		renamed_away = false;

		SpinLockAcquire(&slot->mutex);
		if (event == XACT_EVENT_COMMIT && slot->dbname[0] != '\0')
		{
			if (strcmp(slot->dbname, sweeper_gone_name) == 0)
			{
				slot->missing = changed = true;
				renamed_away = OidIsValid(sweeper_renamed_oid);
			}
			if (strcmp(slot->dbname, sweeper_come_name) == 0)
			{
				slot->missing = false;
				changed = true;
			}
		}
		if (sweeper_my_holds[i] > 0)
		{
			slot->holds = Max(slot->holds - sweeper_my_holds[i], 0);
			if (slot->holds == 0)
				slot->holder_pid = 0;
			changed = true;
		}
		latch = slot->latch;
		SpinLockRelease(&slot->mutex);
		sweeper_my_holds[i] = 0;
		if (renamed_away)
			sweeper_detach_ring(sweeper_renamed_oid);
		if (changed && latch != NULL)
			SetLatch(latch);
	}
	if (event == XACT_EVENT_COMMIT && OidIsValid(sweeper_dropped_oid))
		sweeper_empty_ring(sweeper_dropped_oid);
	sweeper_pending = false;
	sweeper_gone_name[0] = '\0';
	sweeper_come_name[0] = '\0';
	sweeper_dropped_oid = InvalidOid;
	sweeper_renamed_oid = InvalidOid;
}

/*
 * sweeper_held
 *
 * Whether a command needs this worker out of its database.  A hold whose
 * backend is gone without ending it (it cannot: its transaction ends as it
 * exits) is dropped, so a worker is never kept out for good.
 */
static bool
sweeper_held(SweeperSlot *slot)
{
	int			holds;
	int			holder;

	SpinLockAcquire(&slot->mutex);
	holds = slot->holds;
	holder = slot->holder_pid;
	SpinLockRelease(&slot->mutex);
	if (holds == 0)
		return false;
	if (holder != 0 && BackendPidGetProc(holder) != NULL)
		return true;
	SpinLockAcquire(&slot->mutex);
	if (slot->holder_pid == holder)
	{
		slot->holds = 0;
		slot->holder_pid = 0;
	}
	SpinLockRelease(&slot->mutex);
	return false;
}

/*
 * sweeper_wait_for_database
 *
 * Before connecting: wait while a command holds the worker off its
 * database, or while no database of its name exists since a committed
 * DROP DATABASE or RENAME.  The holders and CREATE DATABASE set our latch.
 */
static void
sweeper_wait_for_database(SweeperSlot *slot)
{
	bool		logged = false;

	for (;;)
	{
		bool		missing;

		SpinLockAcquire(&slot->mutex);
		missing = slot->missing;
		SpinLockRelease(&slot->mutex);
		if (!missing && !sweeper_held(slot))
			break;
		if (!logged)
			ereport(LOG,
					(errmsg("delivery_outbox sweeper waits for database \"%s\"",
							slot->dbname),
					 errdetail(missing ?
							   "No database of that name exists since it was dropped or renamed." :
							   "A command needs the database to itself.")));
		logged = true;
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 1000, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * sweeper_slot_detach
 *
 * On exit: the slot no longer has a worker.
 */
static void
sweeper_slot_detach(int code, Datum arg)
{
	if (sweeper_slot == NULL)
		return;
	SpinLockAcquire(&sweeper_slot->mutex);
	sweeper_slot->pid = 0;
	sweeper_slot->latch = NULL;
	sweeper_slot->dboid = InvalidOid;
	SpinLockRelease(&sweeper_slot->mutex);
}

/*
 * sweeper_empty_ring
 *
 * The database dboid was dropped: the deferred wake-ups waiting in its
 * ring are of rows that are gone.  The ring is emptied and detached from
 * the database's slot, which is given back (a worker that connects to a
 * database of the same name later takes its ring again, under its new
 * OID).
 */
static void
sweeper_empty_ring(Oid dboid)
{
	OutboxDatabase *db = outbox_database(dboid, false);

	if (db == NULL)
		return;
	sweeper_detach_ring(dboid);
	outbox_forget_database(dboid);
}

/*
 * sweeper_detach_ring
 *
 * The database dboid no longer goes by the name its worker serves (dropped,
 * or renamed away): nobody will read its ring again, and the worker takes
 * the ring along to the next database of that name.  The ring is emptied
 * and detached, so that the database's producers in notify = deferred mode
 * notify at commit themselves, as in any database without a worker, rather
 * than handing ids over to a ring nobody reads (or that another database
 * now uses).  The ids waiting in it are of rows that are gone (dropped) or
 * still pending (renamed: the relays' drain finds them).
 */
static void
sweeper_detach_ring(Oid dboid)
{
	OutboxDatabase *db = outbox_database(dboid, false);

	if (db == NULL)
		return;
	SpinLockAcquire(&db->mutex);
	db->ring_tail = db->ring_head;
	db->ring = -1;
	SpinLockRelease(&db->mutex);
}
