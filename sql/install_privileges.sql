--
-- install_privileges.sql: only a superuser installs, updates or drops the
-- extension (it is not trusted), and a role without grants cannot borrow
-- its C trigger for a table of its own
--
\set VERBOSITY default
\set SHOW_CONTEXT never

-- (left behind by an interrupted earlier run)
SET client_min_messages = warning;
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'regress_outbox_installer') THEN
        DROP OWNED BY regress_outbox_installer;
        DROP ROLE regress_outbox_installer;
    END IF;
END
$$;
RESET client_min_messages;

-- The role has what a trusted extension would need (CREATE on the database
-- and on the schema), and a schema of its own.
CREATE ROLE regress_outbox_installer;
DO $$
BEGIN
    EXECUTE format('GRANT CREATE ON DATABASE %I TO regress_outbox_installer',
                   current_database());
END
$$;
GRANT CREATE ON SCHEMA public TO regress_outbox_installer;
CREATE SCHEMA regress_installer_schema AUTHORIZATION regress_outbox_installer;

SELECT superuser, trusted FROM pg_available_extension_versions
 WHERE name = 'delivery_outbox' AND version = '1.0';

--
-- CREATE EXTENSION by a non-superuser: 42501, nothing created
--
SET ROLE regress_outbox_installer;
CREATE EXTENSION delivery_outbox;
\echo :SQLSTATE
CREATE EXTENSION delivery_outbox SCHEMA regress_installer_schema;
\echo :SQLSTATE
CREATE EXTENSION delivery_outbox VERSION '1.0';
\echo :SQLSTATE
CREATE EXTENSION IF NOT EXISTS delivery_outbox;
\echo :SQLSTATE
-- nor by loading the library by hand
LOAD 'delivery_outbox';
\echo :SQLSTATE
RESET ROLE;
SELECT count(*) AS extensions FROM pg_extension
 WHERE extname = 'delivery_outbox';
SELECT to_regclass('public.delivery_outbox') AS in_public,
       to_regclass('regress_installer_schema.delivery_outbox') AS in_own_schema,
       to_regprocedure('public.outbox_enqueue(text,text,bytea,text,timestamptz,timestamptz,text,regclass)') AS enqueue;

--
-- Installed by a superuser: a non-superuser that is not its owner cannot
-- update, move, drop, comment on or change the membership of it
--
CREATE EXTENSION delivery_outbox;
SELECT outbox_enqueue('agent:a', 'work', '\x01');
SET ROLE regress_outbox_installer;
ALTER EXTENSION delivery_outbox UPDATE;
\echo :SQLSTATE
ALTER EXTENSION delivery_outbox UPDATE TO '1.0';
\echo :SQLSTATE
ALTER EXTENSION delivery_outbox SET SCHEMA regress_installer_schema;
\echo :SQLSTATE
DROP EXTENSION delivery_outbox;
\echo :SQLSTATE
DROP EXTENSION delivery_outbox CASCADE;
\echo :SQLSTATE
COMMENT ON EXTENSION delivery_outbox IS 'mine now';
\echo :SQLSTATE
CREATE FUNCTION regress_installer_schema.f() RETURNS int LANGUAGE sql AS 'SELECT 1';
ALTER EXTENSION delivery_outbox ADD FUNCTION regress_installer_schema.f();
\echo :SQLSTATE
ALTER EXTENSION delivery_outbox DROP FUNCTION outbox_enqueue(text, text, bytea, text, timestamptz, timestamptz, text, regclass);
\echo :SQLSTATE
-- nor take over or alter its objects
ALTER TABLE delivery_outbox DISABLE TRIGGER zz_delivery_outbox_state_guard;
\echo :SQLSTATE
ALTER FUNCTION outbox_claim(integer, text, text, regclass) SECURITY INVOKER;
\echo :SQLSTATE
GRANT EXECUTE ON FUNCTION outbox_claim(integer, text, text, regclass) TO PUBLIC;
\echo :SQLSTATE

--
-- The C trigger cannot be attached to a table of its own: no EXECUTE
--
CREATE TABLE regress_installer_schema.my_outbox (LIKE delivery_outbox);
\echo :SQLSTATE
CREATE TABLE regress_installer_schema.my_outbox (
    id bigint, recipient text, kind text, tenant_id text, payload bytea,
    delivery_state text, delivery_attempts integer, created_at timestamptz,
    delivered_at timestamptz, acked_at timestamptz);
CREATE TRIGGER guard BEFORE INSERT OR UPDATE ON regress_installer_schema.my_outbox
    FOR EACH ROW EXECUTE FUNCTION outbox_state_guard();
\echo :SQLSTATE
RESET ROLE;

-- everything as it was
SELECT e.extversion = a.default_version AS at_default,
       e.extnamespace::regnamespace AS schema,
       obj_description(e.oid, 'pg_extension') = a.comment AS comment_kept
  FROM pg_extension e JOIN pg_available_extensions a ON a.name = e.extname
 WHERE e.extname = 'delivery_outbox';
SELECT tgenabled FROM pg_trigger
 WHERE tgname = 'zz_delivery_outbox_state_guard';
SELECT prosecdef, has_function_privilege('public', oid, 'EXECUTE') AS public_execute
  FROM pg_proc WHERE oid = 'outbox_claim(integer, text, text, regclass)'::regprocedure;
SELECT count(*) AS triggers_on_own_table FROM pg_trigger
 WHERE tgrelid = 'regress_installer_schema.my_outbox'::regclass;
SELECT id, recipient, delivery_state FROM delivery_outbox ORDER BY id;

DROP EXTENSION delivery_outbox;
DROP SCHEMA regress_installer_schema CASCADE;
DROP OWNED BY regress_outbox_installer;
DROP ROLE regress_outbox_installer;
