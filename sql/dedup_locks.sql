--
-- dedup_locks.sql: the locks a partitioned outbox's dedup keys are taken
-- under are bounded per transaction.  Each key is locked until the
-- transaction ends (the state guard's uniqueness check), under one of 1024
-- locks per outbox chosen by the key's hash: a keyed batch of 50,000 rows,
-- more than the server's shared lock table holds with the default
-- max_locks_per_transaction and max_connections (64 * 100), goes in, and
-- the transaction holds 1024 of them.  The keys still dedupe: within the
-- batch, against the rows of an earlier batch (in all its partitions), and
-- two keys that share a lock are still two keys.
--
CREATE EXTENSION delivery_outbox;

CREATE SCHEMA dl;
SELECT outbox_create('dl', 't', partition_rows => 20000);

-- 50,000 positions, 45,000 keys: the last 5,000 repeat earlier ones
BEGIN;
CREATE TEMP TABLE batch AS
SELECT n, id
  FROM outbox_enqueue_batch(array_fill('agent:a'::text, ARRAY[50000]),
                            array_fill('work'::text, ARRAY[50000]),
                            array_fill('\x01'::bytea, ARRAY[50000]),
                            dedup_keys => ARRAY(SELECT 'k' || (i % 45000)
                                                  FROM generate_series(1, 50000) i),
                            outbox => 'dl.t') WITH ORDINALITY AS b(id, n);
SELECT count(*) AS positions, count(DISTINCT id) AS ids FROM batch;
-- the key locks the transaction holds: one per slot, every slot taken
SELECT count(*) AS key_locks, count(DISTINCT objid) AS slots,
       max(objid) < 1024 AS in_range, bool_and(granted) AS granted
  FROM pg_locks
 WHERE pid = pg_backend_pid() AND locktype = 'advisory' AND objsubid = 256
   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND classid = 'dl.t'::regclass::oid;
-- a repeated key got its first position's id
SELECT count(*) AS repeats_on_their_holder
  FROM batch b JOIN batch h ON h.n = b.n - 45000
 WHERE b.n > 45000 AND b.id = h.id;
COMMIT;
SELECT count(*) AS rows, count(DISTINCT dedup_key) AS keys,
       (SELECT count(*) FROM pg_partition_tree('dl.t') WHERE isleaf) > 2 AS partitions
  FROM dl.t;

-- the same keys again, in another transaction: every position gets its
-- holder's id, wherever the holder's partition, and nothing goes in
CREATE TEMP TABLE again AS
SELECT n, id
  FROM outbox_enqueue_batch(array_fill('agent:a'::text, ARRAY[45000]),
                            array_fill('work'::text, ARRAY[45000]),
                            array_fill('\x02'::bytea, ARRAY[45000]),
                            dedup_keys => ARRAY(SELECT 'k' || (i % 45000)
                                                  FROM generate_series(1, 45000) i),
                            outbox => 'dl.t') WITH ORDINALITY AS b(id, n);
SELECT count(*) AS positions,
       count(*) FILTER (WHERE a.id = b.id) AS on_their_holder
  FROM again a JOIN batch b ON b.n = a.n;
SELECT count(*) AS rows FROM dl.t;
-- no key lock outlives its transaction
SELECT count(*) AS key_locks FROM pg_locks
 WHERE locktype = 'advisory' AND objsubid = 256;

-- two new keys of one slot (the slot is the hash of recipient and key
-- modulo 1024, computed here as the state guard does): two rows, under
-- one lock
CREATE FUNCTION pg_temp.key_slot(recipient text, key text) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    -- hash_combine(hash_any(recipient), hash_any(key)) % 1024, in uint32
    SELECT (a # ((b + 2654435769 + ((a << 6) & 4294967295) + (a >> 2))
                 & 4294967295)) % 1024
      FROM (SELECT hashtext(recipient)::bigint & 4294967295 AS a,
                   hashtext(key)::bigint & 4294967295 AS b) h
$$;
SELECT k AS first, (SELECT 's' || i FROM generate_series(1, 100000) i
                     WHERE i > 1 AND pg_temp.key_slot('agent:b', 's' || i) =
                                     pg_temp.key_slot('agent:b', k)
                     ORDER BY i LIMIT 1) AS second
  FROM (VALUES ('s1')) v(k) \gset
SELECT :'first' <> :'second' AS distinct_keys,
       pg_temp.key_slot('agent:b', :'first') = pg_temp.key_slot('agent:b', :'second') AS one_slot;
BEGIN;
SELECT count(DISTINCT id) AS ids
  FROM outbox_enqueue_batch(ARRAY['agent:b', 'agent:b', 'agent:b'],
                            ARRAY['work', 'work', 'work'],
                            ARRAY['\x03', '\x04', '\x05']::bytea[],
                            dedup_keys => ARRAY[:'first', :'second', :'first'],
                            outbox => 'dl.t') AS b(id);
SELECT count(*) AS key_locks FROM pg_locks
 WHERE pid = pg_backend_pid() AND locktype = 'advisory' AND objsubid = 256;
COMMIT;
SELECT dedup_key = :'first' AS first, count(*) FROM dl.t
 WHERE recipient = 'agent:b' GROUP BY 1 ORDER BY 1;

SET client_min_messages = warning;
DROP SCHEMA dl CASCADE;
RESET client_min_messages;
DROP EXTENSION delivery_outbox;
