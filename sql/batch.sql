--
-- batch.sql: outbox_enqueue_batch (1.1)
--
-- Position i of each array is one row; the ids come back in input order;
-- every element is validated like outbox_enqueue's arguments, the trigger
-- judges every row (payload size included), and a bad batch is an error
-- with a precise SQLSTATE that writes nothing.  Whether each row wakes
-- relays is for specs/iso_notify_modes.spec.
--
CREATE EXTENSION delivery_outbox;

\set VERBOSITY default
\set SHOW_CONTEXT never

\i sql/include/outbox_rows.sql
-- One line for the whole table: count, and id:state/attempts per row.
CREATE VIEW outbox_digest AS
SELECT count(*) AS n,
       coalesce(string_agg(format('%s:%s/%s', id, delivery_state,
                                  delivery_attempts), ' ' ORDER BY id),
                '') AS rows
  FROM delivery_outbox;

--
-- The normal path
--
-- three rows, ids in input order, each row as given, pending, no tenant
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:a', 'agent:b', 'agent:c'],
                                   ARRAY['work', 'execution_event', 'work'],
                                   ARRAY['\x01', '\x02', '\x03']::bytea[]);
SELECT * FROM outbox_rows;
SELECT bool_and(delivered_at IS NULL AND acked_at IS NULL) AS no_delivery,
       count(DISTINCT created_at) = 1 AS same_created_at
  FROM delivery_outbox;

-- tenant_ids, with a NULL element (a global row) among them
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:a', 'agent:b'],
                                   ARRAY['work', 'work'],
                                   ARRAY['\x04', '\x05']::bytea[],
                                   ARRAY['tenant-1', NULL]);
SELECT * FROM outbox_rows WHERE id > 3;

-- named notation; tenant_ids => NULL is "no tenant for any row"
SELECT * FROM outbox_enqueue_batch(payloads => ARRAY['\x06']::bytea[],
                                   kinds => ARRAY['work'],
                                   recipients => ARRAY['agent:d'],
                                   tenant_ids => NULL);
SELECT * FROM outbox_rows WHERE id > 5;

-- empty arrays: no rows, nothing written
SELECT count(*) FROM outbox_enqueue_batch('{}', '{}', '{}');
SELECT count(*) FROM outbox_enqueue_batch('{}', '{}', '{}', '{}');
SELECT * FROM outbox_digest;

-- an empty payload is a payload (as for outbox_enqueue)
SELECT outbox_enqueue('agent:e', 'work', '');
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:e'], ARRAY['work'],
                                   ARRAY['']::bytea[]);

-- arrays that do not start at 1 are read by position
SELECT * FROM outbox_enqueue_batch('[0:1]={agent:f,agent:g}'::text[],
                                   '[5:6]={work,work}'::text[],
                                   ARRAY['\x07', '\x08']::bytea[]);
SELECT * FROM outbox_rows WHERE id > 6;

-- duplicates are separate rows
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:h', 'agent:h'],
                                   ARRAY['work', 'work'],
                                   ARRAY['\x09', '\x09']::bytea[]);
SELECT * FROM outbox_rows WHERE id > 10;

-- A larger batch: the i-th id returned is the row made from position i,
-- and the ids ascend.
CREATE TABLE batch_in AS
SELECT g AS pos, 'agent:' || (g % 7) AS recipient, 'kind-' || (g % 3) AS kind,
       int4send(g) AS payload,
       CASE WHEN g % 2 = 0 THEN 'tenant-' || g END AS tenant_id
  FROM generate_series(1, 1000) g;
CREATE TABLE batch_out AS
SELECT b.id, b.pos
  FROM outbox_enqueue_batch(
         (SELECT array_agg(recipient ORDER BY pos) FROM batch_in),
         (SELECT array_agg(kind ORDER BY pos) FROM batch_in),
         (SELECT array_agg(payload ORDER BY pos) FROM batch_in),
         (SELECT array_agg(tenant_id ORDER BY pos) FROM batch_in))
       WITH ORDINALITY AS b(id, pos);
SELECT count(*) AS returned,
       count(*) FILTER (WHERE o.recipient = i.recipient AND o.kind = i.kind
                          AND o.payload = i.payload
                          AND o.tenant_id IS NOT DISTINCT FROM i.tenant_id
                          AND o.delivery_state = 'pending'
                          AND o.delivery_attempts = 0) AS rows_match_position
  FROM batch_out r
  JOIN batch_in i USING (pos)
  JOIN delivery_outbox o ON o.id = r.id;
SELECT bool_and(id > prev) AS ids_ascend_in_input_order
  FROM (SELECT id, lag(id, 1, 0::bigint) OVER (ORDER BY pos) AS prev
          FROM batch_out) s;
DELETE FROM delivery_outbox WHERE id IN (SELECT id FROM batch_out);
DROP TABLE batch_in, batch_out;

-- A batch whose ids outgrow the memory of the statements that inserted
-- them (50000 ids): each position still gets its own row's id.
CREATE TABLE batch_out AS
SELECT b.id, b.pos
  FROM outbox_enqueue_batch(
         (SELECT array_agg('agent:big'::text ORDER BY g) FROM generate_series(1, 50000) g),
         (SELECT array_agg('work'::text ORDER BY g) FROM generate_series(1, 50000) g),
         (SELECT array_agg(int4send(g) ORDER BY g) FROM generate_series(1, 50000) g))
       WITH ORDINALITY AS b(id, pos);
SELECT count(*) AS returned,
       count(*) FILTER (WHERE o.payload = int4send(r.pos::int)) AS rows_match_position
  FROM batch_out r JOIN delivery_outbox o ON o.id = r.id;
DELETE FROM delivery_outbox WHERE recipient = 'agent:big';
DROP TABLE batch_out;

-- in a transaction that rolls back: nothing stays
BEGIN;
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:x', 'agent:x'],
                                          ARRAY['work', 'work'],
                                          ARRAY['\x0a', '\x0b']::bytea[]);
ROLLBACK;
SELECT count(*) FROM delivery_outbox WHERE recipient = 'agent:x';

-- the rows are ordinary outbox rows: claimable in id order
SELECT id, recipient, delivery_state, delivery_attempts
  FROM outbox_claim(3);

--
-- Bad input: each error, its SQLSTATE, and the table unchanged
--
SELECT * FROM outbox_digest;

-- NULL arrays: 22004
SELECT * FROM outbox_enqueue_batch(NULL, ARRAY['work'], ARRAY['\x01']::bytea[]);
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:a'], NULL, ARRAY['\x01']::bytea[]);
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:a'], ARRAY['work'], NULL);
\echo :SQLSTATE
SELECT * FROM outbox_digest;

-- NULL elements: 22004, and the detail names the element
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:a', NULL], ARRAY['work', 'work'],
                                   ARRAY['\x01', '\x02']::bytea[]);
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:a', 'agent:b', 'agent:c'],
                                   ARRAY['work', 'work', NULL],
                                   ARRAY['\x01', '\x02', '\x03']::bytea[]);
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:a'], ARRAY['work'],
                                   ARRAY[NULL]::bytea[]);
\echo :SQLSTATE
SELECT * FROM outbox_digest;

-- empty recipient or kind elements: 22023
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:a', ''], ARRAY['work', 'work'],
                                   ARRAY['\x01', '\x02']::bytea[]);
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:a'], ARRAY[''],
                                   ARRAY['\x01']::bytea[]);
\echo :SQLSTATE
SELECT * FROM outbox_digest;

-- unequal lengths: 2202E, the detail says which
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:a', 'agent:b'], ARRAY['work'],
                                   ARRAY['\x01', '\x02']::bytea[]);
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:a'], ARRAY['work'],
                                   ARRAY['\x01', '\x02']::bytea[]);
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:a'], ARRAY['work'],
                                   ARRAY['\x01']::bytea[], ARRAY['t1', 't2']);
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:a'], ARRAY['work'],
                                   ARRAY['\x01']::bytea[], '{}');
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch('{}', ARRAY['work'], ARRAY['\x01']::bytea[]);
\echo :SQLSTATE
SELECT * FROM outbox_digest;

-- more than one dimension: 2202E
SELECT * FROM outbox_enqueue_batch(ARRAY[['agent:a', 'agent:b']],
                                   ARRAY['work', 'work'],
                                   ARRAY['\x01', '\x02']::bytea[]);
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:a', 'agent:b'],
                                   ARRAY[['work'], ['work']],
                                   ARRAY['\x01', '\x02']::bytea[]);
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:a'], ARRAY['work'],
                                   ARRAY[['\x01']]::bytea[]);
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:a'], ARRAY['work'],
                                   ARRAY['\x01']::bytea[], ARRAY[['t1']]);
\echo :SQLSTATE
SELECT * FROM outbox_digest;

-- A payload over max_payload_size in the middle of a batch: 54000 from the
-- trigger, and not even the rows before it are written; at the limit it
-- passes.
SET delivery_outbox.max_payload_size = 4;
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:a', 'agent:b', 'agent:c'],
                                   ARRAY['work', 'work', 'work'],
                                   ARRAY['\x01', '\x0102030405', '\x03']::bytea[]);
\echo :SQLSTATE
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:a'], ARRAY['work'],
                                          ARRAY['\x01020304']::bytea[]);
RESET delivery_outbox.max_payload_size;
SELECT recipient, payload, delivery_state
  FROM outbox_rows WHERE id > 12;

-- An error inside a transaction leaves the earlier work to the caller: a
-- savepoint keeps it, the failed batch adds nothing.
BEGIN;
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:s'], ARRAY['work'],
                                          ARRAY['\x11']::bytea[]);
SAVEPOINT before_bad_batch;
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:s', NULL], ARRAY['work', 'work'],
                                   ARRAY['\x12', '\x13']::bytea[]);
\echo :SQLSTATE
ROLLBACK TO SAVEPOINT before_bad_batch;
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:s'], ARRAY['work'],
                                          ARRAY['\x14']::bytea[]);
COMMIT;
SELECT recipient, payload, delivery_state
  FROM outbox_rows WHERE recipient = 'agent:s';

-- the SQLSTATEs alone, as a client sees them
\set VERBOSITY sqlstate
SELECT * FROM outbox_enqueue_batch(NULL, NULL, NULL);
SELECT * FROM outbox_enqueue_batch(ARRAY[NULL]::text[], ARRAY['work'], ARRAY['\x01']::bytea[]);
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:a'], ARRAY[''], ARRAY['\x01']::bytea[]);
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:a'], ARRAY['work', 'work'], ARRAY['\x01']::bytea[]);
SELECT * FROM outbox_enqueue_batch(ARRAY[['agent:a']], ARRAY['work'], ARRAY['\x01']::bytea[]);
\set VERBOSITY default

DROP VIEW outbox_digest, outbox_rows;
DROP EXTENSION delivery_outbox;
