--
-- partitions_convert.sql: outbox_partition(tbl, partition_rows) (1.2):
-- an outbox made by outbox_create or taken over by outbox_attach becomes a
-- partitioned one, the table itself (rows, relfilenode and all) becoming
-- its first partition; bad calls change nothing.
--
CREATE EXTENSION delivery_outbox;

\set SHOW_CONTEXT never

SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_conv_owner;
DROP ROLE IF EXISTS regress_conv_reader;
DROP ROLE IF EXISTS "Regress Conv Tenant";
RESET client_min_messages;
CREATE ROLE regress_conv_owner;
CREATE ROLE regress_conv_reader;

CREATE SCHEMA conv;
GRANT USAGE, CREATE ON SCHEMA conv TO regress_conv_owner;
GRANT USAGE ON SCHEMA conv TO regress_conv_reader;
GRANT EXECUTE ON FUNCTION outbox_create(name, name, text, bigint) TO regress_conv_owner;

-- The partitions of an outbox: name, bounds, owner, rows (id:state).
CREATE FUNCTION conv_parts(t regclass)
RETURNS TABLE (part regclass, bounds text, owner name, rows text)
LANGUAGE plpgsql AS $f$
DECLARE
    p record;
BEGIN
    FOR p IN SELECT c.oid, pg_get_expr(c.relpartbound, c.oid) AS b,
                    pg_get_userbyid(c.relowner) AS o
               FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
              WHERE i.inhparent = t
              ORDER BY pg_get_expr(c.relpartbound, c.oid) LIKE '%MINVALUE%' DESC, c.relname
    LOOP
        part := p.oid;
        bounds := p.b;
        owner := p.o;
        EXECUTE format('SELECT coalesce(string_agg(id || '':'' || delivery_state, '' '' ORDER BY id), ''-'') FROM %s',
                       p.oid::regclass) INTO rows;
        RETURN NEXT;
    END LOOP;
END
$f$;

-- The triggers of a table and its partitions.
CREATE VIEW conv_triggers AS
SELECT tgrelid::regclass AS tbl, tgname, tgenabled
  FROM pg_trigger
 WHERE tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'conv'::regnamespace)
   AND NOT tgisinternal
 ORDER BY tgrelid::regclass::text, tgname;

-- an outbox of regress_conv_owner with rows in every state, a dead letter,
-- a dedup key, and grants on the table and on columns
SET ROLE regress_conv_owner;
SELECT outbox_create('conv', 'events');
RESET ROLE;
SELECT outbox_configure('conv.events', max_attempts => 1);
SELECT outbox_enqueue('agent:a', 'work', '\x01', outbox => 'conv.events') FROM generate_series(1, 6);
SELECT outbox_enqueue('agent:b', 'work', '\x02', dedup_key => 'k1', outbox => 'conv.events');
SELECT count(*) FROM outbox_claim(4, outbox => 'conv.events');
SELECT outbox_ack('{1,2}'::bigint[], outbox => 'conv.events');
SELECT outbox_reject('{3}', 'bad', outbox => 'conv.events');
GRANT SELECT ON conv.events TO regress_conv_reader;
GRANT SELECT (id, delivery_state) ON conv.events TO regress_conv_reader;
SELECT id, delivery_state, delivery_attempts FROM conv.events ORDER BY id;
CREATE TEMP TABLE conv_before AS
SELECT 'conv.events'::regclass::oid AS oid, pg_relation_filenode('conv.events') AS filenode;

--
-- Bad calls: each error, its SQLSTATE, and nothing changed.
--
SELECT outbox_partition(NULL, 10);
\echo :SQLSTATE
SELECT outbox_partition('conv.events', NULL);
\echo :SQLSTATE
SELECT outbox_partition('conv.events', 0);
\echo :SQLSTATE
SELECT outbox_partition('delivery_outbox', 10);
\echo :SQLSTATE
CREATE TABLE conv.plain (id bigint);
SELECT outbox_partition('conv.plain', 10);
\echo :SQLSTATE
-- not the owner
GRANT EXECUTE ON FUNCTION outbox_partition(regclass, bigint) TO regress_conv_reader;
SET ROLE regress_conv_reader;
SELECT outbox_partition('conv.events', 10);
\echo :SQLSTATE
RESET ROLE;
-- an ordered outbox
SELECT outbox_configure('conv.events', ordered => true);
SELECT outbox_partition('conv.events', 10);
\echo :SQLSTATE
SELECT outbox_configure('conv.events', ordered => false);
-- a view on it would go on reading the old table alone
CREATE VIEW conv.events_view AS SELECT id FROM conv.events;
SELECT outbox_partition('conv.events', 10);
\echo :SQLSTATE
DROP VIEW conv.events_view;
-- nothing changed
SELECT c.oid = b.oid AS same_table, c.relkind, pg_relation_filenode(c.oid) = b.filenode AS same_file
  FROM pg_class c, conv_before b WHERE c.oid = 'conv.events'::regclass;
SELECT outbox, partition_rows FROM delivery_outbox_tables WHERE outbox::text LIKE 'conv.%';
SELECT * FROM conv_triggers;

--
-- The conversion: 4 ids per partition; the next id is 8, so the old table
-- keeps the ids below 9 and is named after partition 1.
--
SELECT outbox_partition('conv.events', 4);
SELECT * FROM conv_parts('conv.events');
-- the old table is the first partition, unrewritten
SELECT c.oid = b.oid AS old_table_is_first_partition,
       pg_relation_filenode(c.oid) = b.filenode AS not_rewritten
  FROM pg_class c, conv_before b WHERE c.oid = 'conv.events_p1'::regclass;
SELECT relkind, pg_get_userbyid(relowner) AS owner FROM pg_class WHERE oid = 'conv.events'::regclass;
SELECT outbox, origin, partition_rows, max_attempts, dead_table FROM delivery_outbox_tables
 WHERE outbox::text LIKE 'conv.%';
-- the extension's triggers are the new table's, cloned onto each partition once
SELECT * FROM conv_triggers;
-- the id sequence goes on, under its name
SELECT pg_get_serial_sequence('conv.events', 'id') AS sequence;
-- the grants came along
SELECT has_table_privilege('regress_conv_reader', 'conv.events', 'SELECT') AS reader_selects,
       has_column_privilege('regress_conv_reader', 'conv.events', 'delivery_state', 'SELECT') AS reader_column;
-- the old partition's unique dedup index gave way to a plain one
SELECT count(*) FILTER (WHERE i.indisunique) AS unique_dedup, count(*) AS dedup
  FROM pg_index i
 WHERE i.indrelid = 'conv.events_p1'::regclass
   AND pg_get_indexdef(i.indexrelid) LIKE '%(recipient, dedup_key)%';

--
-- It works as a partitioned outbox.
--
SELECT outbox_enqueue('agent:a', 'work', '\x03', outbox => 'conv.events') AS new_id;
-- the key of row 7 (in the old partition) is still taken
SELECT outbox_enqueue('agent:b', 'work', '\x04', dedup_key => 'k1', outbox => 'conv.events') AS holder;
SELECT * FROM conv_parts('conv.events');
SELECT id FROM outbox_claim(10, outbox => 'conv.events') ORDER BY id;
SELECT outbox_ack(array(SELECT id FROM conv.events WHERE delivery_state = 'delivered'),
                  outbox => 'conv.events') AS acked;
-- the state guard on the old partition
UPDATE conv.events SET delivery_state = 'pending' WHERE id = 1;
\echo :SQLSTATE
UPDATE conv.events_p1 SET delivery_state = 'pending' WHERE id = 1;
\echo :SQLSTATE
-- the old partition goes like any other once its ids were all drawn and
-- its rows all acked
SELECT outbox_enqueue('agent:a', 'work', '\x05', outbox => 'conv.events') FROM generate_series(1, 2);
SELECT outbox_purge('0 seconds', outbox => 'conv.events') > 0 AS purged;
SELECT * FROM conv_parts('conv.events');
-- a second conversion
SELECT outbox_partition('conv.events', 4);
\echo :SQLSTATE
SELECT pending, delivered, acked, dead FROM outbox_stats('conv.events');

--
-- A table of the seed system's, taken over by outbox_attach (timestamp
-- columns, a BIGSERIAL id, its notifying trigger disabled), then partitioned.
--
CREATE TABLE conv.seed (
    id BIGSERIAL PRIMARY KEY,
    recipient TEXT NOT NULL,
    kind TEXT NOT NULL,
    tenant_id TEXT NULL,
    payload BYTEA NOT NULL,
    delivery_state TEXT NOT NULL DEFAULT 'pending',
    delivery_attempts INTEGER NOT NULL DEFAULT 0,
    created_at TIMESTAMP NOT NULL,
    delivered_at TIMESTAMP NULL,
    acked_at TIMESTAMP NULL);
CREATE FUNCTION conv.seed_notify() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN PERFORM pg_notify('delivery_outbox', NEW.id::text); RETURN NEW; END $$;
CREATE TRIGGER delivery_outbox_notify_trg AFTER INSERT ON conv.seed
  FOR EACH ROW EXECUTE FUNCTION conv.seed_notify();
INSERT INTO conv.seed (recipient, kind, payload, created_at)
SELECT 'agent:s', 'work', '\x01', now() AT TIME ZONE 'UTC' FROM generate_series(1, 3);
SELECT outbox_attach('conv.seed');
SELECT outbox_partition('conv.seed', 10);
SELECT c.oid::regclass, pg_get_expr(c.relpartbound, c.oid)
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'conv.seed'::regclass ORDER BY 1;
-- the seed's INSERT, as written, goes on with the serial's ids
INSERT INTO conv.seed (recipient, kind, payload, delivery_state, delivery_attempts, created_at)
VALUES ('agent:s', 'work', '\x02', 'pending', 0, now() AT TIME ZONE 'UTC')
RETURNING id, tableoid::regclass;
SELECT pg_get_serial_sequence('conv.seed', 'id') AS sequence;
SELECT count(*) FROM outbox_claim(10, outbox => 'conv.seed');
-- the seed's notifying trigger stays disabled, on the old partition
SELECT * FROM conv_triggers WHERE tbl::text LIKE 'conv.seed%';

-- the retention reads the seed table's timestamps as UTC, whatever the
-- session's time zone: rows acked just now are not an hour old
SELECT count(*) FROM outbox_ack(array(SELECT id FROM conv.seed WHERE delivery_state = 'delivered'),
                                outbox => 'conv.seed');
SELECT outbox_enqueue('agent:s', 'work', '\x03', outbox => 'conv.seed') FROM generate_series(1, 7) \g /dev/null
SET timezone = 'Pacific/Kiritimati';
SELECT outbox_purge('1 hour', outbox => 'conv.seed') AS purged_kiritimati;
SET timezone = 'America/Anchorage';
SELECT outbox_purge('1 hour', outbox => 'conv.seed') AS purged_anchorage;
RESET timezone;
SELECT c.oid::regclass FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'conv.seed'::regclass ORDER BY 1;

--
-- A seed table of a tenant role (not a superuser) with a quoting name:
-- the sequence and the owner come along.
--
CREATE ROLE "Regress Conv Tenant";
GRANT USAGE, CREATE ON SCHEMA conv TO "Regress Conv Tenant";
SET ROLE "Regress Conv Tenant";
CREATE TABLE conv.tseed (
    id BIGSERIAL PRIMARY KEY,
    recipient TEXT NOT NULL,
    kind TEXT NOT NULL,
    tenant_id TEXT NULL,
    payload BYTEA NOT NULL,
    delivery_state TEXT NOT NULL DEFAULT 'pending',
    delivery_attempts INTEGER NOT NULL DEFAULT 0,
    created_at TIMESTAMP NOT NULL,
    delivered_at TIMESTAMP NULL,
    acked_at TIMESTAMP NULL);
INSERT INTO conv.tseed (recipient, kind, payload, created_at)
VALUES ('agent:t', 'work', '\x01', now() AT TIME ZONE 'UTC');
RESET ROLE;
GRANT EXECUTE ON FUNCTION outbox_attach(regclass, text), outbox_partition(regclass, bigint)
  TO "Regress Conv Tenant";
SET ROLE "Regress Conv Tenant";
SELECT outbox_attach('conv.tseed');
SELECT outbox_partition('conv.tseed', 10);
INSERT INTO conv.tseed (recipient, kind, payload, created_at)
VALUES ('agent:t', 'work', '\x02', now() AT TIME ZONE 'UTC') RETURNING id;
RESET ROLE;
SELECT c.oid::regclass, pg_get_userbyid(c.relowner) AS owner
  FROM pg_class c
 WHERE c.oid IN ('conv.tseed'::regclass, 'conv.tseed_p0'::regclass,
                 pg_get_serial_sequence('conv.tseed', 'id')::regclass)
 ORDER BY 1;

--
-- Row-level security would not follow the table: refused.
--
SELECT outbox_create('conv', 'rls');
ALTER TABLE conv.rls ENABLE ROW LEVEL SECURITY;
CREATE POLICY rls_t1 ON conv.rls FOR SELECT USING (tenant_id = 't1');
SELECT outbox_partition('conv.rls', 10);
\echo :SQLSTATE
SELECT relkind FROM pg_class WHERE oid = 'conv.rls'::regclass;

DROP SCHEMA conv CASCADE;
DROP OWNED BY regress_conv_owner, regress_conv_reader, "Regress Conv Tenant";
DROP ROLE "Regress Conv Tenant";
DROP ROLE regress_conv_owner;
DROP ROLE regress_conv_reader;
DROP EXTENSION delivery_outbox;
