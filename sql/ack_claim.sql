--
-- ack_claim.sql: outbox_ack_claim (1.3), a relay's round in one call
--
-- It acks the ids of the last batch as outbox_ack(ids, recipient) would,
-- then claims as outbox_claim(max_rows, recipient, tenant_id) would, in the
-- caller's transaction: a rollback undoes both.  '{}' acks nothing (a
-- relay's first call).  Every bad argument is an error that acks nothing.
-- The ack comes first, so on an ordered outbox it frees the recipient's
-- next row for the same call's claim.  On an outbox whose retain_acked is
-- '0' every ack deletes the rows it acks.
--
CREATE EXTENSION delivery_outbox;

\set VERBOSITY default
\set SHOW_CONTEXT never

CREATE VIEW outbox_digest AS
SELECT coalesce(string_agg(format('%s:%s/%s', id, delivery_state,
                                  delivery_attempts), ' ' ORDER BY id),
                '') AS rows
  FROM delivery_outbox;

SELECT count(*) FROM outbox_enqueue_batch(
    ARRAY['agent:a', 'agent:b', 'agent:a', 'agent:b', 'agent:a', 'agent:c'],
    array_fill('work'::text, '{6}'), array_fill('\x01'::bytea, '{6}'),
    ARRAY[NULL, NULL, 't1', NULL, 't1', NULL]);

-- the first round: nothing to ack, two rows claimed, in id order
SELECT id, recipient, delivery_state, delivery_attempts
  FROM outbox_ack_claim('{}', 2);
-- the next: those two acked, the next two claimed, one statement
SELECT id, recipient, delivery_state FROM outbox_ack_claim('{1,2}', 2);
SELECT * FROM outbox_digest;
SELECT acked FROM outbox_stats();

-- a recipient's round: only its rows acked (row 4 is agent:b's, left
-- delivered) and claimed
SELECT id, recipient FROM outbox_ack_claim('{3,4}', 10, 'agent:a');
SELECT * FROM outbox_digest;
-- a tenant's: rows of the recipient and the tenant only
SELECT outbox_release('{5}', retry_after => '0');
SELECT id, recipient, tenant_id FROM outbox_ack_claim('{}', 10, 'agent:a', 't1');

-- a late ack of a reclaimed row (pending again) still acks it, through
-- delivered, as outbox_ack does; the claim then takes what is left
SELECT outbox_reclaim('0 seconds');
SELECT * FROM outbox_digest;
SELECT id FROM outbox_ack_claim('{4}', 1);
SELECT * FROM outbox_digest;

-- a rollback undoes the ack and the claim alike
BEGIN;
SELECT id FROM outbox_ack_claim('{5}', 10);
ROLLBACK;
SELECT * FROM outbox_digest;

-- ids of no row, and acked ones, ack nothing; the claim still runs
SELECT count(*) FROM outbox_ack_claim('{1,2,999}', 10);
SELECT * FROM outbox_digest;

--
-- bad arguments: an error, nothing acked
--
\set VERBOSITY sqlstate
SELECT * FROM outbox_ack_claim(NULL, 10);
SELECT * FROM outbox_ack_claim('{5,NULL}', 10);
SELECT * FROM outbox_ack_claim('{5}', 0);
SELECT * FROM outbox_ack_claim('{5}', NULL);
SELECT * FROM outbox_ack_claim('{5}', 10, '');
SELECT * FROM outbox_ack_claim('{5}', 10, outbox => 'pg_class');
SELECT * FROM outbox_ack_claim('{5}', 10, outbox => 0);
\set VERBOSITY default
SELECT * FROM outbox_ack_claim('{5}', 0);
SELECT * FROM outbox_ack_claim('{5}', 10, outbox => 'pg_class');
SELECT * FROM outbox_digest;

-- a role needs EXECUTE, and UPDATE on a tenant's outbox
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_ack_claim_relay;
RESET client_min_messages;
CREATE ROLE regress_ack_claim_relay;
CREATE SCHEMA regress_ack_claim;
SELECT outbox_create('regress_ack_claim');
SELECT outbox_enqueue('agent:t', 'work', '\x02',
                      outbox => 'regress_ack_claim.delivery_outbox');
GRANT USAGE ON SCHEMA regress_ack_claim TO regress_ack_claim_relay;
SET ROLE regress_ack_claim_relay;
\set VERBOSITY sqlstate
SELECT * FROM outbox_ack_claim('{}', 10, outbox => 'regress_ack_claim.delivery_outbox');
RESET ROLE;
GRANT EXECUTE ON FUNCTION outbox_ack_claim(bigint[], integer, text, text, regclass)
   TO regress_ack_claim_relay;
SET ROLE regress_ack_claim_relay;
SELECT * FROM outbox_ack_claim('{}', 10, outbox => 'regress_ack_claim.delivery_outbox');
RESET ROLE;
GRANT UPDATE ON regress_ack_claim.delivery_outbox TO regress_ack_claim_relay;
SET ROLE regress_ack_claim_relay;
\set VERBOSITY default
SELECT id, recipient, delivery_state
  FROM outbox_ack_claim('{}', 10, outbox => 'regress_ack_claim.delivery_outbox');
SELECT id, recipient, delivery_state
  FROM outbox_ack_claim('{1}', 10, outbox => 'regress_ack_claim.delivery_outbox');
RESET ROLE;
SELECT id, delivery_state FROM regress_ack_claim.delivery_outbox;

--
-- an ordered outbox: the ack of a recipient's head frees its next row for
-- the same call's claim
--
SELECT outbox_configure('regress_ack_claim.delivery_outbox', ordered => true);
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:o', 'agent:o', 'agent:o'],
    array_fill('work'::text, '{3}'), array_fill('\x03'::bytea, '{3}'),
    outbox => 'regress_ack_claim.delivery_outbox');
-- one row a round: the head, then nothing while it is out, then the
-- next with the head's ack
SELECT id FROM outbox_ack_claim('{}', 1, outbox => 'regress_ack_claim.delivery_outbox');
SELECT id FROM outbox_ack_claim('{}', 1, outbox => 'regress_ack_claim.delivery_outbox');
SELECT id FROM outbox_ack_claim('{2}', 1, outbox => 'regress_ack_claim.delivery_outbox');
SELECT id FROM outbox_ack_claim('{3}', 1, outbox => 'regress_ack_claim.delivery_outbox');
SELECT id, delivery_state FROM regress_ack_claim.delivery_outbox ORDER BY id;

--
-- An outbox that keeps no acked row (its own retain_acked is '0'): an ack
-- deletes the rows instead of writing them acked, whichever call acks
-- (outbox_ack of one id or many, outbox_ack_claim, a late ack of a
-- reclaimed row); only delivered rows, only the recipient's; the guard
-- sees the DELETE.  A dedup_key is free again once its row is acked.
-- Another retain_acked, or none (the GUC), keeps acked rows as before.
--
SELECT outbox_create('regress_ack_claim', 'gone');
SELECT outbox_configure('regress_ack_claim.gone', retain_acked => '0');
SELECT count(*) FROM outbox_enqueue_batch(
    ARRAY['agent:a', 'agent:a', 'agent:b', 'agent:a', 'agent:a', 'agent:a'],
    array_fill('work'::text, '{6}'), array_fill('\x04'::bytea, '{6}'),
    dedup_keys => ARRAY['k1', NULL, NULL, NULL, NULL, NULL],
    outbox => 'regress_ack_claim.gone');
SELECT id FROM outbox_ack_claim('{}', 4, outbox => 'regress_ack_claim.gone');
-- one id; then many, the recipient's only (3 is agent:b's, left), 5 too,
-- pending: a late ack, as outbox_ack's
SELECT outbox_ack(1, outbox => 'regress_ack_claim.gone');
SELECT outbox_ack('{2,3,5}'::bigint[], 'agent:a', outbox => 'regress_ack_claim.gone');
SELECT id, delivery_state FROM regress_ack_claim.gone ORDER BY id;
SELECT pending, delivered, acked FROM outbox_stats('regress_ack_claim.gone');
-- the key of the deleted row 1 is free
SELECT outbox_enqueue('agent:a', 'work', '\x05', dedup_key => 'k1',
                      outbox => 'regress_ack_claim.gone');
-- a reclaimed row acked late goes too; ack_claim deletes and claims
SELECT outbox_reclaim('0 seconds', outbox => 'regress_ack_claim.gone');
SELECT id FROM outbox_ack_claim('{3,4}', 2, outbox => 'regress_ack_claim.gone');
SELECT id, delivery_state, delivery_attempts FROM regress_ack_claim.gone ORDER BY id;
-- a rollback keeps them
BEGIN;
SELECT outbox_ack('{5,6}'::bigint[], outbox => 'regress_ack_claim.gone');
ROLLBACK;
SELECT id, delivery_state FROM regress_ack_claim.gone ORDER BY id;
-- a hand-written UPDATE still acks (the purge takes the row later)
UPDATE regress_ack_claim.gone SET delivery_state = 'acked' WHERE id = 6;
-- retain_acked '1 hour' keeps acked rows; reset to the GUC keeps them too
SELECT outbox_configure('regress_ack_claim.gone', retain_acked => '1 hour');
SELECT outbox_ack(7, outbox => 'regress_ack_claim.gone');
SELECT outbox_configure('regress_ack_claim.gone', retain_acked => '-1 second');
SELECT outbox_enqueue('agent:a', 'work', '\x05', outbox => 'regress_ack_claim.gone');
SELECT id FROM outbox_ack_claim('{}', 10, outbox => 'regress_ack_claim.gone');
SELECT id FROM outbox_ack_claim('{8}', 10, outbox => 'regress_ack_claim.gone');
SELECT id, delivery_state FROM regress_ack_claim.gone ORDER BY id;
-- the guard still judges every write: acked rows never change
\set VERBOSITY sqlstate
UPDATE regress_ack_claim.gone SET delivery_state = 'pending' WHERE id = 6;
\set VERBOSITY default

-- an ordered outbox that keeps no acked row: the head's ack (a delete)
-- frees the group's next row
SELECT outbox_configure('regress_ack_claim.delivery_outbox', retain_acked => '0');
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:p', 'agent:p'],
    array_fill('work'::text, '{2}'), array_fill('\x06'::bytea, '{2}'),
    outbox => 'regress_ack_claim.delivery_outbox');
SELECT id FROM outbox_ack_claim('{4}', 1, outbox => 'regress_ack_claim.delivery_outbox');
SELECT id FROM outbox_ack_claim('{}', 1, outbox => 'regress_ack_claim.delivery_outbox');
SELECT id FROM outbox_ack_claim('{5}', 1, outbox => 'regress_ack_claim.delivery_outbox');
SELECT id FROM outbox_ack_claim('{6}', 1, outbox => 'regress_ack_claim.delivery_outbox');
SELECT id, delivery_state FROM regress_ack_claim.delivery_outbox ORDER BY id;

-- a partitioned one: the rows go from their partitions
SELECT outbox_create('regress_ack_claim', 'parted', partition_rows => 2);
SELECT outbox_configure('regress_ack_claim.parted', retain_acked => '0');
SELECT count(*) FROM outbox_enqueue_batch(array_fill('agent:q'::text, '{5}'),
    array_fill('work'::text, '{5}'), array_fill('\x07'::bytea, '{5}'),
    outbox => 'regress_ack_claim.parted');
SELECT id FROM outbox_ack_claim('{}', 3, outbox => 'regress_ack_claim.parted');
SELECT id FROM outbox_ack_claim('{1,2,3}', 3, outbox => 'regress_ack_claim.parted');
SELECT tableoid::regclass AS partition, id, delivery_state
  FROM regress_ack_claim.parted ORDER BY id;

-- An ack of several ids without a recipient acks them in one statement in
-- a subtransaction when all are delivered rows; a transaction keeps 16 such
-- subtransactions at most (each holds a transaction id until the end, and
-- past 64 every snapshot must look them up in pg_subtrans), then acks by
-- the lock-then-ack path, in the transaction itself.  Seen from the rows'
-- xmin: 20 acks of 2 rows in one transaction write them with 17 distinct
-- transaction ids, 16 subtransactions of 2 rows and the transaction's own
-- 8 rows.  And one that falls short (a row pending) is rolled back whole:
-- its rows are acked by the transaction itself.
SELECT outbox_create('regress_ack_claim', 'subx');
SELECT count(*) FROM outbox_enqueue_batch(array_fill('agent:s'::text, '{44}'),
    array_fill('work'::text, '{44}'), array_fill('\x05'::bytea, '{44}'),
    outbox => 'regress_ack_claim.subx');
SELECT count(*) FROM outbox_claim(42, outbox => 'regress_ack_claim.subx');
BEGIN;
DO $$
BEGIN
    FOR i IN 0..19 LOOP
        PERFORM outbox_ack(ARRAY[2 * i + 1, 2 * i + 2]::bigint[],
                           outbox => 'regress_ack_claim.subx');
    END LOOP;
END
$$;
SELECT rows, count(*) AS transaction_ids
  FROM (SELECT xmin, count(*) AS rows FROM regress_ack_claim.subx
         WHERE id <= 40 GROUP BY xmin) x
 GROUP BY rows ORDER BY rows;
COMMIT;
BEGIN;
SELECT outbox_ack(ARRAY[41, 42, 43]::bigint[], outbox => 'regress_ack_claim.subx') AS acked;
SELECT count(DISTINCT xmin::text) AS transaction_ids,
       bool_and(xmin::text = (pg_current_xact_id()::text::numeric % 4294967296)::text) AS the_transactions_own
  FROM regress_ack_claim.subx WHERE id BETWEEN 41 AND 43;
COMMIT;
SELECT delivery_state, delivery_attempts, count(*)
  FROM regress_ack_claim.subx GROUP BY 1, 2 ORDER BY 1, 2;
-- An error in that statement (the table's own trigger refusing the ack)
-- closes its subtransaction before it reaches the caller: a PL/pgSQL
-- EXCEPTION block catching it rolls back its own, and the transaction goes
-- on, the rows as they were.
CREATE FUNCTION regress_ack_claim.refuse() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RAISE EXCEPTION 'refused: %', NEW.id USING ERRCODE = 'P0099'; END $$;
CREATE TRIGGER refuse BEFORE UPDATE ON regress_ack_claim.subx
    FOR EACH ROW WHEN (NEW.delivery_state = 'acked') EXECUTE FUNCTION regress_ack_claim.refuse();
SELECT count(*) FROM outbox_enqueue_batch(array_fill('agent:s'::text, '{2}'),
    array_fill('work'::text, '{2}'), array_fill('\x06'::bytea, '{2}'),
    outbox => 'regress_ack_claim.subx');
SELECT count(*) FROM outbox_claim(3, outbox => 'regress_ack_claim.subx');
BEGIN;
SAVEPOINT before_ack;
DO $$
BEGIN
    PERFORM outbox_ack(ARRAY[46, 45]::bigint[], outbox => 'regress_ack_claim.subx');
EXCEPTION WHEN SQLSTATE 'P0099' THEN
    RAISE NOTICE 'caught: %', SQLERRM;
END
$$;
SELECT id, delivery_state FROM regress_ack_claim.subx WHERE id >= 44 ORDER BY id;
ROLLBACK TO before_ack;
RELEASE before_ack;
SELECT count(*) AS still_in_the_transaction FROM regress_ack_claim.subx;
COMMIT;
DROP TRIGGER refuse ON regress_ack_claim.subx;

SET client_min_messages = warning;
DROP SCHEMA regress_ack_claim CASCADE;
RESET client_min_messages;
REVOKE ALL ON FUNCTION outbox_ack_claim(bigint[], integer, text, text, regclass)
  FROM regress_ack_claim_relay;
DROP ROLE regress_ack_claim_relay;
DROP VIEW outbox_digest;
DROP EXTENSION delivery_outbox;
