--
-- fuzz_findings.sql: what a bounded run of random SQL found (issue 22),
-- each now a clear error or a clean end, nothing written
--
CREATE EXTENSION delivery_outbox;
\set VERBOSITY default
\set SHOW_CONTEXT never

-- an invalidation of a relation that does not exist: 42P01, not XX000
SELECT outbox_invalidate(0::oid::regclass);
\echo :SQLSTATE
SELECT outbox_invalidate(NULL);
\echo :SQLSTATE

-- outbox_create with an empty name: 22023, as every other bad argument
CREATE SCHEMA fuzz;
SELECT outbox_create('fuzz', '');
\echo :SQLSTATE
SELECT outbox_create('', 'delivery_outbox');
\echo :SQLSTATE
-- nor into a temporary schema: its registry row would outlive the session
SELECT outbox_create('pg_temp');
\echo :SQLSTATE
SELECT count(*) AS registered FROM delivery_outbox_registry;

-- a temporary table is not attached, whatever its shape
CREATE TEMPORARY TABLE fuzz_temp (LIKE delivery_outbox INCLUDING ALL);
SELECT outbox_attach('fuzz_temp');
\echo :SQLSTATE
SELECT count(*) AS registered FROM delivery_outbox_registry;

-- a dropped outbox leaves no registry row, also under
-- session_replication_role = replica
SELECT outbox_create('fuzz') AS t \gset
SELECT count(*) AS registered FROM delivery_outbox_registry WHERE outbox = :'t'::regclass;
SET session_replication_role = replica;
DROP TABLE fuzz.delivery_outbox;
RESET session_replication_role;
SELECT count(*) AS registered FROM delivery_outbox_registry;
SELECT outbox FROM delivery_outbox_tables ORDER BY 1;

-- a huge partition_rows: the last partition's bound stops at the largest
-- bigint (it wrapped: an empty range, 42P17), for a new outbox and for one
-- converted
SELECT outbox_create('fuzz', 'big', partition_rows => 9223372036854775807) AS big \gset
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) AS bound
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = :'big'::regclass ORDER BY 1;
SELECT outbox_enqueue('agent:a', 'work', '\x01', outbox => :'big') AS id;
SELECT outbox_create('fuzz', 'conv') AS conv \gset
SELECT outbox_partition(:'conv', 9223372036854775807) AS converted \gset
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) AS bound
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = :'converted'::regclass ORDER BY 1;

-- the SQL functions' internal helpers, given NULL: 22004, not a syntax error
SELECT outbox_grant_triggers(NULL);
\echo :SQLSTATE
SELECT outbox_drop_triggers(NULL);
\echo :SQLSTATE
SELECT outbox_make_indexes(0::oid::regclass);
\echo :SQLSTATE

SET client_min_messages = warning;
DROP SCHEMA fuzz CASCADE;
DROP TABLE fuzz_temp;
DROP EXTENSION delivery_outbox;
