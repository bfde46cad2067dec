--
-- state_machine.sql: the C trigger outbox_state_guard() and plain SQL
--
-- pending -> delivered -> acked, delivered -> pending; everything else is
-- 23514, whoever writes.  The trigger owns the bookkeeping columns.
--
CREATE EXTENSION delivery_outbox;

\set VERBOSITY default
\set SHOW_CONTEXT never

\i sql/include/outbox_rows.sql

-- a plain INSERT: pending, no attempts, no delivery timestamps
INSERT INTO delivery_outbox (recipient, kind, tenant_id, payload)
VALUES ('agent:a', 'work', NULL, '\x01'),
       ('agent:a', 'work', 't1', '\x02'),
       ('agent:b', 'work', NULL, '\x03');
SELECT * FROM outbox_rows;

--
-- The nine (from, to) pairs by plain UPDATE
--
-- pending -> pending: allowed, nothing changes
UPDATE delivery_outbox SET delivery_state = 'pending' WHERE id = 1;
SELECT * FROM outbox_rows WHERE id = 1;
-- pending -> delivered: attempts + 1, delivered_at set
UPDATE delivery_outbox SET delivery_state = 'delivered' WHERE id = 1;
SELECT * FROM outbox_rows WHERE id = 1;
SELECT delivered_at AS d1 FROM delivery_outbox WHERE id = 1 \gset
-- delivered -> delivered: allowed, not a new delivery
SELECT pg_sleep(0.01);
UPDATE delivery_outbox SET delivery_state = 'delivered' WHERE id = 1;
SELECT id, delivery_state, delivery_attempts,
       delivered_at = :'d1' AS same_delivered_at
  FROM delivery_outbox WHERE id = 1;
-- delivered -> pending: attempts and delivered_at are kept
UPDATE delivery_outbox SET delivery_state = 'pending' WHERE id = 1;
SELECT id, delivery_state, delivery_attempts,
       delivered_at = :'d1' AS same_delivered_at, acked_at IS NULL AS no_acked_at
  FROM delivery_outbox WHERE id = 1;
-- pending -> delivered again: attempts 2, a new delivered_at
UPDATE delivery_outbox SET delivery_state = 'delivered' WHERE id = 1;
SELECT id, delivery_state, delivery_attempts,
       delivered_at > :'d1' AS new_delivered_at
  FROM delivery_outbox WHERE id = 1;
-- delivered -> acked: acked_at set, attempts unchanged
UPDATE delivery_outbox SET delivery_state = 'acked' WHERE id = 1;
SELECT * FROM outbox_rows WHERE id = 1;
SELECT acked_at >= delivered_at AS acked_after_delivered
  FROM delivery_outbox WHERE id = 1;
SELECT delivered_at AS d1, acked_at AS a1 FROM delivery_outbox WHERE id = 1 \gset
-- pending -> acked: rejected
UPDATE delivery_outbox SET delivery_state = 'acked' WHERE id = 3;
\echo :SQLSTATE
SELECT * FROM outbox_rows WHERE id = 3;
-- acked -> pending, acked -> delivered, acked -> acked: rejected
UPDATE delivery_outbox SET delivery_state = 'pending' WHERE id = 1;
\echo :SQLSTATE
UPDATE delivery_outbox SET delivery_state = 'delivered' WHERE id = 1;
\echo :SQLSTATE
UPDATE delivery_outbox SET delivery_state = 'acked' WHERE id = 1;
\echo :SQLSTATE
-- an acked row rejects any UPDATE, even one that changes nothing
UPDATE delivery_outbox SET recipient = recipient WHERE id = 1;
\echo :SQLSTATE
SELECT id, delivery_state, delivery_attempts,
       delivered_at = :'d1' AS same_delivered_at,
       acked_at = :'a1' AS same_acked_at
  FROM delivery_outbox WHERE id = 1;
-- one illegal row fails a multi-row UPDATE: row 2 is not claimed either
UPDATE delivery_outbox SET delivery_state = 'delivered' WHERE id IN (1, 2);
\echo :SQLSTATE
SELECT * FROM outbox_rows;

--
-- The bookkeeping is the trigger's: values written into delivery_attempts,
-- delivered_at and acked_at are replaced
--
-- row 2 pending, attempts 0: a pending -> delivered UPDATE that also writes
-- the bookkeeping gets attempts 0 + 1 and the trigger's timestamps
UPDATE delivery_outbox
   SET delivery_state = 'delivered', delivery_attempts = 99,
       delivered_at = '2000-01-01 00:00:00+00',
       acked_at = '2000-01-01 00:00:00+00'
 WHERE id = 2;
SELECT id, delivery_state, delivery_attempts,
       delivered_at > '2000-01-02' AS trigger_delivered_at,
       acked_at IS NULL AS no_acked_at
  FROM delivery_outbox WHERE id = 2;
SELECT delivered_at AS d2 FROM delivery_outbox WHERE id = 2 \gset
-- delivered -> pending writing the columns: the old values stay
UPDATE delivery_outbox
   SET delivery_state = 'pending', delivery_attempts = 0,
       delivered_at = NULL, acked_at = '2000-01-01 00:00:00+00'
 WHERE id = 2;
SELECT id, delivery_state, delivery_attempts,
       delivered_at = :'d2' AS same_delivered_at,
       acked_at IS NULL AS no_acked_at
  FROM delivery_outbox WHERE id = 2;
-- pending -> pending writing the columns: the old values stay
UPDATE delivery_outbox
   SET delivery_attempts = 42, delivered_at = '2000-01-01 00:00:00+00'
 WHERE id = 2;
SELECT id, delivery_state, delivery_attempts,
       delivered_at = :'d2' AS same_delivered_at
  FROM delivery_outbox WHERE id = 2;
-- pending -> delivered again with attempts = 99: the previous count plus one
SELECT pg_sleep(0.01);
UPDATE delivery_outbox
   SET delivery_state = 'delivered', delivery_attempts = 99,
       delivered_at = '2000-01-01 00:00:00+00'
 WHERE id = 2;
SELECT id, delivery_state, delivery_attempts,
       delivered_at > :'d2' AS new_delivered_at
  FROM delivery_outbox WHERE id = 2;
SELECT delivered_at AS d2 FROM delivery_outbox WHERE id = 2 \gset
-- delivered -> delivered writing the columns: the old values stay
UPDATE delivery_outbox
   SET delivery_attempts = 7, delivered_at = NULL,
       acked_at = '2000-01-01 00:00:00+00'
 WHERE id = 2;
SELECT id, delivery_state, delivery_attempts,
       delivered_at = :'d2' AS same_delivered_at,
       acked_at IS NULL AS no_acked_at
  FROM delivery_outbox WHERE id = 2;
-- delivered -> acked writing the columns: acked_at is the trigger's
UPDATE delivery_outbox
   SET delivery_state = 'acked', delivery_attempts = 0,
       delivered_at = NULL, acked_at = '2000-01-01 00:00:00+00'
 WHERE id = 2;
SELECT id, delivery_state, delivery_attempts,
       delivered_at = :'d2' AS same_delivered_at,
       acked_at > '2000-01-02' AS trigger_acked_at,
       acked_at >= delivered_at AS acked_after_delivered
  FROM delivery_outbox WHERE id = 2;
-- the functions go through the same rules: outbox_ack of an acked row is
-- false, not an error; outbox_release of it does nothing
SELECT outbox_ack(2), outbox_release(ARRAY[2]::bigint[]);
SELECT * FROM outbox_rows;

--
-- id, kind, tenant_id, payload and created_at never change
--
INSERT INTO delivery_outbox (recipient, kind, tenant_id, payload, created_at)
VALUES ('agent:c', 'work', NULL, '\x04', '2001-02-03 04:05:06+00'),
       ('agent:c', 'work', 't1', '\x05', '2001-02-03 04:05:06+00');
UPDATE delivery_outbox SET delivery_state = 'delivered' WHERE id = 5;
SELECT * FROM outbox_rows WHERE id IN (4, 5);
-- in pending (row 4)
UPDATE delivery_outbox SET id = 100 WHERE id = 4;
\echo :SQLSTATE
UPDATE delivery_outbox SET kind = 'other' WHERE id = 4;
\echo :SQLSTATE
UPDATE delivery_outbox SET tenant_id = 't2' WHERE id = 4;
\echo :SQLSTATE
UPDATE delivery_outbox SET payload = '\x99' WHERE id = 4;
\echo :SQLSTATE
UPDATE delivery_outbox SET created_at = '2000-01-01 00:00:00+00' WHERE id = 4;
\echo :SQLSTATE
-- with a transition in the same UPDATE
UPDATE delivery_outbox SET delivery_state = 'delivered', payload = '\x99'
 WHERE id = 4;
\echo :SQLSTATE
-- in delivered (row 5)
UPDATE delivery_outbox SET id = 101 WHERE id = 5;
\echo :SQLSTATE
UPDATE delivery_outbox SET kind = 'other' WHERE id = 5;
\echo :SQLSTATE
UPDATE delivery_outbox SET tenant_id = NULL WHERE id = 5;
\echo :SQLSTATE
UPDATE delivery_outbox SET payload = '\x99' WHERE id = 5;
\echo :SQLSTATE
UPDATE delivery_outbox SET created_at = '2000-01-01 00:00:00+00' WHERE id = 5;
\echo :SQLSTATE
UPDATE delivery_outbox SET delivery_state = 'pending', kind = 'other'
 WHERE id = 5;
\echo :SQLSTATE
-- in acked (row 1): the state rule answers first
UPDATE delivery_outbox SET payload = '\x99' WHERE id = 1;
\echo :SQLSTATE
-- writing the same value is not a change
UPDATE delivery_outbox
   SET id = id, kind = kind, tenant_id = tenant_id, payload = payload,
       created_at = created_at
 WHERE id IN (4, 5);
SELECT id, kind, tenant_id, payload, delivery_state, delivery_attempts,
       created_at
  FROM delivery_outbox WHERE id IN (4, 5) ORDER BY id;

--
-- recipient: re-addressing while pending or delivered, never once acked
--
UPDATE delivery_outbox SET recipient = 'agent:d' WHERE id = 4;
UPDATE delivery_outbox SET recipient = 'agent:d' WHERE id = 5;
SELECT id, recipient, delivery_state, delivery_attempts
  FROM delivery_outbox WHERE id IN (4, 5) ORDER BY id;
UPDATE delivery_outbox SET recipient = 'agent:d' WHERE id = 1;
\echo :SQLSTATE
SELECT id, recipient, delivery_state FROM delivery_outbox WHERE id = 1;
-- the table's CHECK still applies to a new recipient
UPDATE delivery_outbox SET recipient = '' WHERE id = 4;
\echo :SQLSTATE

--
-- Other statements that UPDATE go through the same trigger: an upsert and
-- MERGE (what ORMs and sync jobs issue)
--
INSERT INTO delivery_outbox (id, recipient, kind, payload, delivery_state,
                             delivery_attempts, created_at, delivered_at,
                             acked_at)
VALUES (4, 'agent:d', 'work', '\x04', 'acked', 1, '2001-02-03 04:05:06+00',
        '2001-02-03 04:06:00+00', '2001-02-03 04:07:00+00')
ON CONFLICT (id) DO UPDATE SET delivery_state = excluded.delivery_state,
                               acked_at = excluded.acked_at;
\echo :SQLSTATE
INSERT INTO delivery_outbox (id, recipient, kind, payload, delivery_state,
                             delivery_attempts, created_at, delivered_at)
VALUES (4, 'agent:d', 'work', '\x04', 'delivered', 7, '2001-02-03 04:05:06+00',
        '2001-02-03 04:06:00+00')
ON CONFLICT (id) DO UPDATE
   SET delivery_state = excluded.delivery_state,
       delivery_attempts = excluded.delivery_attempts,
       delivered_at = excluded.delivered_at;
SELECT id, delivery_state, delivery_attempts,
       delivered_at > '2002-01-01' AS trigger_delivered_at
  FROM delivery_outbox WHERE id = 4;
MERGE INTO delivery_outbox o USING (VALUES (1::bigint), (4::bigint)) v(id)
   ON o.id = v.id
 WHEN MATCHED THEN UPDATE SET delivery_state = 'pending';
\echo :SQLSTATE
MERGE INTO delivery_outbox o USING (VALUES (4::bigint)) v(id) ON o.id = v.id
 WHEN MATCHED THEN UPDATE SET delivery_state = 'pending', delivery_attempts = 0;
SELECT id, delivery_state, delivery_attempts FROM delivery_outbox
 WHERE id IN (1, 4) ORDER BY id;

--
-- session_replication_role = replica does not switch the trigger off
--
SET session_replication_role = replica;
UPDATE delivery_outbox SET delivery_state = 'pending' WHERE id = 1;
\echo :SQLSTATE
UPDATE delivery_outbox SET delivery_state = 'acked' WHERE id = 4;
\echo :SQLSTATE
RESET session_replication_role;
SELECT id, delivery_state FROM delivery_outbox WHERE id IN (1, 4) ORDER BY id;

--
-- INSERT in another state (what a dump restore does): accepted when the
-- bookkeeping agrees with the state, and never rewritten
--
INSERT INTO delivery_outbox (id, recipient, kind, tenant_id, payload,
                             delivery_state, delivery_attempts, created_at,
                             delivered_at, acked_at)
VALUES (1001, 'agent:r', 'work', NULL, '\x10', 'pending', 0,
        '2001-02-03 04:05:06+00', NULL, NULL),
       (1002, 'agent:r', 'work', 't1', '\x11', 'pending', 2,
        '2001-02-03 04:05:06+00', '2001-02-03 04:06:00+00', NULL),
       (1003, 'agent:r', 'work', NULL, '\x12', 'delivered', 3,
        '2001-02-03 04:05:06+00', '2001-02-03 04:07:00+00', NULL),
       (1004, 'agent:r', 'work', 't2', '\x13', 'acked', 1,
        '2001-02-03 04:05:06+00', '2001-02-03 04:08:00+00',
        '2001-02-03 04:09:00+00');
COPY delivery_outbox (id, recipient, kind, tenant_id, payload, delivery_state, delivery_attempts, created_at, delivered_at, acked_at) FROM stdin;
1005	agent:r	work	\N	\\x14	acked	4	2001-02-03 04:05:06+00	2001-02-03 04:10:00+00	2001-02-03 04:11:00+00
1006	agent:r	work	\N	\\x15	delivered	1	2001-02-03 04:05:06+00	2001-02-03 04:12:00+00	\N
\.
SET TIME ZONE 'UTC';
SELECT id, recipient, kind, tenant_id, payload, delivery_state,
       delivery_attempts, created_at, delivered_at, acked_at
  FROM delivery_outbox WHERE id > 1000 ORDER BY id;
RESET TIME ZONE;
-- restored rows follow the state machine like any other
UPDATE delivery_outbox SET delivery_state = 'pending' WHERE id = 1004;
\echo :SQLSTATE
UPDATE delivery_outbox SET delivery_state = 'delivered' WHERE id = 1002;
UPDATE delivery_outbox SET delivery_state = 'acked' WHERE id = 1003;
SELECT id, delivery_state, delivery_attempts,
       delivered_at > '2002-01-01' AS new_delivered_at,
       acked_at > '2002-01-01' AS new_acked_at
  FROM delivery_outbox WHERE id IN (1002, 1003) ORDER BY id;

-- inconsistent rows are rejected, with what is wrong
INSERT INTO delivery_outbox (id, recipient, kind, payload, delivery_state,
                             delivery_attempts, created_at, delivered_at)
VALUES (1101, 'agent:r', 'work', '\x20', 'delivered', 1,
        '2001-02-03 04:05:06+00', NULL);
\echo :SQLSTATE
INSERT INTO delivery_outbox (id, recipient, kind, payload, delivery_state,
                             delivery_attempts, created_at, delivered_at)
VALUES (1102, 'agent:r', 'work', '\x21', 'delivered', 0,
        '2001-02-03 04:05:06+00', '2001-02-03 04:06:00+00');
\echo :SQLSTATE
INSERT INTO delivery_outbox (id, recipient, kind, payload, delivery_state,
                             delivery_attempts, created_at, delivered_at,
                             acked_at)
VALUES (1103, 'agent:r', 'work', '\x22', 'delivered', 1,
        '2001-02-03 04:05:06+00', '2001-02-03 04:06:00+00',
        '2001-02-03 04:07:00+00');
\echo :SQLSTATE
INSERT INTO delivery_outbox (id, recipient, kind, payload, delivery_state,
                             delivery_attempts, created_at, delivered_at,
                             acked_at)
VALUES (1104, 'agent:r', 'work', '\x23', 'acked', 1,
        '2001-02-03 04:05:06+00', '2001-02-03 04:06:00+00', NULL);
\echo :SQLSTATE
INSERT INTO delivery_outbox (id, recipient, kind, payload, delivery_state,
                             created_at, acked_at)
VALUES (1105, 'agent:r', 'work', '\x24', 'pending',
        '2001-02-03 04:05:06+00', '2001-02-03 04:07:00+00');
\echo :SQLSTATE
INSERT INTO delivery_outbox (id, recipient, kind, payload, delivery_state,
                             delivery_attempts, created_at, delivered_at)
VALUES (1106, 'agent:r', 'work', '\x25', 'pending', 0,
        '2001-02-03 04:05:06+00', '2001-02-03 04:06:00+00');
\echo :SQLSTATE
INSERT INTO delivery_outbox (id, recipient, kind, payload, delivery_state,
                             delivery_attempts, created_at)
VALUES (1107, 'agent:r', 'work', '\x26', 'pending', 1,
        '2001-02-03 04:05:06+00');
\echo :SQLSTATE
-- a plain INSERT cannot smuggle bookkeeping in either
INSERT INTO delivery_outbox (recipient, kind, payload, acked_at)
VALUES ('agent:r', 'work', '\x27', '2001-02-03 04:07:00+00');
\echo :SQLSTATE
COPY delivery_outbox (id, recipient, kind, payload, delivery_state, delivery_attempts, created_at, delivered_at, acked_at) FROM stdin;
1108	agent:r	work	\\x28	acked	1	2001-02-03 04:05:06+00	2001-02-03 04:06:00+00	\N
\.
-- psql sets no :SQLSTATE after COPY: the same again, code only
\set VERBOSITY sqlstate
COPY delivery_outbox (id, recipient, kind, payload, delivery_state, delivery_attempts, created_at, delivered_at, acked_at) FROM stdin;
1108	agent:r	work	\\x28	acked	1	2001-02-03 04:05:06+00	2001-02-03 04:06:00+00	\N
\.
\set VERBOSITY default
SELECT count(*) FROM delivery_outbox WHERE id > 1100;

--
-- The trigger function misused
--
-- called directly, not as a trigger
SELECT outbox_state_guard();
\echo :SQLSTATE
-- a scratch table with the outbox's columns (in another order)
CREATE TABLE scratch (
    acked_at timestamptz,
    delivered_at timestamptz,
    extra text,
    created_at timestamptz NOT NULL DEFAULT '2001-02-03 04:05:06+00',
    delivery_attempts integer NOT NULL DEFAULT 0,
    delivery_state text NOT NULL DEFAULT 'pending',
    payload bytea NOT NULL,
    tenant_id text,
    kind text NOT NULL,
    recipient text NOT NULL,
    id bigint PRIMARY KEY
);
-- AFTER ROW
CREATE TRIGGER guard AFTER INSERT OR UPDATE ON scratch
    FOR EACH ROW EXECUTE FUNCTION outbox_state_guard();
INSERT INTO scratch (id, recipient, kind, payload) VALUES (1, 'x', 'k', '\x00');
\echo :SQLSTATE
DROP TRIGGER guard ON scratch;
-- BEFORE ... FOR EACH STATEMENT
CREATE TRIGGER guard BEFORE INSERT OR UPDATE ON scratch
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_state_guard();
INSERT INTO scratch (id, recipient, kind, payload) VALUES (1, 'x', 'k', '\x00');
\echo :SQLSTATE
DROP TRIGGER guard ON scratch;
-- BEFORE DELETE is accepted (deletes are counted, never refused): the row
-- goes, and nothing else changes
CREATE TRIGGER guard BEFORE DELETE ON scratch
    FOR EACH ROW EXECUTE FUNCTION outbox_state_guard();
INSERT INTO scratch (id, recipient, kind, payload) VALUES (1, 'x', 'k', '\x00');
DELETE FROM scratch;
\echo :SQLSTATE
SELECT count(*) AS scratch_rows FROM scratch;
INSERT INTO scratch (id, recipient, kind, payload) VALUES (1, 'x', 'k', '\x00');
DROP TRIGGER guard ON scratch;
-- used as intended, on a table laid out differently, it guards that table
CREATE TRIGGER guard BEFORE INSERT OR UPDATE ON scratch
    FOR EACH ROW EXECUTE FUNCTION outbox_state_guard();
UPDATE scratch SET delivery_state = 'acked';
\echo :SQLSTATE
UPDATE scratch SET delivery_state = 'delivered', delivery_attempts = 5,
                   extra = 'free';
SELECT id, delivery_state, delivery_attempts, extra,
       delivered_at IS NOT NULL AS has_delivered_at, acked_at IS NULL AS no_acked_at
  FROM scratch;
UPDATE scratch SET kind = 'other';
\echo :SQLSTATE
-- and the outbox's own trigger still sees the outbox's layout
UPDATE delivery_outbox SET delivery_state = 'delivered' WHERE id = 4;
UPDATE delivery_outbox SET payload = '\x98' WHERE id = 4;
\echo :SQLSTATE
SELECT * FROM outbox_rows WHERE id = 4;
-- a table missing a column
CREATE TABLE scratch2 (
    id bigint PRIMARY KEY, recipient text NOT NULL, kind text NOT NULL,
    tenant_id text, payload bytea NOT NULL,
    delivery_state text NOT NULL DEFAULT 'pending',
    delivery_attempts integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT '2001-02-03 04:05:06+00',
    delivered_at timestamptz
);
CREATE TRIGGER guard BEFORE INSERT OR UPDATE ON scratch2
    FOR EACH ROW EXECUTE FUNCTION outbox_state_guard();
INSERT INTO scratch2 (id, recipient, kind, payload) VALUES (1, 'x', 'k', '\x00');
\echo :SQLSTATE
SELECT count(*) FROM scratch2;
-- a column of the wrong type
ALTER TABLE scratch2 ADD COLUMN acked_at text;
INSERT INTO scratch2 (id, recipient, kind, payload) VALUES (1, 'x', 'k', '\x00');
\echo :SQLSTATE
-- fixed, it works
ALTER TABLE scratch2 DROP COLUMN acked_at;
ALTER TABLE scratch2 ADD COLUMN acked_at timestamptz;
INSERT INTO scratch2 (id, recipient, kind, payload) VALUES (1, 'x', 'k', '\x00');
SELECT id, delivery_state, delivery_attempts FROM scratch2;
DROP TABLE scratch, scratch2;

DROP VIEW outbox_rows;
DROP EXTENSION delivery_outbox;
