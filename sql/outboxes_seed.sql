--
-- outboxes_seed.sql: taking over the seed system's own table with
-- outbox_attach(), and the seed's data-layer statements, as it writes them,
-- on an attached and on a created outbox
--
-- The seed (cloacina) makes its table with migrations 027 and 028 in each
-- tenant schema and runs its DAL under SET search_path TO <tenant>, public.
-- Its timestamps are "timestamp" (without time zone) holding UTC.  The
-- statements are PREPAREd here as the seed binds them ($now is an
-- app-side timestamp), under the search_path of the schema they are for.
-- UPDATEs report their row count (:ROW_COUNT); lists are kept with CREATE
-- TEMP TABLE ... AS EXECUTE and looked at with the bookkeeping timestamps
-- as facts.
--
CREATE EXTENSION delivery_outbox;

\set VERBOSITY default
\set SHOW_CONTEXT never

-- The seed's migration 027 (the table, its indexes) and 028 (its NOTIFY
-- trigger), in schema s.
CREATE FUNCTION regress_seed_migrations(s name) RETURNS void
LANGUAGE plpgsql SET search_path = public AS $f$
BEGIN
    EXECUTE format('SET LOCAL search_path TO %I, public', s);
    CREATE TABLE delivery_outbox (
        id BIGSERIAL PRIMARY KEY,
        recipient TEXT NOT NULL,
        kind TEXT NOT NULL,
        tenant_id TEXT NULL,
        payload BYTEA NOT NULL,
        delivery_state TEXT NOT NULL DEFAULT 'pending',
        delivery_attempts INTEGER NOT NULL DEFAULT 0,
        created_at TIMESTAMP NOT NULL,
        delivered_at TIMESTAMP NULL,
        acked_at TIMESTAMP NULL
    );
    CREATE INDEX idx_delivery_outbox_recipient_open
        ON delivery_outbox (recipient, id) WHERE delivery_state <> 'acked';
    CREATE INDEX idx_delivery_outbox_open_age
        ON delivery_outbox (delivery_state, created_at) WHERE delivery_state <> 'acked';
    CREATE OR REPLACE FUNCTION delivery_outbox_notify() RETURNS trigger AS $$
    BEGIN
        PERFORM pg_notify('delivery_outbox', NEW.id::text);
        RETURN NEW;
    END;
    $$ LANGUAGE plpgsql;
    CREATE TRIGGER delivery_outbox_notify_trg
        AFTER INSERT ON delivery_outbox
        FOR EACH ROW EXECUTE FUNCTION delivery_outbox_notify();
END
$f$;

-- Everything outbox_attach() may touch on a table, as one text: the
-- relfilenode, the columns with their defaults, the indexes, the triggers
-- and whether they are enabled, the registry row, the rows.
CREATE FUNCTION regress_table_state(t regclass) RETURNS text
LANGUAGE plpgsql SET search_path = public AS $f$
DECLARE
    r text;
    rows text;
BEGIN
    EXECUTE format('SELECT string_agg(o::text, %L ORDER BY o.id) FROM %s o', ' ', t)
       INTO rows;
    SELECT concat_ws(' | ',
        'filenode=' || pg_relation_filenode(t),
        (SELECT string_agg(format('%s %s default=%s', a.attname,
                                  format_type(a.atttypid, a.atttypmod),
                                  pg_get_expr(d.adbin, d.adrelid)), ', '
                           ORDER BY a.attnum)
           FROM pg_attribute a
           LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
          WHERE a.attrelid = t AND a.attnum > 0 AND NOT a.attisdropped),
        (SELECT string_agg(pg_get_indexdef(indexrelid), ', ' ORDER BY indexrelid)
           FROM pg_index WHERE indrelid = t),
        (SELECT string_agg(tgname || '=' || tgenabled::text, ', ' ORDER BY tgname)
           FROM pg_trigger WHERE tgrelid = t AND NOT tgisinternal),
        (SELECT 'registered=' || count(*) FROM delivery_outbox_registry
          WHERE outbox = t),
        rows) INTO r;
    RETURN r;
END
$f$;

-- The indexes and triggers of a table, one a line.
CREATE FUNCTION regress_indexes(t regclass)
RETURNS TABLE (index_name name, definition text) LANGUAGE sql AS $f$
    SELECT c.relname, regexp_replace(pg_get_indexdef(i.indexrelid),
                                     '^.* USING ', '')
      FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
     WHERE i.indrelid = t ORDER BY c.relname
$f$;
CREATE FUNCTION regress_triggers(t regclass)
RETURNS TABLE (tgname name, tgenabled "char", args text) LANGUAGE sql AS $f$
    SELECT tgname, tgenabled, replace(encode(tgargs, 'escape'), '\000', '|')
      FROM pg_trigger WHERE tgrelid = t AND NOT tgisinternal ORDER BY tgname
$f$;

CREATE SCHEMA app;
SELECT regress_seed_migrations('app');

--
-- The seed's data-layer statements, as written, PREPAREd (again) under the
-- search_path in force: a prepared statement keeps its result type, so
-- each schema's table (timestamp or timestamptz columns) gets them afresh.
--
CREATE FUNCTION regress_prepare_dal() RETURNS void
LANGUAGE plpgsql AS $f$
BEGIN
    DEALLOCATE ALL;
    EXECUTE $dal$
    PREPARE seed_insert(text, text, text, bytea, timestamp) AS
        INSERT INTO delivery_outbox
            (recipient, kind, tenant_id, payload, delivery_state,
             delivery_attempts, created_at)
        VALUES ($1, $2, $3, $4, 'pending', 0, $5)
        RETURNING id, recipient, kind, tenant_id, payload, delivery_state,
                  delivery_attempts, created_at, delivered_at, acked_at
    $dal$;
    EXECUTE $dal$
    PREPARE mark_delivered(bigint, timestamp) AS
        UPDATE delivery_outbox
           SET delivery_state = 'delivered', delivered_at = $2,
               delivery_attempts = delivery_attempts + 1
         WHERE id = $1 AND delivery_state = 'pending'
    $dal$;
    EXECUTE $dal$
    PREPARE mark_acked(bigint, timestamp) AS
        UPDATE delivery_outbox
           SET delivery_state = 'acked', acked_at = $2
         WHERE id = $1 AND delivery_state <> 'acked'
    $dal$;
    EXECUTE $dal$
    PREPARE reset_to_pending(bigint) AS
        UPDATE delivery_outbox
           SET delivery_state = 'pending'
         WHERE id = $1 AND delivery_state = 'delivered'
    $dal$;
    EXECUTE $dal$
    PREPARE resync_tenant(text, text) AS
        UPDATE delivery_outbox
           SET delivery_state = 'pending'
         WHERE recipient = $1 AND delivery_state = 'delivered' AND tenant_id = $2
    $dal$;
    EXECUTE $dal$
    PREPARE resync_global(text) AS
        UPDATE delivery_outbox
           SET delivery_state = 'pending'
         WHERE recipient = $1 AND delivery_state = 'delivered' AND tenant_id IS NULL
    $dal$;
    EXECUTE $dal$
    PREPARE reassign_open_rows(text, text) AS
        UPDATE delivery_outbox
           SET recipient = $2, delivery_state = 'pending', delivered_at = NULL
         WHERE recipient = $1 AND delivery_state <> 'acked'
    $dal$;
    EXECUTE $dal$
    PREPARE list_pending AS
        SELECT id, recipient, kind, tenant_id, payload, delivery_state,
               delivery_attempts, created_at, delivered_at, acked_at
          FROM delivery_outbox
         WHERE delivery_state = 'pending'
         ORDER BY id LIMIT 256
    $dal$;
    EXECUTE $dal$
    PREPARE list_open_for_recipient(text) AS
        SELECT id, recipient, kind, tenant_id, payload, delivery_state,
               delivery_attempts, created_at, delivered_at, acked_at
          FROM delivery_outbox
         WHERE recipient = $1 AND delivery_state <> 'acked'
         ORDER BY id
    $dal$;
    EXECUTE $dal$
    PREPARE list_stuck(timestamp) AS
        SELECT id, recipient, kind, tenant_id, payload, delivery_state,
               delivery_attempts, created_at, delivered_at, acked_at
          FROM delivery_outbox
         WHERE delivery_state <> 'acked' AND created_at < $1
         ORDER BY created_at, id
    $dal$;
    EXECUTE $dal$
    PREPARE count_open AS
        SELECT count(*) FROM delivery_outbox WHERE delivery_state <> 'acked'
    $dal$;
END
$f$;

--
-- Before attach: the seed's own statements make rows in every state (no
-- guard yet, the app's $now everywhere)
--
SET search_path TO app, public;
SELECT regress_prepare_dal();
EXECUTE seed_insert('agent:1', 'work', NULL, '\x01', '2000-01-01 00:00:01');
EXECUTE seed_insert('agent:1', 'work', 't1', '\x02', '2000-01-01 00:00:02');
EXECUTE seed_insert('agent:2', 'execution_event', 't1', '\x03', '2000-01-01 00:00:03');
EXECUTE seed_insert('agent:2', 'work', NULL, '\x04', '2000-01-01 00:00:04');
EXECUTE seed_insert('agent:3', 'work', NULL, '\x05', '2000-01-01 00:00:05');
EXECUTE seed_insert('agent:3', 'work', 't1', '\x06', '2000-01-01 00:00:06');
-- 2 delivered; 3 delivered and acked; 4 delivered and reset to pending;
-- 5 acked straight from pending (the seed allows it); 1 and 6 pending
EXECUTE mark_delivered(2, '2000-01-01 00:01:02');
EXECUTE mark_delivered(3, '2000-01-01 00:01:03');
EXECUTE mark_acked(3, '2000-01-01 00:02:03');
EXECUTE mark_delivered(4, '2000-01-01 00:01:04');
EXECUTE reset_to_pending(4);
EXECUTE mark_acked(5, '2000-01-01 00:02:05');
RESET search_path;
SELECT * FROM app.delivery_outbox ORDER BY id;

SELECT pg_relation_filenode('app.delivery_outbox') AS filenode_before \gset
SELECT regress_table_state('app.delivery_outbox') AS app_before \gset

--
-- Attach: rows kept, no rewrite, the seed's indexes kept and the claims'
-- added, created_at given a default (UTC), the seed's NOTIFY trigger
-- disabled (our own trigger wakes relays), the registry row made
--
SELECT outbox_attach('app.delivery_outbox');
SELECT pg_relation_filenode('app.delivery_outbox') = :filenode_before AS same_filenode;
SELECT * FROM regress_indexes('app.delivery_outbox');
SELECT * FROM regress_triggers('app.delivery_outbox');
SELECT attname, pg_get_expr(adbin, adrelid) AS column_default
  FROM pg_attrdef JOIN pg_attribute ON attrelid = adrelid AND attnum = adnum
 WHERE adrelid = 'app.delivery_outbox'::regclass ORDER BY attnum;
SELECT outbox, origin, channel, channel_is_default FROM delivery_outbox_tables
 ORDER BY outbox::text COLLATE "C";
SELECT outbox::text, origin, channel, disabled_triggers FROM delivery_outbox_registry;
-- the rows are exactly as they were
SELECT * FROM app.delivery_outbox ORDER BY id;
-- attached twice: 42710, and nothing changes
SELECT regress_table_state('app.delivery_outbox') AS app_attached \gset
\set VERBOSITY terse
SELECT outbox_attach('app.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_attach('app.delivery_outbox', 'other_channel');
\echo :SQLSTATE
\set VERBOSITY default
SELECT regress_table_state('app.delivery_outbox') = :'app_attached' AS unchanged;

--
-- Tables outbox_attach() refuses, each left exactly as it was: the same
-- relfilenode, columns, defaults, indexes, triggers (the seed's still
-- enabled) and rows, and no registry row
--
CREATE SCHEMA bad;
CREATE FUNCTION regress_bad_table(kind text) RETURNS regclass
LANGUAGE plpgsql SET client_min_messages = warning AS $f$
BEGIN
    DROP TABLE IF EXISTS bad.delivery_outbox;
    PERFORM regress_seed_migrations('bad');
    CASE kind
    WHEN 'no acked_at' THEN
        ALTER TABLE bad.delivery_outbox DROP COLUMN acked_at;
    WHEN 'no recipient' THEN
        ALTER TABLE bad.delivery_outbox DROP COLUMN recipient;
    WHEN 'attempts bigint' THEN
        ALTER TABLE bad.delivery_outbox ALTER COLUMN delivery_attempts TYPE bigint;
    WHEN 'payload text' THEN
        ALTER TABLE bad.delivery_outbox ALTER COLUMN payload TYPE text;
    WHEN 'id integer' THEN
        ALTER TABLE bad.delivery_outbox ALTER COLUMN id TYPE integer;
    WHEN 'created_at date' THEN
        ALTER TABLE bad.delivery_outbox ALTER COLUMN created_at TYPE date;
    WHEN 'mixed timestamps' THEN
        ALTER TABLE bad.delivery_outbox ALTER COLUMN acked_at TYPE timestamptz;
    WHEN 'kind nullable' THEN
        ALTER TABLE bad.delivery_outbox ALTER COLUMN kind DROP NOT NULL;
    WHEN 'created_at nullable' THEN
        ALTER TABLE bad.delivery_outbox ALTER COLUMN created_at DROP NOT NULL;
    WHEN 'no unique id' THEN
        ALTER TABLE bad.delivery_outbox DROP CONSTRAINT delivery_outbox_pkey,
                                        ALTER COLUMN id SET NOT NULL;
    WHEN 'id unique with a predicate' THEN
        ALTER TABLE bad.delivery_outbox DROP CONSTRAINT delivery_outbox_pkey,
                                        ALTER COLUMN id SET NOT NULL;
        CREATE UNIQUE INDEX ON bad.delivery_outbox (id) WHERE delivery_state <> 'acked';
    WHEN 'id without sequence' THEN
        ALTER TABLE bad.delivery_outbox ALTER COLUMN id DROP DEFAULT;
    ELSE
        NULL;
    END CASE;
    IF kind NOT IN ('no recipient', 'id without sequence') THEN
        INSERT INTO bad.delivery_outbox (recipient, kind, payload, created_at)
        VALUES ('agent:b', 'work', '\x01', '2000-01-01');
    END IF;
    RETURN 'bad.delivery_outbox'::regclass;
END
$f$;

SELECT regress_table_state(regress_bad_table('no acked_at')) AS before \gset
\set VERBOSITY terse
SELECT outbox_attach('bad.delivery_outbox');
\echo :SQLSTATE
\set VERBOSITY default
SELECT regress_table_state('bad.delivery_outbox') = :'before' AS unchanged;
SELECT regress_table_state(regress_bad_table('no recipient')) AS before \gset
\set VERBOSITY terse
SELECT outbox_attach('bad.delivery_outbox');
\echo :SQLSTATE
\set VERBOSITY default
SELECT regress_table_state('bad.delivery_outbox') = :'before' AS unchanged;
SELECT regress_table_state(regress_bad_table('attempts bigint')) AS before \gset
\set VERBOSITY terse
SELECT outbox_attach('bad.delivery_outbox');
\echo :SQLSTATE
\set VERBOSITY default
SELECT regress_table_state('bad.delivery_outbox') = :'before' AS unchanged;
SELECT regress_table_state(regress_bad_table('payload text')) AS before \gset
\set VERBOSITY terse
SELECT outbox_attach('bad.delivery_outbox');
\echo :SQLSTATE
\set VERBOSITY default
SELECT regress_table_state('bad.delivery_outbox') = :'before' AS unchanged;
SELECT regress_table_state(regress_bad_table('id integer')) AS before \gset
\set VERBOSITY terse
SELECT outbox_attach('bad.delivery_outbox');
\echo :SQLSTATE
\set VERBOSITY default
SELECT regress_table_state('bad.delivery_outbox') = :'before' AS unchanged;
SELECT regress_table_state(regress_bad_table('created_at date')) AS before \gset
\set VERBOSITY terse
SELECT outbox_attach('bad.delivery_outbox');
\echo :SQLSTATE
\set VERBOSITY default
SELECT regress_table_state('bad.delivery_outbox') = :'before' AS unchanged;
SELECT regress_table_state(regress_bad_table('mixed timestamps')) AS before \gset
SELECT outbox_attach('bad.delivery_outbox');
\echo :SQLSTATE
SELECT regress_table_state('bad.delivery_outbox') = :'before' AS unchanged;
SELECT regress_table_state(regress_bad_table('kind nullable')) AS before \gset
\set VERBOSITY terse
SELECT outbox_attach('bad.delivery_outbox');
\echo :SQLSTATE
\set VERBOSITY default
SELECT regress_table_state('bad.delivery_outbox') = :'before' AS unchanged;
SELECT regress_table_state(regress_bad_table('created_at nullable')) AS before \gset
\set VERBOSITY terse
SELECT outbox_attach('bad.delivery_outbox');
\echo :SQLSTATE
\set VERBOSITY default
SELECT regress_table_state('bad.delivery_outbox') = :'before' AS unchanged;
SELECT regress_table_state(regress_bad_table('no unique id')) AS before \gset
SELECT outbox_attach('bad.delivery_outbox');
\echo :SQLSTATE
SELECT regress_table_state('bad.delivery_outbox') = :'before' AS unchanged;
SELECT regress_table_state(regress_bad_table('id unique with a predicate')) AS before \gset
\set VERBOSITY terse
SELECT outbox_attach('bad.delivery_outbox');
\echo :SQLSTATE
\set VERBOSITY default
SELECT regress_table_state('bad.delivery_outbox') = :'before' AS unchanged;
SELECT regress_table_state(regress_bad_table('id without sequence')) AS before \gset
SELECT outbox_attach('bad.delivery_outbox');
\echo :SQLSTATE
SELECT regress_table_state('bad.delivery_outbox') = :'before' AS unchanged;
SELECT count(*) AS registry_rows FROM delivery_outbox_registry
 WHERE outbox::text LIKE 'bad.%';

--
-- Rows that break the rules: 23514, the first offending ids (ten at most)
-- in DETAIL, and nothing changes.  The seed's own statements make the
-- first kind: reassign_open_rows on a delivered row leaves it pending with
-- delivery_attempts >= 1 and delivered_at NULL.
--
SELECT regress_bad_table('rows') IS NOT NULL AS made;
SET search_path TO bad, public;
SELECT regress_prepare_dal();
-- 2 and 3: valid rows, delivered and acked
EXECUTE seed_insert('agent:r', 'work', NULL, '\x02', '2000-01-01 00:00:00');
EXECUTE mark_delivered(2, '2000-01-01 00:01:00');
EXECUTE seed_insert('agent:r', 'work', NULL, '\x03', '2000-01-01 00:00:00');
EXECUTE mark_delivered(3, '2000-01-01 00:01:00');
EXECUTE mark_acked(3, '2000-01-01 00:02:00');
-- 4: delivered, then re-addressed by the seed: pending, 1 attempt, no
-- delivered_at
EXECUTE seed_insert('agent:dead', 'work', NULL, '\x04', '2000-01-01 00:00:00');
EXECUTE mark_delivered(4, '2000-01-01 00:01:00');
EXECUTE reassign_open_rows('agent:dead', 'agent:new');
RESET search_path;
-- 5..16: hand-made rows that break the rules in every other way
INSERT INTO bad.delivery_outbox (id, recipient, kind, payload, delivery_state,
                                 delivery_attempts, created_at, delivered_at,
                                 acked_at)
VALUES (5, 'agent:h', 'work', '\x05', 'delivered', 1, '2000-01-01', NULL, NULL),
       (6, 'agent:h', 'work', '\x06', 'delivered', 0, '2000-01-01', '2000-01-01', NULL),
       (7, 'agent:h', 'work', '\x07', 'delivered', 1, '2000-01-01', '2000-01-01', '2000-01-01'),
       (8, 'agent:h', 'work', '\x08', 'acked', 1, '2000-01-01', '2000-01-01', NULL),
       (9, 'agent:h', 'work', '\x09', 'pending', 0, '2000-01-01', '2000-01-01', NULL),
       (10, 'agent:h', 'work', '\x0a', 'pending', 0, '2000-01-01', NULL, '2000-01-01'),
       (11, 'agent:h', 'work', '\x0b', 'failed', 1, '2000-01-01', '2000-01-01', NULL),
       (12, 'agent:h', 'work', '\x0c', 'Pending', 0, '2000-01-01', NULL, NULL),
       (13, 'agent:h', 'work', '\x0d', 'pending', -1, '2000-01-01', NULL, NULL),
       (14, 'agent:h', 'work', '\x0e', 'acked', -1, '2000-01-01', NULL, '2000-01-01'),
       (15, 'agent:h', 'work', '\x0f', 'pending', 2, '2000-01-01', NULL, NULL),
       (16, 'agent:h', 'work', '\x10', 'delivered', 1, '2000-01-01', NULL, NULL),
       -- and valid ones after them
       (17, 'agent:h', 'work', '\x11', 'acked', 0, '2000-01-01', NULL, '2000-01-01'),
       (18, 'agent:h', 'work', '\x12', 'pending', 3, '2000-01-01', '2000-01-01', NULL);
SELECT id, delivery_state, delivery_attempts, delivered_at IS NOT NULL AS has_delivered_at,
       acked_at IS NOT NULL AS has_acked_at
  FROM bad.delivery_outbox ORDER BY id;
SELECT regress_table_state('bad.delivery_outbox') AS before \gset
SELECT outbox_attach('bad.delivery_outbox');
\echo :SQLSTATE
SELECT regress_table_state('bad.delivery_outbox') = :'before' AS unchanged;
-- the first offending row alone
DELETE FROM bad.delivery_outbox WHERE id >= 5 AND id <= 16;
SELECT regress_table_state('bad.delivery_outbox') AS before \gset
SELECT outbox_attach('bad.delivery_outbox');
\echo :SQLSTATE
SELECT regress_table_state('bad.delivery_outbox') = :'before' AS unchanged;
SELECT count(*) AS registry_rows FROM delivery_outbox_registry
 WHERE outbox::text LIKE 'bad.%';

-- The repair the HINT gives, then attach works (with a channel of its own;
-- the defaults for delivery_state and delivery_attempts, missing here, are
-- added too).
UPDATE bad.delivery_outbox SET delivered_at = created_at
 WHERE delivery_state = 'pending' AND delivery_attempts > 0 AND delivered_at IS NULL;
ALTER TABLE bad.delivery_outbox ALTER COLUMN delivery_state DROP DEFAULT,
                                ALTER COLUMN delivery_attempts DROP DEFAULT;
SELECT outbox_attach('bad.delivery_outbox', channel => 'bad_wakeups');
SELECT attname, pg_get_expr(adbin, adrelid) AS column_default
  FROM pg_attrdef JOIN pg_attribute ON attrelid = adrelid AND attnum = adnum
 WHERE adrelid = 'bad.delivery_outbox'::regclass ORDER BY attnum;
SELECT * FROM regress_triggers('bad.delivery_outbox');
SELECT outbox, origin, channel, channel_is_default FROM delivery_outbox_tables
 ORDER BY outbox::text COLLATE "C";
SELECT outbox_detach('bad.delivery_outbox');
SET client_min_messages = warning;
DROP SCHEMA bad CASCADE;
RESET client_min_messages;

--
-- Every seed DAL statement on the attached table, with the session in a
-- time zone far from UTC: what the trigger writes into the "timestamp"
-- columns is UTC wall time, and the API returns timestamptz values that
-- are that UTC time.  Rows 7 and 8 are new; 1..6 are from before attach.
--
SET TimeZone = 'Asia/Kolkata';
SET search_path TO app, public;
SELECT regress_prepare_dal();
EXECUTE seed_insert('agent:4', 'work', NULL, '\x07', '2000-01-01 00:00:07');
EXECUTE seed_insert('agent:4', 'work', 't1', '\x08', '2000-01-01 00:00:08');

-- list_pending: 1, 4, 6, 7, 8
CREATE TEMP TABLE listed AS EXECUTE list_pending;
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts,
       delivered_at IS NOT NULL AS has_delivered_at FROM listed ORDER BY id;
DROP TABLE listed;

-- mark_delivered: one attempt, counted by the trigger (+1, not +2); the
-- app's $now is replaced by the trigger's time, UTC wall time
EXECUTE mark_delivered(7, '2000-01-01 00:01:07');
\echo :ROW_COUNT
SELECT id, delivery_state, delivery_attempts,
       delivered_at <> '2000-01-01 00:01:07' AS not_the_apps_now,
       abs(extract(epoch FROM delivered_at - (now() AT TIME ZONE 'UTC'))) < 60 AS utc_wall_time,
       abs(extract(epoch FROM delivered_at - localtimestamp)) > 3600 AS not_local_time
  FROM delivery_outbox WHERE id = 7;
-- a second mark_delivered finds no pending row
EXECUTE mark_delivered(7, '2000-01-01 00:01:07');
\echo :ROW_COUNT
SELECT id, delivery_state, delivery_attempts FROM delivery_outbox WHERE id = 7;

-- mark_acked on a pending row: the state guard refuses pending -> acked
\set VERBOSITY terse
EXECUTE mark_acked(8, '2000-01-01 00:02:08');
\echo :SQLSTATE
\set VERBOSITY default
SELECT id, delivery_state, delivery_attempts, acked_at IS NULL AS no_acked_at
  FROM delivery_outbox WHERE id = 8;
-- on a delivered row it acks (acked_at the trigger's, UTC); acked twice: 0
EXECUTE mark_acked(7, '2000-01-01 00:02:07');
\echo :ROW_COUNT
SELECT id, delivery_state, delivery_attempts,
       acked_at <> '2000-01-01 00:02:07' AS not_the_apps_now,
       abs(extract(epoch FROM acked_at - (now() AT TIME ZONE 'UTC'))) < 60 AS utc_wall_time
  FROM delivery_outbox WHERE id = 7;
EXECUTE mark_acked(7, '2000-01-01 00:02:07');
\echo :ROW_COUNT
-- the state guard: an acked row never changes again
\set VERBOSITY terse
UPDATE delivery_outbox SET delivery_state = 'pending' WHERE id = 7;
\echo :SQLSTATE
\set VERBOSITY default

-- reset_to_pending: delivered -> pending (attempts and delivered_at kept);
-- on a pending row it finds nothing
EXECUTE mark_delivered(8, '2000-01-01 00:01:08');
\echo :ROW_COUNT
EXECUTE reset_to_pending(8);
\echo :ROW_COUNT
EXECUTE reset_to_pending(8);
\echo :ROW_COUNT
SELECT id, delivery_state, delivery_attempts,
       abs(extract(epoch FROM delivered_at - (now() AT TIME ZONE 'UTC'))) < 60 AS utc_wall_time
  FROM delivery_outbox WHERE id = 8;

-- resync per (recipient, tenant): row 2 (agent:1, tenant t1) is delivered
-- since before attach; the NULL-tenant variant does not touch it
EXECUTE mark_delivered(1, '2000-01-01 00:01:01');
\echo :ROW_COUNT
EXECUTE resync_tenant('agent:1', 't2');
\echo :ROW_COUNT
EXECUTE resync_tenant('agent:1', 't1');
\echo :ROW_COUNT
SELECT id, tenant_id, delivery_state, delivery_attempts FROM delivery_outbox
 WHERE recipient = 'agent:1' ORDER BY id;
EXECUTE resync_global('agent:1');
\echo :ROW_COUNT
EXECUTE resync_global('agent:1');
\echo :ROW_COUNT
SELECT id, tenant_id, delivery_state, delivery_attempts FROM delivery_outbox
 WHERE recipient = 'agent:1' ORDER BY id;

-- reassign_open_rows: agent:1's open rows go to agent:6 as pending; the
-- seed's delivered_at = NULL is the trigger's to decide: it keeps the last
-- delivery time, so the rows stay valid (a pending row with attempts has
-- delivered_at)
EXECUTE mark_delivered(2, '2000-01-01 00:01:02');
\echo :ROW_COUNT
EXECUTE reassign_open_rows('agent:1', 'agent:6');
\echo :ROW_COUNT
SELECT id, recipient, delivery_state, delivery_attempts,
       delivered_at IS NOT NULL AS has_delivered_at
  FROM delivery_outbox WHERE recipient IN ('agent:1', 'agent:6') ORDER BY id;
-- (agent:2's acked row 3 stays with agent:2; its pending row 4 moves)
EXECUTE reassign_open_rows('agent:2', 'agent:6');
\echo :ROW_COUNT
SELECT id, recipient, delivery_state FROM delivery_outbox
 WHERE id IN (3, 4) ORDER BY id;

-- list_open_for_recipient, list_stuck, count_open
CREATE TEMP TABLE listed AS EXECUTE list_open_for_recipient('agent:6');
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts FROM listed ORDER BY id;
DROP TABLE listed;
CREATE TEMP TABLE listed AS EXECUTE list_stuck('2000-01-01 00:00:05');
SELECT id, recipient, delivery_state, created_at FROM listed ORDER BY created_at, id;
DROP TABLE listed;
EXECUTE count_open;

-- The API on the same table: it claims what the seed left pending; the
-- rows come back as timestamptz, the UTC times of the table's values.
-- (kept first: a query joining the claim to the table would see the rows
-- as they were before it)
CREATE TEMP TABLE claimed AS SELECT * FROM outbox_claim(2, outbox => 'delivery_outbox');
SELECT c.id, c.recipient, c.delivery_state, c.delivery_attempts,
       pg_typeof(c.delivered_at) AS returned_type,
       c.created_at = (o.created_at AT TIME ZONE 'UTC') AS created_at_utc,
       c.delivered_at = (o.delivered_at AT TIME ZONE 'UTC') AS delivered_at_utc,
       abs(extract(epoch FROM c.delivered_at - now())) < 60 AS delivered_now
  FROM claimed c JOIN delivery_outbox o ON o.id = c.id
 ORDER BY c.id;
DROP TABLE claimed;
SELECT created_at FROM outbox_replay('agent:6', 0, 1, outbox => 'delivery_outbox');
SELECT outbox_enqueue('agent:7', 'work', '\x09', 't1', outbox => 'delivery_outbox') AS api_id \gset
SELECT abs(extract(epoch FROM created_at - (now() AT TIME ZONE 'UTC'))) < 60 AS created_at_utc,
       delivery_state, delivery_attempts
  FROM delivery_outbox WHERE id = :api_id;
-- ages and cutoffs are measured in UTC, whatever TimeZone says
SELECT pending, delivered, acked,
       oldest_delivered_age < '1 minute' AS delivered_age_small
  FROM outbox_stats('delivery_outbox');
SELECT outbox_reclaim('1 hour', outbox => 'delivery_outbox') AS reclaimed_none;
SET TimeZone = 'America/Sao_Paulo';
SELECT pending, delivered, acked,
       oldest_delivered_age < '1 minute' AS delivered_age_small
  FROM outbox_stats('delivery_outbox');
SELECT outbox_reclaim('0 seconds', outbox => 'delivery_outbox') AS reclaimed;
SELECT id, recipient FROM outbox_claim(1, 'agent:7', 't1', 'delivery_outbox');
SELECT outbox_ack(:api_id, 'agent:7', 'delivery_outbox') AS acked;
SELECT abs(extract(epoch FROM acked_at - (now() AT TIME ZONE 'UTC'))) < 60 AS acked_at_utc
  FROM delivery_outbox WHERE id = :api_id;
-- (rows 3 and 5 were acked by the seed, with the app's $now of 2000)
SELECT outbox_purge('1 hour', 'delivery_outbox') AS purged_old;
SELECT outbox_purge('0 seconds', 'delivery_outbox') AS purged;
SET TimeZone = 'Asia/Kolkata';
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts,
       delivered_at IS NOT NULL AS has_delivered_at,
       acked_at IS NOT NULL AS has_acked_at
  FROM delivery_outbox ORDER BY id;
RESET search_path;

--
-- Exactly the same statements on a created outbox (timestamptz columns):
-- the same outcomes
--
CREATE SCHEMA fresh;
SELECT outbox_create('fresh');
SET search_path TO fresh, public;
SELECT regress_prepare_dal();
EXECUTE seed_insert('agent:1', 'work', NULL, '\x01', '2000-01-01 00:00:01');
EXECUTE seed_insert('agent:1', 'work', 't1', '\x02', '2000-01-01 00:00:02');
EXECUTE seed_insert('agent:2', 'execution_event', 't1', '\x03', '2000-01-01 00:00:03');
EXECUTE seed_insert('agent:2', 'work', NULL, '\x04', '2000-01-01 00:00:04');
EXECUTE seed_insert('agent:4', 'work', NULL, '\x07', '2000-01-01 00:00:07');
EXECUTE seed_insert('agent:4', 'work', 't1', '\x08', '2000-01-01 00:00:08');
SELECT count(*) AS in_fresh FROM fresh.delivery_outbox;
SELECT count(*) AS in_app FROM app.delivery_outbox;

CREATE TEMP TABLE listed AS EXECUTE list_pending;
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts,
       delivered_at IS NOT NULL AS has_delivered_at FROM listed ORDER BY id;
DROP TABLE listed;

EXECUTE mark_delivered(5, '2000-01-01 00:01:07');
\echo :ROW_COUNT
SELECT id, delivery_state, delivery_attempts,
       delivered_at <> '2000-01-01 00:01:07' AS not_the_apps_now,
       abs(extract(epoch FROM delivered_at - now())) < 60 AS delivered_now
  FROM delivery_outbox WHERE id = 5;
EXECUTE mark_delivered(5, '2000-01-01 00:01:07');
\echo :ROW_COUNT
SELECT id, delivery_state, delivery_attempts FROM delivery_outbox WHERE id = 5;

\set VERBOSITY terse
EXECUTE mark_acked(6, '2000-01-01 00:02:08');
\echo :SQLSTATE
\set VERBOSITY default
SELECT id, delivery_state, delivery_attempts, acked_at IS NULL AS no_acked_at
  FROM delivery_outbox WHERE id = 6;
EXECUTE mark_acked(5, '2000-01-01 00:02:07');
\echo :ROW_COUNT
SELECT id, delivery_state, delivery_attempts,
       acked_at <> '2000-01-01 00:02:07' AS not_the_apps_now,
       abs(extract(epoch FROM acked_at - now())) < 60 AS acked_now
  FROM delivery_outbox WHERE id = 5;
EXECUTE mark_acked(5, '2000-01-01 00:02:07');
\echo :ROW_COUNT
\set VERBOSITY terse
UPDATE delivery_outbox SET delivery_state = 'pending' WHERE id = 5;
\echo :SQLSTATE
\set VERBOSITY default

EXECUTE mark_delivered(6, '2000-01-01 00:01:08');
\echo :ROW_COUNT
EXECUTE reset_to_pending(6);
\echo :ROW_COUNT
EXECUTE reset_to_pending(6);
\echo :ROW_COUNT
SELECT id, delivery_state, delivery_attempts,
       abs(extract(epoch FROM delivered_at - now())) < 60 AS delivered_now
  FROM delivery_outbox WHERE id = 6;

EXECUTE mark_delivered(1, '2000-01-01 00:01:01');
\echo :ROW_COUNT
EXECUTE mark_delivered(2, '2000-01-01 00:01:02');
\echo :ROW_COUNT
EXECUTE resync_tenant('agent:1', 't2');
\echo :ROW_COUNT
EXECUTE resync_tenant('agent:1', 't1');
\echo :ROW_COUNT
SELECT id, tenant_id, delivery_state, delivery_attempts FROM delivery_outbox
 WHERE recipient = 'agent:1' ORDER BY id;
EXECUTE resync_global('agent:1');
\echo :ROW_COUNT
EXECUTE resync_global('agent:1');
\echo :ROW_COUNT
SELECT id, tenant_id, delivery_state, delivery_attempts FROM delivery_outbox
 WHERE recipient = 'agent:1' ORDER BY id;

EXECUTE mark_delivered(2, '2000-01-01 00:01:02');
\echo :ROW_COUNT
EXECUTE reassign_open_rows('agent:1', 'agent:6');
\echo :ROW_COUNT
SELECT id, recipient, delivery_state, delivery_attempts,
       delivered_at IS NOT NULL AS has_delivered_at
  FROM delivery_outbox WHERE recipient IN ('agent:1', 'agent:6') ORDER BY id;
EXECUTE mark_delivered(3, '2000-01-01 00:01:03');
\echo :ROW_COUNT
EXECUTE mark_acked(3, '2000-01-01 00:02:03');
\echo :ROW_COUNT
EXECUTE reassign_open_rows('agent:2', 'agent:6');
\echo :ROW_COUNT
SELECT id, recipient, delivery_state FROM delivery_outbox
 WHERE id IN (3, 4) ORDER BY id;

CREATE TEMP TABLE listed AS EXECUTE list_open_for_recipient('agent:6');
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts FROM listed ORDER BY id;
DROP TABLE listed;
-- (a timestamp parameter against timestamptz: read in the session's zone)
CREATE TEMP TABLE listed AS EXECUTE list_stuck('2000-01-01 00:00:05');
SELECT id, recipient, delivery_state, created_at FROM listed ORDER BY created_at, id;
DROP TABLE listed;
EXECUTE count_open;

CREATE TEMP TABLE claimed AS SELECT * FROM outbox_claim(2, outbox => 'delivery_outbox');
SELECT c.id, c.recipient, c.delivery_state, c.delivery_attempts,
       pg_typeof(c.delivered_at) AS returned_type,
       c.created_at = o.created_at AS same_created_at,
       c.delivered_at = o.delivered_at AS same_delivered_at,
       abs(extract(epoch FROM c.delivered_at - now())) < 60 AS delivered_now
  FROM claimed c JOIN delivery_outbox o ON o.id = c.id
 ORDER BY c.id;
DROP TABLE claimed;
SELECT outbox_reclaim('1 hour', outbox => 'delivery_outbox') AS reclaimed_none;
SELECT outbox_reclaim('0 seconds', outbox => 'delivery_outbox') AS reclaimed;
SELECT outbox_purge('0 seconds', 'delivery_outbox') AS purged;
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts,
       delivered_at IS NOT NULL AS has_delivered_at,
       acked_at IS NOT NULL AS has_acked_at
  FROM delivery_outbox ORDER BY id;
RESET search_path;
RESET TimeZone;

--
-- Detach the seed's table: our triggers go, the seed's NOTIFY trigger is
-- enabled again; rows, indexes and the defaults attach added stay; still
-- no rewrite
--
SELECT outbox_detach('app.delivery_outbox');
SELECT * FROM regress_triggers('app.delivery_outbox');
SELECT index_name FROM regress_indexes('app.delivery_outbox');
SELECT attname, pg_get_expr(adbin, adrelid) AS column_default
  FROM pg_attrdef JOIN pg_attribute ON attrelid = adrelid AND attnum = adnum
 WHERE adrelid = 'app.delivery_outbox'::regclass ORDER BY attnum;
SELECT pg_relation_filenode('app.delivery_outbox') = :filenode_before AS same_filenode;
SELECT count(*) AS rows_kept FROM app.delivery_outbox;
SELECT outbox, origin FROM delivery_outbox_tables ORDER BY outbox::text COLLATE "C";
-- a trigger disabled before attach stays disabled after detach
ALTER TABLE app.delivery_outbox DISABLE TRIGGER delivery_outbox_notify_trg;
-- (attach keeps the indexes of those names that detach left behind)
SET client_min_messages = warning;
SELECT outbox_attach('app.delivery_outbox');
RESET client_min_messages;
SELECT disabled_triggers FROM delivery_outbox_registry
 WHERE outbox = 'app.delivery_outbox'::regclass;
SELECT outbox_detach('app.delivery_outbox');
SELECT * FROM regress_triggers('app.delivery_outbox');

DEALLOCATE ALL;
SET client_min_messages = warning;
DROP SCHEMA app, fresh CASCADE;
RESET client_min_messages;
DROP FUNCTION regress_seed_migrations(name), regress_table_state(regclass),
              regress_indexes(regclass), regress_triggers(regclass),
              regress_bad_table(text), regress_prepare_dal();
DROP EXTENSION delivery_outbox;
