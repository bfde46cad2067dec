/*-------------------------------------------------------------------------
 *
 * outbox_statements.c
 *		The statements run on outbox tables: their SQL, parameter types,
 *		1.1-shaped variants and how each is planned (outbox_plan_defs).
 *		outbox_execute.c prepares and runs them.
 *
 * Every statement that touches several rows either skips locked rows
 * (claim, reclaim, purge, expiry) or locks its rows in ascending id order
 * before changing them (ack, release, resync, reassign, reject, redrive),
 * so no two of them can deadlock each other.
 *
 * Copyright (c) 2026, delivery_outbox developers
 *
 * IDENTIFICATION
 *		outbox_statements.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"

#include "delivery_outbox.h"
#include "outbox_statements.h"
#include "outbox_statements_int.h"
#include "outbox_table.h"

StaticAssertDecl(OUTBOX_NUM_PLANS <= OUTBOX_NUM_PLANS_MAX,
				 "OUTBOX_NUM_PLANS_MAX is too small");

/*
 * The statements, one entry per OutboxPlanId: the text, in which %1$s is the
 * table's qualified name and %2$s the select list of its row o as the
 * default outbox's columns (outbox_put_rows makes rows of them), and the
 * parameter types.  Every operator and
 * function is qualified, the state literals stay literal (so the partial
 * indexes' predicates are proven from the query text, whatever the
 * parameter values), and each multi-row change either skips locked rows or
 * first locks its rows ORDER BY id.
 *
 * Where rows are found by id (acks, release, the UPDATE half of every
 * lock-then-update), the state is re-checked in function form,
 * pg_catalog.texteq(): the same test, but one no partial index predicate can
 * be proven from, so the planner cannot trade the primary key lookup for a
 * scan of a whole partial index, with or without statistics.  They are
 * walks too (OutboxPlanDef.walk): a session that first ran them while the
 * table was nearly empty (a relay connected before the first burst) would
 * otherwise keep the generic plan made then, a sequential scan, until the
 * next invalidation, and read the whole table at every ack.
 */
#define OUTBOX_OPEN_STATES \
	"ANY ('{pending,delivered}'::pg_catalog.text[])"

/*
 * A pending row that may be handed out, as far as expiry goes: not past its
 * expires_at (against now) nor its outbox's ttl (created_at against the
 * cutoff, NULL when there is no ttl).
 */
#define OUTBOX_UNEXPIRED(now, ttl_cutoff) \
	" AND (expires_at IS NULL OR expires_at OPERATOR(pg_catalog.>) " now ")" \
	" AND (" ttl_cutoff " IS NULL OR created_at OPERATOR(pg_catalog.>) " ttl_cutoff ")"

/*
 * The claim: first the scheduled rows that fell due, in the order they fell
 * due, then the others, oldest id first (each from its own index, so rows
 * scheduled for later are never walked past), optionally one recipient's
 * and/or one tenant's, skipping locked rows and expired ones.  $1 max rows,
 * $2 recipient, $3 tenant, $4 now, $5 the ttl cutoff.  The second LIMIT is
 * an expression, which the planner estimates at a tenth of the table: the
 * UPDATE finds the rows by "id = ANY (ARRAY(...))", by the primary key
 * whatever that estimate, not by a join it could plan as a hash of the
 * whole table.
 */
#define OUTBOX_CLAIM_ROWS_SQL(filter, by) \
	"WITH d AS (" \
	"SELECT id FROM %1$s" \
	" WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'" \
	" AND not_before IS NOT NULL AND not_before OPERATOR(pg_catalog.<=) $4" \
	filter OUTBOX_UNEXPIRED("$4", "$5") \
	" ORDER BY " by "not_before, id LIMIT $1 FOR UPDATE SKIP LOCKED)," \
	" r AS (" \
	"SELECT id FROM %1$s" \
	" WHERE delivery_state OPERATOR(pg_catalog.=) 'pending' AND not_before IS NULL" \
	filter OUTBOX_UNEXPIRED("$4", "$5") \
	" ORDER BY " by "id" \
	" LIMIT ($1 OPERATOR(pg_catalog.-) (SELECT pg_catalog.count(*) FROM d))" \
	" FOR UPDATE SKIP LOCKED)"
#define OUTBOX_CLAIM_SQL(filter, by) \
	OUTBOX_CLAIM_ROWS_SQL(filter, by) "," \
	" u AS (" \
	"UPDATE %1$s o SET delivery_state = 'delivered'" \
	" WHERE o.id OPERATOR(pg_catalog.=)" \
	" ANY (ARRAY(SELECT id FROM d UNION ALL SELECT id FROM r))" \
	" AND pg_catalog.texteq(o.delivery_state, 'pending')" \
	" RETURNING %2$s)" \
	" SELECT u.* FROM u ORDER BY u.id"
/*
 * A partitioned outbox's claim in two statements: the rows locked, then
 * (OUTBOX_PLAN_CLAIM_IDS) updated by their ids.  In one, the UPDATE's
 * partitions could be pruned only during the run, from the locked ids,
 * after its executor start has set up every partition's scan and opened
 * every one of their indexes; by the ids' range of a parameter, they are
 * pruned at executor start.
 */
#define OUTBOX_CLAIM_LOCK_SQL(filter, by) \
	OUTBOX_CLAIM_ROWS_SQL(filter, by) \
	" SELECT id FROM d UNION ALL SELECT id FROM r"
#define OUTBOX_BY_RECIPIENT	" AND recipient OPERATOR(pg_catalog.=) $2"

/*
 * A recipient's rows for a scan that walks an index of (recipient, ...):
 * the equality written as a range of one value, and the scan ordered by
 * recipient first.  (An equality would make the planner drop the
 * recipient from the ordering as a constant, and then, without
 * statistics, an index of the whole table's open rows in id order with a
 * filter costs it the same as the recipient's own index: a walk past every
 * other recipient's rows.  The range leaves the recipient's index the only
 * one that gives the order.  Both bounds are the same text: in the
 * database's collation, which is deterministic for these columns, the rows
 * between them are the ones equal to it.)
 */
#define OUTBOX_RECIPIENT_IS(param) \
	" AND recipient OPERATOR(pg_catalog.>=) " param \
	" AND recipient OPERATOR(pg_catalog.<=) " param
#define OUTBOX_BY_RECIPIENT_ORDER	"recipient, "
#define OUTBOX_BY_TENANT	" AND tenant_id OPERATOR(pg_catalog.=) $3"

#define OUTBOX_CLAIM_ARGS	{INT8OID, TEXTOID, TEXTOID, TIMESTAMPTZOID, TABLE_TIME}

/* the acks' lock: open rows by id, in id order */
#define OUTBOX_ACK_LOCK_SQL(filter) \
	"SELECT id, delivery_state OPERATOR(pg_catalog.=) 'pending'" \
	" FROM %1$s" \
	" WHERE id OPERATOR(pg_catalog.=) ANY ($1)%P" \
	" AND NOT pg_catalog.texteq(delivery_state, 'acked')" filter \
	" ORDER BY id FOR UPDATE"

/*
 * Delivered rows going back to pending (release, reclaim, resync): the rows
 * locked by the CTE l, in id order or skipping locked rows, either go back
 * to pending, not claimable before not_before, or, when expired or out of
 * attempts, move to the dead letters (%3$s); the same test decides both,
 * so every row does exactly one.  Returns the numbers requeued and
 * dead-lettered.  The policy's parameters, shared by all three: $1 now,
 * $2 max_attempts (NULL: unlimited), $3 the ttl cutoff (NULL: none),
 * $4 backoff_base, $5 backoff_max; the statement's own follow.
 */
#define OUTBOX_EXPIRED \
	"(expires_at IS NOT NULL AND expires_at OPERATOR(pg_catalog.<=) $1" \
	" OR $3 IS NOT NULL AND created_at OPERATOR(pg_catalog.<=) $3)"
#define OUTBOX_DEAD \
	"coalesce(" OUTBOX_EXPIRED \
	" OR $2 IS NOT NULL AND delivery_attempts OPERATOR(pg_catalog.>=) $2, false)"
/*
 * base x 2^(attempts - 1), capped at max, times a jitter in [0.5, 1), in
 * seconds (float8: doubling an interval overflows it after some 40
 * attempts; outbox_configure bounds base and max).  Every OPERATOR() has the
 * same precedence, left to right: hence the parentheses.
 */
#define OUTBOX_BACKOFF \
	"CASE WHEN $4 OPERATOR(pg_catalog.>) '0'::pg_catalog.interval THEN" \
	" $1 OPERATOR(pg_catalog.+)" \
	" ((LEAST(pg_catalog.date_part('epoch', $4) OPERATOR(pg_catalog.*)" \
	" pg_catalog.power(2::pg_catalog.float8," \
	" LEAST(o.delivery_attempts OPERATOR(pg_catalog.-) 1, 1000))," \
	" pg_catalog.date_part('epoch', $5))" \
	" OPERATOR(pg_catalog.*) (0.5::pg_catalog.float8 OPERATOR(pg_catalog.+)" \
	" (0.5::pg_catalog.float8 OPERATOR(pg_catalog.*) pg_catalog.random())))" \
	" OPERATOR(pg_catalog.*) '1 second'::pg_catalog.interval) END"
#define OUTBOX_DEAD_COLUMNS \
	"id, recipient, kind, tenant_id, payload, delivery_state," \
	" delivery_attempts, created_at, delivered_at, acked_at, not_before," \
	" expires_at, dedup_key, last_error, dead_at, dead_reason"
/* the dead letters' INSERT from the deleted rows d */
#define OUTBOX_TO_DEAD(last_error, reason) \
	" x AS (INSERT INTO %3$s (" OUTBOX_DEAD_COLUMNS ")" \
	" SELECT id, recipient, kind, tenant_id, payload, delivery_state," \
	" delivery_attempts, created_at, delivered_at, acked_at, not_before," \
	" expires_at, dedup_key, " last_error ", $1, " reason \
	" FROM d ORDER BY id RETURNING 1)"
/*
 * What the lock CTE l of a requeue statement returns for each row it
 * locked, computed on the version it locked (a row changed concurrently is
 * re-read and re-judged by the lock), so that the DELETE and the UPDATE
 * below agree on every row, whichever version their own scans start from.
 */
#define OUTBOX_LOCKED_COLUMNS \
	"id, " OUTBOX_DEAD " AS dead," \
	" CASE WHEN " OUTBOX_EXPIRED " THEN 'expired' ELSE 'max_attempts' END AS reason"
#define OUTBOX_REQUEUE_SQL(lock, not_before, error) \
	"WITH l AS (" lock ")," \
	" d AS (DELETE FROM %1$s o USING l" \
	" WHERE o.id OPERATOR(pg_catalog.=) l.id" \
	" AND pg_catalog.texteq(o.delivery_state, 'delivered') AND l.dead" \
	" RETURNING o.id, o.recipient, o.kind, o.tenant_id, o.payload," \
	" o.delivery_state, o.delivery_attempts, o.created_at, o.delivered_at," \
	" o.acked_at, o.not_before, o.expires_at, o.dedup_key, o.last_error," \
	" l.reason AS dead_reason)," \
	OUTBOX_TO_DEAD("coalesce(" error ", last_error)", "dead_reason") "," \
	" u AS (UPDATE %1$s o SET delivery_state = 'pending'," \
	" not_before = " not_before "," \
	" last_error = coalesce(" error ", o.last_error)" \
	" FROM l WHERE o.id OPERATOR(pg_catalog.=) l.id" \
	" AND pg_catalog.texteq(o.delivery_state, 'delivered')" \
	" AND NOT l.dead RETURNING 1)" \
	" SELECT (SELECT pg_catalog.count(*) FROM u), (SELECT pg_catalog.count(*) FROM x)"
#define OUTBOX_POLICY_ARGS \
	TIMESTAMPTZOID, INT4OID, TABLE_TIME, INTERVALOID, INTERVALOID

/* the reconnect resync: a recipient's delivered rows, in id order */
#define OUTBOX_RESYNC_LOCK(tenant) \
	"SELECT " OUTBOX_LOCKED_COLUMNS " FROM %1$s" \
	" WHERE delivery_state OPERATOR(pg_catalog.=) 'delivered'" \
	OUTBOX_RECIPIENT_IS("$6") \
	" AND " tenant \
	" ORDER BY recipient, id FOR UPDATE"

/* the replay: a recipient's open rows after an id */
#define OUTBOX_REPLAY_SQL(filter) \
	"SELECT %2$s FROM %1$s o" \
	" WHERE delivery_state OPERATOR(pg_catalog.=) " OUTBOX_OPEN_STATES \
	OUTBOX_RECIPIENT_IS("$1") \
	" AND id OPERATOR(pg_catalog.>) $2" filter \
	" ORDER BY recipient, id LIMIT $3"

/*
 * outbox_wait's probe: is there a row a claim would hand out (of a
 * recipient)?  $1 recipient, $2 now, $3 the ttl cutoff.
 */
#define OUTBOX_EXISTS_SQL(filter) \
	"SELECT EXISTS (SELECT FROM %1$s" \
	" WHERE delivery_state OPERATOR(pg_catalog.=) 'pending' AND not_before IS NULL" \
	filter OUTBOX_UNEXPIRED("$2", "$3") ")" \
	" OR EXISTS (SELECT FROM %1$s" \
	" WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'" \
	" AND not_before IS NOT NULL AND not_before OPERATOR(pg_catalog.<=) $2" \
	filter OUTBOX_UNEXPIRED("$2", "$3") ")"

/* when the next scheduled row (of a recipient) falls due: $1 now, $2 recipient */
#define OUTBOX_NEXT_DUE_SQL(filter) \
	"SELECT pg_catalog.min(not_before) FROM %1$s" \
	" WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'" \
	" AND not_before IS NOT NULL AND not_before OPERATOR(pg_catalog.>) $1" filter

#define OUTBOX_INSERT_COLUMNS \
	"recipient, kind, payload, tenant_id, not_before, expires_at, dedup_key"
#define OUTBOX_ENQUEUE_ARGS \
	{TEXTOID, TEXTOID, BYTEAOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID}
/* %K: OUTBOX_KEY_CONFLICT or OUTBOX_PARTITIONED_KEY_CONFLICT */
#define OUTBOX_DEDUP_CONFLICT	" %K"
#define OUTBOX_ENQUEUE_BATCH_SQL(conflict) \
	"INSERT INTO %1$s (" OUTBOX_INSERT_COLUMNS ")" \
	" SELECT r, k, p, t, nb, ea, dk" \
	" FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)," \
	" pg_catalog.unnest($3), pg_catalog.unnest($4), pg_catalog.unnest($5)," \
	" pg_catalog.unnest($6), pg_catalog.unnest($7))" \
	" WITH ORDINALITY AS u(r, k, p, t, nb, ea, dk, n)" \
	" ORDER BY n" conflict " RETURNING id"
#define OUTBOX_ENQUEUE_BATCH_ARGS \
	{TEXTARRAYOID, TEXTARRAYOID, BYTEAARRAYOID, TEXTARRAYOID, \
	 TIMESTAMPTZARRAYOID, TIMESTAMPTZARRAYOID, TEXTARRAYOID}

/* 1.1's statements, for tables without the policy's columns */
const char	outbox_same_sql[] = "";
#define OUTBOX_LEGACY_CLAIM_SQL(filter, by) \
	"WITH c AS (" \
	"SELECT id FROM %1$s" \
	" WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'" filter \
	" ORDER BY " by "id LIMIT $1 FOR UPDATE SKIP LOCKED)," \
	" u AS (" \
	"UPDATE %1$s o SET delivery_state = 'delivered' FROM c" \
	" WHERE o.id OPERATOR(pg_catalog.=) c.id" \
	" AND pg_catalog.texteq(o.delivery_state, 'pending')" \
	" RETURNING %2$s)" \
	" SELECT u.* FROM u ORDER BY u.id"
#define OUTBOX_LEGACY_REQUEUE_SQL(lock) \
	"WITH l AS (" lock ")," \
	" u AS (UPDATE %1$s o SET delivery_state = 'pending' FROM l" \
	" WHERE o.id OPERATOR(pg_catalog.=) l.id" \
	" AND pg_catalog.texteq(o.delivery_state, 'delivered') RETURNING 1)" \
	" SELECT (SELECT pg_catalog.count(*) FROM u), 0::pg_catalog.int8"
#define OUTBOX_LEGACY_EXISTS_SQL(filter) \
	"SELECT EXISTS (SELECT FROM %1$s" \
	" WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'" filter ")"

/* outbox_stats(): counts, ages, and the dead letters */
/*
 * outbox_stats: each count and age from the partial index of its state (a
 * walk of that state's entries, never of the whole table: acked rows,
 * however many are kept, are counted from the acked index alone when the
 * visibility map allows), the oldest pending row's age from the pending
 * rows' heap tuples, the recipients from the open rows' index.  The
 * pending rows in two parts, those due and those scheduled, each matching
 * its own index; a 1.0 or 1.1 table has no not_before, and no scheduled
 * rows.
 */
#define OUTBOX_STATS_SQL(dead, due, scheduled) \
	"WITH p AS (SELECT pg_catalog.count(*) AS n, pg_catalog.min(created_at) AS oldest" \
	" FROM %1$s WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'" due ")," \
	" s AS (SELECT pg_catalog.count(*) AS n, pg_catalog.min(created_at) AS oldest" \
	" FROM %1$s WHERE " scheduled ")," \
	" d AS (SELECT pg_catalog.count(*) AS n, pg_catalog.min(delivered_at) AS oldest" \
	" FROM %1$s WHERE delivery_state OPERATOR(pg_catalog.=) 'delivered')," \
	" a AS (SELECT pg_catalog.count(*) AS n" \
	" FROM %1$s WHERE delivery_state OPERATOR(pg_catalog.=) 'acked')," \
	" r AS (SELECT pg_catalog.count(DISTINCT recipient) AS n" \
	" FROM %1$s WHERE delivery_state OPERATOR(pg_catalog.=) " OUTBOX_OPEN_STATES ")" \
	" SELECT p.n OPERATOR(pg_catalog.+) s.n, d.n, a.n," \
	" $1 OPERATOR(pg_catalog.-) LEAST(p.oldest, s.oldest)," \
	" $1 OPERATOR(pg_catalog.-) d.oldest, r.n, " dead \
	" FROM p, s, d, a, r"

const OutboxPlanDef outbox_plan_defs[OUTBOX_NUM_PLANS] = {
	[OUTBOX_PLAN_ENQUEUE] = {
		"INSERT INTO %1$s (" OUTBOX_INSERT_COLUMNS ")"
		" VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
		OUTBOX_ENQUEUE_ARGS,
		"INSERT INTO %1$s (recipient, kind, payload, tenant_id)"
		" VALUES ($1, $2, $3, $4) RETURNING id"
	},
	[OUTBOX_PLAN_ENQUEUE_DEDUP] = {
		"INSERT INTO %1$s (" OUTBOX_INSERT_COLUMNS ")"
		" VALUES ($1, $2, $3, $4, $5, $6, $7)" OUTBOX_DEDUP_CONFLICT
		" RETURNING id",
		OUTBOX_ENQUEUE_ARGS
	},
	/* $3: the tenant, whose key it is in a distributed outbox (%T) */
	[OUTBOX_PLAN_DEDUP_LOOKUP] = {
		"SELECT id FROM %1$s WHERE recipient OPERATOR(pg_catalog.=) $1"
		" AND dedup_key OPERATOR(pg_catalog.=) $2%T",
		{TEXTOID, TEXTOID, TEXTOID},
		.walk = OUTBOX_WALK_SCAN
	},
	[OUTBOX_PLAN_CLAIM] = {
		OUTBOX_CLAIM_SQL("", ""),
		OUTBOX_CLAIM_ARGS,
		OUTBOX_LEGACY_CLAIM_SQL("", ""),
		.walk = OUTBOX_WALK_SCAN,
		.generic = true
	},
	[OUTBOX_PLAN_CLAIM_R] = {
		OUTBOX_CLAIM_SQL(OUTBOX_RECIPIENT_IS("$2"), OUTBOX_BY_RECIPIENT_ORDER),
		OUTBOX_CLAIM_ARGS,
		OUTBOX_LEGACY_CLAIM_SQL(OUTBOX_RECIPIENT_IS("$2"), OUTBOX_BY_RECIPIENT_ORDER),
		.walk = OUTBOX_WALK_SCAN,
		.generic = true
	},
	[OUTBOX_PLAN_CLAIM_T] = {
		OUTBOX_CLAIM_SQL(OUTBOX_BY_TENANT, ""),
		OUTBOX_CLAIM_ARGS,
		OUTBOX_LEGACY_CLAIM_SQL(OUTBOX_BY_TENANT, ""),
		.walk = OUTBOX_WALK_SCAN,
		.generic = true
	},
	[OUTBOX_PLAN_CLAIM_RT] = {
		OUTBOX_CLAIM_SQL(OUTBOX_RECIPIENT_IS("$2") OUTBOX_BY_TENANT, OUTBOX_BY_RECIPIENT_ORDER),
		OUTBOX_CLAIM_ARGS,
		OUTBOX_LEGACY_CLAIM_SQL(OUTBOX_RECIPIENT_IS("$2") OUTBOX_BY_TENANT, OUTBOX_BY_RECIPIENT_ORDER),
		.walk = OUTBOX_WALK_SCAN,
		.generic = true
	},
	/* partitioned outboxes have the policy's columns: no legacy statements */
	[OUTBOX_PLAN_CLAIM_LOCK] = {
		OUTBOX_CLAIM_LOCK_SQL("", ""),
		OUTBOX_CLAIM_ARGS,
		.walk = OUTBOX_WALK_SCAN,
		.generic = true
	},
	[OUTBOX_PLAN_CLAIM_LOCK_R] = {
		OUTBOX_CLAIM_LOCK_SQL(OUTBOX_RECIPIENT_IS("$2"), OUTBOX_BY_RECIPIENT_ORDER),
		OUTBOX_CLAIM_ARGS,
		.walk = OUTBOX_WALK_SCAN,
		.generic = true
	},
	[OUTBOX_PLAN_CLAIM_LOCK_T] = {
		OUTBOX_CLAIM_LOCK_SQL(OUTBOX_BY_TENANT, ""),
		OUTBOX_CLAIM_ARGS,
		.walk = OUTBOX_WALK_SCAN,
		.generic = true
	},
	[OUTBOX_PLAN_CLAIM_LOCK_RT] = {
		OUTBOX_CLAIM_LOCK_SQL(OUTBOX_RECIPIENT_IS("$2") OUTBOX_BY_TENANT, OUTBOX_BY_RECIPIENT_ORDER),
		OUTBOX_CLAIM_ARGS,
		.walk = OUTBOX_WALK_SCAN,
		.generic = true
	},

	/*
	 * The locked rows of a claim, by id, to delivered: a partitioned outbox's
	 * (OUTBOX_CLAIM_LOCK_SQL) or an ordered one's (outbox_claim_ordered)
	 */
	[OUTBOX_PLAN_CLAIM_IDS] = {
		"WITH u AS ("
		"UPDATE %1$s o SET delivery_state = 'delivered'"
		" WHERE o.id OPERATOR(pg_catalog.=) ANY ($1)%P"
		" AND pg_catalog.texteq(o.delivery_state, 'pending')"
		" RETURNING %2$s)"
		" SELECT u.* FROM u ORDER BY u.id",
		{INT8ARRAYOID},
		.walk = OUTBOX_WALK_SCAN,
		.ids = 1
	},
	[OUTBOX_PLAN_ACK_LOCK] = {OUTBOX_ACK_LOCK_SQL(""), {INT8ARRAYOID, TEXTOID}, OUTBOX_SAME_SQL,.walk = OUTBOX_WALK_SCAN,.ids = 1},
	[OUTBOX_PLAN_ACK_LOCK_R] = {
		OUTBOX_ACK_LOCK_SQL(OUTBOX_BY_RECIPIENT),
		{INT8ARRAYOID, TEXTOID},
		OUTBOX_SAME_SQL,
		.walk = OUTBOX_WALK_SCAN,
		.ids = 1
	},
	[OUTBOX_PLAN_ACK_DELIVER] = {
		"UPDATE %1$s SET delivery_state = 'delivered'"
		" WHERE id OPERATOR(pg_catalog.=) ANY ($1)%P"
		" AND pg_catalog.texteq(delivery_state, 'pending')",
		{INT8ARRAYOID},
		OUTBOX_SAME_SQL,
		.walk = OUTBOX_WALK_SCAN,
		.ids = 1
	},
	[OUTBOX_PLAN_ACK_FINISH] = {
		"UPDATE %1$s SET delivery_state = 'acked'"
		" WHERE id OPERATOR(pg_catalog.=) ANY ($1)%P"
		" AND pg_catalog.texteq(delivery_state, 'delivered')",
		{INT8ARRAYOID},
		OUTBOX_SAME_SQL,
		.walk = OUTBOX_WALK_SCAN,
		.ids = 1
	},
	/* the ack of an outbox that keeps no acked row (retain_acked 0) */
	[OUTBOX_PLAN_ACK_DELETE] = {
		"DELETE FROM %1$s"
		" WHERE id OPERATOR(pg_catalog.=) ANY ($1)%P"
		" AND pg_catalog.texteq(delivery_state, 'delivered')",
		{INT8ARRAYOID},
		OUTBOX_SAME_SQL,
		.walk = OUTBOX_WALK_SCAN,
		.ids = 1
	},
	/* $6 ids, $7 retry_after, $8 error */
	[OUTBOX_PLAN_RELEASE] = {
		OUTBOX_REQUEUE_SQL("SELECT " OUTBOX_LOCKED_COLUMNS " FROM %1$s"
						   " WHERE id OPERATOR(pg_catalog.=) ANY ($6)%P"
						   " AND pg_catalog.texteq(delivery_state, 'delivered')"
						   " ORDER BY id FOR UPDATE",
						   "CASE WHEN $7 IS NOT NULL"
						   " THEN $1 OPERATOR(pg_catalog.+) $7"
						   " ELSE " OUTBOX_BACKOFF " END",
						   "$8"),
		{OUTBOX_POLICY_ARGS, INT8ARRAYOID, INTERVALOID, TEXTOID},
		OUTBOX_LEGACY_REQUEUE_SQL("SELECT id FROM %1$s"
								  " WHERE id OPERATOR(pg_catalog.=) ANY ($6)"
								  " AND pg_catalog.texteq(delivery_state, 'delivered')"
								  " ORDER BY id FOR UPDATE"),.walk = OUTBOX_WALK_JOINS,
	.ids = 6},
	/* $6 cutoff, $7 max rows */
	[OUTBOX_PLAN_RECLAIM] = {
		OUTBOX_REQUEUE_SQL("SELECT " OUTBOX_LOCKED_COLUMNS " FROM %1$s"
						   " WHERE delivery_state OPERATOR(pg_catalog.=) 'delivered'"
						   " AND delivered_at OPERATOR(pg_catalog.<) $6"
						   " ORDER BY delivered_at LIMIT $7 FOR UPDATE SKIP LOCKED",
						   OUTBOX_BACKOFF, "NULL::pg_catalog.text"),
		{OUTBOX_POLICY_ARGS, TABLE_TIME, INT8OID},
		OUTBOX_LEGACY_REQUEUE_SQL("SELECT id FROM %1$s"
								  " WHERE delivery_state OPERATOR(pg_catalog.=) 'delivered'"
								  " AND delivered_at OPERATOR(pg_catalog.<) $6"
								  " ORDER BY delivered_at LIMIT $7 FOR UPDATE SKIP LOCKED"),.walk = OUTBOX_WALK_JOINS},
	/* $6 recipient, $7 tenant: immediate, no backoff */
	[OUTBOX_PLAN_RESYNC] = {
		OUTBOX_REQUEUE_SQL(OUTBOX_RESYNC_LOCK("tenant_id OPERATOR(pg_catalog.=) $7"),
						   "NULL", "NULL::pg_catalog.text"),
		{OUTBOX_POLICY_ARGS, TEXTOID, TEXTOID},
	OUTBOX_LEGACY_REQUEUE_SQL(OUTBOX_RESYNC_LOCK("tenant_id OPERATOR(pg_catalog.=) $7")),.walk = OUTBOX_WALK_JOINS},
	[OUTBOX_PLAN_RESYNC_NULL_TENANT] = {
		OUTBOX_REQUEUE_SQL(OUTBOX_RESYNC_LOCK("tenant_id IS NULL"),
						   "NULL", "NULL::pg_catalog.text"),
		{OUTBOX_POLICY_ARGS, TEXTOID, TEXTOID},
	OUTBOX_LEGACY_REQUEUE_SQL(OUTBOX_RESYNC_LOCK("tenant_id IS NULL")),.walk = OUTBOX_WALK_JOINS},
	[OUTBOX_PLAN_REASSIGN] = {
		"WITH l AS ("
		"SELECT id FROM %1$s"
		" WHERE delivery_state OPERATOR(pg_catalog.=) " OUTBOX_OPEN_STATES
		OUTBOX_RECIPIENT_IS("$1")
		" ORDER BY recipient, id FOR UPDATE)"
		" UPDATE %1$s o SET recipient = $2, delivery_state = 'pending',"
		" not_before = NULL,"
		" dedup_key = CASE WHEN EXISTS (SELECT FROM %1$s k"
		" WHERE k.recipient OPERATOR(pg_catalog.=) $2"
		" AND k.dedup_key OPERATOR(pg_catalog.=) o.dedup_key"
		" AND k.id OPERATOR(pg_catalog.<>) o.id)"
		" THEN NULL ELSE o.dedup_key END"
		" FROM l WHERE o.id OPERATOR(pg_catalog.=) l.id"
		" AND NOT pg_catalog.texteq(o.delivery_state, 'acked')",
		{TEXTOID, TEXTOID},
		"WITH l AS ("
		"SELECT id FROM %1$s"
		" WHERE delivery_state OPERATOR(pg_catalog.=) " OUTBOX_OPEN_STATES
		OUTBOX_RECIPIENT_IS("$1")
		" ORDER BY recipient, id FOR UPDATE)"
		" UPDATE %1$s o SET recipient = $2, delivery_state = 'pending'"
		" FROM l WHERE o.id OPERATOR(pg_catalog.=) l.id"
	" AND NOT pg_catalog.texteq(o.delivery_state, 'acked')",.walk = OUTBOX_WALK_JOINS},
	/* $1 now, $2 ids, $3 error */
	[OUTBOX_PLAN_REJECT] = {
		"WITH l AS ("
		"SELECT id FROM %1$s"
		" WHERE id OPERATOR(pg_catalog.=) ANY ($2)%P"
		" AND pg_catalog.texteq(delivery_state, 'delivered')"
		" ORDER BY id FOR UPDATE),"
		" d AS (DELETE FROM %1$s o USING l"
		" WHERE o.id OPERATOR(pg_catalog.=) l.id"
		" AND pg_catalog.texteq(o.delivery_state, 'delivered')"
		" RETURNING o.*),"
		OUTBOX_TO_DEAD("coalesce($3, last_error)", "'rejected'")
		" SELECT pg_catalog.count(*) FROM x",
		{TIMESTAMPTZOID, INT8ARRAYOID, TEXTOID},.walk = OUTBOX_WALK_JOINS,
	.ids = 2},
	/* $1 now (the new created_at), $2 ids */
	[OUTBOX_PLAN_REDRIVE] = {
		"WITH l AS ("
		"SELECT id FROM %3$s WHERE id OPERATOR(pg_catalog.=) ANY ($2)"
		" ORDER BY id FOR UPDATE),"
		" i AS (INSERT INTO %1$s (id, recipient, kind, tenant_id, payload,"
		" delivery_state, delivery_attempts, created_at, dedup_key, last_error)"
		" OVERRIDING SYSTEM VALUE"
		" SELECT d.id, d.recipient, d.kind, d.tenant_id, d.payload, 'pending', 0,"
		" $1, d.dedup_key, d.last_error"
		" FROM %3$s d JOIN l ON d.id OPERATOR(pg_catalog.=) l.id ORDER BY d.id"
		" ON CONFLICT DO NOTHING RETURNING id),"
		" x AS (DELETE FROM %3$s d USING i WHERE d.id OPERATOR(pg_catalog.=) i.id"
		" RETURNING 1)"
		" SELECT pg_catalog.count(*) FROM x",
	{TABLE_TIME, INT8ARRAYOID},.walk = OUTBOX_WALK_JOINS},

	/*
	 * The worker's expiry sweep: pending rows past expires_at (from their
	 * index), or past the ttl among the oldest ready rows, the due scheduled
	 * ones and (with a ttl: a scan of the scheduled rows, which no index
	 * orders by age) the others; $1 now, $2 the ttl cutoff, $3 max rows of
	 * each.
	 */
	[OUTBOX_PLAN_EXPIRE] = {
		"WITH c AS ("
		"SELECT o.id FROM %1$s o"
		" WHERE o.id OPERATOR(pg_catalog.=) ANY (ARRAY("
		"SELECT id FROM (SELECT id FROM %1$s"
		" WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'"
		" AND expires_at IS NOT NULL AND expires_at OPERATOR(pg_catalog.<=) $1"
		" ORDER BY expires_at LIMIT $3) a"
		" UNION ALL SELECT id FROM (SELECT id FROM %1$s"
		" WHERE delivery_state OPERATOR(pg_catalog.=) 'pending' AND not_before IS NULL"
		" AND $2 IS NOT NULL ORDER BY id LIMIT $3) b"
		" UNION ALL SELECT id FROM (SELECT id FROM %1$s"
		" WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'"
		" AND not_before IS NOT NULL AND not_before OPERATOR(pg_catalog.<=) $1"
		" ORDER BY not_before, id LIMIT $3) s"
		" UNION ALL SELECT id FROM (SELECT id FROM %1$s"
		" WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'"
		" AND not_before IS NOT NULL AND $2 IS NOT NULL"
		" AND created_at OPERATOR(pg_catalog.<=) $2 LIMIT $3) t))"
		" AND o.delivery_state OPERATOR(pg_catalog.=) 'pending'"
		" AND (o.expires_at OPERATOR(pg_catalog.<=) $1"
		" OR $2 IS NOT NULL AND o.created_at OPERATOR(pg_catalog.<=) $2)"
		" ORDER BY o.id FOR UPDATE SKIP LOCKED),"
		" d AS (DELETE FROM %1$s o USING c"
		" WHERE o.id OPERATOR(pg_catalog.=) c.id"
		" AND pg_catalog.texteq(o.delivery_state, 'pending')"
		" RETURNING o.*),"
		OUTBOX_TO_DEAD("last_error", "'expired'")
		" SELECT pg_catalog.count(*) FROM x",
	{TIMESTAMPTZOID, TABLE_TIME, INT8OID},.walk = OUTBOX_WALK_JOINS},

	/*
	 * The worker's wake-ups of scheduled rows: those that fell due after the
	 * (not_before, id) it got to; $1, $2 that position, $3 now, $4 max.
	 */
	[OUTBOX_PLAN_DUE] = {
		"SELECT id, not_before FROM %1$s"
		" WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'"
		" AND not_before IS NOT NULL"
		" AND ROW(not_before, id) OPERATOR(pg_catalog.>) ROW($1, $2)"
		" AND not_before OPERATOR(pg_catalog.<=) $3"
		" AND (expires_at IS NULL OR expires_at OPERATOR(pg_catalog.>) $3)"
		" ORDER BY not_before, id LIMIT $4",
	{TIMESTAMPTZOID, INT8OID, TIMESTAMPTZOID, INT8OID},.walk = OUTBOX_WALK_SCAN},
	[OUTBOX_PLAN_NEXT_DUE] = {OUTBOX_NEXT_DUE_SQL(""), {TIMESTAMPTZOID, TEXTOID},.walk = OUTBOX_WALK_SCAN},
	[OUTBOX_PLAN_NEXT_DUE_R] = {
		"SELECT (SELECT not_before FROM %1$s"
		" WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'"
		" AND not_before IS NOT NULL AND not_before OPERATOR(pg_catalog.>) $1"
		OUTBOX_RECIPIENT_IS("$2")
		" ORDER BY recipient, not_before LIMIT 1)",
		{TIMESTAMPTZOID, TEXTOID},
		.walk = OUTBOX_WALK_SCAN
	},
	[OUTBOX_PLAN_REPLAY] = {OUTBOX_REPLAY_SQL(""), {TEXTOID, INT8OID, INT8OID, TEXTOID}, OUTBOX_SAME_SQL,.walk = OUTBOX_WALK_SCAN},
	[OUTBOX_PLAN_REPLAY_T] = {
		OUTBOX_REPLAY_SQL(" AND tenant_id OPERATOR(pg_catalog.=) $4"),
		{TEXTOID, INT8OID, INT8OID, TEXTOID},
	OUTBOX_SAME_SQL,.walk = OUTBOX_WALK_SCAN},
	[OUTBOX_PLAN_PURGE] = {
		"WITH d AS ("
		"SELECT id FROM %1$s"
		" WHERE delivery_state OPERATOR(pg_catalog.=) 'acked'"
		" AND acked_at OPERATOR(pg_catalog.<) $1"
		" ORDER BY acked_at LIMIT $2 FOR UPDATE SKIP LOCKED)"
		" DELETE FROM %1$s o USING d"
		" WHERE o.id OPERATOR(pg_catalog.=) d.id",
		{TABLE_TIME, INT8OID},
	OUTBOX_SAME_SQL,.walk = OUTBOX_WALK_JOINS},
	/* the same, of the ids [$3, $4) only: one partition's */
	[OUTBOX_PLAN_PURGE_RANGE] = {
		"WITH d AS ("
		"SELECT id FROM %1$s"
		" WHERE delivery_state OPERATOR(pg_catalog.=) 'acked'"
		" AND acked_at OPERATOR(pg_catalog.<) $1"
		" AND id OPERATOR(pg_catalog.>=) $3 AND id OPERATOR(pg_catalog.<) $4"
		" ORDER BY acked_at LIMIT $2 FOR UPDATE SKIP LOCKED)"
		" DELETE FROM %1$s o USING d"
		" WHERE o.id OPERATOR(pg_catalog.=) d.id"
		" AND o.id OPERATOR(pg_catalog.>=) $3 AND o.id OPERATOR(pg_catalog.<) $4",
	{TABLE_TIME, INT8OID, INT8OID, INT8OID},.walk = OUTBOX_WALK_JOINS},
	[OUTBOX_PLAN_STATS] = {
		OUTBOX_STATS_SQL("(SELECT pg_catalog.count(*) FROM %3$s)",
						 " AND not_before IS NULL",
						 "delivery_state OPERATOR(pg_catalog.=) 'pending'"
						 " AND not_before IS NOT NULL"),
		{TABLE_TIME},
		OUTBOX_STATS_SQL("NULL::pg_catalog.int8", "", "false"),
		.walk = OUTBOX_WALK_SCAN
	},
	[OUTBOX_PLAN_ENQUEUE_BATCH] = {
		OUTBOX_ENQUEUE_BATCH_SQL(""), OUTBOX_ENQUEUE_BATCH_ARGS,
		"INSERT INTO %1$s (recipient, kind, payload, tenant_id)"
		" SELECT r, k, p, t"
		" FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2),"
		" pg_catalog.unnest($3), pg_catalog.unnest($4))"
		" WITH ORDINALITY AS u(r, k, p, t, n)"
		" ORDER BY n RETURNING id"
	},
	[OUTBOX_PLAN_ENQUEUE_BATCH_DEDUP] = {
		OUTBOX_ENQUEUE_BATCH_SQL(OUTBOX_DEDUP_CONFLICT), OUTBOX_ENQUEUE_BATCH_ARGS
	},

	/*
	 * the rows holding the batch's keys, by position: $1 recipients, $2 keys
	 * (never on a distributed outbox, whose keyed batches are refused)
	 */
	[OUTBOX_PLAN_DEDUP_LOOKUP_BATCH] = {
		"SELECT u.n, o.id"
		" FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2))"
		" WITH ORDINALITY AS u(r, k, n)"
		" JOIN %1$s o ON o.recipient OPERATOR(pg_catalog.=) u.r"
		" AND o.dedup_key OPERATOR(pg_catalog.=) u.k",
		{TEXTARRAYOID, TEXTARRAYOID},
		.walk = OUTBOX_WALK_JOINS
	},
	[OUTBOX_PLAN_EXISTS] = {OUTBOX_EXISTS_SQL(""), {TEXTOID, TIMESTAMPTZOID, TABLE_TIME}, OUTBOX_LEGACY_EXISTS_SQL(""),.walk = OUTBOX_WALK_SCAN},
	[OUTBOX_PLAN_EXISTS_R] = {
		"SELECT (SELECT id FROM %1$s"
		" WHERE delivery_state OPERATOR(pg_catalog.=) 'pending' AND not_before IS NULL"
		OUTBOX_RECIPIENT_IS("$1") OUTBOX_UNEXPIRED("$2", "$3")
		" ORDER BY recipient, id LIMIT 1) IS NOT NULL"
		" OR (SELECT id FROM %1$s"
		" WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'"
		" AND not_before IS NOT NULL AND not_before OPERATOR(pg_catalog.<=) $2"
		OUTBOX_RECIPIENT_IS("$1") OUTBOX_UNEXPIRED("$2", "$3")
		" ORDER BY recipient, not_before, id LIMIT 1) IS NOT NULL",
		{TEXTOID, TIMESTAMPTZOID, TABLE_TIME},
		"SELECT (SELECT id FROM %1$s"
		" WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'"
		OUTBOX_RECIPIENT_IS("$1")
		" ORDER BY recipient, id LIMIT 1) IS NOT NULL",
		.walk = OUTBOX_WALK_SCAN
	},
	[OUTBOX_PLAN_BACKLOG] = {
		"SELECT"
		" pg_catalog.count(*) FILTER (WHERE delivery_state OPERATOR(pg_catalog.=) 'pending'),"
		" pg_catalog.count(*) FILTER (WHERE delivery_state OPERATOR(pg_catalog.=) 'delivered')"
		" FROM %1$s"
		" WHERE delivery_state OPERATOR(pg_catalog.=) " OUTBOX_OPEN_STATES,
		{InvalidOid},
		OUTBOX_SAME_SQL
	},

	/*
	 * An ordered claim (outbox_heads.c chose the rows): lock what is still
	 * pending, skipping locked rows; then, of each run, only the rows locked
	 * from its head on are claimed.  $1 ids.
	 */
	[OUTBOX_PLAN_ORDERED_LOCK] = {
		"SELECT id FROM %1$s"
		" WHERE id OPERATOR(pg_catalog.=) ANY ($1)"
		" AND pg_catalog.texteq(delivery_state, 'pending')"
		" ORDER BY id FOR UPDATE SKIP LOCKED",
		{INT8ARRAYOID},
		.walk = OUTBOX_WALK_SCAN,
		.ids = 1
	},
};
