/*-------------------------------------------------------------------------
 *
 * outbox_heads.c
 *		The ordered claims' reads of an outbox: each group's head and run,
 *		the check of a locked run, the wake-up of a group's next row.
 *
 * On an ordered outbox the rows of one (recipient, tenant_id) group go out
 * in id order, one run at a time.  A group's *head* is its open row with
 * the lowest id.  A claim may hand out a run of a group's rows, from its
 * head on, when:
 *
 * - no row of the group is delivered (a run is in flight);
 * - no row of the group with a lower id is being inserted, updated or
 *   deleted by a transaction still running (a dirty snapshot on the
 *   recipient's open rows finds it once it is in the index), and no
 *   running statement may have drawn a lower id for a row not yet in the
 *   indexes (the insert markers' window, outbox_markers.c);
 * - each row of the run is pending and due; a row past its expiry is never
 *   handed out and does not hold the rest back (it is dead-lettered).
 *
 * The heads are found recipient by recipient, with a loose scan of the
 * (recipient, id) index of open rows that starts where this backend's last
 * claim of the outbox stopped, so every group is visited in turn and one
 * recipient's backlog costs the others nothing.  Nothing here locks: the
 * caller locks what it chose with SKIP LOCKED and keeps of each run only
 * the rows locked from its head on.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_heads.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/relation.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "common/hashfn.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "delivery_outbox.h"
#include "outbox_heads.h"
#include "outbox_markers.h"
#include "outbox_order.h"
#include "outbox_shmem.h"
#include "outbox_xact.h"

/*
 * Rows of a recipient scanned past the point where all its groups seen so
 * far are held back, looking for another tenant's group.
 */
#define OUTBOX_ORDER_LOOKAHEAD	4

/* A group with a run in flight, when the claim lists them all. */
typedef struct OutboxInFlight
{
	text	   *recipient;
	text	   *tenant;			/* NULL: the NULL tenant */
} OutboxInFlight;

/* What a claim may do with a row it read. */
typedef enum OutboxEntryStatus
{
	OUTBOX_ENTRY_TAKE,			/* hand it out, as part of its group's run */
	OUTBOX_ENTRY_SKIP,			/* pass over it (pending, expired) */
	OUTBOX_ENTRY_HOLD			/* nothing of its group from here on */
} OutboxEntryStatus;

typedef struct OutboxEntry
{
	int64		id;
	text	   *tenant;			/* NULL: the NULL tenant; in the scan's slot */
	OutboxEntryStatus status;
} OutboxEntry;

/*
 * Where a recipient's open rows start, as far as this backend knows: no
 * row of it below low was open at the claim that found it, and none can be
 * since but through what moves its outbox's order epoch on (a row
 * re-addressed to it, or one that brings its own id).  Scans start there,
 * past the dead index entries of its acked rows, which an open transaction
 * anywhere keeps.  Only with shared memory (the epoch is there).
 */
typedef struct OutboxLowKey
{
	Oid			relid;
	uint32		hash;			/* of the recipient */
} OutboxLowKey;

typedef struct OutboxLowWater
{
	OutboxLowKey key;
	uint64		epoch;
	int64		low;
	text	   *recipient;		/* in outbox_low_water_cxt */
} OutboxLowWater;

/* One (recipient, tenant_id) group met by a claim's scan. */
typedef struct OutboxGroup
{
	bool		tenant_null;
	text	   *tenant;
	bool		held;			/* nothing more of it goes out now */
	int			run;			/* its run's number in the claim */
} OutboxGroup;

/* A claim's scan. */
typedef struct OutboxScan
{
	Relation	rel;
	const OutboxColumns *cols;
	Relation	open_index;
	Relation	delivered_index;	/* or NULL: in_flight lists them */
	OutboxInFlight *in_flight;	/* sorted by recipient */
	int			nin_flight;
	TupleTableSlot *slot;
	SnapshotData dirty;
	bool		by_tenant;
	text	   *tenant;			/* NULL with by_tenant: the NULL tenant */
	TimestampTz now;
	bool		has_ttl;
	TimestampTz ttl_cutoff;
	int64		window;
	bool		use_low;		/* start each recipient at its low water */
	uint64		epoch;			/* the outbox's order epoch, read first */
	Snapshot	snapshot;		/* then this */
	int64		next_id;		/* then the sequence's next value */
	int			max_rows;
	int			nruns;
	OutboxHeads *heads;
} OutboxScan;

static void outbox_scan_init(OutboxScan *scan, Relation rel,
							 const OutboxColumns *cols, bool by_tenant,
							 text *tenant, TimestampTz now, bool has_ttl,
							 TimestampTz ttl_cutoff);
static void outbox_scan_recipient(OutboxScan *scan, text *recipient);
static text *outbox_next_recipient(OutboxScan *scan, text *after);
static bool outbox_next_entry(OutboxScan *scan, IndexScanDesc iscan,
							  TupleTableSlot *slot, bool dirty, OutboxEntry *e);
static bool outbox_scan_tenant(OutboxScan *scan, text *tenant);
static OutboxLowWater *outbox_low_water(Oid relid, text *recipient,
										bool create);
static int64 outbox_first_open(OutboxScan *scan, text *recipient, int64 from);
static OutboxGroup *outbox_group(List **groups, bool tenant_null,
								 text *tenant, int *nruns);
static bool outbox_text_equal(text *a, text *b);
static int	outbox_text_cmp(text *a, text *b);
static int	outbox_in_flight_cmp(const void *a, const void *b);
static void outbox_list_in_flight(OutboxScan *scan, Oid indexoid);
static void outbox_recipient_key(ScanKey key, Relation index,
								 StrategyNumber strategy, text *recipient);

static HTAB *outbox_low_waters = NULL;
static MemoryContext outbox_low_water_cxt = NULL;

/* Recipients' low waters a backend keeps at most (see outbox_low_water). */
#define OUTBOX_LOW_WATERS_MAX	65536

/* Where this backend's last whole-table ordered claim stopped. */
static Oid	outbox_cursor_relid = InvalidOid;
static text *outbox_cursor = NULL;

/*
 * outbox_order_heads
 *
 * What an ordered claim of rel may hand out now (see the file header): up
 * to max_rows rows, as runs from the heads of their groups, of one
 * recipient (recipient not NULL) or of every recipient in turn, of one
 * tenant when by_tenant.  Raises 55000 when the outbox lacks the indexes
 * ordered delivery reads.
 */
void
outbox_order_heads(Relation rel, const OutboxColumns *cols,
				   text *recipient, bool by_tenant, text *tenant,
				   TimestampTz now, bool has_ttl, TimestampTz ttl_cutoff,
				   int max_rows, OutboxHeads *heads)
{
	OutboxOrderInfo *info = outbox_order_info(rel);
	OutboxScan	scan;

	if (!OidIsValid(info->open_index) ||
		(!OidIsValid(info->delivered_index) && !OidIsValid(info->in_flight_index)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ordered outbox %s lacks the indexes ordered delivery reads",
						quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
												   RelationGetRelationName(rel))),
				 errhint("Detach the outbox and attach it again: that makes the indexes it lacks.")));

	heads->n = 0;
	heads->ids = palloc(sizeof(int64) * max_rows);
	heads->group = palloc(sizeof(int) * max_rows);
	heads->recipient = palloc(sizeof(text *) * max_rows);
	heads->tenant = palloc(sizeof(text *) * max_rows);
	heads->low = palloc(sizeof(int64) * max_rows);

	outbox_scan_init(&scan, rel, cols, by_tenant, tenant, now, has_ttl,
					 ttl_cutoff);
	scan.max_rows = max_rows;
	scan.heads = heads;

	/*
	 * The order epoch and a snapshot (see OutboxLowWater), the sequence's
	 * next value, then the windows.  Every row with a lower id was drawn
	 * before: a row found in no index below was then announced by a window. A
	 * row with that id or above may be drawn at any moment, by a statement
	 * whose window opens after the windows were read: none is handed out.
	 */
	if (!OidIsValid(info->seqrelid) || !outbox_order_sequence_ok(info->seqrelid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ordered outbox %s needs an id sequence that counts up with CACHE 1",
						quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
												   RelationGetRelationName(rel))),
				 errdetail("With a cache, a session may insert ids below the sequence's last value at any time."),
				 errhint("ALTER the id column's sequence to CACHE 1 with a positive INCREMENT, or turn ordered off.")));
	scan.use_low = outbox_order_epoch(RelationGetRelid(rel), &scan.epoch);
	if (scan.use_low)
		scan.snapshot = RegisterSnapshot(GetLatestSnapshot());
	scan.next_id = outbox_order_next_id(info->seqrelid);
	scan.window = Min(outbox_marker_window(RelationGetRelid(rel)),
					  scan.next_id - 1);
	scan.open_index = index_open(info->open_index, AccessShareLock);
	scan.slot = table_slot_create(rel, NULL);

	/*
	 * The groups with a run in flight: looked up per recipient in the
	 * (recipient, id) index of delivered rows that outbox_configure() makes;
	 * without it (a restored default outbox: the index, made on an
	 * extension's table, is not dumped), all of them listed once from the
	 * sweeper's (delivered_at) index, which costs a read of every row in
	 * flight per claim.
	 */
	if (OidIsValid(info->delivered_index))
		scan.delivered_index = index_open(info->delivered_index, AccessShareLock);
	else
		outbox_list_in_flight(&scan, info->in_flight_index);

	if (recipient != NULL)
		outbox_scan_recipient(&scan, recipient);
	else
	{
		text	   *start = NULL;
		text	   *cur;
		bool		wrapped = false;

		if (outbox_cursor_relid == RelationGetRelid(rel) && outbox_cursor != NULL)
			start = DatumGetTextPCopy(PointerGetDatum(outbox_cursor));
		cur = start;
		while (heads->n < max_rows)
		{
			text	   *next = outbox_next_recipient(&scan, cur);

			CHECK_FOR_INTERRUPTS();
			if (next == NULL)
			{
				if (wrapped || start == NULL)
					break;
				wrapped = true;
				cur = NULL;
				continue;
			}
			if (wrapped &&
				DatumGetInt32(DirectFunctionCall2Coll(bttextcmp,
													  scan.open_index->rd_indcollation[0],
													  PointerGetDatum(next),
													  PointerGetDatum(start))) > 0)
				break;
			outbox_scan_recipient(&scan, next);
			cur = next;
		}
		/* the next claim starts after the last recipient visited */
		if (outbox_cursor != NULL)
			pfree(outbox_cursor);
		outbox_cursor = NULL;
		outbox_cursor_relid = RelationGetRelid(rel);
		if (cur != NULL)
			outbox_cursor = (text *) MemoryContextAllocZero(TopMemoryContext, VARSIZE_ANY(cur));
		if (cur != NULL)
			memcpy(outbox_cursor, cur, VARSIZE_ANY(cur));
	}

	ExecDropSingleTupleTableSlot(scan.slot);
	if (scan.use_low)
		UnregisterSnapshot(scan.snapshot);
	if (scan.delivered_index != NULL)
		index_close(scan.delivered_index, AccessShareLock);
	index_close(scan.open_index, AccessShareLock);
}

/*
 * outbox_order_locked_run
 *
 * After a claim locked a run of rel's group (recipient, tenant, NULL for
 * the NULL tenant), its n rows run[] in id order: how many of them, from
 * the first, may go out, by the group's rows from low (where the claim
 * started reading the recipient) up to the last one read again with the
 * dirty snapshot.  The run ends before the first open row
 * of the group that is not in it (or is being changed) and is not an
 * expired pending row.  A row that the claim's first scan could not see
 * while it changed (its old version dead by the time it was read, its new
 * index entry added behind the scan) has its entries in place by now.
 */
int
outbox_order_locked_run(Relation rel, const OutboxColumns *cols,
						text *recipient, text *tenant, int64 low,
						const int64 *run, int n, TimestampTz now,
						bool has_ttl, TimestampTz ttl_cutoff)
{
	OutboxOrderInfo *info = outbox_order_info(rel);
	OutboxScan	scan;
	ScanKeyData keys[3];
	IndexScanDesc iscan;
	OutboxEntry entry;
	int			ok = 0;

	outbox_scan_init(&scan, rel, cols, true, tenant, now, has_ttl, ttl_cutoff);
	scan.window = PG_INT64_MAX;
	scan.open_index = index_open(info->open_index, AccessShareLock);
	scan.slot = table_slot_create(rel, NULL);
	outbox_recipient_key(&keys[0], scan.open_index, BTEqualStrategyNumber,
						 recipient);
	ScanKeyInit(&keys[1], 2, BTGreaterEqualStrategyNumber, F_INT8GE,
				Int64GetDatum(low));
	ScanKeyInit(&keys[2], 2, BTLessEqualStrategyNumber, F_INT8LE,
				Int64GetDatum(run[n - 1]));

	iscan = outbox_index_beginscan(rel, scan.open_index, &scan.dirty, 3, 0);
	index_rescan(iscan, keys, 3, NULL, 0);
	while (ok < n && outbox_next_entry(&scan, iscan, scan.slot, true, &entry))
	{
		if (!outbox_scan_tenant(&scan, entry.tenant) ||
			entry.status == OUTBOX_ENTRY_SKIP)
			continue;
		/* the claim's own locked row (a lock is no change), or the end */
		if (entry.id != run[ok] || entry.status != OUTBOX_ENTRY_TAKE)
			break;
		ok++;
	}
	index_endscan(iscan);

	ExecDropSingleTupleTableSlot(scan.slot);
	index_close(scan.open_index, AccessShareLock);
	return ok;
}

/*
 * outbox_order_wake_next
 *
 * A delivered row of an ordered outbox was acked or dead-lettered (tuple,
 * its last version): wake relays for its group's next row when that is
 * pending, since nothing else will (it was notified when it was inserted,
 * and no claim could take it then).
 */
void
outbox_order_wake_next(Relation rel, const OutboxColumns *cols,
					   HeapTuple tuple, const char *channel)
{
	OutboxOrderInfo *info = outbox_order_info(rel);
	TupleDesc	tupdesc = RelationGetDescr(rel);
	Relation	index;
	IndexScanDesc iscan;
	TupleTableSlot *slot;
	ScanKeyData keys[2];
	Datum		d;
	bool		isnull;
	text	   *recipient;
	text	   *tenant;
	int64		id;
	int			scanned = 0;

	if (!OidIsValid(info->open_index) || !ActiveSnapshotSet())
		return;
	d = heap_getattr(tuple, cols->recipient, tupdesc, &isnull);
	if (isnull)
		return;
	recipient = DatumGetTextPP(d);
	d = heap_getattr(tuple, cols->tenant_id, tupdesc, &isnull);
	tenant = isnull ? NULL : DatumGetTextPP(d);
	id = DatumGetInt64(heap_getattr(tuple, cols->id, tupdesc, &isnull));

	index = index_open(info->open_index, AccessShareLock);
	slot = table_slot_create(rel, NULL);
	outbox_recipient_key(&keys[0], index, BTEqualStrategyNumber, recipient);
	ScanKeyInit(&keys[1], 2, BTGreaterStrategyNumber, F_INT8GT,
				Int64GetDatum(id));
	iscan = outbox_index_beginscan(rel, index, GetActiveSnapshot(), 2, 0);
	index_rescan(iscan, keys, 2, NULL, 0);
	while (index_getnext_slot(iscan, ForwardScanDirection, slot))
	{
		Datum		t = slot_getattr(slot, cols->tenant_id, &isnull);

		if (isnull ? tenant == NULL :
			(tenant != NULL && outbox_text_equal(DatumGetTextPP(t), tenant)))
		{
			char	   *state = TextDatumGetCString(slot_getattr(slot, cols->state,
																 &isnull));

			if (strcmp(state, "pending") == 0)
				outbox_wake(DatumGetInt64(slot_getattr(slot, cols->id, &isnull)),
							RelationGetRelid(rel), channel);
			break;
		}
		if (++scanned > OUTBOX_ORDER_LOOKAHEAD * 4)
			break;
	}
	index_endscan(iscan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, AccessShareLock);
}

/*
 * outbox_scan_init
 *
 * A claim's scan of rel, before its indexes are opened: of one tenant's
 * rows when by_tenant, with the expiry rules of now (and the ttl's cutoff
 * when has_ttl).
 */
static void
outbox_scan_init(OutboxScan *scan, Relation rel, const OutboxColumns *cols,
				 bool by_tenant, text *tenant, TimestampTz now, bool has_ttl,
				 TimestampTz ttl_cutoff)
{
	memset(scan, 0, sizeof(*scan));
	scan->rel = rel;
	scan->cols = cols;
	scan->by_tenant = by_tenant;
	scan->tenant = tenant;
	scan->now = now;
	scan->has_ttl = has_ttl;
	scan->ttl_cutoff = ttl_cutoff;
	InitDirtySnapshot(scan->dirty);
}

/*
 * outbox_scan_recipient
 *
 * Add to the claim what the groups of one recipient may hand out: first
 * the tenants that have a delivered row are held, then its open rows are
 * read in id order, each group's run growing from its head until a row
 * holds it back.
 */
static void
outbox_scan_recipient(OutboxScan *scan, text *recipient)
{
	const OutboxColumns *cols = scan->cols;
	OutboxHeads *heads = scan->heads;
	List	   *groups = NIL;
	IndexScanDesc iscan;
	ScanKeyData keys[2];
	int			nkeys = 1;
	OutboxEntry entry;
	int			lookahead = 0;
	bool		isnull;
	int64		from = 0;
	int64		first = PG_INT64_MAX;	/* the first row the dirty scan read */
	OutboxLowWater *lw = NULL;

	/* where the recipient's open rows start (see OutboxLowWater) */
	if (scan->use_low)
	{
		lw = outbox_low_water(RelationGetRelid(scan->rel), recipient, false);
		if (lw != NULL && lw->epoch == scan->epoch)
			from = lw->low;
	}
	if (from > 0)
	{
		ScanKeyInit(&keys[1], 2, BTGreaterEqualStrategyNumber, F_INT8GE,
					Int64GetDatum(from));
		nkeys = 2;
	}

	/* groups with a run in flight */
	if (scan->delivered_index != NULL)
	{
		outbox_recipient_key(&keys[0], scan->delivered_index, BTEqualStrategyNumber,
							 recipient);
		iscan = outbox_index_beginscan(scan->rel, scan->delivered_index, &scan->dirty,
									   nkeys, 0);
		index_rescan(iscan, keys, nkeys, NULL, 0);
		while (index_getnext_slot(iscan, ForwardScanDirection, scan->slot))
		{
			Datum		t = slot_getattr(scan->slot, cols->tenant_id, &isnull);

			if (outbox_scan_tenant(scan, isnull ? NULL : DatumGetTextPP(t)))
				outbox_group(&groups, isnull, isnull ? NULL : DatumGetTextPP(t),
							 &scan->nruns)->held = true;
		}
		index_endscan(iscan);
	}
	else
	{
		OutboxInFlight *f = scan->in_flight;
		int			lo = 0;
		int			hi = scan->nin_flight;

		/* the first of the recipient's, then all of them */
		while (lo < hi)
		{
			int			mid = (lo + hi) / 2;

			if (outbox_text_cmp(f[mid].recipient, recipient) < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
		for (; lo < scan->nin_flight &&
			 outbox_text_cmp(f[lo].recipient, recipient) == 0; lo++)
			if (outbox_scan_tenant(scan, f[lo].tenant))
				outbox_group(&groups, f[lo].tenant == NULL, f[lo].tenant,
							 &scan->nruns)->held = true;
	}

	/*
	 * The recipient's open rows in id order, as they are now (the dirty
	 * snapshot, which shows running changes).  A row whose update commits
	 * while the scan goes past it can be missing from it (its old version
	 * dead by the time it is read, its new index entry added behind the
	 * scan): the caller reads the rows below each run's head again once it
	 * has locked the run (outbox_order_locked_run), when every such entry is
	 * in place.
	 */
	outbox_recipient_key(&keys[0], scan->open_index, BTEqualStrategyNumber,
						 recipient);
	iscan = outbox_index_beginscan(scan->rel, scan->open_index, &scan->dirty, nkeys, 0);
	index_rescan(iscan, keys, nkeys, NULL, 0);
	while (heads->n < scan->max_rows &&
		   outbox_next_entry(scan, iscan, scan->slot, true, &entry))
	{
		OutboxGroup *group;
		ListCell   *lc;
		bool		all_held = true;

		CHECK_FOR_INTERRUPTS();
		first = Min(first, entry.id);
		if (!outbox_scan_tenant(scan, entry.tenant))
			continue;
		group = outbox_group(&groups, entry.tenant == NULL, entry.tenant,
							 &scan->nruns);
		if (!group->held && entry.status == OUTBOX_ENTRY_TAKE)
		{
			heads->ids[heads->n] = entry.id;
			heads->group[heads->n] = group->run;
			heads->recipient[heads->n] = recipient;
			heads->tenant[heads->n] = group->tenant;
			heads->low[heads->n] = from;
			heads->n++;
			lookahead = 0;
			continue;
		}
		if (entry.status != OUTBOX_ENTRY_SKIP)
			group->held = true;

		/* stop reading the recipient once every group seen is held */
		foreach(lc, groups)
			all_held &= ((OutboxGroup *) lfirst(lc))->held;
		if (all_held && (scan->by_tenant || ++lookahead > OUTBOX_ORDER_LOOKAHEAD))
			break;
	}
	index_endscan(iscan);
	list_free(groups);

	/*
	 * The recipient's new low water: its first row open at the claim's
	 * snapshot (which, unlike the dirty one, no update committing under the
	 * scan hides) or being changed now (running, which the snapshot does not
	 * see), and never above the lowest window (an id drawn for a row that is
	 * in no index yet) nor the sequence's next value as the claim began (a
	 * row inserted later has a higher id).  A row that joins the recipient
	 * below it otherwise moves the order epoch on (outbox_note_order_change).
	 */
	if (scan->use_low)
	{
		int64		low = Min(Min(outbox_first_open(scan, recipient, from), first),
							  Min(scan->window, scan->next_id));

		if (lw == NULL)
			lw = outbox_low_water(RelationGetRelid(scan->rel), recipient, true);
		if (lw != NULL)
		{
			lw->epoch = scan->epoch;
			lw->low = low;
		}
	}
}

/*
 * outbox_first_open
 *
 * The id of a recipient's first open row at or after from, at the claim's
 * snapshot; PG_INT64_MAX when none.
 */
static int64
outbox_first_open(OutboxScan *scan, text *recipient, int64 from)
{
	ScanKeyData keys[2];
	IndexScanDesc iscan;
	int64		first = PG_INT64_MAX;

	outbox_recipient_key(&keys[0], scan->open_index, BTEqualStrategyNumber,
						 recipient);
	ScanKeyInit(&keys[1], 2, BTGreaterEqualStrategyNumber, F_INT8GE,
				Int64GetDatum(from));
	iscan = outbox_index_beginscan(scan->rel, scan->open_index, scan->snapshot, 2, 0);
	index_rescan(iscan, keys, 2, NULL, 0);
	if (index_getnext_slot(iscan, ForwardScanDirection, scan->slot))
	{
		bool		isnull;

		first = DatumGetInt64(slot_getattr(scan->slot, scan->cols->id, &isnull));
	}
	index_endscan(iscan);
	return first;
}

/*
 * outbox_low_water
 *
 * This backend's low water of a recipient of outbox relid, NULL if none
 * (with create: a new one, low 0, NULL only if the recipient's key is
 * another recipient's, which keeps it).
 */
static OutboxLowWater *
outbox_low_water(Oid relid, text *recipient, bool create)
{
	OutboxLowKey key;
	OutboxLowWater *lw;
	bool		found;

	/* a bounded memory: past the limit, all is forgotten at once */
	if (outbox_low_waters != NULL && create &&
		hash_get_num_entries(outbox_low_waters) >= OUTBOX_LOW_WATERS_MAX)
	{
		hash_destroy(outbox_low_waters);
		outbox_low_waters = NULL;
		MemoryContextReset(outbox_low_water_cxt);
	}
	if (outbox_low_waters == NULL)
	{
		HASHCTL		ctl;

		if (outbox_low_water_cxt == NULL)
			outbox_low_water_cxt = AllocSetContextCreate(TopMemoryContext,
														 "delivery_outbox low waters",
														 ALLOCSET_DEFAULT_SIZES);
		ctl.keysize = sizeof(OutboxLowKey);
		ctl.entrysize = sizeof(OutboxLowWater);
		ctl.hcxt = outbox_low_water_cxt;
		outbox_low_waters = hash_create("delivery_outbox low waters", 256,
										&ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	memset(&key, 0, sizeof(key));
	key.relid = relid;
	key.hash = hash_bytes((const unsigned char *) VARDATA_ANY(recipient),
						  VARSIZE_ANY_EXHDR(recipient));
	lw = hash_search(outbox_low_waters, &key, create ? HASH_ENTER : HASH_FIND,
					 &found);
	if (lw == NULL)
		return NULL;
	if (!found)
	{
		lw->epoch = 0;
		lw->low = 0;
		lw->recipient = (text *) MemoryContextAlloc(outbox_low_water_cxt,
													VARSIZE_ANY(recipient));
		memcpy(lw->recipient, recipient, VARSIZE_ANY(recipient));
		return lw;
	}
	if (!outbox_text_equal(lw->recipient, recipient))
		return NULL;			/* another recipient's key */
	return lw;
}

/*
 * outbox_next_entry
 *
 * The next row of an index scan of open rows (with the dirty snapshot when
 * dirty, which tells running changes), as an OutboxEntry: what the claim may do
 * with it, by the version read: taken when pending, due, not being changed
 * (as the dirty snapshot shows) and below every open window, skipped when
 * pending and expired, else it holds its group.  False at the end of the
 * scan.
 */
static bool
outbox_next_entry(OutboxScan *scan, IndexScanDesc iscan, TupleTableSlot *slot,
				  bool dirty, OutboxEntry *e)
{
	const OutboxColumns *cols = scan->cols;
	bool		isnull;
	Datum		d;
	bool		busy;
	char	   *state;

	if (!index_getnext_slot(iscan, ForwardScanDirection, slot))
		return false;
	busy = dirty && (TransactionIdIsValid(scan->dirty.xmin) ||
					 TransactionIdIsValid(scan->dirty.xmax));
	e->id = DatumGetInt64(slot_getattr(slot, cols->id, &isnull));
	d = slot_getattr(slot, cols->tenant_id, &isnull);
	e->tenant = isnull ? NULL : DatumGetTextPP(d);
	e->status = OUTBOX_ENTRY_HOLD;
	if (busy)
		return true;
	state = TextDatumGetCString(slot_getattr(slot, cols->state, &isnull));
	if (strcmp(state, "pending") == 0)
	{
		bool		expired = false;
		bool		due = true;

		if (cols->expires_at != InvalidAttrNumber)
		{
			d = slot_getattr(slot, cols->expires_at, &isnull);
			expired = !isnull && DatumGetTimestampTz(d) <= scan->now;
		}
		if (scan->has_ttl)
		{
			d = slot_getattr(slot, cols->created_at, &isnull);
			expired |= !isnull && DatumGetTimestampTz(d) <= scan->ttl_cutoff;
		}
		if (cols->not_before != InvalidAttrNumber)
		{
			d = slot_getattr(slot, cols->not_before, &isnull);
			due = isnull || DatumGetTimestampTz(d) <= scan->now;
		}
		if (expired)
			e->status = OUTBOX_ENTRY_SKIP;	/* never handed out, dead-lettered */
		else if (due && e->id <= scan->window)
			e->status = OUTBOX_ENTRY_TAKE;
	}
	pfree(state);
	return true;
}

/*
 * outbox_scan_tenant
 *
 * Whether a row of tenant (NULL: the NULL tenant) is one the claim looks
 * at: any, or only its tenant's.
 */
static bool
outbox_scan_tenant(OutboxScan *scan, text *tenant)
{
	if (!scan->by_tenant)
		return true;
	if (tenant == NULL || scan->tenant == NULL)
		return tenant == NULL && scan->tenant == NULL;
	return outbox_text_equal(tenant, scan->tenant);
}

/*
 * outbox_next_recipient
 *
 * The first recipient after after (NULL: the first) with an open row, or
 * NULL when there is none.
 */
static text *
outbox_next_recipient(OutboxScan *scan, text *after)
{
	IndexScanDesc iscan;
	ScanKeyData key;
	text	   *next = NULL;

	/*
	 * The recipient is the entry's key: read from the index alone, without
	 * the table (the entry may be a dead row's, whose recipient's scan then
	 * finds nothing; an open transaction anywhere keeps many such entries).
	 */
	iscan = outbox_index_beginscan(scan->rel, scan->open_index, &scan->dirty,
								   after != NULL ? 1 : 0, 0);
	iscan->xs_want_itup = true;
	if (after != NULL)
		outbox_recipient_key(&key, scan->open_index, BTGreaterStrategyNumber,
							 after);
	index_rescan(iscan, after != NULL ? &key : NULL, after != NULL ? 1 : 0,
				 NULL, 0);
	if (index_getnext_tid(iscan, ForwardScanDirection) != NULL)
	{
		bool		isnull;
		Datum		d = index_getattr(iscan->xs_itup, 1, iscan->xs_itupdesc,
									  &isnull);

		if (!isnull)
			next = DatumGetTextPCopy(d);
	}
	index_endscan(iscan);
	return next;
}

/*
 * outbox_group
 *
 * The group of a tenant among those a recipient's scan met, added (with
 * the next run number) if new.
 */
static OutboxGroup *
outbox_group(List **groups, bool tenant_null, text *tenant, int *nruns)
{
	ListCell   *lc;
	OutboxGroup *group;

	foreach(lc, *groups)
	{
		group = lfirst(lc);
		if (group->tenant_null ? tenant_null :
			(!tenant_null && outbox_text_equal(group->tenant, tenant)))
			return group;
	}
	group = palloc0(sizeof(OutboxGroup));
	group->tenant_null = tenant_null;
	group->tenant = tenant_null ? NULL :
		DatumGetTextPCopy(PointerGetDatum(tenant));
	group->run = (*nruns)++;
	*groups = lappend(*groups, group);
	return group;
}

/*
 * outbox_text_equal
 *
 * Whether two (possibly short-header) texts are the same bytes.
 */
static bool
outbox_text_equal(text *a, text *b)
{
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/*
 * outbox_text_cmp
 *
 * Byte order of two texts (for the list of groups in flight).
 */
static int
outbox_text_cmp(text *a, text *b)
{
	int			la = VARSIZE_ANY_EXHDR(a);
	int			lb = VARSIZE_ANY_EXHDR(b);
	int			c = memcmp(VARDATA_ANY(a), VARDATA_ANY(b), Min(la, lb));

	return c != 0 ? c : (la > lb) - (la < lb);
}

static int
outbox_in_flight_cmp(const void *a, const void *b)
{
	return outbox_text_cmp(((const OutboxInFlight *) a)->recipient,
						   ((const OutboxInFlight *) b)->recipient);
}

/*
 * outbox_list_in_flight
 *
 * Every group with a delivered row (or a row being claimed), read with a
 * dirty snapshot from the (delivered_at) index of delivered rows, sorted
 * by recipient.
 */
static void
outbox_list_in_flight(OutboxScan *scan, Oid indexoid)
{
	Relation	index = index_open(indexoid, AccessShareLock);
	IndexScanDesc iscan;
	int			space = 64;

	scan->in_flight = palloc(sizeof(OutboxInFlight) * space);
	scan->nin_flight = 0;
	iscan = outbox_index_beginscan(scan->rel, index, &scan->dirty, 0, 0);
	index_rescan(iscan, NULL, 0, NULL, 0);
	while (index_getnext_slot(iscan, ForwardScanDirection, scan->slot))
	{
		bool		isnull;
		Datum		r = slot_getattr(scan->slot, scan->cols->recipient, &isnull);
		Datum		t;

		CHECK_FOR_INTERRUPTS();
		if (isnull)
			continue;
		if (scan->nin_flight == space)
		{
			space *= 2;
			scan->in_flight = repalloc(scan->in_flight,
									   sizeof(OutboxInFlight) * space);
		}
		scan->in_flight[scan->nin_flight].recipient = DatumGetTextPCopy(r);
		t = slot_getattr(scan->slot, scan->cols->tenant_id, &isnull);
		scan->in_flight[scan->nin_flight].tenant = isnull ? NULL : DatumGetTextPCopy(t);
		scan->nin_flight++;
	}
	index_endscan(iscan);
	index_close(index, AccessShareLock);
	qsort(scan->in_flight, scan->nin_flight, sizeof(OutboxInFlight),
		  outbox_in_flight_cmp);
}

/*
 * outbox_recipient_key
 *
 * A scan key on an index's first column, recipient, with its collation.
 */
static void
outbox_recipient_key(ScanKey key, Relation index, StrategyNumber strategy,
					 text *recipient)
{
	ScanKeyEntryInitialize(key, 0, 1, strategy, TEXTOID,
						   index->rd_indcollation[0],
						   strategy == BTEqualStrategyNumber ? F_TEXTEQ : F_TEXT_GT,
						   PointerGetDatum(recipient));
}

/*
 * outbox_heads_relcache_callback
 *
 * Forget this backend's low waters of a relation (registered by _PG_init).
 */
void
outbox_heads_relcache_callback(Datum arg, Oid relid)
{
	HASH_SEQ_STATUS status;

	/*
	 * Its setting may have changed (outbox_configure invalidates the outbox),
	 * and while it was not ordered nothing moved its order epoch on: read its
	 * recipients from the start again.
	 */
	if (outbox_low_waters != NULL)
	{
		OutboxLowWater *lw;

		hash_seq_init(&status, outbox_low_waters);
		while ((lw = hash_seq_search(&status)) != NULL)
			if (relid == InvalidOid || lw->key.relid == relid)
				lw->epoch = 0;	/* matches no epoch: read from the start */
	}
}
