--
-- read_only.sql: in a read-only transaction (as on a standby, see
-- t/005_standby.pl) every function that writes fails with 25006 and
-- changes nothing; the functions that only read work
--
\set VERBOSITY default
\set SHOW_CONTEXT never

CREATE EXTENSION delivery_outbox;
SELECT outbox_enqueue('agent:a', 'work', '\x01');
SELECT outbox_enqueue('agent:a', 'work', '\x02', 't1');
SELECT outbox_enqueue('agent:b', 'work', '\x03');
SELECT id FROM outbox_claim(1, 'agent:b');
CREATE TEMP TABLE before AS SELECT o::text AS row FROM delivery_outbox o;

-- each statement in its own READ ONLY transaction; the message names the
-- statement the function runs internally, so only the SQLSTATE is pinned
SET default_transaction_read_only = on;
\set VERBOSITY sqlstate
SELECT outbox_enqueue('agent:a', 'work', '\x04');
SELECT id FROM outbox_claim();
SELECT id FROM outbox_claim(1, 'agent:a');
SELECT id FROM outbox_claim(1, 'agent:a', 't1');
SELECT id FROM outbox_claim(1, NULL, 't1');
SELECT outbox_ack(3);
SELECT outbox_ack(3, 'agent:b');
SELECT outbox_ack(ARRAY[3]::bigint[]);
SELECT outbox_release(ARRAY[3]::bigint[]);
SELECT outbox_reclaim('0 seconds');
SELECT outbox_reclaim_recipient('agent:b');
SELECT outbox_reassign('agent:a', 'agent:c');
SELECT outbox_purge('0 seconds');
INSERT INTO delivery_outbox (recipient, kind, payload) VALUES ('agent:a', 'work', '\x05');
UPDATE delivery_outbox SET delivery_state = 'delivered' WHERE id = 1;
\set VERBOSITY default
-- reading works
SELECT id, delivery_state FROM outbox_replay('agent:a');
SELECT pending, delivered, acked, open_recipients FROM outbox_stats();
RESET default_transaction_read_only;

-- an explicit READ ONLY transaction: the error aborts it, nothing written
BEGIN TRANSACTION READ ONLY;
SELECT outbox_enqueue('agent:a', 'work', '\x06');
ROLLBACK;

SELECT count(*) AS rows_changed
  FROM (SELECT row FROM before
        EXCEPT SELECT o::text FROM delivery_outbox o) d;
SELECT count(*) AS rows FROM delivery_outbox;
-- and the sequence did not move either (nextval is refused too)
SELECT outbox_enqueue('agent:a', 'work', '\x07');
DROP EXTENSION delivery_outbox;
