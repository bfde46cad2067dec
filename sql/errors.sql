--
-- errors.sql: every bad input is a clear error with a precise SQLSTATE, and
-- nothing is written
--
-- Each error shows its message (and DETAIL/HINT) and then its SQLSTATE
-- (psql's :SQLSTATE, 00000 had the statement succeeded); the
-- digest after it shows the table unchanged.
--
CREATE EXTENSION delivery_outbox;

\set VERBOSITY default
\set SHOW_CONTEXT never

-- One line per row: id:state/attempts.
CREATE VIEW outbox_digest AS
SELECT count(*) AS n,
       coalesce(string_agg(format('%s:%s/%s', id, delivery_state,
                                  delivery_attempts), ' ' ORDER BY id),
                '') AS rows
  FROM delivery_outbox;

-- a row in each state: 1 acked, 2 delivered, 3 pending
SELECT outbox_enqueue('agent:a', 'work', '\x01');
SELECT outbox_enqueue('agent:a', 'work', '\x02');
SELECT outbox_enqueue('agent:b', 'work', '\x03');
SELECT id FROM outbox_claim(2);
SELECT outbox_ack(1);
SELECT * FROM outbox_digest;

--
-- outbox_enqueue: NULL or empty recipient and kind, NULL payload
--
SELECT outbox_enqueue(NULL, 'work', '\x01');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_enqueue('', 'work', '\x01');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_enqueue('agent:a', NULL, '\x01');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_enqueue('agent:a', '', '\x01');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_enqueue('agent:a', 'work', NULL);
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_enqueue('agent:a', 'work', NULL, 't1');
\echo :SQLSTATE
SELECT * FROM outbox_digest;

--
-- The same through a plain INSERT: the table's NOT NULL (23502) and CHECK
-- (23514) constraints.  created_at is given so the failing row is stable.
--
INSERT INTO delivery_outbox (recipient, kind, payload, created_at)
VALUES (NULL, 'work', '\x01', '2000-01-01 00:00:00+00');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
INSERT INTO delivery_outbox (recipient, kind, payload, created_at)
VALUES ('', 'work', '\x01', '2000-01-01 00:00:00+00');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
INSERT INTO delivery_outbox (recipient, kind, payload, created_at)
VALUES ('agent:a', NULL, '\x01', '2000-01-01 00:00:00+00');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
INSERT INTO delivery_outbox (recipient, kind, payload, created_at)
VALUES ('agent:a', '', '\x01', '2000-01-01 00:00:00+00');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
INSERT INTO delivery_outbox (recipient, kind, payload, created_at)
VALUES ('agent:a', 'work', NULL, '2000-01-01 00:00:00+00');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
INSERT INTO delivery_outbox (recipient, kind, payload, delivery_state,
                             created_at)
VALUES ('agent:a', 'work', '\x01', NULL, '2000-01-01 00:00:00+00');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
INSERT INTO delivery_outbox (recipient, kind, payload, delivery_attempts,
                             created_at)
VALUES ('agent:a', 'work', '\x01', -1, '2000-01-01 00:00:00+00');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
-- one bad row fails the whole statement
INSERT INTO delivery_outbox (recipient, kind, payload, created_at)
VALUES ('agent:m', 'work', '\x01', '2000-01-01 00:00:00+00'),
       ('agent:m', '', '\x02', '2000-01-01 00:00:00+00');
\echo :SQLSTATE
SELECT * FROM outbox_digest;

--
-- max_rows: NULL, 0 and negative
--
SELECT * FROM outbox_claim(0);
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT * FROM outbox_claim(-1);
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT * FROM outbox_claim(NULL);
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT * FROM outbox_claim(0, 'agent:b', 't1');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT * FROM outbox_replay('agent:b', 0, 0);
\echo :SQLSTATE
SELECT * FROM outbox_replay('agent:b', 0, -1);
\echo :SQLSTATE
SELECT * FROM outbox_replay('agent:b', 0, NULL);
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_reclaim('0 seconds', 0);
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_reclaim('0 seconds', -1);
\echo :SQLSTATE
SELECT * FROM outbox_digest;
-- (a NULL max_rows is outbox_reclaim's declared default, "no limit"; see api)

--
-- Empty recipient filters, and the other required arguments
--
SELECT * FROM outbox_claim(10, '');
\echo :SQLSTATE
SELECT * FROM outbox_claim(10, '', 't1');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT * FROM outbox_replay(NULL);
\echo :SQLSTATE
SELECT * FROM outbox_replay('');
\echo :SQLSTATE
SELECT * FROM outbox_replay('agent:b', NULL);
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_reclaim_recipient(NULL);
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_reclaim_recipient(NULL, 't1');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_reclaim_recipient('');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_reassign(NULL, 'agent:c');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_reassign('agent:a', NULL);
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_reassign('', 'agent:c');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_reassign('agent:a', '');
\echo :SQLSTATE
SELECT * FROM outbox_digest;

--
-- Intervals: NULL and negative
--
SELECT outbox_reclaim(NULL);
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_reclaim(NULL, 10);
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_reclaim('-1 second');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_reclaim('1 day -25 hours');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_purge(NULL);
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_purge('-1 second');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_purge('-1 month');
\echo :SQLSTATE
SELECT * FROM outbox_digest;

--
-- ids: a NULL id, a NULL array, an array holding a NULL, an empty recipient
-- (row 2 is delivered and must stay so)
--
SELECT outbox_ack(NULL::bigint);
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_ack(NULL::bigint, 'agent:a');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_ack(2, '');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_ack(NULL::bigint[]);
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_ack(ARRAY[2, NULL]::bigint[]);
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_ack(ARRAY[NULL]::bigint[], 'agent:a');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_ack(ARRAY[2]::bigint[], '');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_release(NULL);
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_release(ARRAY[2, NULL]::bigint[]);
\echo :SQLSTATE
SELECT * FROM outbox_digest;
SELECT outbox_release('{{2},{NULL}}'::bigint[]);
\echo :SQLSTATE
SELECT * FROM outbox_digest;

--
-- Payload size: delivery_outbox.max_payload_size, SQLSTATE 54000, for every
-- INSERT path (enqueue, INSERT, INSERT ... SELECT of a TOASTed value, COPY)
--
SET delivery_outbox.max_payload_size = '16B';
SELECT outbox_enqueue('agent:big', 'work', '\x000102030405060708090a0b0c0d0e0f') AS ok16 \gset
SELECT id - :ok16 AS n, length(payload) FROM delivery_outbox
 WHERE recipient = 'agent:big';
DELETE FROM delivery_outbox WHERE recipient = 'agent:big';
SELECT * FROM outbox_digest;
SELECT outbox_enqueue('agent:big', 'work', '\x000102030405060708090a0b0c0d0e0f10');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
INSERT INTO delivery_outbox (recipient, kind, payload)
VALUES ('agent:big', 'work', '\x000102030405060708090a0b0c0d0e0f10');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
COPY delivery_outbox (recipient, kind, payload) FROM stdin;
agent:big	work	\\x000102030405060708090a0b0c0d0e0f10
\.
-- psql sets no :SQLSTATE after COPY: the same again, code only
\set VERBOSITY sqlstate
COPY delivery_outbox (recipient, kind, payload) FROM stdin;
agent:big	work	\\x000102030405060708090a0b0c0d0e0f10
\.
\set VERBOSITY default
SELECT * FROM outbox_digest;
SET delivery_outbox.max_payload_size = 0;
SELECT outbox_enqueue('agent:big', 'work', '\x00');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
RESET delivery_outbox.max_payload_size;
-- the default, 1MB: exactly 1MB is accepted, one byte more is not, whether
-- the value arrives plain or compressed and TOASTed from another table
CREATE TEMP TABLE big (p bytea);
INSERT INTO big VALUES (decode(repeat('ab', 1048576), 'hex')),
                       (decode(repeat('ab', 1048577), 'hex'));
SELECT length(p), pg_column_size(p) < 100000 AS stored_compressed
  FROM big ORDER BY 1;
SELECT outbox_enqueue('agent:big', 'work', p) > 0 AS enqueued
  FROM big WHERE length(p) = 1048576;
SELECT outbox_enqueue('agent:big', 'work', p)
  FROM big WHERE length(p) = 1048577;
\echo :SQLSTATE
INSERT INTO delivery_outbox (recipient, kind, payload)
SELECT 'agent:big', 'work', p FROM big WHERE length(p) = 1048577;
\echo :SQLSTATE
SELECT recipient, length(payload) FROM delivery_outbox
 WHERE recipient = 'agent:big';
DELETE FROM delivery_outbox WHERE recipient = 'agent:big';
DROP TABLE big;
SELECT * FROM outbox_digest;

--
-- An unknown state string, by INSERT and by UPDATE
--
INSERT INTO delivery_outbox (recipient, kind, payload, delivery_state)
VALUES ('agent:a', 'work', '\x01', 'bogus');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
INSERT INTO delivery_outbox (recipient, kind, payload, delivery_state)
VALUES ('agent:a', 'work', '\x01', 'Pending');
\echo :SQLSTATE
SELECT * FROM outbox_digest;
UPDATE delivery_outbox SET delivery_state = 'bogus' WHERE id = 3;
\echo :SQLSTATE
SELECT * FROM outbox_digest;
UPDATE delivery_outbox SET delivery_state = 'delivered ' WHERE id = 2;
\echo :SQLSTATE
SELECT * FROM outbox_digest;
UPDATE delivery_outbox SET delivery_state = 'bogus' WHERE id = 1;
\echo :SQLSTATE
SELECT * FROM outbox_digest;
-- NULL is the NOT NULL constraint's (its failing row holds a timestamp)
\set VERBOSITY terse
UPDATE delivery_outbox SET delivery_state = NULL WHERE id = 3;
\echo :SQLSTATE
\set VERBOSITY default
SELECT * FROM outbox_digest;

--
-- In a transaction: the error leaves the earlier work as it was, for the
-- caller to keep (ROLLBACK TO SAVEPOINT) or not
--
BEGIN;
SELECT outbox_enqueue('agent:tx', 'work', '\x10') AS tx1 \gset
SAVEPOINT s1;
SELECT outbox_enqueue('agent:tx', '', '\x11');
\echo :SQLSTATE
ROLLBACK TO SAVEPOINT s1;
SELECT id - :tx1 AS n, recipient, delivery_state FROM delivery_outbox
 WHERE recipient = 'agent:tx';
SELECT id - :tx1 AS n, delivery_state, delivery_attempts
  FROM outbox_claim(10, 'agent:tx');
SAVEPOINT s2;
SELECT outbox_ack(ARRAY[:tx1, NULL]::bigint[]);
\echo :SQLSTATE
ROLLBACK TO SAVEPOINT s2;
SAVEPOINT s3;
SELECT outbox_ack(:tx1);
UPDATE delivery_outbox SET delivery_state = 'pending' WHERE id = :tx1;
\echo :SQLSTATE
ROLLBACK TO SAVEPOINT s3;
-- the claim before s2 stands; the ack after s3 is undone
SELECT id - :tx1 AS n, delivery_state, delivery_attempts,
       acked_at IS NULL AS no_acked_at
  FROM delivery_outbox WHERE recipient = 'agent:tx';
COMMIT;
SELECT * FROM outbox_digest;
-- without a savepoint the whole transaction goes
BEGIN;
SELECT outbox_enqueue('agent:tx2', 'work', '\x12') > 0 AS enqueued;
SELECT outbox_enqueue('agent:tx2', 'work', NULL);
\echo :SQLSTATE
COMMIT;
SELECT count(*) FROM delivery_outbox WHERE recipient = 'agent:tx2';
SELECT * FROM outbox_digest;

DROP VIEW outbox_digest;
DROP EXTENSION delivery_outbox;
