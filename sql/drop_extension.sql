--
-- drop_extension.sql: DROP EXTENSION drops the table and its rows (as README
-- says); objects of the user's that depend on the table block it unless
-- CASCADE; a rolled-back DROP keeps everything
--
\set VERBOSITY default
\set SHOW_CONTEXT never

CREATE EXTENSION delivery_outbox;
SELECT outbox_enqueue('agent:a', 'work', '\x01');
SELECT outbox_enqueue('agent:a', 'work', '\x02');
SELECT outbox_enqueue('agent:b', 'work', '\x03');
SELECT id FROM outbox_claim(1);
SELECT outbox_ack(1);
SELECT id FROM outbox_claim(1);

-- what belongs to the extension
CREATE TEMP TABLE members AS
SELECT pg_describe_object(classid, objid, objsubid) AS member
  FROM pg_depend
 WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
   AND refobjid = (SELECT oid FROM pg_extension
                    WHERE extname = 'delivery_outbox');
SELECT count(*) > 0 AS has_members,
       bool_or(member = 'table delivery_outbox') AS has_table,
       bool_or(member = 'sequence delivery_outbox_id_seq') AS has_sequence
  FROM members;

--
-- A rolled-back DROP EXTENSION keeps the table, the rows and the functions
--
BEGIN;
DROP EXTENSION delivery_outbox;
SELECT to_regclass('public.delivery_outbox') AS table_in_tx;
ROLLBACK;
SELECT id, recipient, delivery_state, delivery_attempts
  FROM delivery_outbox ORDER BY id;
SELECT outbox_enqueue('agent:b', 'work', '\x04');

--
-- A view on the table blocks DROP EXTENSION (2BP01); nothing is dropped
--
CREATE VIEW outbox_open AS
SELECT id, recipient FROM delivery_outbox WHERE delivery_state <> 'acked';
DROP EXTENSION delivery_outbox;
\echo :SQLSTATE
DROP EXTENSION delivery_outbox RESTRICT;
\echo :SQLSTATE
SELECT id, recipient FROM outbox_open ORDER BY id;
SELECT count(*) AS rows_kept FROM delivery_outbox;

-- so does a foreign key of a business table to the outbox's ids
DROP VIEW outbox_open;
CREATE TABLE orders (id int PRIMARY KEY,
                     outbox_id bigint REFERENCES delivery_outbox (id));
INSERT INTO orders VALUES (1, 2);
DROP EXTENSION delivery_outbox;
\echo :SQLSTATE
SELECT count(*) AS rows_kept FROM delivery_outbox;
DROP TABLE orders;

-- and a function of the user's whose argument is the table's row type
CREATE FUNCTION outbox_label(o delivery_outbox) RETURNS text
LANGUAGE sql AS $$ SELECT o.recipient || '#' || o.id $$;
SELECT outbox_label(o) FROM delivery_outbox o ORDER BY id;
DROP EXTENSION delivery_outbox;
\echo :SQLSTATE
DROP FUNCTION outbox_label(delivery_outbox);

--
-- With CASCADE the dependent view goes too
--
CREATE VIEW outbox_open AS
SELECT id, recipient FROM delivery_outbox WHERE delivery_state <> 'acked';
-- a trigger of the user's on the table is part of the table: no need to cascade
CREATE FUNCTION outbox_audit() RETURNS trigger LANGUAGE plpgsql AS
$$BEGIN RETURN NEW; END$$;
CREATE TRIGGER outbox_audit BEFORE INSERT ON delivery_outbox
    FOR EACH ROW EXECUTE FUNCTION outbox_audit();
DROP EXTENSION delivery_outbox CASCADE;
SELECT to_regclass('public.outbox_open') AS view_after,
       to_regclass('public.delivery_outbox') AS table_after,
       to_regclass('public.delivery_outbox_id_seq') AS sequence_after;
SELECT count(*) AS extension_rows
  FROM pg_extension WHERE extname = 'delivery_outbox';
-- every member is gone
SELECT count(*) AS functions_left
  FROM pg_proc WHERE proname LIKE 'outbox\_%' AND proname <> 'outbox_audit';
SELECT count(*) AS triggers_left
  FROM pg_trigger WHERE tgname IN ('zz_delivery_outbox_state_guard', 'outbox_audit');
SELECT outbox_enqueue('agent:a', 'work', '\x01');
\echo :SQLSTATE
DROP FUNCTION outbox_audit();

--
-- Without dependents a plain DROP EXTENSION drops the table with its rows;
-- created again, the outbox starts empty, ids from 1
--
CREATE EXTENSION delivery_outbox;
SELECT outbox_enqueue('agent:a', 'work', '\x01');
SELECT outbox_enqueue('agent:a', 'work', '\x02');
SELECT count(*) AS rows_before_drop FROM delivery_outbox;
DROP EXTENSION delivery_outbox;
SELECT to_regclass('public.delivery_outbox') AS table_after,
       to_regclass('public.delivery_outbox_id_seq') AS sequence_after;
SELECT count(*) AS members_left
  FROM members m
 WHERE to_regclass(CASE WHEN m.member LIKE 'table %' OR m.member LIKE 'sequence %'
                        THEN split_part(m.member, ' ', 2) END) IS NOT NULL
    OR to_regprocedure(CASE WHEN m.member LIKE 'function %'
                            THEN substr(m.member, 10) END) IS NOT NULL;
CREATE EXTENSION delivery_outbox;
SELECT count(*) AS rows_after_recreate FROM delivery_outbox;
SELECT outbox_enqueue('agent:a', 'work', '\x03') AS first_id;
DROP EXTENSION delivery_outbox;

--
-- With other outboxes (created or attached), DROP EXTENSION refuses: their
-- triggers depend on the extension's trigger functions.  CASCADE drops those
-- triggers and leaves the tables and their rows; created again, the
-- extension does not know them until they are attached again.
--
CREATE EXTENSION delivery_outbox;
CREATE SCHEMA regress_tenant;
SELECT outbox_create('regress_tenant');
SELECT outbox_enqueue('agent:t', 'work', '\x04',
                      outbox => 'regress_tenant.delivery_outbox') AS tenant_id;
\set VERBOSITY terse
DROP EXTENSION delivery_outbox;
\echo :SQLSTATE
\set VERBOSITY default
SELECT count(*) AS tenant_triggers FROM pg_trigger
 WHERE tgrelid = 'regress_tenant.delivery_outbox'::regclass AND NOT tgisinternal;
DROP EXTENSION delivery_outbox CASCADE;
SELECT count(*) AS tenant_rows FROM regress_tenant.delivery_outbox;
SELECT count(*) AS tenant_triggers FROM pg_trigger
 WHERE tgrelid = 'regress_tenant.delivery_outbox'::regclass AND NOT tgisinternal;
CREATE EXTENSION delivery_outbox;
SELECT outbox FROM delivery_outbox_tables ORDER BY outbox::text;
\set VERBOSITY terse
SELECT outbox_enqueue('agent:t', 'work', '\x05',
                      outbox => 'regress_tenant.delivery_outbox');
\echo :SQLSTATE
\set VERBOSITY default
SELECT outbox_attach('regress_tenant.delivery_outbox');
SELECT id, recipient, delivery_state FROM outbox_claim(10,
       outbox => 'regress_tenant.delivery_outbox');
DROP SCHEMA regress_tenant CASCADE;
SELECT outbox FROM delivery_outbox_tables ORDER BY outbox::text;
DROP EXTENSION delivery_outbox;
