--
-- outboxes.sql: many outboxes in one database (1.2): outbox_create, the
-- API's "outbox" argument on a created outbox, schema-per-tenant SQL,
-- tenant isolation through table privileges, outbox_configure,
-- outbox_detach, DROP TABLE and the view delivery_outbox_tables
--
-- Each bad call shows its message and then its SQLSTATE (psql's :SQLSTATE,
-- 00000 had it succeeded); the look at the outboxes after it shows that
-- nothing changed.  Timestamps are printed only as facts about them.
--
CREATE EXTENSION delivery_outbox;

\set SHOW_CONTEXT never

-- roles left behind by an interrupted earlier run
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_outbox_creator;
DROP ROLE IF EXISTS regress_outbox_tenant_a;
DROP ROLE IF EXISTS regress_outbox_tenant_b;
DROP ROLE IF EXISTS regress_outbox_reader;
RESET client_min_messages;

-- Every outbox the view lists, with its rows as id:recipient:state/attempts.
CREATE FUNCTION regress_rows(t regclass) RETURNS text
LANGUAGE plpgsql AS $f$
DECLARE
    r text;
BEGIN
    EXECUTE format($q$
        SELECT coalesce(string_agg(format('%%s:%%s:%%s/%%s', id, recipient,
                                          delivery_state, delivery_attempts),
                                   ' ' ORDER BY id), '-')
          FROM %s$q$, t) INTO r;
    RETURN r;
END
$f$;
CREATE VIEW outboxes_now AS
SELECT outbox, origin, channel, channel_is_default AS dflt,
       regress_rows(outbox) AS rows
  FROM delivery_outbox_tables
 ORDER BY outbox::text COLLATE "C";

-- The tables of the tenant schemas, outboxes or not, and their owners.
CREATE VIEW tenant_tables AS
SELECT c.oid::regclass AS tbl, pg_get_userbyid(c.relowner) AS owner
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname LIKE 'tenant%' AND c.relkind = 'r'
 ORDER BY c.oid::regclass::text COLLATE "C";

CREATE SCHEMA tenant_a;
CREATE SCHEMA tenant_b;
-- a third schema, where only regress_outbox_creator may create
CREATE SCHEMA tenant_own;
CREATE ROLE regress_outbox_creator;
GRANT USAGE, CREATE ON SCHEMA tenant_own TO regress_outbox_creator;
GRANT USAGE ON SCHEMA tenant_a TO regress_outbox_creator;

-- before any outbox is made, the view lists the default one
SELECT * FROM outboxes_now;

--
-- outbox_create: two outboxes, one in each tenant schema
--
SELECT outbox_create('tenant_a');
SELECT outbox_create(schema_name => 'tenant_b', table_name => 'delivery_outbox');
SELECT pg_typeof(outbox_create('tenant_own', 'created_by_superuser'));
SELECT * FROM outboxes_now;
SELECT * FROM tenant_tables;

-- The same columns, defaults, constraints, indexes and triggers as the
-- default outbox: the differences (names of the table left out; only the
-- id's default differs: an identity column instead of a serial).
CREATE FUNCTION regress_shape(t regclass) RETURNS SETOF text
LANGUAGE sql AS $f$
    SELECT format('column %s %s %s notnull=%s default=%s identity=%s',
                  a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),
                  a.attnotnull, pg_get_expr(d.adbin, d.adrelid),
                  a.attidentity)
      FROM pg_attribute a
      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE a.attrelid = t AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT format('constraint %s %s', k.contype, pg_get_constraintdef(k.oid))
      FROM pg_constraint k WHERE k.conrelid = t AND k.contype <> 'n'
    UNION ALL
    SELECT format('index %s', regexp_replace(pg_get_indexdef(i.indexrelid),
                                             ' ON \S+ ', ' ON T '))
      FROM pg_index i WHERE i.indrelid = t
    UNION ALL
    SELECT format('trigger %s enabled=%s',
                  regexp_replace(pg_get_triggerdef(g.oid), ' ON \S+ ', ' ON T '),
                  g.tgenabled)
      FROM pg_trigger g WHERE g.tgrelid = t AND NOT g.tgisinternal
$f$;
(SELECT 'only default' AS side, s FROM regress_shape('public.delivery_outbox') s
 EXCEPT ALL
 SELECT 'only default', s FROM regress_shape('tenant_a.delivery_outbox') s)
UNION ALL
(SELECT 'only created', s FROM regress_shape('tenant_a.delivery_outbox') s
 EXCEPT ALL
 SELECT 'only created', s FROM regress_shape('public.delivery_outbox') s)
ORDER BY 1, 2;
SELECT count(*) AS shape_items FROM regress_shape('tenant_a.delivery_outbox');

-- Two outboxes in one schema whose names share their first 51 characters
-- each get the claims' five indexes besides the primary key (where the
-- name outbox_make_outbox() derives is another table's index, PostgreSQL
-- picks a free one).
SELECT outbox_create('tenant_own', repeat('x', 55) || '_one') IS NOT NULL AS made_one;
SELECT outbox_create('tenant_own', repeat('x', 55) || '_two') IS NOT NULL AS made_two;
SELECT right(c.relname, 4) AS tbl, count(*) AS indexes
  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
 WHERE c.relnamespace = 'tenant_own'::regnamespace AND c.relname LIKE 'xxx%'
 GROUP BY 1 ORDER BY 1;
SELECT format('DROP TABLE tenant_own.%I', relname) FROM pg_class
 WHERE relnamespace = 'tenant_own'::regnamespace AND relkind = 'r'
   AND relname LIKE 'xxx%' \gexec

-- A non-superuser with CREATE on a schema makes an outbox there, and owns it
-- (and its identity sequence).
GRANT EXECUTE ON FUNCTION outbox_create(name, name, text, bigint) TO regress_outbox_creator;
SET ROLE regress_outbox_creator;
SELECT outbox_create('tenant_own', 'mine');
RESET ROLE;
SELECT c.oid::regclass, pg_get_userbyid(c.relowner) AS owner
  FROM pg_class c
 WHERE c.oid IN ('tenant_own.mine'::regclass,
                 pg_get_serial_sequence('tenant_own.mine', 'id')::regclass)
 ORDER BY c.oid::regclass::text;

-- Bad calls, each followed by the outboxes and tables, unchanged.
\set VERBOSITY terse
-- a schema that does not exist
SELECT outbox_create('tenant_none');
\echo :SQLSTATE
SELECT outbox_create('tenant_none', 'x', 'chan');
\echo :SQLSTATE
SELECT * FROM outboxes_now;
SELECT * FROM tenant_tables;
-- no CREATE on the schema (EXECUTE on the function is granted, USAGE too)
SET ROLE regress_outbox_creator;
SELECT outbox_create('tenant_a', 'intruder');
\echo :SQLSTATE
SELECT outbox_create('public', 'intruder');
\echo :SQLSTATE
RESET ROLE;
SELECT * FROM outboxes_now;
SELECT * FROM tenant_tables;
-- EXECUTE is needed at all (nothing is granted to PUBLIC)
CREATE ROLE regress_outbox_reader;
GRANT USAGE, CREATE ON SCHEMA tenant_own TO regress_outbox_reader;
SET ROLE regress_outbox_reader;
SELECT outbox_create('tenant_own', 'no_execute');
\echo :SQLSTATE
RESET ROLE;
REVOKE CREATE ON SCHEMA tenant_own FROM regress_outbox_reader;
SELECT * FROM tenant_tables;
-- NULL arguments
SELECT outbox_create(NULL);
\echo :SQLSTATE
SELECT outbox_create('tenant_a', NULL);
\echo :SQLSTATE
SELECT outbox_create(NULL, NULL, NULL);
\echo :SQLSTATE
SELECT * FROM outboxes_now;
SELECT * FROM tenant_tables;
-- bad channels: empty, 64 bytes (a channel is shorter than NAMEDATALEN)
SELECT outbox_create('tenant_own', 'bad_channel', '');
\echo :SQLSTATE
SELECT outbox_create('tenant_own', 'bad_channel', repeat('c', 64));
\echo :SQLSTATE
SELECT outbox_create('tenant_own', 'bad_channel', repeat('é', 32));
\echo :SQLSTATE
SELECT * FROM outboxes_now;
SELECT * FROM tenant_tables;
-- (63 bytes is a channel)
BEGIN;
SELECT outbox_create('tenant_own', 'long_channel', repeat('c', 63));
SELECT length(channel) FROM delivery_outbox_tables
 WHERE outbox = 'tenant_own.long_channel'::regclass;
ROLLBACK;
-- a table of that name exists: an outbox, the default one, a plain table
SELECT outbox_create('tenant_a');
\echo :SQLSTATE
SELECT outbox_create('public');
\echo :SQLSTATE
CREATE TABLE tenant_own.plain (x int);
SELECT outbox_create('tenant_own', 'plain');
\echo :SQLSTATE
SELECT * FROM outboxes_now;
SELECT * FROM tenant_tables;
SELECT count(*) AS plain_triggers FROM pg_trigger
 WHERE tgrelid = 'tenant_own.plain'::regclass;
DROP TABLE tenant_own.plain;
\set VERBOSITY default

--
-- Every API function on a created outbox, with "outbox =>".  The default
-- outbox holds rows with the same ids (1-3, id 1 delivered), which no call
-- on tenant_a may touch.
--
SELECT outbox_enqueue('agent:a', 'work', '\x01');
SELECT outbox_enqueue('agent:a', 'work', '\x02', 't1');
SELECT outbox_enqueue('agent:b', 'work', '\x03');
SELECT id FROM outbox_claim(1);

-- enqueue, named and positional; the batch
SELECT outbox_enqueue('agent:a', 'work', '\x11', outbox => 'tenant_a.delivery_outbox');
SELECT outbox_enqueue('agent:a', 'work', '\x12', 't1', outbox => 'tenant_a.delivery_outbox');
SELECT outbox_enqueue(recipient => 'agent:b', kind => 'work', payload => '\x13',
                      outbox => 'tenant_a.delivery_outbox');
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:b', 'agent:c'],
                                   ARRAY['work', 'event'],
                                   ARRAY['\x14', '\x15']::bytea[],
                                   ARRAY[NULL, 't1'],
                                   outbox => 'tenant_a.delivery_outbox');
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:e'], ARRAY['work'],
                                   ARRAY['\x16']::bytea[],
                                   outbox => 'tenant_a.delivery_outbox');
SELECT * FROM outboxes_now;
SELECT id, recipient, kind, tenant_id, payload, delivery_state,
       delivery_attempts, created_at IS NOT NULL AS has_created_at,
       delivered_at IS NULL AS no_delivered_at, acked_at IS NULL AS no_acked_at
  FROM tenant_a.delivery_outbox ORDER BY id;

-- claim: the oldest first, then by recipient and tenant, by tenant, by
-- recipient; the rows come back as the default outbox's row type
SELECT pg_typeof(c) AS row_type, c.id, c.recipient, c.delivery_state,
       c.delivery_attempts, c.delivered_at IS NOT NULL AS has_delivered_at
  FROM outbox_claim(1, outbox => 'tenant_a.delivery_outbox') c;
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts
  FROM outbox_claim(10, 'agent:a', 't1', 'tenant_a.delivery_outbox');
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts
  FROM outbox_claim(10, tenant_id => 't1', outbox => 'tenant_a.delivery_outbox');
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts
  FROM outbox_claim(10, 'agent:b', outbox => 'tenant_a.delivery_outbox');
-- nothing pending for agent:a any more
SELECT count(*) FROM outbox_claim(10, 'agent:a', outbox => 'tenant_a.delivery_outbox');
SELECT * FROM outboxes_now;

-- ack: one id (with the right and a wrong recipient), then an array
SELECT outbox_ack(1, outbox => 'tenant_a.delivery_outbox') AS acked;
SELECT outbox_ack(1, outbox => 'tenant_a.delivery_outbox') AS acked_again;
SELECT outbox_ack(2, 'agent:zz', 'tenant_a.delivery_outbox') AS acked_wrong_recipient;
SELECT outbox_ack(2, 'agent:a', 'tenant_a.delivery_outbox') AS acked;
SELECT outbox_ack(ARRAY[3, 4, 999]::bigint[], outbox => 'tenant_a.delivery_outbox') AS acked;
SELECT outbox_ack(ARRAY[5]::bigint[], 'agent:zz', 'tenant_a.delivery_outbox') AS acked;
SELECT * FROM outboxes_now;

-- release, reclaim (all, then at most one), resync per tenant, reassign
SELECT outbox_release(ARRAY[5]::bigint[], outbox => 'tenant_a.delivery_outbox') AS released;
SELECT outbox_release(ARRAY[5]::bigint[], outbox => 'tenant_a.delivery_outbox') AS released_again;
SELECT id FROM outbox_claim(10, outbox => 'tenant_a.delivery_outbox');
SELECT outbox_reclaim('0 seconds', outbox => 'tenant_a.delivery_outbox') AS reclaimed;
SELECT * FROM outboxes_now;
SELECT id FROM outbox_claim(10, outbox => 'tenant_a.delivery_outbox');
SELECT outbox_reclaim('0 seconds', 1, 'tenant_a.delivery_outbox') AS reclaimed;
SELECT outbox_reclaim('0 seconds', 1, 'tenant_a.delivery_outbox') AS reclaimed;
SELECT outbox_reclaim('1 hour', outbox => 'tenant_a.delivery_outbox') AS reclaimed_none;
SELECT * FROM outboxes_now;
SELECT id FROM outbox_claim(10, outbox => 'tenant_a.delivery_outbox');
-- agent:c's row is in tenant t1: a NULL tenant matches NULL only
SELECT outbox_reclaim_recipient('agent:c', outbox => 'tenant_a.delivery_outbox') AS resynced;
SELECT outbox_reclaim_recipient('agent:c', 't1', 'tenant_a.delivery_outbox') AS resynced;
SELECT outbox_reclaim_recipient('agent:e', outbox => 'tenant_a.delivery_outbox') AS resynced;
SELECT * FROM outboxes_now;
SELECT outbox_reassign('agent:c', 'agent:d', outbox => 'tenant_a.delivery_outbox') AS moved;
SELECT outbox_reassign('agent:e', 'agent:d', 'tenant_a.delivery_outbox') AS moved;
-- (agent:a's rows are all acked: nothing to move)
SELECT outbox_reassign('agent:a', 'agent:d', 'tenant_a.delivery_outbox') AS moved;
SELECT * FROM outboxes_now;

-- replay: agent:d's open rows, all, after an id, in a tenant
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts
  FROM outbox_replay('agent:d', outbox => 'tenant_a.delivery_outbox');
SELECT id FROM outbox_replay('agent:d', 5, outbox => 'tenant_a.delivery_outbox');
SELECT id FROM outbox_replay('agent:d', 0, 10, 't1', 'tenant_a.delivery_outbox');
SELECT id FROM outbox_replay('agent:d', 0, 1, outbox => 'tenant_a.delivery_outbox');
SELECT pg_typeof(r) AS row_type
  FROM outbox_replay('agent:d', 0, 1, outbox => 'tenant_a.delivery_outbox') r;
-- (acked rows are not replayed)
SELECT count(*) FROM outbox_replay('agent:a', outbox => 'tenant_a.delivery_outbox');

-- stats and wait, here and on the default outbox
SELECT pending, delivered, acked, open_recipients,
       oldest_pending_age IS NOT NULL AS has_pending_age,
       oldest_delivered_age IS NULL AS no_delivered_age
  FROM outbox_stats(outbox => 'tenant_a.delivery_outbox');
SELECT pending, delivered, acked, open_recipients FROM outbox_stats('tenant_a.delivery_outbox');
SELECT pending, delivered, acked, open_recipients FROM outbox_stats();
SELECT outbox_wait('0', outbox => 'tenant_a.delivery_outbox') AS found;
SELECT outbox_wait('0 seconds', 'agent:d', 'tenant_a.delivery_outbox') AS found;
SELECT outbox_wait('0', 'agent:a', 'tenant_a.delivery_outbox') AS found;
-- the default outbox has a pending row of agent:b, tenant_a has none
SELECT outbox_wait('0', 'agent:b') AS found_default,
       outbox_wait('0', 'agent:b', 'tenant_a.delivery_outbox') AS found_tenant_a;

-- purge: tenant_a's four acked rows go, the default outbox is untouched
SELECT outbox_purge('1 hour', outbox => 'tenant_a.delivery_outbox') AS purged_none;
SELECT outbox_purge('0 seconds', outbox => 'tenant_a.delivery_outbox') AS purged;
SELECT outbox_ack(1) AS default_acked;
SELECT outbox_purge('0 seconds', 'tenant_a.delivery_outbox') AS purged_again;
SELECT * FROM outboxes_now;

-- Bad arguments on a created outbox: the same errors as on the default
-- one, and nothing changes.
\set VERBOSITY terse
SELECT outbox_enqueue(NULL, 'work', '\x01', outbox => 'tenant_a.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_enqueue('agent:a', '', '\x01', outbox => 'tenant_a.delivery_outbox');
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:a', 'agent:b'], ARRAY['work'],
                                   ARRAY['\x01', '\x02']::bytea[],
                                   outbox => 'tenant_a.delivery_outbox');
\echo :SQLSTATE
SELECT * FROM outbox_claim(0, outbox => 'tenant_a.delivery_outbox');
\echo :SQLSTATE
SELECT * FROM outbox_claim(10, '', outbox => 'tenant_a.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_ack(NULL::bigint, outbox => 'tenant_a.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_ack(ARRAY[5, NULL]::bigint[], outbox => 'tenant_a.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_release(NULL, outbox => 'tenant_a.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_reclaim('-1 second', outbox => 'tenant_a.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_reclaim_recipient(NULL, outbox => 'tenant_a.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_reassign('agent:d', '', 'tenant_a.delivery_outbox');
\echo :SQLSTATE
SELECT * FROM outbox_replay('agent:d', NULL, outbox => 'tenant_a.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_purge(NULL, 'tenant_a.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_wait('-1 second', outbox => 'tenant_a.delivery_outbox');
\echo :SQLSTATE
SELECT * FROM outboxes_now;
-- the state guard of a created outbox: illegal moves are refused (23514)
UPDATE tenant_a.delivery_outbox SET delivery_state = 'acked' WHERE id = 5;
\echo :SQLSTATE
UPDATE tenant_a.delivery_outbox SET delivery_state = 'bogus' WHERE id = 5;
\echo :SQLSTATE
UPDATE tenant_a.delivery_outbox SET payload = '\xff' WHERE id = 5;
\echo :SQLSTATE
INSERT INTO tenant_a.delivery_outbox (recipient, kind, payload, delivery_state)
VALUES ('agent:x', 'work', '\x01', 'delivered');
\echo :SQLSTATE
SELECT * FROM outboxes_now;
\set VERBOSITY default

--
-- A table that is not an outbox: 42809 from every function, and the table
-- is untouched.  A table of the outbox's shape, a view, a sequence, the
-- registry, an OID that names nothing.
--
CREATE TABLE public.not_an_outbox (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    recipient text NOT NULL, kind text NOT NULL, tenant_id text,
    payload bytea NOT NULL,
    delivery_state text NOT NULL DEFAULT 'pending',
    delivery_attempts integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    delivered_at timestamptz, acked_at timestamptz);
INSERT INTO not_an_outbox (recipient, kind, payload) VALUES ('agent:n', 'work', '\x01');
INSERT INTO not_an_outbox (recipient, kind, payload, delivery_state,
                           delivery_attempts, delivered_at)
VALUES ('agent:n', 'work', '\x02', 'delivered', 1, now());
CREATE VIEW not_outbox_rows AS
SELECT id, recipient, delivery_state, delivery_attempts FROM not_an_outbox ORDER BY id;
SELECT * FROM not_outbox_rows;

\set VERBOSITY terse
SELECT outbox_enqueue('agent:n', 'work', '\x03', outbox => 'not_an_outbox');
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:n'], ARRAY['work'],
                                   ARRAY['\x03']::bytea[], outbox => 'not_an_outbox');
\echo :SQLSTATE
SELECT * FROM outbox_claim(outbox => 'not_an_outbox');
\echo :SQLSTATE
SELECT outbox_ack(2, outbox => 'not_an_outbox');
\echo :SQLSTATE
SELECT outbox_ack(ARRAY[2]::bigint[], outbox => 'not_an_outbox');
\echo :SQLSTATE
SELECT outbox_release(ARRAY[2]::bigint[], outbox => 'not_an_outbox');
\echo :SQLSTATE
SELECT outbox_reclaim('0 seconds', outbox => 'not_an_outbox');
\echo :SQLSTATE
SELECT outbox_reclaim_recipient('agent:n', outbox => 'not_an_outbox');
\echo :SQLSTATE
SELECT outbox_reassign('agent:n', 'agent:m', 'not_an_outbox');
\echo :SQLSTATE
SELECT * FROM outbox_replay('agent:n', outbox => 'not_an_outbox');
\echo :SQLSTATE
SELECT outbox_purge('0 seconds', 'not_an_outbox');
\echo :SQLSTATE
SELECT * FROM outbox_stats('not_an_outbox');
\echo :SQLSTATE
SELECT outbox_wait('0', outbox => 'not_an_outbox');
\echo :SQLSTATE
SELECT outbox_configure('not_an_outbox', channel => 'x');
\echo :SQLSTATE
SELECT outbox_detach('not_an_outbox');
\echo :SQLSTATE
SELECT * FROM not_outbox_rows;
SELECT count(*) AS not_outbox_triggers FROM pg_trigger
 WHERE tgrelid = 'not_an_outbox'::regclass;
-- other relations
SELECT * FROM outbox_claim(outbox => 'not_outbox_rows');
\echo :SQLSTATE
SELECT * FROM outbox_stats('delivery_outbox_tables');
\echo :SQLSTATE
SELECT outbox_enqueue('agent:n', 'work', '\x03', outbox => 'delivery_outbox_id_seq');
\echo :SQLSTATE
SELECT * FROM outbox_stats('delivery_outbox_registry');
\echo :SQLSTATE
SELECT * FROM outbox_stats('delivery_outbox_pkey');
\echo :SQLSTATE
SELECT * FROM outbox_claim(outbox => 4294967295::oid::regclass);
\echo :SQLSTATE
SELECT * FROM outboxes_now;
\set VERBOSITY default

--
-- Schema per tenant: under SET search_path TO tenant_a, public the seed's
-- plain SQL on "delivery_outbox" is tenant_a's outbox, guarded, and
-- outbox => 'delivery_outbox' resolves through the same path.  A NULL
-- outbox is still the extension's own table.
--
SET search_path TO tenant_a, public;
INSERT INTO delivery_outbox (recipient, kind, tenant_id, payload,
                             delivery_state, delivery_attempts, created_at)
VALUES ('agent:s', 'work', 'tenant-a', '\x21', 'pending', 0,
        '2000-01-01 00:00:00')
RETURNING id, recipient, kind, tenant_id, payload, delivery_state,
          delivery_attempts, created_at = '2000-01-01 00:00:00' AS app_created_at,
          delivered_at IS NULL AS no_delivered_at, acked_at IS NULL AS no_acked_at;
SELECT count(*) AS in_tenant_a FROM tenant_a.delivery_outbox WHERE recipient = 'agent:s';
SELECT count(*) AS in_default FROM public.delivery_outbox WHERE recipient = 'agent:s';
SELECT count(*) AS in_tenant_b FROM tenant_b.delivery_outbox WHERE recipient = 'agent:s';
-- the guard: pending -> acked is not a transition
\set VERBOSITY terse
UPDATE delivery_outbox SET delivery_state = 'acked', acked_at = '2000-01-01 00:00:00'
 WHERE recipient = 'agent:s' AND delivery_state <> 'acked';
\echo :SQLSTATE
\set VERBOSITY default
SELECT id, delivery_state, delivery_attempts, acked_at IS NULL AS no_acked_at
  FROM delivery_outbox WHERE recipient = 'agent:s';
-- mark_delivered as the seed writes it: the trigger counts one attempt
UPDATE delivery_outbox
   SET delivery_state = 'delivered', delivered_at = '2000-01-01 00:00:00',
       delivery_attempts = delivery_attempts + 1
 WHERE recipient = 'agent:s' AND delivery_state = 'pending';
SELECT id, delivery_state, delivery_attempts,
       delivered_at > now() - interval '1 minute' AS trigger_delivered_at
  FROM delivery_outbox WHERE recipient = 'agent:s';
-- outbox => 'delivery_outbox' is tenant_a's outbox here
SELECT 'delivery_outbox'::regclass = 'tenant_a.delivery_outbox'::regclass AS resolves_to_tenant_a;
SELECT outbox_reclaim_recipient('agent:s', 'tenant-a', outbox => 'delivery_outbox') AS resynced;
SELECT id, recipient, delivery_state, delivery_attempts
  FROM outbox_claim(10, 'agent:s', outbox => 'delivery_outbox');
SELECT outbox_ack(ARRAY(SELECT id FROM delivery_outbox WHERE recipient = 'agent:s'),
                  'agent:s', 'delivery_outbox') AS acked;
SELECT pending, delivered, acked FROM outbox_stats('delivery_outbox');
-- the default outbox is still the one without "outbox"
SELECT pending, delivered, acked FROM outbox_stats();
SELECT pending, delivered, acked FROM outbox_stats('public.delivery_outbox');
-- and under tenant_b's path, tenant_b's
SET search_path TO tenant_b, public;
INSERT INTO delivery_outbox (recipient, kind, tenant_id, payload,
                             delivery_state, delivery_attempts, created_at)
VALUES ('agent:s', 'work', 'tenant-b', '\x22', 'pending', 0,
        '2000-01-01 00:00:00')
RETURNING id, recipient, delivery_state;
SELECT id, tenant_id, delivery_state FROM outbox_claim(outbox => 'delivery_outbox');
RESET search_path;
SELECT * FROM outboxes_now;

--
-- Tenant isolation.  Each tenant role may execute every function and has
-- the privileges on its own tenant's table only (and USAGE on both
-- schemas, so that only the table privilege stands between it and the
-- other tenant): on the other tenant's outbox every function is 42501, and
-- nothing changes there.  The default outbox works with EXECUTE alone, as
-- in 1.1.
--
CREATE ROLE regress_outbox_tenant_a;
CREATE ROLE regress_outbox_tenant_b;
GRANT USAGE ON SCHEMA tenant_a, tenant_b
   TO regress_outbox_tenant_a, regress_outbox_tenant_b, regress_outbox_reader;
GRANT EXECUTE ON FUNCTION
    outbox_enqueue(text, text, bytea, text, timestamptz, timestamptz, text, regclass),
    outbox_enqueue_batch(text[], text[], bytea[], text[], timestamptz[], timestamptz[], text[], regclass),
    outbox_claim(integer, text, text, regclass),
    outbox_ack(bigint, text, regclass),
    outbox_ack(bigint[], text, regclass),
    outbox_release(bigint[], interval, text, regclass),
    outbox_reclaim(interval, integer, regclass),
    outbox_reclaim_recipient(text, text, regclass),
    outbox_reassign(text, text, regclass),
    outbox_replay(text, bigint, integer, text, regclass),
    outbox_purge(interval, regclass),
    outbox_stats(regclass),
    outbox_wait(interval, text, regclass),
    outbox_configure(regclass, text, integer, interval, interval, interval, boolean, interval),
    outbox_detach(regclass),
    outbox_attach(regclass, text)
  TO regress_outbox_tenant_a, regress_outbox_tenant_b, regress_outbox_reader;
GRANT SELECT, INSERT, UPDATE, DELETE ON tenant_a.delivery_outbox TO regress_outbox_tenant_a;
GRANT SELECT, INSERT, UPDATE, DELETE ON tenant_b.delivery_outbox TO regress_outbox_tenant_b;

-- tenant_b's rows before: agent:s's delivered row (above), agent:q's
-- rows acked (b1) and delivered (b2), agent:p's pending row (b3)
SELECT outbox_enqueue('agent:q', 'work', '\x31', outbox => 'tenant_b.delivery_outbox') AS b1 \gset
SELECT outbox_enqueue('agent:q', 'work', '\x32', outbox => 'tenant_b.delivery_outbox') AS b2 \gset
SELECT count(*) FROM outbox_claim(10, 'agent:q', outbox => 'tenant_b.delivery_outbox');
SELECT outbox_ack(:b1, outbox => 'tenant_b.delivery_outbox');
SELECT outbox_enqueue('agent:p', 'work', '\x33', outbox => 'tenant_b.delivery_outbox') AS b3 \gset
SELECT * FROM outboxes_now;

SET ROLE regress_outbox_tenant_a;
-- its own outbox: everything works
SELECT outbox_enqueue('agent:t', 'work', '\x41', outbox => 'tenant_a.delivery_outbox') AS a1 \gset
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:t'], ARRAY['work'],
                                          ARRAY['\x42']::bytea[],
                                          outbox => 'tenant_a.delivery_outbox');
SELECT recipient, delivery_state, delivery_attempts
  FROM outbox_claim(10, 'agent:t', outbox => 'tenant_a.delivery_outbox');
SELECT outbox_ack(:a1, outbox => 'tenant_a.delivery_outbox') AS acked;
SELECT outbox_release(ARRAY[:a1 + 1], outbox => 'tenant_a.delivery_outbox') AS released;
SELECT recipient, delivery_state FROM outbox_replay('agent:t', outbox => 'tenant_a.delivery_outbox');
SELECT pending, delivered, acked FROM outbox_stats('tenant_a.delivery_outbox');
SELECT outbox_wait('0', 'agent:t', 'tenant_a.delivery_outbox') AS found;
SELECT outbox_reclaim('0 seconds', outbox => 'tenant_a.delivery_outbox') AS reclaimed;
SELECT outbox_reclaim_recipient('agent:t', outbox => 'tenant_a.delivery_outbox') AS resynced;
SELECT outbox_reassign('agent:t', 'agent:u', 'tenant_a.delivery_outbox') AS moved;
SELECT outbox_purge('0 seconds', 'tenant_a.delivery_outbox') AS purged;
-- tenant_b's: every function refused
\set VERBOSITY terse
SELECT outbox_enqueue('agent:p', 'work', '\x43', outbox => 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:p'], ARRAY['work'],
                                   ARRAY['\x44']::bytea[],
                                   outbox => 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT * FROM outbox_claim(outbox => 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT * FROM outbox_claim(10, 'agent:p', outbox => 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_ack(:b2, outbox => 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_ack(ARRAY[:b2]::bigint[], 'agent:q', 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_release(ARRAY[:b2]::bigint[], outbox => 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_reclaim('0 seconds', outbox => 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_reclaim_recipient('agent:q', outbox => 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_reassign('agent:q', 'agent:t', 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT * FROM outbox_replay('agent:p', outbox => 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT * FROM outbox_stats('tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_wait('0', outbox => 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_purge('0 seconds', 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_configure('tenant_b.delivery_outbox', channel => 'stolen');
\echo :SQLSTATE
SELECT outbox_detach('tenant_b.delivery_outbox');
\echo :SQLSTATE
-- and the table itself, of course
SELECT count(*) FROM tenant_b.delivery_outbox;
\echo :SQLSTATE
-- table privileges are not ownership: its own outbox's settings are its
-- owner's
SELECT outbox_configure('tenant_a.delivery_outbox', channel => 'mine');
\echo :SQLSTATE
SELECT outbox_detach('tenant_a.delivery_outbox');
\echo :SQLSTATE
\set VERBOSITY default
-- the default outbox: EXECUTE is enough (no privilege on its table)
SELECT outbox_enqueue('agent:dflt', 'work', '\x45') AS d1 \gset
SELECT recipient, delivery_state FROM outbox_claim(10, 'agent:dflt');
SELECT outbox_ack(:d1) AS acked;
SELECT count(*) FROM outbox_replay('agent:dflt');
SELECT pending, delivered, acked FROM outbox_stats();
SELECT pending, delivered, acked FROM outbox_stats('public.delivery_outbox');
SELECT outbox_purge('0 seconds') AS purged;
\set VERBOSITY terse
SELECT count(*) FROM public.delivery_outbox;
\echo :SQLSTATE
\set VERBOSITY default
RESET ROLE;
SELECT * FROM outboxes_now;

-- the same the other way round: tenant_b's role on tenant_a's outbox
SET ROLE regress_outbox_tenant_b;
SELECT pending, delivered, acked FROM outbox_stats('tenant_b.delivery_outbox');
\set VERBOSITY terse
SELECT outbox_enqueue('agent:u', 'work', '\x46', outbox => 'tenant_a.delivery_outbox');
\echo :SQLSTATE
SELECT * FROM outbox_claim(outbox => 'tenant_a.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_ack(5, outbox => 'tenant_a.delivery_outbox');
\echo :SQLSTATE
SELECT * FROM outbox_replay('agent:u', outbox => 'tenant_a.delivery_outbox');
\echo :SQLSTATE
SELECT * FROM outbox_stats('tenant_a.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_purge('0 seconds', 'tenant_a.delivery_outbox');
\echo :SQLSTATE
\set VERBOSITY default
RESET ROLE;
SELECT * FROM outboxes_now;

-- Each privilege opens its own functions: SELECT replay, stats and wait;
-- INSERT the enqueues; UPDATE claim, ack, release, reclaim, resync and
-- reassign; DELETE purge.
GRANT SELECT ON tenant_b.delivery_outbox TO regress_outbox_reader;
SET ROLE regress_outbox_reader;
SELECT pending, delivered, acked FROM outbox_stats('tenant_b.delivery_outbox');
SELECT count(*) FROM outbox_replay('agent:p', outbox => 'tenant_b.delivery_outbox');
SELECT outbox_wait('0', outbox => 'tenant_b.delivery_outbox') AS found;
\set VERBOSITY terse
SELECT outbox_enqueue('agent:p', 'work', '\x47', outbox => 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:p'], ARRAY['work'],
                                   ARRAY['\x48']::bytea[],
                                   outbox => 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT * FROM outbox_claim(outbox => 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_ack(:b2, outbox => 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_ack(ARRAY[:b2]::bigint[], outbox => 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_release(ARRAY[:b2]::bigint[], outbox => 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_reclaim('0 seconds', outbox => 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_reclaim_recipient('agent:q', outbox => 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_reassign('agent:q', 'agent:r', 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_purge('0 seconds', 'tenant_b.delivery_outbox');
\echo :SQLSTATE
\set VERBOSITY default
RESET ROLE;
GRANT INSERT ON tenant_b.delivery_outbox TO regress_outbox_reader;
SET ROLE regress_outbox_reader;
SELECT outbox_enqueue('agent:p', 'work', '\x49', outbox => 'tenant_b.delivery_outbox') AS b4 \gset
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:p'], ARRAY['work'],
                                          ARRAY['\x4a']::bytea[],
                                          outbox => 'tenant_b.delivery_outbox');
\set VERBOSITY terse
SELECT * FROM outbox_claim(outbox => 'tenant_b.delivery_outbox');
\echo :SQLSTATE
\set VERBOSITY default
RESET ROLE;
GRANT UPDATE ON tenant_b.delivery_outbox TO regress_outbox_reader;
SET ROLE regress_outbox_reader;
SELECT id - :b4 AS n, recipient, delivery_state
  FROM outbox_claim(10, 'agent:p', outbox => 'tenant_b.delivery_outbox');
SELECT outbox_release(ARRAY[:b4]::bigint[], outbox => 'tenant_b.delivery_outbox') AS released;
SELECT outbox_reclaim('0 seconds', outbox => 'tenant_b.delivery_outbox') AS reclaimed;
SELECT outbox_reclaim_recipient('agent:q', outbox => 'tenant_b.delivery_outbox') AS resynced;
SELECT outbox_reassign('agent:q', 'agent:p', 'tenant_b.delivery_outbox') AS moved;
SELECT count(*) FROM outbox_claim(10, 'agent:p', outbox => 'tenant_b.delivery_outbox');
SELECT outbox_ack(:b2, outbox => 'tenant_b.delivery_outbox') AS acked;
SELECT outbox_ack(ARRAY[:b3, :b4]::bigint[], outbox => 'tenant_b.delivery_outbox') AS acked;
\set VERBOSITY terse
SELECT outbox_purge('0 seconds', 'tenant_b.delivery_outbox');
\echo :SQLSTATE
\set VERBOSITY default
RESET ROLE;
GRANT DELETE ON tenant_b.delivery_outbox TO regress_outbox_reader;
SET ROLE regress_outbox_reader;
SELECT outbox_purge('0 seconds', 'tenant_b.delivery_outbox') AS purged;
RESET ROLE;
SELECT * FROM outboxes_now;

--
-- outbox_configure: an outbox's channel is an argument of its triggers and
-- shows in the view; channel => '' goes back to delivery_outbox.channel,
-- a NULL channel changes nothing.
--
CREATE VIEW outbox_trigger_args AS
SELECT tgrelid::regclass AS tbl, tgname,
       replace(encode(tgargs, 'escape'), '\000', '|') AS args, tgenabled
  FROM pg_trigger
 WHERE NOT tgisinternal
   AND tgrelid IN ('public.delivery_outbox'::regclass,
                   'tenant_a.delivery_outbox'::regclass,
                   'tenant_b.delivery_outbox'::regclass)
 ORDER BY tgrelid::regclass::text COLLATE "C", tgname;
SELECT * FROM outbox_trigger_args;
SELECT outbox_configure('tenant_a.delivery_outbox', channel => 'tenant_a_wakeups');
SELECT outbox_configure('tenant_b.delivery_outbox', 'tenant_b_wakeups');
SELECT * FROM outbox_trigger_args;
SELECT * FROM outboxes_now;
-- NULL: as it is
SELECT outbox_configure('tenant_a.delivery_outbox');
SELECT outbox_configure('tenant_a.delivery_outbox', NULL);
SELECT * FROM outbox_trigger_args WHERE tbl = 'tenant_a.delivery_outbox'::regclass;
-- '': back to the default channel, which follows delivery_outbox.channel
SELECT outbox_configure('tenant_a.delivery_outbox', channel => '');
SELECT * FROM outbox_trigger_args WHERE tbl = 'tenant_a.delivery_outbox'::regclass;
SET delivery_outbox.channel = 'session_channel';
SELECT * FROM outboxes_now;
RESET delivery_outbox.channel;
-- the default outbox has settings too
SELECT outbox_configure('delivery_outbox', channel => 'default_wakeups');
SELECT * FROM outbox_trigger_args WHERE tbl = 'public.delivery_outbox'::regclass;
SELECT * FROM outboxes_now;
SELECT outbox_configure('public.delivery_outbox', channel => '');
SELECT * FROM outbox_trigger_args WHERE tbl = 'public.delivery_outbox'::regclass;
SELECT * FROM outboxes_now;
-- the owner of an outbox may configure it (and nobody else, above)
GRANT EXECUTE ON FUNCTION outbox_configure(regclass, text, integer, interval, interval, interval, boolean, interval), outbox_detach(regclass)
   TO regress_outbox_creator;
SET ROLE regress_outbox_creator;
SELECT outbox_configure('tenant_own.mine', channel => 'mine_wakeups');
RESET ROLE;
SELECT outbox, channel FROM delivery_outbox_tables
 WHERE outbox = 'tenant_own.mine'::regclass;
-- bad calls
\set VERBOSITY terse
SELECT outbox_configure(NULL, channel => 'x');
\echo :SQLSTATE
SELECT outbox_configure('tenant_a.delivery_outbox', repeat('c', 64));
\echo :SQLSTATE
SET ROLE regress_outbox_creator;
SELECT outbox_configure('tenant_a.delivery_outbox', channel => 'x');
\echo :SQLSTATE
SELECT outbox_configure('delivery_outbox', channel => 'x');
\echo :SQLSTATE
RESET ROLE;
\set VERBOSITY default
SELECT * FROM outbox_trigger_args;
SELECT * FROM outboxes_now;

--
-- A renamed outbox (table or schema) is still the same outbox.
--
ALTER TABLE tenant_b.delivery_outbox RENAME TO renamed_outbox;
ALTER SCHEMA tenant_b RENAME TO tenant_b_renamed;
SELECT outbox, origin, channel FROM delivery_outbox_tables
 WHERE outbox::text LIKE 'tenant_b%';
SELECT outbox_enqueue('agent:v', 'work', '\x51', outbox => 'tenant_b_renamed.renamed_outbox') AS b5 \gset
SELECT id - :b5 AS n, recipient, delivery_state
  FROM outbox_claim(outbox => 'tenant_b_renamed.renamed_outbox');
ALTER SCHEMA tenant_b_renamed RENAME TO tenant_b;
ALTER TABLE tenant_b.renamed_outbox RENAME TO delivery_outbox;
SELECT outbox_ack(:b5, outbox => 'tenant_b.delivery_outbox') AS acked;
SELECT * FROM outboxes_now;

--
-- outbox_detach: the triggers go (the state guard with them), the rows,
-- indexes and defaults stay, the view forgets it, and the functions refuse
-- it (42809).
--
SELECT outbox_detach('tenant_b.delivery_outbox');
SELECT * FROM outbox_trigger_args WHERE tbl = 'tenant_b.delivery_outbox'::regclass;
SELECT * FROM outboxes_now;
SELECT regress_rows('tenant_b.delivery_outbox') AS rows_kept;
SELECT count(*) AS indexes_kept FROM pg_index
 WHERE indrelid = 'tenant_b.delivery_outbox'::regclass;
\set VERBOSITY terse
SELECT outbox_enqueue('agent:w', 'work', '\x52', outbox => 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT * FROM outbox_claim(outbox => 'tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT * FROM outbox_stats('tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_configure('tenant_b.delivery_outbox', channel => 'x');
\echo :SQLSTATE
-- detached twice, NULL, the default outbox
SELECT outbox_detach('tenant_b.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_detach(NULL);
\echo :SQLSTATE
SELECT outbox_detach('delivery_outbox');
\echo :SQLSTATE
SELECT outbox_detach('public.delivery_outbox');
\echo :SQLSTATE
-- not by a role that does not own it
SET ROLE regress_outbox_creator;
SELECT outbox_detach('tenant_a.delivery_outbox');
\echo :SQLSTATE
RESET ROLE;
\set VERBOSITY default
SELECT * FROM outboxes_now;
SELECT * FROM outbox_trigger_args;
-- no guard any more: a plain table takes any update
UPDATE tenant_b.delivery_outbox SET delivery_state = 'pending' WHERE delivery_state = 'acked';
SELECT regress_rows('tenant_b.delivery_outbox') AS rows_now;
-- its owner may detach its own outbox
SET ROLE regress_outbox_creator;
SELECT outbox_detach('tenant_own.mine');
RESET ROLE;
SELECT * FROM outboxes_now;

--
-- outbox_attach of a table that is an outbox already: 42710 (created, or
-- the default outbox); other bad calls
--
\set VERBOSITY terse
SELECT outbox_attach('tenant_a.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_attach('delivery_outbox');
\echo :SQLSTATE
SELECT outbox_attach(NULL);
\echo :SQLSTATE
SELECT outbox_attach('not_outbox_rows');
\echo :SQLSTATE
SELECT outbox_attach('not_an_outbox', '');
\echo :SQLSTATE
SELECT outbox_attach('not_an_outbox', repeat('c', 64));
\echo :SQLSTATE
-- not by a role that does not own the table
SET ROLE regress_outbox_tenant_a;
SELECT outbox_attach('tenant_b.delivery_outbox');
\echo :SQLSTATE
RESET ROLE;
\set VERBOSITY default
SELECT * FROM outboxes_now;
SELECT * FROM not_outbox_rows;
SELECT count(*) AS not_outbox_triggers FROM pg_trigger
 WHERE tgrelid = 'not_an_outbox'::regclass;
-- a detached outbox can be attached again, and a second attach is 42710
SELECT outbox_attach('tenant_own.mine');
\set VERBOSITY terse
SELECT outbox_attach('tenant_own.mine');
\echo :SQLSTATE
\set VERBOSITY default
SELECT * FROM outboxes_now;

--
-- DROP TABLE of an outbox ends it: the view forgets it.  So does DROP
-- SCHEMA ... CASCADE.
--
DROP TABLE tenant_own.created_by_superuser;
SELECT * FROM outboxes_now;
CREATE SCHEMA tenant_gone;
SELECT outbox_create('tenant_gone');
SELECT outbox_create('tenant_gone', 'second');
SELECT count(*) AS outboxes FROM delivery_outbox_tables;
SET client_min_messages = warning;
DROP SCHEMA tenant_gone CASCADE;
RESET client_min_messages;
SELECT count(*) AS outboxes FROM delivery_outbox_tables;
SELECT count(*) AS registry_rows FROM delivery_outbox_registry;

-- The owner drops its own outbox (and any other table of its own): DROP
-- TABLE works for a non-superuser, and the outbox ends.
SET ROLE regress_outbox_creator;
CREATE TABLE tenant_own.scratch (x int);
-- (the event trigger that removes a dropped outbox's registry row runs as
-- the extension's owner)
DROP TABLE tenant_own.scratch;
DROP TABLE tenant_own.mine;
RESET ROLE;
SELECT * FROM outboxes_now;

--
-- Clean up: DROP EXTENSION refuses while outboxes' triggers depend on its
-- functions, so the schemas go first.
--
DROP VIEW outboxes_now, tenant_tables, not_outbox_rows, outbox_trigger_args;
DROP TABLE not_an_outbox;
DROP FUNCTION regress_rows(regclass), regress_shape(regclass);
SET client_min_messages = warning;
DROP SCHEMA tenant_a, tenant_b, tenant_own CASCADE;
RESET client_min_messages;
DROP EXTENSION delivery_outbox;
DROP ROLE regress_outbox_creator;
DROP ROLE regress_outbox_tenant_a;
DROP ROLE regress_outbox_tenant_b;
DROP ROLE regress_outbox_reader;
