--
-- api.sql: the normal path of every function of delivery_outbox
--
-- Timestamps are never printed: only facts about them (set or not, ordered).
--
CREATE EXTENSION delivery_outbox;

\set VERBOSITY default
\set SHOW_CONTEXT never

\i sql/include/outbox_rows.sql

--
-- The table as SPEC describes it: columns, defaults, checks, indexes, the
-- guard trigger (enabled ALWAYS), and both table and sequence dumped
--
SELECT attname, format_type(atttypid, atttypmod) AS type, attnotnull,
       pg_get_expr(d.adbin, d.adrelid) AS default
  FROM pg_attribute a
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE a.attrelid = 'delivery_outbox'::regclass AND a.attnum > 0
   AND NOT a.attisdropped
 ORDER BY a.attnum;
SELECT contype, pg_get_constraintdef(oid) AS definition
  FROM pg_constraint WHERE conrelid = 'delivery_outbox'::regclass
   AND contype <> 'n'  -- NOT NULL, catalogued here from PostgreSQL 18 on
 ORDER BY contype, 2;
-- indexes for: pending rows in id order, a recipient's rows in id order,
-- delivered rows by delivered_at (their exact predicates are the C code's
-- business, so only the key columns are pinned)
WITH ix AS (
  SELECT i.indexrelid, i.indpred IS NOT NULL AS partial,
         (SELECT array_agg(a.attname::text ORDER BY k.n)
            FROM unnest(i.indkey) WITH ORDINALITY k(attnum, n)
            JOIN pg_attribute a ON a.attrelid = i.indrelid
                               AND a.attnum = k.attnum) AS keys
    FROM pg_index i WHERE i.indrelid = 'delivery_outbox'::regclass)
SELECT bool_or(keys = '{id}' AND partial) AS pending_by_id,
       bool_or(keys[1:2] = '{recipient,id}') AS recipient_by_id,
       bool_or(keys[1] = 'delivered_at') AS delivered_by_delivered_at
  FROM ix;
SELECT tgfoid::regproc AS function, tgenabled, tgtype & 1 = 1 AS for_each_row,
       tgtype & 2 = 2 AS before, tgtype & 4 = 4 AS on_insert,
       tgtype & 8 = 8 AS on_delete, tgtype & 16 = 16 AS on_update
  FROM pg_trigger WHERE tgrelid = 'delivery_outbox'::regclass ORDER BY tgname;
SELECT extconfig::regclass[] AS dumped, extcondition, extrelocatable
  FROM pg_extension WHERE extname = 'delivery_outbox';
-- the functions: argument names and defaults (callers use named notation),
-- results, none STRICT (a NULL must raise, not return NULL), all VOLATILE
SELECT p.proname, pg_get_function_arguments(p.oid) AS arguments,
       pg_get_function_result(p.oid) AS result, p.proisstrict, p.provolatile
  FROM pg_proc p
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                  AND d.refclassid = 'pg_extension'::regclass
                  AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'delivery_outbox'
 ORDER BY p.proname, arguments;

-- An empty outbox: counts are zero, the ages are NULL.
SELECT * FROM outbox_stats();

--
-- outbox_enqueue: one pending row per call, the new id returned
--
SELECT outbox_enqueue('agent:a', 'work', '\x01');
SELECT outbox_enqueue('agent:b', 'work', '\x02');
SELECT outbox_enqueue('agent:a', 'work', '\x03', 't1');
SELECT outbox_enqueue('agent:b', 'work', '\x04', 't1');
SELECT outbox_enqueue('agent:a', 'execution_event', '\x05', 't2');
SELECT outbox_enqueue('agent:c', 'work', '\x06', 't2');
SELECT outbox_enqueue('agent:a', 'work', '\x07', 't1');
SELECT outbox_enqueue('agent:b', 'work', '\x08');
SELECT * FROM outbox_rows;

-- the id returned is the id of the row inserted; created_at is now()
BEGIN;
SELECT outbox_enqueue('exec_events:42', 'execution_event', '\xdeadbeef') AS new_id \gset
SELECT id, recipient, kind, payload, delivery_state,
       created_at = now() AS created_now
  FROM delivery_outbox WHERE id = :new_id;
ROLLBACK;
-- rolled back: the row is gone (the id it took is not reused)
SELECT count(*) FROM delivery_outbox WHERE id = :new_id;

-- a payload is opaque bytes, kept exactly (zero bytes included)
SELECT outbox_enqueue('agent:z', 'work', '\x00ff00') AS zid \gset
SELECT payload = '\x00ff00'::bytea AS same_bytes, length(payload)
  FROM delivery_outbox WHERE id = :zid;
DELETE FROM delivery_outbox WHERE id = :zid;

--
-- outbox_claim
--
-- max_rows limits, oldest id first across all recipients; the rows come back
-- as updated (delivered, attempts 1, delivered_at set) and equal the table.
CREATE TEMP TABLE claimed AS SELECT * FROM outbox_claim(2);
SELECT id, recipient, delivery_state, delivery_attempts,
       delivered_at IS NOT NULL AS has_delivered_at,
       acked_at IS NULL AS no_acked_at
  FROM claimed;
SELECT c.id, c = t AS returned_equals_table
  FROM claimed c JOIN delivery_outbox t USING (id) ORDER BY c.id;
SELECT bool_and(delivered_at >= created_at) AS delivered_after_created
  FROM claimed;
DROP TABLE claimed;

-- recipient and tenant together
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts
  FROM outbox_claim(100, 'agent:a', 't1');
-- tenant only (any recipient)
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts
  FROM outbox_claim(100, NULL, 't2');
-- recipient only (any tenant, NULL included); max_rows 1 takes the oldest
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts
  FROM outbox_claim(1, 'agent:b');
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts
  FROM outbox_claim(recipient => 'agent:b');
-- nothing pending is left
SELECT count(*) FROM outbox_claim();
-- a filter that matches nothing
SELECT outbox_enqueue('agent:d', 'work', '\x09');
SELECT count(*) FROM outbox_claim(10, 'agent:nobody');
SELECT count(*) FROM outbox_claim(10, 'agent:d', 't1');
SELECT count(*) FROM outbox_claim(10, NULL, 'no-such-tenant');
-- claim never takes a delivered row again
SELECT id FROM outbox_claim(10, 'agent:d');
SELECT count(*) FROM outbox_claim(10, 'agent:d');
SELECT * FROM outbox_rows;

--
-- outbox_ack(id bigint, recipient text)
--
SELECT outbox_ack(1);                 -- true: acked now
SELECT outbox_ack(1);                 -- false: already acked
SELECT outbox_ack(999);               -- false: no such row
SELECT outbox_ack(2, 'agent:a');      -- false: row 2 is agent:b's
SELECT delivery_state FROM delivery_outbox WHERE id = 2;
SELECT outbox_ack(2, 'agent:b');      -- true
SELECT id, delivery_state, delivery_attempts, has_delivered_at, has_acked_at
  FROM outbox_rows WHERE id IN (1, 2);
SELECT bool_and(acked_at >= delivered_at) AS acked_after_delivered
  FROM delivery_outbox WHERE id IN (1, 2);

--
-- outbox_ack(ids bigint[], recipient text): the number this call acked
--
SELECT outbox_ack(ARRAY[3, 4, 1, 999]::bigint[]);  -- 2: 1 acked before, 999 missing
SELECT outbox_ack(ARRAY[5, 6]::bigint[], 'agent:a'); -- 1: row 6 is agent:c's
SELECT outbox_ack(ARRAY[7, 7]::bigint[]);          -- 1: a duplicate counts once
SELECT outbox_ack('{}'::bigint[]);                 -- 0
SELECT id, recipient, delivery_state, delivery_attempts, has_acked_at
  FROM outbox_rows WHERE id BETWEEN 1 AND 8;

--
-- A late ack: the row was reclaimed to pending before the ack arrived.  It
-- still counts; the row passes through delivered (attempts + 1, a new
-- delivered_at) and ends acked.
--
SELECT delivered_at AS old_delivered_at FROM delivery_outbox WHERE id = 8 \gset
SELECT outbox_release(ARRAY[8]::bigint[]);
SELECT id, delivery_state, delivery_attempts FROM delivery_outbox WHERE id = 8;
SELECT pg_sleep(0.01);
SELECT outbox_ack(8, 'agent:c');      -- false: wrong recipient, still pending
SELECT id, delivery_state, delivery_attempts, has_acked_at
  FROM outbox_rows WHERE id = 8;
SELECT outbox_ack(8, 'agent:b');      -- true
SELECT id, delivery_state, delivery_attempts, acked_at IS NOT NULL AS has_acked_at,
       delivered_at > :'old_delivered_at' AS new_delivered_at,
       acked_at >= delivered_at AS acked_after_delivered
  FROM delivery_outbox WHERE id = 8;
-- the same through the array form, on row 6 (agent:c)
SELECT outbox_release(ARRAY[6]::bigint[]);
SELECT outbox_ack(ARRAY[6]::bigint[]);
SELECT id, delivery_state, delivery_attempts, has_delivered_at, has_acked_at
  FROM outbox_rows WHERE id = 6;
-- a row never claimed (read through outbox_replay) is acked the same way
SELECT outbox_enqueue('agent:e', 'work', '\x0e') AS e1 \gset
SELECT id - :e1 AS n FROM outbox_replay('agent:e');
SELECT outbox_ack(:e1, 'agent:e');
SELECT id - :e1 AS n, delivery_state, delivery_attempts, has_delivered_at,
       has_acked_at
  FROM outbox_rows WHERE id = :e1;
SELECT outbox_ack(:e1, 'agent:e');    -- false: acked now

--
-- outbox_release: delivered -> pending, the count of rows released
--
SELECT outbox_enqueue('agent:r', 'work', '\x0a') AS r1 \gset
SELECT outbox_enqueue('agent:r', 'work', '\x0b') AS r2 \gset
SELECT outbox_enqueue('agent:r', 'work', '\x0c') AS r3 \gset
SELECT count(*) FROM outbox_claim(10, 'agent:r');
-- r1 and r2 go back; row 1 is acked and stays so
SELECT outbox_release(ARRAY[:r1, :r2, 1]::bigint[]);
SELECT outbox_release(ARRAY[:r1]::bigint[]);       -- 0: already pending
SELECT outbox_release(ARRAY[12345]::bigint[]);     -- 0: no such row
SELECT outbox_release('{}'::bigint[]);             -- 0
-- release keeps attempts and the last delivered_at
SELECT id, delivery_state, delivery_attempts, has_delivered_at, has_acked_at
  FROM outbox_rows WHERE recipient = 'agent:r';
SELECT delivery_state FROM delivery_outbox WHERE id = 1;
-- claimed again: attempts 2
SELECT id, delivery_state, delivery_attempts FROM outbox_claim(10, 'agent:r');

--
-- outbox_reclaim(older_than, max_rows): delivered longer ago than older_than
--
-- a row restored as delivered long ago, next to the freshly delivered r1..r3
INSERT INTO delivery_outbox (recipient, kind, payload, delivery_state,
                             delivery_attempts, created_at, delivered_at)
VALUES ('agent:old', 'work', '\x0d', 'delivered', 1,
        '2000-01-01 00:00:00+00', '2000-01-01 00:00:01+00')
RETURNING id AS old_id \gset
SELECT outbox_reclaim();                 -- default 60 seconds: only the old row
SELECT id, recipient, delivery_state, delivery_attempts
  FROM delivery_outbox WHERE delivery_state <> 'acked' ORDER BY id;
SELECT outbox_reclaim('1 hour');         -- 0: the rest are fresh
SELECT outbox_reclaim('1 hour', 10);     -- 0
SELECT outbox_reclaim('10000 years');    -- 0: nothing was delivered that long ago
-- '0 seconds' takes them all; max_rows 1 takes the oldest delivery (row 11)
SELECT outbox_reclaim('0 seconds', 1);
SELECT id, recipient, delivery_state FROM delivery_outbox
 WHERE delivery_state <> 'acked' ORDER BY id;
SELECT outbox_reclaim('0 seconds', NULL);   -- 3: a NULL max_rows is no limit
SELECT outbox_reclaim('0 seconds');         -- 0: nothing delivered left
SELECT id, recipient, delivery_state, delivery_attempts, has_delivered_at
  FROM outbox_rows WHERE delivery_state <> 'acked';

--
-- outbox_reclaim_recipient(recipient, tenant_id): a NULL tenant matches NULL only
--
SELECT outbox_enqueue('agent:s', 'work', '\x10') AS s_null \gset
SELECT outbox_enqueue('agent:s', 'work', '\x11', 't1') AS s_t1 \gset
SELECT outbox_enqueue('agent:s', 'work', '\x12', 't2') AS s_t2 \gset
SELECT outbox_enqueue('agent:other', 'work', '\x13') AS other \gset
SELECT count(*) FROM outbox_claim(10, 'agent:s');
SELECT count(*) FROM outbox_claim(10, 'agent:other');
SELECT outbox_enqueue('agent:s', 'work', '\x14') AS s_pending \gset
SELECT outbox_reclaim_recipient('agent:s');          -- 1: the NULL-tenant row
SELECT outbox_reclaim_recipient('agent:s', 't1');    -- 1
SELECT outbox_reclaim_recipient('agent:s', 't9');    -- 0
SELECT outbox_reclaim_recipient('agent:s');          -- 0: nothing left there
SELECT outbox_reclaim_recipient('agent:nobody');     -- 0
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts
  FROM delivery_outbox
 WHERE recipient IN ('agent:s', 'agent:other') ORDER BY id;

--
-- outbox_reassign(from, to): every non-acked row of a dead recipient moves,
-- as pending; acked rows stay where they are
--
SELECT outbox_enqueue('agent:dead', 'work', '\x20') AS dead1 \gset
SELECT outbox_enqueue('agent:dead', 'work', '\x21', 't1') AS dead2 \gset
SELECT outbox_enqueue('agent:dead', 'work', '\x22') AS dead3 \gset
SELECT count(*) FROM outbox_claim(2, 'agent:dead');
SELECT outbox_ack(:dead1);
SELECT outbox_reassign('agent:dead', 'agent:new');   -- 2
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts,
       has_delivered_at, has_acked_at
  FROM outbox_rows WHERE id IN (:dead1, :dead2, :dead3);
SELECT outbox_reassign('agent:dead', 'agent:new');   -- 0: only the acked row is left
SELECT outbox_reassign('agent:nobody', 'agent:new'); -- 0
-- the moved rows are the new recipient's to claim
SELECT id, recipient, delivery_state, delivery_attempts
  FROM outbox_claim(10, 'agent:new');

--
-- outbox_replay(recipient, after_id, max_rows, tenant_id): read only
--
SELECT outbox_enqueue('agent:p', 'work', '\x30') AS p1 \gset
SELECT outbox_enqueue('agent:p', 'work', '\x31', 't1') AS p2 \gset
SELECT outbox_enqueue('agent:p', 'work', '\x32') AS p3 \gset
SELECT outbox_enqueue('agent:p', 'work', '\x33', 't1') AS p4 \gset
SELECT outbox_enqueue('agent:p', 'work', '\x34') AS p5 \gset
SELECT count(*) FROM outbox_claim(2, 'agent:p');   -- p1, p2 delivered
SELECT outbox_ack(:p3);                           -- p3 acked (late ack)
CREATE TEMP TABLE before_replay AS SELECT * FROM delivery_outbox;
-- the open rows (pending and delivered), in id order, acked excluded
SELECT id - :p1 AS n, recipient, tenant_id, payload, delivery_state,
       delivery_attempts
  FROM outbox_replay('agent:p');
SELECT id - :p1 AS n FROM outbox_replay('agent:p', :p2);
SELECT id - :p1 AS n FROM outbox_replay('agent:p', :p4);
SELECT id - :p1 AS n FROM outbox_replay('agent:p', :p5);
SELECT id - :p1 AS n FROM outbox_replay('agent:p', 0, 2);
SELECT id - :p1 AS n FROM outbox_replay('agent:p', :p1, 1);
SELECT id - :p1 AS n, tenant_id FROM outbox_replay('agent:p', 0, 100, 't1');
SELECT id - :p1 AS n, tenant_id FROM outbox_replay('agent:p', :p2, 100, 't1');
SELECT count(*) FROM outbox_replay('agent:p', 0, 100, 't9');
SELECT count(*) FROM outbox_replay('agent:nobody');
-- nothing changed: states, attempts and timestamps are as before
SELECT count(*) AS changed_rows FROM (
  (SELECT * FROM delivery_outbox EXCEPT SELECT * FROM before_replay)
  UNION ALL
  (SELECT * FROM before_replay EXCEPT SELECT * FROM delivery_outbox)) d;
DROP TABLE before_replay;
-- read only, so it runs in a READ ONLY transaction (as outbox_stats does)
BEGIN TRANSACTION READ ONLY;
SELECT id - :p1 AS n FROM outbox_replay('agent:p', :p1);
SELECT pending > 0 AS has_pending FROM outbox_stats();
ROLLBACK;

--
-- outbox_purge(older_than): only acked rows, only those acked long enough ago
--
INSERT INTO delivery_outbox (recipient, kind, payload, delivery_state,
                             delivery_attempts, created_at, delivered_at,
                             acked_at)
VALUES ('agent:gone', 'work', '\x40', 'acked', 1, '2000-01-01 00:00:00+00',
        '2000-01-01 00:00:01+00', '2000-01-01 00:00:02+00'),
       ('agent:gone', 'work', '\x41', 'acked', 2, '2000-01-02 00:00:00+00',
        '2000-01-02 00:00:01+00', '2000-01-02 00:00:02+00'),
       ('agent:gone', 'work', '\x42', 'delivered', 1, '2000-01-03 00:00:00+00',
        '2000-01-03 00:00:01+00', NULL),
       ('agent:gone', 'work', '\x43', 'pending', 0, '2000-01-04 00:00:00+00',
        NULL, NULL);
SELECT delivery_state, count(*) FROM delivery_outbox GROUP BY 1 ORDER BY 1;
SELECT outbox_purge('10000 years');      -- 0: nothing was acked that long ago
SELECT outbox_purge('1 day');            -- 2: the two old acked rows
SELECT payload, delivery_state FROM delivery_outbox
 WHERE recipient = 'agent:gone' ORDER BY id;
SELECT outbox_purge('1 day');            -- 0
SELECT pg_typeof(outbox_purge('1 day'));
SELECT count(*) AS acked_before FROM delivery_outbox
 WHERE delivery_state = 'acked' \gset
SELECT outbox_purge('0 seconds') = :acked_before AS purged_all_acked;
SELECT delivery_state, count(*) FROM delivery_outbox GROUP BY 1 ORDER BY 1;

--
-- outbox_stats
--
SELECT pending, delivered, acked, open_recipients,
       oldest_pending_age IS NOT NULL AS has_pending_age,
       oldest_delivered_age IS NOT NULL AS has_delivered_age
  FROM outbox_stats();
-- the counts agree with the table
SELECT s.pending = t.pending AND s.delivered = t.delivered
       AND s.acked = t.acked AND s.open_recipients = t.open_recipients
       AS stats_agree
  FROM outbox_stats() s,
       (SELECT count(*) FILTER (WHERE delivery_state = 'pending') AS pending,
               count(*) FILTER (WHERE delivery_state = 'delivered') AS delivered,
               count(*) FILTER (WHERE delivery_state = 'acked') AS acked,
               count(DISTINCT recipient)
                 FILTER (WHERE delivery_state <> 'acked') AS open_recipients
          FROM delivery_outbox) t;
-- the oldest pending row was enqueued in 2000, the oldest delivered one was
-- delivered in 2000
SELECT oldest_pending_age > '20 years' AS old_pending,
       oldest_delivered_age > '20 years' AS old_delivered
  FROM outbox_stats();
-- with no delivered rows the delivered age is NULL again; an acked row is not
-- an open recipient
SELECT outbox_ack(ARRAY(SELECT id FROM delivery_outbox
                         WHERE delivery_state = 'delivered'))
       = (SELECT count(*) FROM delivery_outbox
           WHERE delivery_state = 'delivered') AS acked_all_delivered;
SELECT pending, delivered, open_recipients,
       oldest_pending_age IS NOT NULL AS has_pending_age,
       oldest_delivered_age IS NULL AS no_delivered_age
  FROM outbox_stats();
SELECT outbox_ack(ARRAY(SELECT id FROM delivery_outbox
                         WHERE delivery_state = 'pending')) > 0 AS acked_pending;
SELECT pending, delivered, open_recipients,
       oldest_pending_age IS NULL AS no_pending_age,
       oldest_delivered_age IS NULL AS no_delivered_age
  FROM outbox_stats();
SELECT outbox_purge('0 seconds') > 0 AS purged;
SELECT * FROM outbox_stats();

--
-- The functions in the select list
--
SELECT outbox_enqueue('agent:sl', 'work', '\x50') AS sl1 \gset
SELECT outbox_enqueue('agent:sl', 'work', '\x51') AS sl2 \gset
SELECT outbox_enqueue('agent:sl', 'work', '\x52', 't1') AS sl3 \gset
SELECT (c).id - :sl1 AS n, (c).delivery_state, (c).delivery_attempts
  FROM (SELECT outbox_claim(2, 'agent:sl') AS c OFFSET 0) s;
SELECT (r).id - :sl1 AS n, (r).delivery_state
  FROM (SELECT outbox_replay('agent:sl') AS r OFFSET 0) s;
SELECT outbox_ack(:sl1, 'agent:sl'), outbox_ack(ARRAY[:sl2]::bigint[]);
SELECT (outbox_claim(1, 'agent:sl', 't1')).id - :sl1 AS n;
SELECT outbox_reclaim_recipient('agent:sl', 't1');
SELECT (outbox_claim(1, 'agent:sl', 't1')).delivery_attempts;
SELECT outbox_release(ARRAY[:sl3]::bigint[]);
SELECT (outbox_claim(1, 'agent:sl', 't1')).delivery_attempts;
SELECT outbox_reclaim('0 seconds');
SELECT outbox_reassign('agent:sl', 'agent:sl2');
SELECT (outbox_stats()).pending;
SELECT outbox_purge('0 seconds');
SELECT id - :sl1 AS n, recipient, delivery_state, delivery_attempts
  FROM delivery_outbox ORDER BY id;

DROP VIEW outbox_rows;
DROP EXTENSION delivery_outbox;
