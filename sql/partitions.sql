--
-- partitions.sql: partitioned outboxes (1.2): outbox_create(...,
-- partition_rows), the partitions made ahead by the enqueue functions
-- (no worker here), the state machine on every partition, claims across
-- partition boundaries, acks/releases/rejects that touch only the
-- partitions holding their ids, retain_acked in outbox_configure,
-- ordered => true refused, outbox_purge dropping the partitions that
-- qualify, dedup keys without a unique index, outbox_stats, the seed's
-- plain SQL, and the names and owners of the partitions.
--
-- Each bad call shows its message and then its SQLSTATE (psql's :SQLSTATE,
-- 00000 had it succeeded); the look after it shows that nothing changed.
-- Timestamps are printed only as facts about them.
--
CREATE EXTENSION delivery_outbox;

\set SHOW_CONTEXT never

-- roles left behind by an interrupted earlier run
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_part_owner;
DROP ROLE IF EXISTS regress_part_producer;
RESET client_min_messages;

CREATE SCHEMA part;

-- The partitions of an outbox, in id order: name, bounds, owner and rows
-- (id:state/attempts).
CREATE FUNCTION regress_parts(t regclass)
RETURNS TABLE (part name, bounds text, owner name, rows text)
LANGUAGE plpgsql AS $f$
DECLARE
    p record;
BEGIN
    FOR p IN
        SELECT c.oid, c.relname, pg_get_expr(c.relpartbound, c.oid) AS b,
               pg_get_userbyid(c.relowner) AS o
          FROM pg_partition_tree(t) pt JOIN pg_class c ON c.oid = pt.relid
         WHERE pt.isleaf
         ORDER BY substring(pg_get_expr(c.relpartbound, c.oid)
                            FROM 'FROM \(''(-?\d+)''\)')::numeric
    LOOP
        part := p.relname;
        bounds := p.b;
        owner := p.o;
        EXECUTE format($q$
            SELECT coalesce(string_agg(format('%%s:%%s/%%s', id, delivery_state,
                                              delivery_attempts), ' ' ORDER BY id), '-')
              FROM %s$q$, p.oid::regclass) INTO rows;
        RETURN NEXT;
    END LOOP;
END
$f$;

-- The outboxes of schema part as the view shows them, with their rows.
CREATE VIEW part_outboxes AS
SELECT outbox, partition_rows, retain_acked, ordered,
       (SELECT relkind FROM pg_class WHERE oid = outbox) AS relkind,
       (SELECT count(*) FROM pg_partition_tree(outbox) WHERE isleaf AND level > 0)
         AS partitions
  FROM delivery_outbox_tables
 WHERE outbox::text LIKE 'part.%'
 ORDER BY outbox::text COLLATE "C";

-- The tables of schema part, partitions included.
CREATE VIEW part_tables AS
SELECT c.oid::regclass AS tbl, c.relkind, c.relispartition
  FROM pg_class c
 WHERE c.relnamespace = 'part'::regnamespace AND c.relkind IN ('r', 'p')
 ORDER BY c.oid::regclass::text COLLATE "C";

--
-- outbox_create(..., partition_rows): bad values first (nothing is made),
-- then a partitioned outbox of 5 ids per partition.
--
\set VERBOSITY terse
SELECT outbox_create('part', 't', partition_rows => 0);
\echo :SQLSTATE
SELECT outbox_create('part', 't', partition_rows => -1);
\echo :SQLSTATE
SELECT outbox_create('part', 't', 'chan', -9223372036854775808);
\echo :SQLSTATE
SELECT * FROM part_outboxes;
SELECT * FROM part_tables;
\set VERBOSITY default

-- NULL: an ordinary outbox, as before
SELECT outbox_create('part', 'plain', partition_rows => NULL);
SELECT outbox_create('part', 't', partition_rows => 5);
SELECT * FROM part_outboxes;
SELECT * FROM part_tables;
SELECT pg_get_partkeydef('part.t'::regclass) AS partition_key;
-- the partition of the next id (1) and the one after it
SELECT * FROM regress_parts('part.t');
-- every partition has the row triggers, ENABLE ALWAYS, and the indexes
SELECT c.relname, g.tgname, g.tgenabled
  FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
 WHERE c.relnamespace = 'part'::regnamespace AND c.relname LIKE 't\_p%'
   AND NOT g.tgisinternal
 ORDER BY 1, 2;
SELECT c.relname, count(*) AS indexes,
       count(*) FILTER (WHERE i.indisunique) AS unique_indexes
  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
 WHERE c.relnamespace = 'part'::regnamespace AND c.relname LIKE 't\_p%'
 GROUP BY 1 ORDER BY 1;
-- the partitions are not members of the extension (pg_dump dumps them)
SELECT count(*) AS extension_members
  FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
 WHERE d.classid = 'pg_class'::regclass AND d.deptype = 'e'
   AND c.relnamespace = 'part'::regnamespace;

--
-- Enqueue: each call makes the partitions it needs, and the one after the
-- next id's.
--
SELECT outbox_enqueue('agent:a', 'work', '\x01', outbox => 'part.t') AS id
  FROM generate_series(1, 4);
-- next id 5: still p0 and p1
SELECT part, bounds FROM regress_parts('part.t');
SELECT outbox_enqueue('agent:b', 'work', '\x05', outbox => 'part.t') AS id;
-- next id 6, in p1: p2 is made
SELECT part, bounds FROM regress_parts('part.t');
-- a batch of 12 (ids 6-17) crosses two boundaries; next id 18 is in p3,
-- so p3 and p4 exist after it
SELECT n, id
  FROM outbox_enqueue_batch(array_fill('agent:c'::text, ARRAY[12]),
                            array_fill('work'::text, ARRAY[12]),
                            array_fill('\x06'::bytea, ARRAY[12]),
                            outbox => 'part.t') WITH ORDINALITY AS b(id, n);
SELECT * FROM regress_parts('part.t');

-- A plain INSERT never makes a partition: one into p3 (made ahead) works,
-- one whose id has no partition fails with PostgreSQL's own 23514 and
-- inserts nothing.
INSERT INTO part.t (recipient, kind, payload) VALUES ('agent:d', 'work', '\x12')
RETURNING id, delivery_state;
\set VERBOSITY terse
INSERT INTO part.t (id, recipient, kind, payload) VALUES (1000, 'agent:d', 'work', '\x13');
\echo :SQLSTATE
-- ids 19-26 drawn from the sequence, id 26 has no partition: the whole
-- statement fails
INSERT INTO part.t (recipient, kind, payload)
SELECT 'agent:d', 'work', '\x14' FROM generate_series(1, 10);
\echo :SQLSTATE
\set VERBOSITY default
SELECT * FROM regress_parts('part.t');
-- the next enqueue draws id 27, whose partition (p5) does not exist yet:
-- it makes it, and p6 after it
SELECT outbox_enqueue('agent:e', 'work', '\x15', outbox => 'part.t') AS id;
SELECT * FROM regress_parts('part.t');

--
-- The state machine holds on every partition, through the parent and on
-- the partition itself, whatever session_replication_role.
--
\set VERBOSITY terse
UPDATE part.t SET delivery_state = 'acked' WHERE id = 7;
\echo :SQLSTATE
UPDATE part.t_p1 SET delivery_state = 'acked' WHERE id = 7;
\echo :SQLSTATE
UPDATE part.t_p3 SET delivery_state = 'bogus' WHERE id = 18;
\echo :SQLSTATE
UPDATE part.t_p0 SET payload = '\xff' WHERE id = 1;
\echo :SQLSTATE
-- an id never changes, not even into another partition
UPDATE part.t SET id = 9 WHERE id = 1;
\echo :SQLSTATE
UPDATE part.t SET id = 20 WHERE id = 1;
\echo :SQLSTATE
INSERT INTO part.t (recipient, kind, payload, delivery_state)
VALUES ('agent:x', 'work', '\x01', 'delivered');
\echo :SQLSTATE
INSERT INTO part.t_p3 (id, recipient, kind, payload, delivery_state)
VALUES (19, 'agent:x', 'work', '\x01', 'acked');
\echo :SQLSTATE
SET session_replication_role = replica;
UPDATE part.t_p0 SET delivery_state = 'acked' WHERE id = 2;
\echo :SQLSTATE
RESET session_replication_role;
\set VERBOSITY default
SELECT * FROM regress_parts('part.t');

--
-- Claims across a partition boundary, in id order.
--
SELECT id, recipient, delivery_state, delivery_attempts
  FROM outbox_claim(3, outbox => 'part.t');
SELECT id, recipient, delivery_state, delivery_attempts
  FROM outbox_claim(4, outbox => 'part.t');
-- per recipient: agent:c's rows, from p1 into p2
SELECT id, recipient, delivery_state, delivery_attempts
  FROM outbox_claim(7, 'agent:c', outbox => 'part.t');
SELECT * FROM regress_parts('part.t');

--
-- Acks, releases and rejects by id touch only the partitions holding the
-- ids: in the transaction's own statistics, the other partitions are
-- neither scanned nor updated.
--
-- (The backend's pending statistics are flushed between transactions at
-- most once a second, so the counts since the start of the transaction are
-- the difference with a copy taken in it, by regress_touch_start().)
CREATE TABLE touch_base (relname name, upd bigint, del bigint, scans bigint);
CREATE FUNCTION regress_touch_start() RETURNS void
LANGUAGE sql AS $f$
    DELETE FROM touch_base;
    INSERT INTO touch_base
    SELECT relname, n_tup_upd, n_tup_del, seq_scan + coalesce(idx_scan, 0)
      FROM pg_stat_xact_user_tables
     WHERE schemaname = 'part' AND relname ~ '^t_p\d+$';
$f$;
CREATE VIEW part_touched AS
SELECT s.relname, s.n_tup_upd - b.upd AS updated, s.n_tup_del - b.del AS deleted,
       s.seq_scan + coalesce(s.idx_scan, 0) > b.scans AS scanned
  FROM pg_stat_xact_user_tables s JOIN touch_base b USING (relname)
 WHERE s.schemaname = 'part'
 ORDER BY substring(s.relname FROM '\d+$')::int;

BEGIN;
SELECT regress_touch_start();
SELECT outbox_ack(ARRAY[2, 3]::bigint[], outbox => 'part.t') AS acked;
SELECT * FROM part_touched;
COMMIT;
BEGIN;
SELECT regress_touch_start();
SELECT outbox_ack(7, outbox => 'part.t') AS acked;
SELECT * FROM part_touched;
COMMIT;
BEGIN;
SELECT regress_touch_start();
SELECT outbox_ack(ARRAY[9, 12]::bigint[], 'agent:c', 'part.t') AS acked;
SELECT * FROM part_touched;
COMMIT;
BEGIN;
SELECT regress_touch_start();
SELECT outbox_release(ARRAY[4]::bigint[], outbox => 'part.t') AS released;
SELECT * FROM part_touched;
COMMIT;
BEGIN;
SELECT regress_touch_start();
SELECT outbox_reject(ARRAY[8]::bigint[], 'no', outbox => 'part.t') AS rejected;
SELECT * FROM part_touched;
COMMIT;
-- nothing for ids not delivered or missing
SELECT outbox_ack(ARRAY[2, 999]::bigint[], outbox => 'part.t') AS acked;
SELECT outbox_ack(3, outbox => 'part.t') AS acked_again;
SELECT outbox_release(ARRAY[2, 999]::bigint[], outbox => 'part.t') AS released;
SELECT * FROM regress_parts('part.t');
SELECT id, dead_reason, last_error FROM part.t_dead ORDER BY id;

-- The statements of rows by id keep a generic plan that prunes, at executor
-- start, the partitions outside the range of the ids: an ack opens the
-- indexes of the partitions in that range only (of t_p2 here), and a claim,
-- which walks every partition's pending rows, updates them through the
-- primary keys of the partitions in the range of the rows it locked only (4
-- and 15: t_p0 to t_p2).  Pruned while running, every partition's scan would
-- be set up, and every primary key opened.  (Locks taken in a subtransaction
-- go with it: each call runs once first, to be planned, then again to be
-- looked at; all rolled back.)
CREATE VIEW part_opened AS
SELECT string_agg(DISTINCT substring(c.relname FROM '^t_(p\d+)_'), ' '
                  ORDER BY substring(c.relname FROM '^t_(p\d+)_')) AS indexes_of,
       string_agg(DISTINCT substring(c.relname FROM '^t_(p\d+)_pkey$'), ' '
                  ORDER BY substring(c.relname FROM '^t_(p\d+)_pkey$')) AS primary_keys_of
  FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
 WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation'
   AND c.relkind = 'i' AND c.relnamespace = 'part'::regnamespace;
BEGIN;
SAVEPOINT planned;
SELECT outbox_ack(ARRAY[13, 11]::bigint[], outbox => 'part.t') AS acked;
ROLLBACK TO planned;
SELECT * FROM part_opened;
SELECT outbox_ack(ARRAY[13, 11]::bigint[], outbox => 'part.t') AS acked;
SELECT * FROM part_opened;
ROLLBACK;
BEGIN;
SAVEPOINT planned;
SELECT id FROM outbox_claim(2, outbox => 'part.t');
ROLLBACK TO planned;
SELECT id FROM outbox_claim(2, outbox => 'part.t');
SELECT * FROM part_opened;
ROLLBACK;
-- the ids' range is the array's, whatever its order and bounds
BEGIN;
SELECT outbox_ack('[5:7]={14,6,11}'::bigint[], outbox => 'part.t') AS acked;
SELECT id, delivery_state FROM part.t WHERE id IN (6, 11, 14) ORDER BY id;
SELECT outbox_release('[0:1]={13,1}'::bigint[], outbox => 'part.t') AS released;
SELECT id, delivery_state FROM part.t WHERE id IN (1, 13) ORDER BY id;
ROLLBACK;
DROP VIEW part_opened;

-- An ack-like UPDATE by id, planned once for any id (a generic plan):
-- the partitions not holding the id are pruned at executor start-up.
PREPARE ack_like(bigint) AS
    UPDATE part.t SET delivery_state = 'acked'
     WHERE id = $1 AND delivery_state = 'delivered';
SET plan_cache_mode = force_generic_plan;
-- (the plan's lines, the index a scan uses left out)
CREATE FUNCTION regress_explain(q text) RETURNS SETOF text
LANGUAGE plpgsql AS $f$
DECLARE
    l text;
BEGIN
    -- the same on every major: PostgreSQL 18 lists only the result
    -- partitions left after initial pruning, adds buffers and index
    -- searches to ANALYZE, and prints rows with two decimals
    FOR l IN EXECUTE q LOOP
        CONTINUE WHEN l ~ '^\s*(Update on \S+_p[0-9]+ |Buffers:|Index Searches:)';
        RETURN NEXT regexp_replace(regexp_replace(l, 'Scan( Backward)? using \S+ on', 'Scan using ... on'),
                                   'rows=([0-9]+)\.00', 'rows=\1', 'g');
    END LOOP;
END
$f$;
SELECT * FROM regress_explain('EXPLAIN (COSTS OFF) EXECUTE ack_like(10)');
BEGIN;
SELECT regress_touch_start();
SELECT * FROM regress_explain('EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE ack_like(10)');
SELECT * FROM part_touched;
ROLLBACK;
RESET plan_cache_mode;
DEALLOCATE ack_like;

-- release, reclaim, resync, reassign and replay across partitions
SELECT outbox_reclaim('0 seconds', outbox => 'part.t') AS reclaimed;
SELECT id FROM outbox_claim(100, outbox => 'part.t');
SELECT outbox_reclaim_recipient('agent:c', outbox => 'part.t') AS resynced;
SELECT outbox_reassign('agent:c', 'agent:z', 'part.t') AS moved;
SELECT id, recipient, delivery_state
  FROM outbox_replay('agent:z', 9, outbox => 'part.t');
SELECT outbox_horizon('part.t') AS horizon;
SELECT * FROM regress_parts('part.t');

--
-- The seed's statements, plain SQL by id, on a partitioned outbox.
--
PREPARE mark_delivered(bigint) AS
    UPDATE part.t
       SET delivery_state = 'delivered', delivered_at = now(),
           delivery_attempts = delivery_attempts + 1
     WHERE id = $1 AND delivery_state = 'pending';
PREPARE mark_acked(bigint) AS
    UPDATE part.t
       SET delivery_state = 'acked', acked_at = now()
     WHERE id = $1 AND delivery_state <> 'acked';
PREPARE reset_to_pending(bigint) AS
    UPDATE part.t SET delivery_state = 'pending'
     WHERE id = $1 AND delivery_state = 'delivered';
-- 1 and 4 are delivered, 10 pending (agent:z's)
EXECUTE mark_delivered(1);
EXECUTE mark_acked(1);
EXECUTE mark_acked(1);
EXECUTE reset_to_pending(4);
EXECUTE reset_to_pending(4);
EXECUTE mark_delivered(4);
EXECUTE mark_acked(4);
EXECUTE mark_delivered(10);
EXECUTE mark_delivered(10);
SELECT id, delivery_state, delivery_attempts,
       delivered_at IS NOT NULL AS has_delivered_at, acked_at IS NOT NULL AS has_acked_at
  FROM part.t WHERE id IN (1, 4, 10) ORDER BY id;
-- the seed's mark_acked of a pending row: pending -> acked is refused
\set VERBOSITY terse
EXECUTE mark_acked(11);
\echo :SQLSTATE
UPDATE part.t_p2 SET delivery_state = 'acked', acked_at = now() WHERE id = 13;
\echo :SQLSTATE
\set VERBOSITY default
DEALLOCATE mark_delivered;
DEALLOCATE mark_acked;
DEALLOCATE reset_to_pending;

-- outbox_stats on a partitioned outbox
SELECT pending, delivered, acked, dead, open_recipients,
       oldest_pending_age IS NOT NULL AS has_pending_age,
       oldest_delivered_age IS NOT NULL AS has_delivered_age
  FROM outbox_stats('part.t');
SELECT delivery_state, count(*) FROM part.t GROUP BY 1 ORDER BY 1;

--
-- outbox_configure: retain_acked set, left, reset (a negative interval);
-- on an ordinary outbox too.  ordered => true is refused (0A000) on a
-- partitioned outbox, and nothing changes.
--
SELECT outbox_configure('part.t', retain_acked => '5 minutes');
SELECT outbox_configure('part.plain', retain_acked => '1 day');
SELECT * FROM part_outboxes;
SELECT outbox_configure('part.t', max_attempts => 4);
SELECT outbox, retain_acked, max_attempts FROM delivery_outbox_tables
 WHERE outbox = 'part.t'::regclass;
SELECT outbox_configure('part.t', retain_acked => '0');
SELECT outbox_configure('part.plain', retain_acked => '-1 second');
SELECT * FROM part_outboxes;
SELECT outbox_configure('part.t', retain_acked => '-1 day', max_attempts => 0);
SELECT outbox, retain_acked, max_attempts FROM delivery_outbox_tables
 WHERE outbox = 'part.t'::regclass;
SELECT outbox_configure('part.t', retain_acked => '5 minutes');
\set VERBOSITY terse
SELECT outbox_configure('part.t', ordered => true);
\echo :SQLSTATE
SELECT outbox_configure('part.t', retain_acked => '1 hour', ordered => true);
\echo :SQLSTATE
\set VERBOSITY default
SELECT * FROM part_outboxes;
SELECT count(*) AS delivered_recipient_indexes FROM pg_class
 WHERE relnamespace = 'part'::regnamespace AND relname LIKE 't%delivered_recipient_idx';
-- ordered => false changes nothing
SELECT outbox_configure('part.t', ordered => false);
SELECT * FROM part_outboxes;

--
-- outbox_purge on a partitioned outbox (4 ids per partition):
--   p0  1-4    all acked                          dropped
--   p1  5-8    acked, 6 a dead letter             dropped
--   p2  9-12   10 pending                         kept, acked rows deleted
--   p3  13-16  14 delivered                       kept, acked rows deleted
--   p4  17-20  no row (rolled back)               dropped
--   p5  21-24  all acked, still receiving ids     kept, acked rows deleted
--   p6  25-28  made ahead, empty                  kept
--
SELECT outbox_create('part', 'pg', partition_rows => 4);
SELECT count(*) AS enqueued
  FROM outbox_enqueue_batch(array_fill('agent:p'::text, ARRAY[16]),
                            array_fill('work'::text, ARRAY[16]),
                            array_fill('\x01'::bytea, ARRAY[16]),
                            outbox => 'part.pg');
BEGIN;
SELECT count(*) AS enqueued_then_rolled_back
  FROM outbox_enqueue_batch(array_fill('agent:p'::text, ARRAY[4]),
                            array_fill('work'::text, ARRAY[4]),
                            array_fill('\x01'::bytea, ARRAY[4]),
                            outbox => 'part.pg');
ROLLBACK;
SELECT outbox_enqueue('agent:p', 'work', '\x02', outbox => 'part.pg') AS id
  FROM generate_series(1, 2);
SELECT count(*) AS claimed FROM outbox_claim(100, outbox => 'part.pg');
SELECT outbox_reject(ARRAY[6]::bigint[], outbox => 'part.pg') AS rejected;
SELECT outbox_release(ARRAY[10]::bigint[], outbox => 'part.pg') AS released;
SELECT outbox_ack(ARRAY(SELECT id FROM part.pg WHERE id <> 14 AND delivery_state = 'delivered'),
                  outbox => 'part.pg') AS acked;
SELECT * FROM regress_parts('part.pg');

-- bad arguments: nothing dropped, nothing deleted
\set VERBOSITY terse
SELECT outbox_purge(NULL, 'part.pg');
\echo :SQLSTATE
SELECT outbox_purge('-1 second', 'part.pg');
\echo :SQLSTATE
\set VERBOSITY default
-- acked too recently: nothing qualifies but p4, which holds no row (and
-- so no row counts)
SELECT outbox_purge('1 hour', 'part.pg') AS purged;
SELECT * FROM regress_parts('part.pg');
-- 4 + 3 rows of the dropped p0 and p1 (p4 has none), 3 + 3 + 2 acked rows
-- deleted from p2, p3 and p5
SELECT outbox_purge('0 seconds', 'part.pg') AS purged;
SELECT * FROM regress_parts('part.pg');
SELECT id, dead_reason FROM part.pg_dead ORDER BY id;
SELECT pending, delivered, acked, dead FROM outbox_stats('part.pg');
-- p2's last open row acked: p2 qualifies at once (the cutoff is the time
-- of the call less older_than, also for acks of the calling transaction)
BEGIN;
SELECT id FROM outbox_claim(1, outbox => 'part.pg');
SELECT outbox_ack(10, outbox => 'part.pg') AS acked;
SELECT outbox_purge('0 seconds', 'part.pg') AS purged;
SELECT part, rows FROM regress_parts('part.pg');
COMMIT;
SELECT outbox_purge('0 seconds', 'part.pg') AS purged;
SELECT part, rows FROM regress_parts('part.pg');
-- the outbox goes on: enqueue, claim, ack
SELECT outbox_enqueue('agent:p', 'work', '\x03', outbox => 'part.pg') AS id;
SELECT id, delivery_state FROM outbox_claim(10, outbox => 'part.pg');
SELECT outbox_ack(14, outbox => 'part.pg') AS acked;
SELECT * FROM regress_parts('part.pg');

--
-- Dedup keys on a partitioned outbox (3 ids per partition): no unique
-- index, the state guard takes the key.
--
SELECT outbox_create('part', 'd', partition_rows => 3);
SELECT indexrelid::regclass AS unique_index FROM pg_index
 WHERE indrelid = 'part.d'::regclass AND indisunique;
SELECT outbox_enqueue('agent:a', 'work', '\x01', dedup_key => 'k1', outbox => 'part.d') AS id;
SELECT outbox_enqueue('agent:a', 'work', '\x02', outbox => 'part.d') AS id
  FROM generate_series(1, 3);
-- the holder is in p0, the next id in p1: the key is still taken
SELECT outbox_enqueue('agent:a', 'work', '\x03', dedup_key => 'k1', outbox => 'part.d') AS id;
-- another recipient's k1 is another key
SELECT outbox_enqueue('agent:b', 'work', '\x04', dedup_key => 'k1', outbox => 'part.d') AS id;
-- a batch: a taken key, a new key twice
SELECT n, id
  FROM outbox_enqueue_batch(ARRAY['agent:a', 'agent:a', 'agent:a'],
                            ARRAY['work', 'work', 'work'],
                            ARRAY['\x05', '\x06', '\x07']::bytea[],
                            dedup_keys => ARRAY['k1', 'k2', 'k2'],
                            outbox => 'part.d') WITH ORDINALITY AS b(id, n);
-- plain INSERTs of a taken key insert nothing, with or without ON CONFLICT
-- DO NOTHING
INSERT INTO part.d (recipient, kind, payload, dedup_key)
VALUES ('agent:a', 'work', '\x08', 'k1') RETURNING id;
INSERT INTO part.d (recipient, kind, payload, dedup_key)
VALUES ('agent:a', 'work', '\x09', 'k2') ON CONFLICT DO NOTHING RETURNING id;
-- one statement, one new key twice: one row
INSERT INTO part.d (recipient, kind, payload, dedup_key)
VALUES ('agent:a', 'work', '\x0a', 'k3'), ('agent:a', 'work', '\x0b', 'k3')
ON CONFLICT DO NOTHING RETURNING dedup_key;
SELECT recipient, dedup_key, count(*) FROM part.d
 WHERE dedup_key IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2;
\set VERBOSITY terse
-- a conflict target: no unique index to match
INSERT INTO part.d (recipient, kind, payload, dedup_key)
VALUES ('agent:a', 'work', '\x0c', 'k4') ON CONFLICT (recipient, dedup_key) DO NOTHING;
\echo :SQLSTATE
INSERT INTO part.d (recipient, kind, payload, dedup_key)
VALUES ('agent:a', 'work', '\x0c', 'k1')
ON CONFLICT (recipient, dedup_key) DO UPDATE SET kind = 'x';
\echo :SQLSTATE
-- an empty key
SELECT outbox_enqueue('agent:a', 'work', '\x0d', dedup_key => '', outbox => 'part.d');
\echo :SQLSTATE
INSERT INTO part.d (recipient, kind, payload, dedup_key)
VALUES ('agent:a', 'work', '\x0d', '');
\echo :SQLSTATE
\set VERBOSITY default
SELECT recipient, dedup_key, count(*) FROM part.d
 WHERE dedup_key IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2;
SELECT * FROM regress_parts('part.d');
-- reassign: the moved row whose key the new recipient holds gives it up
SELECT outbox_reassign('agent:b', 'agent:a', 'part.d') AS moved;
SELECT id, recipient, dedup_key FROM part.d WHERE dedup_key IS NOT NULL OR id = 6 ORDER BY id;
-- a purged key is free again: k1's row acked, its partition dropped
SELECT id FROM outbox_claim(3, outbox => 'part.d');
SELECT outbox_ack(ARRAY[1, 2, 3]::bigint[], outbox => 'part.d') AS acked;
SELECT outbox_purge('0 seconds', 'part.d') AS purged;
SELECT outbox_enqueue('agent:a', 'work', '\x0e', dedup_key => 'k1', outbox => 'part.d') AS id;
SELECT id, recipient, dedup_key FROM part.d WHERE dedup_key = 'k1' ORDER BY id;

--
-- The partitions an enqueue makes belong to the outbox's owner, also when
-- a producer that may only INSERT into the outbox makes them.
--
CREATE ROLE regress_part_owner;
CREATE ROLE regress_part_producer;
GRANT USAGE, CREATE ON SCHEMA part TO regress_part_owner;
GRANT USAGE ON SCHEMA part TO regress_part_producer;
SELECT format('GRANT EXECUTE ON FUNCTION %s TO regress_part_owner', oid::regprocedure)
  FROM pg_proc
 WHERE proname = 'outbox_create' AND pronamespace = 'public'::regnamespace \gexec
SELECT format('GRANT EXECUTE ON FUNCTION %s TO regress_part_producer', oid::regprocedure)
  FROM pg_proc
 WHERE proname IN ('outbox_enqueue', 'outbox_enqueue_batch')
   AND pronamespace = 'public'::regnamespace \gexec
SET ROLE regress_part_owner;
SELECT outbox_create('part', 'owned', partition_rows => 2);
GRANT INSERT ON part.owned TO regress_part_producer;
RESET ROLE;
SET ROLE regress_part_producer;
SELECT outbox_enqueue('agent:o', 'work', '\x01', outbox => 'part.owned') AS id
  FROM generate_series(1, 3);
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:o', 'agent:o', 'agent:o'],
                                   ARRAY['work', 'work', 'work'],
                                   ARRAY['\x02', '\x03', '\x04']::bytea[],
                                   outbox => 'part.owned');
\set VERBOSITY terse
-- (it cannot make a table there itself)
CREATE TABLE part.mine (x int);
\echo :SQLSTATE
\set VERBOSITY default
RESET ROLE;
SELECT * FROM regress_parts('part.owned');

--
-- A producer whose transaction holds a lock on the outbox and enqueues
-- past the last partition: with ROW EXCLUSIVE (its own insert), a row lock
-- or ACCESS SHARE, none of which the maker's SHARE UPDATE EXCLUSIVE
-- conflicts with, the maker makes them (the producer holds no such lock
-- afterwards); with SHARE, which it conflicts with, the producer makes
-- them itself at once instead of waiting for a maker that waits for it.
--
SELECT outbox_create('part', 'lk', partition_rows => 2) IS NOT NULL AS made;
CREATE FUNCTION regress_lk_past(n bigint) RETURNS TABLE (id bigint, holds_sue boolean, quick boolean)
LANGUAGE plpgsql AS $f$
DECLARE
    t0 timestamptz := clock_timestamp();
BEGIN
    PERFORM setval(pg_get_serial_sequence('part.lk', 'id'), n);
    id := outbox_enqueue('agent:l', 'work', '\x01', outbox => 'part.lk');
    holds_sue := EXISTS (SELECT FROM pg_locks WHERE pid = pg_backend_pid()
                           AND relation = 'part.lk'::regclass
                           AND mode = 'ShareUpdateExclusiveLock');
    quick := clock_timestamp() - t0 < interval '1.5 s';
    RETURN NEXT;
END
$f$;
BEGIN;
INSERT INTO part.lk (recipient, kind, payload) VALUES ('agent:l', 'work', '\x00');
SELECT * FROM regress_lk_past(10);
COMMIT;
BEGIN;
SELECT count(*) FROM (SELECT FROM part.lk FOR UPDATE) l;
SELECT * FROM regress_lk_past(20);
COMMIT;
BEGIN;
SELECT count(*) FROM part.lk;
SELECT * FROM regress_lk_past(30);
COMMIT;
BEGIN;
LOCK TABLE part.lk IN SHARE MODE;
SELECT * FROM regress_lk_past(40);
COMMIT;
SELECT part, bounds FROM regress_parts('part.lk');
DROP TABLE part.lk;
DROP FUNCTION regress_lk_past(bigint);

--
-- Whose rights attaching a partition runs with.  The owner's CHECK calls
-- an IMMUTABLE function with a constant, which ATTACH PARTITION
-- evaluates while it simplifies the new partition's constraints; the
-- function records who ran it and tries to make its owner a superuser.
-- Attaching copies the extension's row triggers, checking EXECUTE on
-- their functions: with that granted to the owner, the maker attaches as
-- the owner; without it, attaching as the calling user is refused (42501)
-- once the outbox's expressions call a function that is not built in.
--
GRANT USAGE ON SCHEMA part TO regress_part_owner;
SET ROLE regress_part_owner;
SELECT outbox_create('part', 'spy', partition_rows => 2) IS NOT NULL AS made;
CREATE TABLE part.spied (what text, who name, pid int);
CREATE FUNCTION part.regress_spy(what text) RETURNS boolean
LANGUAGE plpgsql AS $f$
BEGIN
    BEGIN
        EXECUTE format('ALTER ROLE %I SUPERUSER', session_user);
    EXCEPTION WHEN insufficient_privilege THEN
        NULL;
    END;
    INSERT INTO part.spied VALUES (what, current_user, pg_catalog.pg_backend_pid());
    RETURN true;
END
$f$;
CREATE FUNCTION part.regress_ok(x int) RETURNS boolean
IMMUTABLE LANGUAGE plpgsql AS $f$
BEGIN
    RETURN part.regress_spy('check');
END
$f$;
ALTER TABLE part.spy ADD CONSTRAINT spy_ok CHECK (part.regress_ok(0));
RESET ROLE;
TRUNCATE part.spied;
GRANT EXECUTE ON FUNCTION outbox_state_guard(), outbox_inserted() TO regress_part_owner;
-- ids 1 and 2 in p0; the enqueue of 2 makes p2 ahead, through the maker
-- (another process), whose ATTACH runs the CHECK's function as the owner;
-- so does each insert here
SELECT outbox_enqueue('agent:s', 'work', '\x01', outbox => 'part.spy') AS id
  FROM generate_series(1, 2);
SELECT part, bounds, owner FROM regress_parts('part.spy');
SELECT DISTINCT what, who, pid = pg_backend_pid() AS in_this_session
  FROM part.spied ORDER BY 1, 2, 3;
SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_part_owner';
REVOKE EXECUTE ON FUNCTION outbox_state_guard(), outbox_inserted() FROM regress_part_owner;
TRUNCATE part.spied;
-- ids 3 to 6: from id 5 on the partition ahead (7-8) cannot be made: a
-- warning, once; after the failed maker, the next enqueues of this session
-- start none and try nothing ahead for a while
SELECT outbox_enqueue('agent:s', 'work', '\x01', outbox => 'part.spy') AS id
  FROM generate_series(1, 4);
-- ids the existing partitions do not hold: the enqueue's error
SELECT setval(pg_get_serial_sequence('part.spy', 'id'), 20) AS moved;
\set VERBOSITY sqlstate
SELECT outbox_enqueue('agent:s', 'work', '\x01', outbox => 'part.spy') AS id;
\set VERBOSITY default
SELECT outbox_enqueue('agent:s', 'work', '\x01', outbox => 'part.spy') AS id;
SELECT part, bounds FROM regress_parts('part.spy');
SELECT count(*) AS spied_as_others FROM part.spied WHERE who <> 'regress_part_owner';
SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_part_owner';
DROP TABLE part.spy, part.spied;
DROP FUNCTION part.regress_ok(int), part.regress_spy(text);

--
-- A partitioned table is not attached, a partition is no outbox, and a
-- long table name is shortened in its partitions' names.
--
CREATE TABLE part.by_hand (LIKE part.plain INCLUDING DEFAULTS)
  PARTITION BY RANGE (id);
\set VERBOSITY terse
SELECT outbox_attach('part.by_hand');
\echo :SQLSTATE
SELECT outbox_attach('part.t_p1');
\echo :SQLSTATE
SELECT * FROM outbox_claim(10, outbox => 'part.t_p1');
\echo :SQLSTATE
SELECT outbox_enqueue('agent:a', 'work', '\x01', outbox => 'part.t_p6');
\echo :SQLSTATE
\set VERBOSITY default
SELECT * FROM regress_parts('part.t');
DROP TABLE part.by_hand;

SELECT outbox_create('part', repeat('y', 63), partition_rows => 10) IS NOT NULL AS made;
SELECT octet_length(part) AS name_bytes, right(part, 4) AS tail,
       left(part, 5) AS head, bounds
  FROM regress_parts(format('part.%I', repeat('y', 63))::regclass);
SELECT outbox_enqueue('agent:y', 'work', '\x01',
                      outbox => format('part.%I', repeat('y', 63))::regclass) AS id;

--
-- The dedup look-up follows the outbox through a rename and an owner
-- change (the partitions keep their owner).
--
SELECT outbox_create('part', 'rn', partition_rows => 100) IS NOT NULL AS made;
INSERT INTO part.rn (recipient, kind, payload, dedup_key) VALUES ('agent:r', 'work', '\x01', 'a1');
ALTER TABLE part.rn RENAME TO rn2;
-- a table of the old name, holding the key a3, is not read
CREATE TABLE part.rn (id bigint, recipient text, dedup_key text);
INSERT INTO part.rn VALUES (99, 'agent:r', 'a3');
INSERT INTO part.rn2 (recipient, kind, payload, dedup_key)
VALUES ('agent:r', 'work', '\x02', 'a3'), ('agent:r', 'work', '\x03', 'a1')
RETURNING id, dedup_key;
ALTER TABLE part.rn2 OWNER TO regress_part_owner;
SELECT outbox_enqueue('agent:r', 'work', '\x04', dedup_key => 'a4', outbox => 'part.rn2') AS id;
SELECT outbox_enqueue('agent:r', 'work', '\x05', dedup_key => 'a4', outbox => 'part.rn2') AS same_id;
SELECT id, dedup_key FROM part.rn2 ORDER BY id;
DROP TABLE part.rn, part.rn2;

--
-- A batch whose rows span more partitions than a partition's worth ahead
-- (400 rows, 3 ids per partition): every partition its rows need is made.
--
SELECT outbox_create('part', 'wide', partition_rows => 3) IS NOT NULL AS made;
SELECT count(*) AS enqueued
  FROM outbox_enqueue_batch(array_fill('agent:w'::text, ARRAY[400]),
                            array_fill('work'::text, ARRAY[400]),
                            array_fill('\x01'::bytea, ARRAY[400]), outbox => 'part.wide');
SELECT count(*) AS partitions FROM pg_partition_tree('part.wide') WHERE isleaf;
DROP TABLE part.wide;

--
-- A partition that is itself partitioned (added by hand) is never dropped
-- by retention, whatever it holds.
--
SELECT outbox_create('part', 'sp', partition_rows => 10) IS NOT NULL AS made;
CREATE TABLE part.sp_extra (LIKE part.sp INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
  PARTITION BY RANGE (id);
CREATE TABLE part.sp_extra_leaf (LIKE part.sp INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE part.sp_extra ATTACH PARTITION part.sp_extra_leaf FOR VALUES FROM (21) TO (41);
ALTER TABLE part.sp ATTACH PARTITION part.sp_extra FOR VALUES FROM (21) TO (41);
INSERT INTO part.sp (id, recipient, kind, payload) VALUES (21, 'agent:s', 'work', '\x01');
SELECT setval(pg_get_serial_sequence('part.sp', 'id'), 100);
SELECT outbox_purge('0 seconds', outbox => 'part.sp') AS purged;
SELECT id, delivery_state, tableoid::regclass FROM part.sp ORDER BY id;
DROP TABLE part.sp;

--
-- DROP TABLE of a partitioned outbox ends it, with its partitions; its
-- dead-letter table stays, as for any outbox.
--
DROP TABLE part.t;
SELECT * FROM part_outboxes;
SELECT * FROM part_tables;

--
-- Clean up
--
DROP VIEW part_outboxes, part_tables, part_touched;
DROP TABLE touch_base;
DROP FUNCTION regress_parts(regclass), regress_touch_start(), regress_explain(text);
SET client_min_messages = warning;
DROP SCHEMA part CASCADE;
RESET client_min_messages;
DROP EXTENSION delivery_outbox;
DROP ROLE regress_part_owner;
DROP ROLE regress_part_producer;
