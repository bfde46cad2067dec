--
-- security.sql: search_path cannot redirect the extension, the extension
-- lives in the schema chosen at CREATE EXTENSION, nothing is granted to
-- PUBLIC, and the README's roles can do exactly what they are granted
--
CREATE EXTENSION delivery_outbox;

\set VERBOSITY default
\set SHOW_CONTEXT never

-- roles left behind by an interrupted earlier run
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_outbox_nobody;
DROP ROLE IF EXISTS regress_outbox_producer;
DROP ROLE IF EXISTS regress_outbox_relay;
DROP ROLE IF EXISTS regress_outbox_monitor;
DROP SCHEMA IF EXISTS regress_probe CASCADE;
DROP ROLE IF EXISTS regress_probe_owner;
RESET client_min_messages;

--
-- A hostile schema, first in search_path: a table named delivery_outbox,
-- functions named like the built-ins, and operators whose functions raise if
-- ever called
--
CREATE SCHEMA hostile;

CREATE FUNCTION hostile.trap() RETURNS trigger LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'hostile table %.% written (%)',
        TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_OP; END$$;

CREATE TABLE hostile.delivery_outbox (
    id bigint, recipient text, kind text, tenant_id text, payload bytea,
    delivery_state text, delivery_attempts integer, created_at timestamptz,
    delivered_at timestamptz, acked_at timestamptz);
CREATE TRIGGER trap BEFORE INSERT OR UPDATE OR DELETE ON hostile.delivery_outbox
    FOR EACH ROW EXECUTE FUNCTION hostile.trap();
CREATE SEQUENCE hostile.delivery_outbox_id_seq START 1000000;

-- the same name as a temporary table, which search_path finds first of all
CREATE TEMP TABLE delivery_outbox (LIKE hostile.delivery_outbox);
CREATE TRIGGER trap BEFORE INSERT OR UPDATE OR DELETE ON pg_temp.delivery_outbox
    FOR EACH ROW EXECUTE FUNCTION hostile.trap();

CREATE FUNCTION hostile.now() RETURNS timestamptz LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'hostile now() called'; END$$;
CREATE FUNCTION hostile.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'hostile clock_timestamp() called'; END$$;
CREATE FUNCTION hostile.statement_timestamp() RETURNS timestamptz LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'hostile statement_timestamp() called'; END$$;
CREATE FUNCTION hostile.nextval(regclass) RETURNS bigint LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'hostile nextval() called'; END$$;
CREATE FUNCTION hostile.pg_notify(text, text) RETURNS void LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'hostile pg_notify() called'; END$$;
CREATE FUNCTION hostile.pg_notification_queue_usage() RETURNS double precision
LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'hostile pg_notification_queue_usage() called'; END$$;
CREATE FUNCTION hostile.length(bytea) RETURNS integer LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'hostile length() called'; END$$;
CREATE FUNCTION hostile.octet_length(bytea) RETURNS integer LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'hostile octet_length() called'; END$$;
CREATE FUNCTION hostile.texteq(text, text) RETURNS boolean LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'hostile texteq() called'; END$$;
CREATE FUNCTION hostile.int8eq(bigint, bigint) RETURNS boolean LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'hostile int8eq() called'; END$$;
CREATE FUNCTION hostile.count_sfunc(bigint) RETURNS bigint LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'hostile count(*) called'; END$$;
CREATE AGGREGATE hostile.count(*) (SFUNC = hostile.count_sfunc, STYPE = bigint);
CREATE FUNCTION hostile.min_sfunc(timestamptz, timestamptz) RETURNS timestamptz
LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'hostile min() called'; END$$;
CREATE AGGREGATE hostile.min(timestamptz) (SFUNC = hostile.min_sfunc,
                                           STYPE = timestamptz);

-- operators: one raising function per operand type
CREATE FUNCTION hostile.op_text(text, text) RETURNS boolean LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'hostile operator on (text, text) called'; END$$;
CREATE FUNCTION hostile.op_int8(bigint, bigint) RETURNS boolean LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'hostile operator on (bigint, bigint) called'; END$$;
CREATE FUNCTION hostile.op_int8_int4(bigint, integer) RETURNS boolean
LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'hostile operator on (bigint, integer) called'; END$$;
CREATE FUNCTION hostile.op_int4(integer, integer) RETURNS boolean LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'hostile operator on (integer, integer) called'; END$$;
CREATE FUNCTION hostile.op_tstz(timestamptz, timestamptz) RETURNS boolean
LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'hostile operator on (timestamptz, timestamptz) called'; END$$;
CREATE FUNCTION hostile.op_tstz_mi(timestamptz, timestamptz) RETURNS interval
LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'hostile timestamptz - timestamptz called'; END$$;
CREATE FUNCTION hostile.op_tstz_mi_interval(timestamptz, interval)
RETURNS timestamptz LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'hostile timestamptz - interval called'; END$$;

CREATE OPERATOR hostile.=  (LEFTARG = text, RIGHTARG = text, FUNCTION = hostile.op_text);
CREATE OPERATOR hostile.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = hostile.op_text);
CREATE OPERATOR hostile.<  (LEFTARG = text, RIGHTARG = text, FUNCTION = hostile.op_text);
CREATE OPERATOR hostile.=  (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = hostile.op_int8);
CREATE OPERATOR hostile.<> (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = hostile.op_int8);
CREATE OPERATOR hostile.<  (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = hostile.op_int8);
CREATE OPERATOR hostile.>  (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = hostile.op_int8);
CREATE OPERATOR hostile.=  (LEFTARG = bigint, RIGHTARG = integer, FUNCTION = hostile.op_int8_int4);
CREATE OPERATOR hostile.>= (LEFTARG = integer, RIGHTARG = integer, FUNCTION = hostile.op_int4);
CREATE OPERATOR hostile.<  (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = hostile.op_tstz);
CREATE OPERATOR hostile.-  (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = hostile.op_tstz_mi);
CREATE OPERATOR hostile.-  (LEFTARG = timestamptz, RIGHTARG = interval, FUNCTION = hostile.op_tstz_mi_interval);

-- Everything below until RESET search_path runs with the hostile objects
-- ahead of pg_catalog.  It is the session's first use of the extension's
-- functions, so their statements are prepared under this path too.
SET search_path = hostile, pg_catalog, public;
-- (proof that the path is live: an unqualified = is the hostile one)
SELECT 'a'::text = 'a'::text;

SELECT outbox_enqueue('agent:h', 'work', '\x01');
SELECT outbox_enqueue('agent:h', 'work', '\x02', 't1');
SELECT outbox_enqueue('agent:h2', 'work', '\x03', 't1');
SELECT outbox_enqueue('agent:h3', 'work', '\x04');
SELECT outbox_enqueue('agent:h', 'work', '\x05');
-- all four claim statements
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts
  FROM outbox_claim(1);
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts
  FROM outbox_claim(10, 'agent:h', 't1');
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts
  FROM outbox_claim(10, NULL, 't1');
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts
  FROM outbox_claim(10, 'agent:h3');
-- ack, with and without recipient, single and array, and a late ack
SELECT outbox_ack(1);
SELECT outbox_ack(2, 'agent:h');
SELECT outbox_ack('{3}'::bigint[]);
SELECT outbox_ack('{4}'::bigint[], 'agent:h3');
SELECT outbox_enqueue('agent:h', 'work', '\x06');
SELECT outbox_ack(6);
-- release, reclaim, reclaim_recipient (NULL tenant and a tenant), reassign
SELECT id FROM outbox_claim(10, 'agent:h');
SELECT outbox_release('{5}'::bigint[]);
SELECT id FROM outbox_claim(10, 'agent:h');
SELECT outbox_reclaim('0 seconds');
SELECT id FROM outbox_claim(10, 'agent:h');
SELECT outbox_reclaim('0 seconds', 1);
SELECT id FROM outbox_claim(10, 'agent:h');
SELECT outbox_reclaim_recipient('agent:h');
SELECT outbox_enqueue('agent:h', 'work', '\x07', 't1');
SELECT id FROM outbox_claim(10, 'agent:h', 't1');
SELECT outbox_reclaim_recipient('agent:h', 't1');
SELECT outbox_reassign('agent:h', 'agent:h9');
-- replay, with and without tenant
SELECT id, recipient, tenant_id, delivery_state FROM outbox_replay('agent:h9');
SELECT id, recipient, tenant_id, delivery_state
  FROM outbox_replay('agent:h9', 5, 10, 't1');
-- every kept statement re-analysed with the hostile path still in force
DISCARD PLANS;
SELECT outbox_enqueue('agent:h', 'work', '\x08', 't2') AS h8 \gset
SELECT id - :h8 AS n, delivery_state FROM outbox_claim(10, 'agent:h', 't2');
SELECT id - :h8 AS n FROM outbox_replay('agent:h', 0, 10, 't2');
SELECT outbox_reassign('agent:h', 'agent:h9');
SELECT outbox_ack(:h8, 'agent:h9');
-- stats and purge
SELECT pending, delivered, acked, open_recipients,
       oldest_pending_age IS NOT NULL AS has_pending_age,
       oldest_delivered_age IS NULL AS no_delivered_age
  FROM outbox_stats();
SELECT outbox_purge('0 seconds');
-- plain INSERT and UPDATE through the trigger (the statements name the real
-- table and pg_catalog's operators; the trigger and defaults do the rest)
INSERT INTO public.delivery_outbox (recipient, kind, payload)
VALUES ('agent:plain', 'work', '\x10') RETURNING id AS plain1 \gset
INSERT INTO public.delivery_outbox (recipient, kind, payload, delivery_state,
                                    delivery_attempts, created_at, delivered_at)
VALUES ('agent:plain', 'work', '\x11', 'delivered', 1,
        '2001-02-03 04:05:06+00', '2001-02-03 04:06:00+00')
RETURNING id AS plain2 \gset
UPDATE public.delivery_outbox SET delivery_state = 'delivered'
 WHERE id OPERATOR(pg_catalog.=) :plain1;
UPDATE public.delivery_outbox SET delivery_state = 'acked'
 WHERE id OPERATOR(pg_catalog.=) :plain1;
UPDATE public.delivery_outbox SET delivery_state = 'pending'
 WHERE id OPERATOR(pg_catalog.=) :plain1;
\echo :SQLSTATE
UPDATE public.delivery_outbox SET recipient = 'agent:plain2'
 WHERE id OPERATOR(pg_catalog.=) :plain2;
UPDATE public.delivery_outbox SET payload = '\x99'
 WHERE id OPERATOR(pg_catalog.=) :plain2;
\echo :SQLSTATE
SET delivery_outbox.max_payload_size = '1B';
INSERT INTO public.delivery_outbox (recipient, kind, payload)
VALUES ('agent:plain', 'work', '\x1213');
\echo :SQLSTATE
RESET delivery_outbox.max_payload_size;
SELECT outbox_ack(:plain2, 'agent:plain2');
RESET search_path;

-- the real table has every row; the impostors have none
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts,
       delivered_at IS NOT NULL AS has_delivered_at,
       acked_at IS NOT NULL AS has_acked_at
  FROM public.delivery_outbox ORDER BY id;
SELECT count(*) FROM hostile.delivery_outbox;
SELECT count(*) FROM pg_temp.delivery_outbox;
SELECT last_value FROM hostile.delivery_outbox_id_seq;
DROP TABLE pg_temp.delivery_outbox;

--
-- Nothing is granted to PUBLIC
--
SELECT p.oid::regprocedure AS function,
       p.prosecdef AS security_definer,
       p.proconfig,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute,
       (SELECT count(*)
          FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
         WHERE a.grantee = 0) AS public_grants
  FROM pg_proc p
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                  AND d.refclassid = 'pg_extension'::regclass
                  AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid
 WHERE e.extname = 'delivery_outbox'
 ORDER BY 1::text;
SELECT c.relname, c.relkind,
       (SELECT count(*)
          FROM aclexplode(coalesce(c.relacl,
                                   acldefault(CASE c.relkind WHEN 'S' THEN 's'
                                              ELSE 'r' END::"char",
                                              c.relowner))) a
         WHERE a.grantee = 0) AS public_grants
  FROM pg_class c
 WHERE c.relnamespace = 'public'::regnamespace
   AND c.relname IN ('delivery_outbox', 'delivery_outbox_id_seq')
 ORDER BY 1;
SELECT has_table_privilege('public', 'public.delivery_outbox',
         'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
         AS table_priv,
       has_any_column_privilege('public', 'public.delivery_outbox',
         'SELECT, INSERT, UPDATE, REFERENCES') AS column_priv,
       has_sequence_privilege('public', 'public.delivery_outbox_id_seq',
         'USAGE, SELECT, UPDATE') AS sequence_priv;

--
-- The privilege probe.  privilege_calls names each call a role may be
-- refused; pg_temp.probe(role, id, recipient, call...) runs the named calls,
-- one by one, as that role (SET LOCAL ROLE) with $1 = id and $2 = recipient,
-- in a subtransaction that is always rolled back, so that a probe changes
-- nothing even should it be allowed.  One row per call: the SQLSTATE and
-- message of the error, or "-" and "allowed".
--
CREATE TEMP TABLE privilege_calls (call text PRIMARY KEY, stmt text NOT NULL);
INSERT INTO privilege_calls VALUES
    ('outbox_enqueue',           $$SELECT outbox_enqueue($2, 'work', '\x01')$$),
    ('outbox_claim',             $$SELECT * FROM outbox_claim()$$),
    ('outbox_ack',               $$SELECT outbox_ack($1)$$),
    ('outbox_ack(bigint[])',     $$SELECT outbox_ack(ARRAY[$1])$$),
    ('outbox_release',           $$SELECT outbox_release(ARRAY[$1])$$),
    ('outbox_reclaim',           $$SELECT outbox_reclaim()$$),
    ('outbox_reclaim_recipient', $$SELECT outbox_reclaim_recipient($2)$$),
    ('outbox_reassign',          $$SELECT outbox_reassign($2, $2 || '-other')$$),
    ('outbox_replay',            $$SELECT * FROM outbox_replay($2)$$),
    ('outbox_purge',             $$SELECT outbox_purge('0 seconds')$$),
    ('outbox_stats',             $$SELECT * FROM outbox_stats()$$),
    ('outbox_state_guard',       $$SELECT outbox_state_guard()$$),
    ('SELECT id',                $$SELECT id FROM delivery_outbox$$),
    ('SELECT payload',           $$SELECT payload FROM delivery_outbox$$),
    ('SELECT *',                 $$SELECT * FROM delivery_outbox$$),
    ('INSERT',                   $$INSERT INTO delivery_outbox (recipient, kind, payload)
                                   VALUES ($2, 'work', '\x01')$$),
    ('UPDATE',                   $$UPDATE delivery_outbox SET delivery_state = 'delivered'$$),
    ('DELETE',                   $$DELETE FROM delivery_outbox$$),
    ('TRUNCATE',                 $$TRUNCATE delivery_outbox$$),
    ('nextval',                  $$SELECT nextval('delivery_outbox_id_seq')$$);

CREATE FUNCTION pg_temp.probe(role name, id bigint, recipient text,
                              VARIADIC calls text[])
RETURNS TABLE (call text, code text, message text)
LANGUAGE plpgsql AS $f$
DECLARE
    stmt text;
    allowed boolean;
BEGIN
    FOREACH call IN ARRAY calls LOOP
        SELECT p.stmt INTO STRICT stmt
          FROM pg_temp.privilege_calls p WHERE p.call = probe.call;
        allowed := false;
        BEGIN
            EXECUTE format('SET LOCAL ROLE %I', role);
            EXECUTE stmt USING id, recipient;
            allowed := true;
            RAISE EXCEPTION 'roll back what the call did';
        EXCEPTION WHEN OTHERS THEN
            IF allowed THEN
                code := '-';
                message := 'allowed';
            ELSE
                code := SQLSTATE;
                message := SQLERRM;
            END IF;
        END;
        RETURN NEXT;
    END LOOP;
END
$f$;

--
-- A role with no grants gets 42501 from every function and from the table
--
CREATE ROLE regress_outbox_nobody;
SELECT * FROM pg_temp.probe('regress_outbox_nobody', 1, 'agent:x',
    'outbox_enqueue', 'outbox_claim', 'outbox_ack', 'outbox_ack(bigint[])',
    'outbox_release', 'outbox_reclaim', 'outbox_reclaim_recipient',
    'outbox_reassign', 'outbox_replay', 'outbox_purge', 'outbox_stats',
    'outbox_state_guard', 'SELECT id', 'INSERT', 'UPDATE', 'DELETE',
    'TRUNCATE', 'nextval');

--
-- The README's roles
--
CREATE ROLE regress_outbox_producer;
CREATE ROLE regress_outbox_relay;
CREATE ROLE regress_outbox_monitor;
GRANT EXECUTE ON FUNCTION outbox_enqueue(text, text, bytea, text, timestamptz, timestamptz, text, regclass)
    TO regress_outbox_producer;
GRANT EXECUTE ON FUNCTION outbox_claim(integer, text, text, regclass),
                          outbox_ack(bigint, text, regclass),
                          outbox_ack(bigint[], text, regclass),
                          outbox_release(bigint[], interval, text, regclass),
                          outbox_reclaim(interval, integer, regclass),
                          outbox_reclaim_recipient(text, text, regclass),
                          outbox_replay(text, bigint, integer, text, regclass)
    TO regress_outbox_relay;
GRANT EXECUTE ON FUNCTION outbox_stats(regclass) TO regress_outbox_monitor;
GRANT SELECT (id, recipient, kind, tenant_id, delivery_state,
              delivery_attempts, created_at, delivered_at, acked_at)
    ON delivery_outbox TO regress_outbox_monitor;

SELECT count(*) AS rows_before FROM delivery_outbox \gset

-- producer: enqueue only
SET ROLE regress_outbox_producer;
BEGIN;
SELECT outbox_enqueue('agent:r1', 'work', '\x21') AS r1 \gset
SELECT outbox_enqueue('agent:r1', 'work', '\x22', 't1') AS r2 \gset
COMMIT;
SELECT :r2 - :r1 AS ids_apart;
RESET ROLE;
-- (outbox_enqueue first: allowed, which shows the probe tells the two apart;
-- rolled back, so agent:r1 still has two rows below)
SELECT * FROM pg_temp.probe('regress_outbox_producer', :r1, 'agent:r1',
    'outbox_enqueue', 'outbox_claim', 'outbox_ack', 'outbox_ack(bigint[])',
    'outbox_release', 'outbox_reclaim', 'outbox_reclaim_recipient',
    'outbox_reassign', 'outbox_replay', 'outbox_purge', 'outbox_stats',
    'SELECT id', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE');
SELECT id - :r1 AS n, recipient, tenant_id, delivery_state FROM delivery_outbox
 WHERE recipient = 'agent:r1' ORDER BY id;

-- relay: claim, ack, release, reclaim, resync, replay
SET ROLE regress_outbox_relay;
SELECT id - :r1 AS n, recipient, delivery_state, delivery_attempts
  FROM outbox_claim(10, 'agent:r1');
SELECT outbox_ack(:r1, 'agent:r1');
SELECT outbox_release(ARRAY[:r2]::bigint[]);
SELECT id - :r1 AS n FROM outbox_claim(10, 'agent:r1', 't1');
SELECT outbox_reclaim('0 seconds');
SELECT id - :r1 AS n FROM outbox_claim(10, 'agent:r1', 't1');
SELECT outbox_reclaim_recipient('agent:r1', 't1');
SELECT id - :r1 AS n, delivery_state, delivery_attempts
  FROM outbox_replay('agent:r1');
SELECT outbox_ack(ARRAY[:r2]::bigint[], 'agent:r1');
RESET ROLE;
SELECT * FROM pg_temp.probe('regress_outbox_relay', :r1, 'agent:r1',
    'outbox_enqueue', 'outbox_reassign', 'outbox_purge', 'outbox_stats',
    'SELECT id', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE');

-- monitor: outbox_stats and the table without its payload
SET ROLE regress_outbox_monitor;
SELECT pending, delivered, acked, open_recipients FROM outbox_stats();
SELECT id - :r1 AS n, recipient, kind, tenant_id, delivery_state,
       delivery_attempts, created_at IS NOT NULL AS has_created_at,
       delivered_at IS NOT NULL AS has_delivered_at,
       acked_at IS NOT NULL AS has_acked_at
  FROM delivery_outbox WHERE recipient = 'agent:r1' ORDER BY id;
SELECT count(*) = :rows_before + 2 AS sees_every_row FROM delivery_outbox;
RESET ROLE;
SELECT * FROM pg_temp.probe('regress_outbox_monitor', :r1, 'agent:r1',
    'SELECT payload', 'SELECT *', 'outbox_enqueue', 'outbox_claim',
    'outbox_ack', 'outbox_ack(bigint[])', 'outbox_release', 'outbox_reclaim',
    'outbox_reclaim_recipient', 'outbox_reassign', 'outbox_replay',
    'outbox_purge', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE');
SELECT count(*) = :rows_before + 2 AS nothing_else_written FROM delivery_outbox;

--
-- CREATE EXTENSION ... SCHEMA: everything lives there, and the functions work
-- with that schema off search_path, whatever sits in public
--
DROP EXTENSION delivery_outbox;
CREATE SCHEMA outbox;
CREATE EXTENSION delivery_outbox SCHEMA outbox;
SELECT extnamespace::regnamespace AS schema, extrelocatable
  FROM pg_extension WHERE extname = 'delivery_outbox';
SELECT count(*) AS objects_outside_schema
  FROM pg_depend d
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'delivery_outbox'
 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
   AND CASE d.classid
         WHEN 'pg_proc'::regclass THEN
           (SELECT pronamespace FROM pg_proc WHERE oid = d.objid)
         WHEN 'pg_class'::regclass THEN
           (SELECT relnamespace FROM pg_class WHERE oid = d.objid)
       END <> 'outbox'::regnamespace;
-- a decoy where the table used to be: this session's cache must not use it
CREATE TABLE public.delivery_outbox (LIKE hostile.delivery_outbox);
CREATE TRIGGER trap BEFORE INSERT OR UPDATE OR DELETE ON public.delivery_outbox
    FOR EACH ROW EXECUTE FUNCTION hostile.trap();
SET search_path = public;
SELECT outbox.outbox_enqueue('agent:s', 'work', '\x01');
SELECT outbox.outbox_enqueue('agent:s', 'work', '\x02', 't1');
SELECT outbox.outbox_enqueue('agent:s2', 'work', '\x03');
SELECT id, recipient, delivery_state, delivery_attempts
  FROM outbox.outbox_claim(1);
SELECT id FROM outbox.outbox_claim(10, 'agent:s', 't1');
SELECT outbox.outbox_ack(1, 'agent:s');
SELECT outbox.outbox_release('{2}'::bigint[]);
SELECT id FROM outbox.outbox_claim(10, 'agent:s');
SELECT outbox.outbox_reclaim('0 seconds', 10);
SELECT id FROM outbox.outbox_claim(10, NULL, 't1');
SELECT outbox.outbox_reclaim_recipient('agent:s', 't1');
SELECT outbox.outbox_reassign('agent:s2', 'agent:s');
SELECT id, recipient, delivery_state FROM outbox.outbox_replay('agent:s');
SELECT outbox.outbox_ack('{2,3}'::bigint[]);
SELECT pending, delivered, acked FROM outbox.outbox_stats();
SELECT outbox.outbox_purge('0 seconds');
INSERT INTO outbox.delivery_outbox (recipient, kind, payload)
VALUES ('agent:s', 'work', '\x04');
UPDATE outbox.delivery_outbox SET delivery_state = 'delivered' WHERE id = 4;
UPDATE outbox.delivery_outbox SET delivery_state = 'acked' WHERE id = 4;
UPDATE outbox.delivery_outbox SET delivery_state = 'pending' WHERE id = 4;
\echo :SQLSTATE
SELECT id, recipient, delivery_state, delivery_attempts
  FROM outbox.delivery_outbox ORDER BY id;
SELECT count(*) FROM public.delivery_outbox;
-- the functions follow the extension's table by OID, even renamed
BEGIN;
ALTER TABLE outbox.delivery_outbox RENAME TO delivery_outbox_renamed;
SELECT outbox.outbox_enqueue('agent:s', 'work', '\x05');
\echo :SQLSTATE
SELECT count(*) AS in_renamed FROM outbox.delivery_outbox_renamed WHERE id = 5;
ROLLBACK;
SELECT outbox.outbox_enqueue('agent:s', 'work', '\x06') > 0 AS enqueued;
-- not relocatable
ALTER EXTENSION delivery_outbox SET SCHEMA public;
\echo :SQLSTATE
SELECT extnamespace::regnamespace AS schema
  FROM pg_extension WHERE extname = 'delivery_outbox';
-- the schema renamed, and a decoy under its old name: this session, which has
-- used the functions, must follow the schema (by OID), not its old name
ALTER SCHEMA outbox RENAME TO outbox_v1;
CREATE SCHEMA outbox;
CREATE TABLE outbox.delivery_outbox (LIKE hostile.delivery_outbox);
CREATE TRIGGER trap BEFORE INSERT OR UPDATE OR DELETE ON outbox.delivery_outbox
    FOR EACH ROW EXECUTE FUNCTION hostile.trap();
SELECT outbox_v1.outbox_enqueue('agent:v1', 'work', '\x07') > 0 AS enqueued;
SELECT id, recipient, delivery_state, delivery_attempts
  FROM outbox_v1.outbox_claim(10, 'agent:v1');
SELECT outbox_v1.outbox_ack(ARRAY(SELECT id FROM outbox_v1.delivery_outbox
                                   WHERE recipient = 'agent:v1'));
SELECT pending, delivered, acked FROM outbox_v1.outbox_stats();
SELECT id, recipient, delivery_state FROM outbox_v1.delivery_outbox
 ORDER BY id;
SELECT count(*) AS decoy_rows FROM outbox.delivery_outbox;
DROP TABLE outbox.delivery_outbox;
DROP SCHEMA outbox;
ALTER SCHEMA outbox_v1 RENAME TO outbox;
SELECT outbox.outbox_purge('0 seconds');
RESET search_path;

--
-- Dropped and created again, in public, in the same session: the functions
-- follow, and a decoy now in schema outbox stays untouched
--
DROP EXTENSION delivery_outbox;
DROP TABLE public.delivery_outbox;
CREATE TABLE outbox.delivery_outbox (LIKE hostile.delivery_outbox);
CREATE TRIGGER trap BEFORE INSERT OR UPDATE OR DELETE ON outbox.delivery_outbox
    FOR EACH ROW EXECUTE FUNCTION hostile.trap();
CREATE EXTENSION delivery_outbox;
SELECT outbox_enqueue('agent:t', 'work', '\x01');
SELECT id, recipient, delivery_state, delivery_attempts FROM outbox_claim();
SELECT outbox_ack(1);
SELECT outbox_enqueue('agent:t', 'work', '\x02');
SELECT id, delivery_state FROM outbox_replay('agent:t');
SELECT pending, delivered, acked FROM outbox_stats();
SELECT id, recipient, delivery_state, delivery_attempts
  FROM public.delivery_outbox ORDER BY id;
SELECT count(*) FROM outbox.delivery_outbox;

DROP EXTENSION delivery_outbox;
DROP TABLE outbox.delivery_outbox;
DROP SCHEMA outbox;
SET client_min_messages = warning;
DROP SCHEMA hostile CASCADE;
RESET client_min_messages;
DROP ROLE regress_outbox_nobody;
DROP ROLE regress_outbox_producer;
DROP ROLE regress_outbox_relay;
DROP ROLE regress_outbox_monitor;

--
-- A created outbox: the calling role needs the table privilege the call
-- uses besides EXECUTE; a monitoring role with SELECT on the columns
-- outbox_stats and outbox_wait read (not payload) may call them, and
-- nothing that reads payloads.
--
CREATE EXTENSION delivery_outbox;
CREATE SCHEMA regress_tenant;
SELECT outbox_create('regress_tenant') AS tenant_outbox;
SELECT outbox_enqueue('agent:m', 'work', '\x01',
                      outbox => 'regress_tenant.delivery_outbox') AS enqueued_id;
CREATE ROLE regress_tenant_monitor;
GRANT USAGE ON SCHEMA regress_tenant TO regress_tenant_monitor;
GRANT EXECUTE ON FUNCTION outbox_stats(regclass),
                          outbox_wait(interval, text, regclass),
                          outbox_replay(text, bigint, integer, text, regclass)
    TO regress_tenant_monitor;
SET ROLE regress_tenant_monitor;
\set VERBOSITY terse
SELECT pending FROM outbox_stats('regress_tenant.delivery_outbox');
\echo :SQLSTATE
RESET ROLE;
GRANT SELECT (id, recipient, kind, tenant_id, delivery_state, delivery_attempts,
              created_at, delivered_at, acked_at)
    ON regress_tenant.delivery_outbox TO regress_tenant_monitor;
SET ROLE regress_tenant_monitor;
SELECT pending, delivered, acked FROM outbox_stats('regress_tenant.delivery_outbox');
SELECT outbox_wait('0 seconds', outbox => 'regress_tenant.delivery_outbox') AS pending_row;
SELECT count(*) FROM outbox_replay('agent:m', outbox => 'regress_tenant.delivery_outbox');
\echo :SQLSTATE
SELECT payload FROM regress_tenant.delivery_outbox;
\echo :SQLSTATE
\set VERBOSITY default
RESET ROLE;
DROP SCHEMA regress_tenant CASCADE;
DROP EXTENSION delivery_outbox;
DROP ROLE regress_tenant_monitor;

--
-- The code of an outbox's table runs as the table's owner, never as the
-- extension's: outbox_attach, outbox_configure (ordered => true builds an
-- index), outbox_partition and outbox_detach, called by the owner, a plain
-- role without CREATE on the schema.  The table carries a row trigger, a
-- CHECK constraint, an expression index, a partial index whose predicate
-- is folded whenever it is loaded, and a forced row security policy
-- (folded when a scan is planned): each records who runs it, and whether
-- that role could make the owner a superuser, in a log the owner owns.
--
CREATE EXTENSION delivery_outbox;
CREATE ROLE regress_probe_owner;
CREATE SCHEMA regress_probe;
GRANT USAGE, CREATE ON SCHEMA regress_probe TO regress_probe_owner;
GRANT EXECUTE ON FUNCTION outbox_attach(regclass, text), outbox_detach(regclass),
      outbox_configure(regclass, text, integer, interval, interval, interval, boolean, interval),
      outbox_partition(regclass, bigint)
   TO regress_probe_owner;
SET ROLE regress_probe_owner;
CREATE TABLE regress_probe.seen (who name, super boolean, what text, escalation text);
-- (the table's code runs with search_path = pg_catalog, pg_temp: every
-- name below is qualified)
CREATE FUNCTION regress_probe.note(what text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $f$
DECLARE
    esc text := 'allowed';
BEGIN
    BEGIN
        ALTER ROLE regress_probe_owner SUPERUSER;
    EXCEPTION WHEN OTHERS THEN
        esc := SQLSTATE;
    END;
    INSERT INTO regress_probe.seen
    VALUES (current_user,
            (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user),
            what, esc);
END
$f$;
CREATE FUNCTION regress_probe.probe(what text, v text DEFAULT 'x') RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $f$
BEGIN
    PERFORM regress_probe.note(what);
    RETURN v;
END
$f$;
CREATE FUNCTION regress_probe.probe_trigger() RETURNS trigger
LANGUAGE plpgsql AS $f$
BEGIN
    PERFORM regress_probe.note('row trigger');
    RETURN NEW;
END
$f$;
-- the seed's shape
CREATE TABLE regress_probe.events (
    id                bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    recipient         text NOT NULL,
    kind              text NOT NULL,
    tenant_id         text,
    payload           bytea NOT NULL,
    delivery_state    text NOT NULL DEFAULT 'pending',
    delivery_attempts integer NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now(),
    delivered_at      timestamptz,
    acked_at          timestamptz,
    CONSTRAINT events_probe_check
        CHECK (regress_probe.probe('check', recipient) IS NOT NULL)
);
INSERT INTO regress_probe.events (recipient, kind, payload)
VALUES ('agent:p', 'work', '\x01'), ('agent:p', 'work', '\x02');
CREATE INDEX events_probe_expr ON regress_probe.events
    (regress_probe.probe('index expression', recipient));
CREATE INDEX events_probe_pred ON regress_probe.events (id)
    WHERE regress_probe.probe('index predicate') IS NOT NULL;
CREATE TRIGGER events_probe BEFORE INSERT OR UPDATE OR DELETE ON regress_probe.events
    FOR EACH ROW EXECUTE FUNCTION regress_probe.probe_trigger();
CREATE POLICY events_probe ON regress_probe.events
    USING (regress_probe.probe('policy') IS NOT NULL);
ALTER TABLE regress_probe.events ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
RESET ROLE;
REVOKE CREATE ON SCHEMA regress_probe FROM regress_probe_owner;
-- what the table's code did while the owner set it up
SELECT DISTINCT who, super, escalation FROM regress_probe.seen;

-- One row per call: whether only the owner ran the table's code, whether
-- any of it ran as a superuser or could make the owner one, and what ran.
CREATE FUNCTION pg_temp.probe_seen()
RETURNS TABLE (only_owner boolean, as_superuser boolean, escalated boolean, ran text)
LANGUAGE sql AS $f$
    SELECT coalesce(bool_and(who = 'regress_probe_owner'), true),
           coalesce(bool_or(super), false),
           coalesce(bool_or(escalation <> '42501'), false),
           coalesce(string_agg(DISTINCT what, ', ' ORDER BY what), '-')
      FROM regress_probe.seen
$f$;
TRUNCATE regress_probe.seen;

-- outbox_attach: the rows' check reads them under the forced policy
SET ROLE regress_probe_owner;
SELECT outbox_attach('regress_probe.events');
RESET ROLE;
SELECT only_owner, as_superuser, escalated, ran LIKE '%policy%' AS scan_ran_policy
  FROM pg_temp.probe_seen();
TRUNCATE regress_probe.seen;

-- outbox_configure: the ordered claims' index, built and dropped
SET ROLE regress_probe_owner;
SELECT outbox_configure('regress_probe.events', ordered => true);
SELECT count(*) AS ordered_index FROM pg_index
 WHERE indrelid = 'regress_probe.events'::regclass
   AND pg_get_indexdef(indexrelid) LIKE '%(recipient, id) WHERE (delivery_state = ''delivered''::text)';
SELECT outbox_configure('regress_probe.events', ordered => false);
RESET ROLE;
SELECT only_owner, as_superuser, escalated FROM pg_temp.probe_seen();
TRUNCATE regress_probe.seen;

-- outbox_partition (row security would not follow the table: gone first)
SET ROLE regress_probe_owner;
DROP POLICY events_probe ON regress_probe.events;
ALTER TABLE regress_probe.events NO FORCE ROW LEVEL SECURITY, DISABLE ROW LEVEL SECURITY;
TRUNCATE regress_probe.seen;
SELECT outbox_partition('regress_probe.events', 10);
RESET ROLE;
SELECT only_owner, as_superuser, escalated FROM pg_temp.probe_seen();
SELECT c.oid::regclass AS part, pg_get_userbyid(c.relowner) AS owner
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'regress_probe.events'::regclass
 ORDER BY 1::text;
TRUNCATE regress_probe.seen;

-- outbox_detach
SET ROLE regress_probe_owner;
SELECT outbox_detach('regress_probe.events');
RESET ROLE;
SELECT only_owner, as_superuser, escalated FROM pg_temp.probe_seen();

-- and the owner is still a plain role
SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_probe_owner';
SET client_min_messages = warning;
DROP SCHEMA regress_probe CASCADE;
RESET client_min_messages;
DROP EXTENSION delivery_outbox;
DROP ROLE regress_probe_owner;
