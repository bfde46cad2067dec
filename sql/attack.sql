--
-- attack.sql: the code an outbox's owner puts on its table runs with the
-- owner's rights, never the extension's (SPEC.md, "Trust: who runs what";
-- docs/guarantees.md, "Who can do what")
--
-- A tenant role, no superuser, owns a schema, and outboxes in it: a plain
-- created one, a partitioned created one (4 ids a partition, so that the
-- enqueues make partitions and the purge drops some) and the seed
-- system's table taken over by outbox_attach; two of each, one worked by
-- the tenant itself, one by a producer, a relay, a monitoring role and an
-- operator that hold only the documented GRANTs.  On each the tenant puts
-- code that tries to gain rights: BEFORE and AFTER row triggers for
-- INSERT, UPDATE and DELETE, a CHECK, a column DEFAULT, an expression
-- index, a partial index whose predicate calls a function on a column,
-- one whose predicate the planner folds (a function of a constant,
-- evaluated whenever the index's description is loaded), triggers on the
-- dead-letter table; on the attached tables these are there before
-- outbox_attach, with statement triggers, a column of a domain whose
-- CHECK calls a function, and a dead-letter table of the tenant's, taken
-- up by outbox_attach.  Each piece calls regress_attack.attempt(), which
-- logs who it ran as and tries ALTER ROLE ... SUPERUSER and an INSERT into
-- a table only the superuser may write, each in a subtransaction undone
-- at once (so that one success does not hide the next), logging the
-- outcome.
--
-- Then every function that works an outbox is called on each, one step a
-- transaction, and each step shows what it returned, which pieces of code
-- ran (fired), as whom (ran_as: the owner, never the superuser nor the
-- caller) and whether any gained a right (gained: never).  The folded
-- predicate is left out of "fired" (when it runs depends on the relation
-- cache, not on the step) but not out of ran_as and gained.  A trigger
-- that rewrites kind on INSERT keeps working.  The background worker's
-- sweeps (reclaim, expiry, purge, partition upkeep and drops) are
-- t/021_attack.pl's.
--
CREATE EXTENSION delivery_outbox;

\set VERBOSITY default
\set SHOW_CONTEXT never

-- roles left behind by an interrupted earlier run
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS regress_attack CASCADE;
DROP ROLE IF EXISTS regress_attack_owner;
DROP ROLE IF EXISTS regress_attack_producer;
DROP ROLE IF EXISTS regress_attack_relay;
DROP ROLE IF EXISTS regress_attack_monitor;
DROP ROLE IF EXISTS regress_attack_operator;
DROP ROLE IF EXISTS regress_attack_producers;
DROP ROLE IF EXISTS regress_attack_relays;
DROP ROLE IF EXISTS regress_attack_monitors;
DROP ROLE IF EXISTS regress_attack_admins;
RESET client_min_messages;

--
-- The roles, as docs/reference.md's "Roles and GRANTs" and "Per-tenant
-- roles" make them: the functions granted to four group roles, the
-- tenant's roles members of them, the table privileges granted by the
-- tenant on its own tables.  The tenant (regress_attack_owner) may call
-- every function an operator may, and owns its schema.
--
CREATE ROLE regress_attack_producers NOLOGIN;
CREATE ROLE regress_attack_relays NOLOGIN;
CREATE ROLE regress_attack_monitors NOLOGIN;
CREATE ROLE regress_attack_admins NOLOGIN;
GRANT EXECUTE ON FUNCTION
    outbox_enqueue(text, text, bytea, text, timestamptz, timestamptz, text, regclass),
    outbox_enqueue_batch(text[], text[], bytea[], text[], timestamptz[], timestamptz[], text[], regclass)
  TO regress_attack_producers;
GRANT EXECUTE ON FUNCTION
    outbox_claim(integer, text, text, regclass),
    outbox_ack(bigint, text, regclass),
    outbox_ack(bigint[], text, regclass),
    outbox_ack_claim(bigint[], integer, text, text, regclass),
    outbox_release(bigint[], interval, text, regclass),
    outbox_reject(bigint[], text, regclass),
    outbox_next_due(text, regclass),
    outbox_reclaim(interval, integer, regclass),
    outbox_reclaim_recipient(text, text, regclass),
    outbox_replay(text, bigint, integer, text, regclass),
    outbox_horizon(regclass),
    outbox_wait(interval, text, regclass),
    outbox_shards(regclass)
  TO regress_attack_relays;
GRANT EXECUTE ON FUNCTION outbox_stats(regclass) TO regress_attack_monitors;
GRANT EXECUTE ON FUNCTION
    outbox_reassign(text, text, regclass),
    outbox_purge(interval, regclass),
    outbox_redrive(bigint[], regclass),
    outbox_expire(integer, regclass),
    outbox_create(name, name, text, bigint),
    outbox_attach(regclass, text),
    outbox_detach(regclass),
    outbox_configure(regclass, text, integer, interval, interval, interval, boolean, interval),
    outbox_partition(regclass, bigint),
    outbox_distribute(regclass, regclass, integer)
  TO regress_attack_admins;

CREATE ROLE regress_attack_owner;
CREATE ROLE regress_attack_producer IN ROLE regress_attack_producers;
CREATE ROLE regress_attack_relay IN ROLE regress_attack_relays;
CREATE ROLE regress_attack_monitor IN ROLE regress_attack_monitors;
CREATE ROLE regress_attack_operator IN ROLE regress_attack_admins;
GRANT regress_attack_producers, regress_attack_relays, regress_attack_monitors,
      regress_attack_admins TO regress_attack_owner;
CREATE SCHEMA regress_attack AUTHORIZATION regress_attack_owner;

-- only the superuser may write this table
CREATE TABLE regress_attack_vault (probe text);
REVOKE ALL ON regress_attack_vault FROM PUBLIC;

--
-- Everything below until RESET ROLE is the tenant's
--
SET ROLE regress_attack_owner;

-- the log: anyone may add to it, so that the tenant's code logs whoever
-- it runs as
CREATE TABLE regress_attack.log (
    n           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    probe       text NOT NULL,
    step        text,
    ran_as      name NOT NULL,
    superuser   boolean,
    alter_role  text NOT NULL,
    vault       text NOT NULL,
    pid         integer
);
GRANT USAGE ON SCHEMA regress_attack TO PUBLIC;
GRANT INSERT ON regress_attack.log TO PUBLIC;

-- The attempt every piece of code makes.  Runs with whatever search_path
-- it finds (pg_catalog, pg_temp when the extension runs it): everything is
-- qualified.  Returns true, so that it can be a CHECK or a predicate.
CREATE FUNCTION regress_attack.attempt(probe text) RETURNS boolean
LANGUAGE plpgsql AS $f$
DECLARE
    alter_role text;
    vault text;
BEGIN
    BEGIN
        ALTER ROLE regress_attack_owner SUPERUSER;
        alter_role := 'GAINED';
        RAISE EXCEPTION 'undo it';
    EXCEPTION WHEN OTHERS THEN
        alter_role := coalesce(alter_role, SQLSTATE);
    END;
    BEGIN
        INSERT INTO public.regress_attack_vault VALUES (probe);
        vault := 'GAINED';
        RAISE EXCEPTION 'undo it';
    EXCEPTION WHEN OTHERS THEN
        vault := coalesce(vault, SQLSTATE);
    END;
    INSERT INTO regress_attack.log (probe, step, ran_as, superuser,
                                    alter_role, vault, pid)
    VALUES (probe, pg_catalog.current_setting('regress_attack.step', true),
            current_user,
            (SELECT r.rolsuper FROM pg_catalog.pg_roles r
              WHERE r.rolname OPERATOR(pg_catalog.=) current_user),
            alter_role, vault, pg_catalog.pg_backend_pid());
    RETURN true;
END
$f$;

-- row and statement triggers; TG_ARGV[0] prefixes the probe's name (the
-- dead-letter table's are "dead ..."); a BEFORE INSERT row rewrites kind
-- 'rewrite-me' to 'rewritten'
CREATE FUNCTION regress_attack.trigger_probe() RETURNS trigger
LANGUAGE plpgsql AS $f$
BEGIN
    PERFORM regress_attack.attempt(pg_catalog.concat(TG_ARGV[0],
        pg_catalog.lower(TG_WHEN), ' ', pg_catalog.lower(TG_OP),
        CASE TG_LEVEL WHEN 'STATEMENT' THEN ' statement' END));
    IF TG_LEVEL OPERATOR(pg_catalog.=) 'STATEMENT' THEN
        RETURN NULL;
    ELSIF TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN
        RETURN OLD;
    ELSIF TG_OP OPERATOR(pg_catalog.=) 'INSERT' AND TG_WHEN OPERATOR(pg_catalog.=) 'BEFORE'
          AND NEW.kind OPERATOR(pg_catalog.=) 'rewrite-me' THEN
        NEW.kind := 'rewritten';
    END IF;
    RETURN NEW;
END
$f$;

CREATE FUNCTION regress_attack.check_probe(kind text) RETURNS boolean
LANGUAGE sql AS $f$ SELECT regress_attack.attempt('check') $f$;
CREATE FUNCTION regress_attack.default_probe() RETURNS text
LANGUAGE sql AS $f$ SELECT CASE WHEN regress_attack.attempt('default') THEN 'd' END $f$;
-- an index's functions must be immutable; these only say so
CREATE FUNCTION regress_attack.expression_probe(kind text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $f$
BEGIN
    PERFORM regress_attack.attempt('index expression');
    RETURN kind;
END
$f$;
CREATE FUNCTION regress_attack.predicate_probe(kind text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $f$
BEGIN
    RETURN regress_attack.attempt(coalesce(
        CASE WHEN kind OPERATOR(pg_catalog.=) 'folded' THEN 'folded predicate' END,
        'index predicate'));
END
$f$;
CREATE FUNCTION regress_attack.domain_probe(v text) RETURNS boolean
LANGUAGE plpgsql AS $f$
BEGIN
    RETURN regress_attack.attempt('domain check');
END
$f$;
CREATE DOMAIN regress_attack.probed_text AS text
    CHECK (regress_attack.domain_probe(VALUE));

-- plant(t, extras): the code on table t; extras: also statement triggers
-- and a column of the probed domain.  dead_plant(t): the triggers of a
-- dead-letter table.
CREATE FUNCTION regress_attack.plant(t regclass, extras boolean) RETURNS void
LANGUAGE plpgsql AS $f$
BEGIN
    EXECUTE format('CREATE TRIGGER attack_before BEFORE INSERT OR UPDATE OR DELETE ON %s'
                   ' FOR EACH ROW EXECUTE FUNCTION regress_attack.trigger_probe('''')', t);
    EXECUTE format('CREATE TRIGGER attack_after AFTER INSERT OR UPDATE OR DELETE ON %s'
                   ' FOR EACH ROW EXECUTE FUNCTION regress_attack.trigger_probe('''')', t);
    EXECUTE format('ALTER TABLE %s ADD CONSTRAINT attack_check'
                   ' CHECK (regress_attack.check_probe(kind))', t);
    EXECUTE format('ALTER TABLE %s ADD COLUMN attack_default text'
                   ' DEFAULT regress_attack.default_probe()', t);
    EXECUTE format('CREATE INDEX ON %s ((regress_attack.expression_probe(kind)))', t);
    EXECUTE format('CREATE INDEX ON %s (id) WHERE regress_attack.predicate_probe(kind)', t);
    EXECUTE format('CREATE INDEX ON %s (id) WHERE regress_attack.predicate_probe(''folded'')', t);
    IF extras THEN
        EXECUTE format('CREATE TRIGGER attack_before_statement BEFORE INSERT OR UPDATE OR DELETE'
                       ' ON %s FOR EACH STATEMENT EXECUTE FUNCTION regress_attack.trigger_probe('''')', t);
        EXECUTE format('CREATE TRIGGER attack_after_statement AFTER INSERT OR UPDATE OR DELETE'
                       ' ON %s FOR EACH STATEMENT EXECUTE FUNCTION regress_attack.trigger_probe('''')', t);
        EXECUTE format('ALTER TABLE %s ADD COLUMN attack_domain regress_attack.probed_text', t);
    END IF;
END
$f$;
CREATE FUNCTION regress_attack.dead_plant(t regclass) RETURNS void
LANGUAGE plpgsql AS $f$
BEGIN
    EXECUTE format('CREATE TRIGGER attack_before BEFORE INSERT OR UPDATE OR DELETE ON %s'
                   ' FOR EACH ROW EXECUTE FUNCTION regress_attack.trigger_probe(''dead '')', t);
    EXECUTE format('CREATE TRIGGER attack_after AFTER INSERT OR UPDATE OR DELETE ON %s'
                   ' FOR EACH ROW EXECUTE FUNCTION regress_attack.trigger_probe(''dead '')', t);
END
$f$;

-- The seed's migrations 027 and 028 (sql/outboxes_seed.sql), with a few
-- rows already acked, and a dead-letter table of the tenant's making,
-- which outbox_attach takes up.
CREATE FUNCTION regress_attack.seed(t name) RETURNS void
LANGUAGE plpgsql AS $f$
BEGIN
    EXECUTE format($ddl$
        CREATE TABLE regress_attack.%1$I (
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
        CREATE INDEX ON regress_attack.%1$I (recipient, id) WHERE delivery_state <> 'acked';
        CREATE INDEX ON regress_attack.%1$I (delivery_state, created_at) WHERE delivery_state <> 'acked';
        CREATE OR REPLACE FUNCTION regress_attack.delivery_outbox_notify() RETURNS trigger AS $$
        BEGIN
            PERFORM pg_notify('delivery_outbox', NEW.id::text);
            RETURN NEW;
        END;
        $$ LANGUAGE plpgsql;
        CREATE TRIGGER delivery_outbox_notify_trg
            AFTER INSERT ON regress_attack.%1$I
            FOR EACH ROW EXECUTE FUNCTION regress_attack.delivery_outbox_notify();
        INSERT INTO regress_attack.%1$I (recipient, kind, payload, delivery_state,
                                         delivery_attempts, created_at, delivered_at, acked_at)
        SELECT 'agent:old', 'work', '\x00', 'acked', 1, '2001-01-01', '2001-01-01', '2001-01-01'
          FROM generate_series(1, 2);
        CREATE TABLE regress_attack.%2$I (
            id bigint PRIMARY KEY, recipient text NOT NULL, kind text NOT NULL,
            tenant_id text, payload bytea NOT NULL, delivery_state text NOT NULL,
            delivery_attempts integer NOT NULL, created_at timestamp NOT NULL,
            delivered_at timestamp, acked_at timestamp, not_before timestamptz,
            expires_at timestamptz, dedup_key text, last_error text,
            dead_at timestamptz NOT NULL DEFAULT now(), dead_reason text NOT NULL)
    $ddl$, t, t || '_dead');
END
$f$;

-- a plain created outbox, a partitioned one, an attached seed table; _o
-- for the owner to work, _r for the other roles
SELECT outbox_create('regress_attack', 'plain_o');
SELECT outbox_create('regress_attack', 'plain_r');
SELECT outbox_create('regress_attack', 'parted_o', partition_rows => 4);
SELECT outbox_create('regress_attack', 'parted_r', partition_rows => 4);
SELECT regress_attack.seed('seed_o');
SELECT regress_attack.seed('seed_r');
SELECT regress_attack.plant(t, false),
       regress_attack.dead_plant((t::text || '_dead')::regclass)
  FROM unnest('{regress_attack.plain_o,regress_attack.plain_r,
                regress_attack.parted_o,regress_attack.parted_r}'::regclass[]) t;
SELECT regress_attack.plant(t, true),
       regress_attack.dead_plant((t::text || '_dead')::regclass)
  FROM unnest('{regress_attack.seed_o,regress_attack.seed_r}'::regclass[]) t;
RESET ROLE;

-- planting ran the tenant's code (validating the CHECK, filling the
-- default, building the indexes), as the tenant
SELECT probe, ran_as, superuser, alter_role, vault, count(*) > 0 AS ran
  FROM regress_attack.log GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2;
SELECT max(n) AS planted_log FROM regress_attack.log \gset

-- the seed tables taken over by the tenant, the code and the dead-letter
-- table already there (the seed's notifying trigger disabled, the
-- tenant's kept)
SET ROLE regress_attack_owner;
SELECT outbox_attach('regress_attack.seed_o');
SELECT outbox_attach('regress_attack.seed_r');
SELECT tgrelid::regclass, tgname, tgenabled FROM pg_trigger
 WHERE tgrelid IN ('regress_attack.seed_o'::regclass, 'regress_attack.seed_o_dead'::regclass)
   AND NOT tgisinternal ORDER BY 1, 2;
RESET ROLE;
SELECT dead_table FROM delivery_outbox_tables WHERE outbox = 'regress_attack.seed_o'::regclass;
-- no code of the tenant's ran as anyone else, and none gained anything
SELECT probe, ran_as, superuser, alter_role, vault
  FROM regress_attack.log
 WHERE n > :planted_log
   AND (ran_as <> 'regress_attack_owner' OR superuser OR alter_role = 'GAINED'
        OR vault = 'GAINED')
 ORDER BY n;

-- the documented table privileges, for the roles that work the _r outboxes
SET ROLE regress_attack_owner;
SELECT format(g, t)
  FROM unnest('{regress_attack.plain_r,regress_attack.parted_r,regress_attack.seed_r}'::text[]) t,
       unnest(ARRAY['GRANT INSERT ON %1$s TO regress_attack_producer',
                    'GRANT UPDATE, SELECT ON %1$s TO regress_attack_relay',
                    'GRANT SELECT (id, recipient, kind, tenant_id, delivery_state, delivery_attempts,'
                    ' created_at, delivered_at, acked_at, not_before, expires_at)'
                    ' ON %1$s TO regress_attack_monitor',
                    'GRANT SELECT, INSERT, UPDATE, DELETE ON %1$s TO regress_attack_operator',
                    'GRANT SELECT ON %1$s_dead TO regress_attack_operator']) g
\gexec
RESET ROLE;

SELECT max(n) AS setup_log FROM regress_attack.log \gset

--
-- The steps.  %1$s is the outbox, %2$s what "pick" returned (ids, picked
-- as the owner, so that no caller reads the table but through the
-- functions).  caller: who calls on a _r outbox; on an _o one the owner
-- calls every step.
--
CREATE TABLE regress_attack_steps (
    n      integer PRIMARY KEY,
    caller text NOT NULL,
    step   text NOT NULL,
    pick   text,
    call   text NOT NULL,
    plain_only boolean NOT NULL DEFAULT false  -- not on a partitioned outbox
);
INSERT INTO regress_attack_steps (n, caller, step, pick, call) VALUES
 (1, 'producer', 'outbox_enqueue', NULL,
  $$SELECT outbox_enqueue('agent:a', 'work', '\x01', outbox => %1$L) > 0$$),
 (2, 'producer', 'outbox_enqueue dedup_key', NULL,
  $$SELECT outbox_enqueue('agent:a', 'work', '\x02', dedup_key => 'k1', outbox => %1$L) > 0$$),
 (3, 'producer', 'outbox_enqueue dedup_key taken', NULL,
  $$SELECT outbox_enqueue('agent:a', 'work', '\x03', dedup_key => 'k1', outbox => %1$L) > 0$$),
 (4, 'producer', 'outbox_enqueue kind rewritten', NULL,
  $$SELECT outbox_enqueue('agent:k', 'rewrite-me', '\x04', outbox => %1$L) > 0$$),
 (5, 'producer', 'outbox_enqueue_batch', NULL,
  $$SELECT count(DISTINCT i) FROM outbox_enqueue_batch(ARRAY['agent:a', 'agent:b', 'agent:b'],
        ARRAY['work', 'work', 'work'], ARRAY['\x05', '\x06', '\x07']::bytea[],
        dedup_keys => ARRAY[NULL, 'kb', 'kb'], outbox => %1$L) i$$),
 (6, 'producer', 'outbox_enqueue expires_at', NULL,
  $$SELECT outbox_enqueue('agent:x', 'work', '\x08', expires_at => '2001-01-01', outbox => %1$L) > 0$$),
 (7, 'producer', 'outbox_enqueue not_before', NULL,
  $$SELECT outbox_enqueue('agent:s', 'work', '\x09', not_before => now() + interval '1 day',
                          outbox => %1$L) > 0$$),
 (8, 'relay', 'outbox_replay', NULL,
  $$SELECT string_agg(kind || ' ' || delivery_state, ', ' ORDER BY id)
      FROM outbox_replay('agent:k', outbox => %1$L)$$),
 (9, 'relay', 'outbox_claim', NULL,
  $$SELECT count(*) FROM outbox_claim(2, outbox => %1$L)$$),
 (10, 'relay', 'outbox_ack', $$SELECT array_agg(id ORDER BY id) FROM %1$s
        WHERE delivery_state = 'delivered'$$,
  $$SELECT outbox_ack((%2$L::bigint[])[1], outbox => %1$L)$$),
 (11, 'relay', 'outbox_ack recipient', $$SELECT array_agg(id ORDER BY id) FROM %1$s
        WHERE delivery_state = 'delivered'$$,
  $$SELECT outbox_ack((%2$L::bigint[])[1], 'agent:a', outbox => %1$L)$$),
 (12, 'relay', 'outbox_claim recipient', NULL,
  $$SELECT count(*) FROM outbox_claim(10, 'agent:a', outbox => %1$L)$$),
 (13, 'relay', 'outbox_release', $$SELECT array_agg(id) FROM %1$s
        WHERE delivery_state = 'delivered'$$,
  $$SELECT outbox_release(%2$L::bigint[], retry_after => '0', error => 'HTTP 503',
                          outbox => %1$L)$$),
 (14, 'relay', 'outbox_claim', NULL,
  $$SELECT count(*) FROM outbox_claim(10, 'agent:a', outbox => %1$L)$$),
 (15, 'relay', 'outbox_reject', $$SELECT array_agg(id) FROM %1$s
        WHERE delivery_state = 'delivered'$$,
  $$SELECT outbox_reject(%2$L::bigint[], 'HTTP 422', outbox => %1$L)$$),
 (16, 'operator', 'outbox_redrive', $$SELECT array_agg(id) FROM %1$s_dead$$,
  $$SELECT outbox_redrive(%2$L::bigint[], outbox => %1$L)$$),
 (17, 'relay', 'outbox_claim', NULL,
  $$SELECT count(*) FROM outbox_claim(10, 'agent:a', outbox => %1$L)$$),
 (18, 'relay', 'outbox_ack array recipient', $$SELECT array_agg(id) FROM %1$s
        WHERE delivery_state = 'delivered'$$,
  $$SELECT outbox_ack(%2$L::bigint[], 'agent:a', outbox => %1$L)$$),
 (19, 'relay', 'outbox_claim', NULL,
  $$SELECT count(*) FROM outbox_claim(10, 'agent:k', outbox => %1$L)$$),
 (20, 'relay', 'outbox_reclaim', NULL,
  $$SELECT outbox_reclaim('0 seconds', outbox => %1$L)$$),
 (21, 'relay', 'outbox_claim', NULL,
  $$SELECT count(*) FROM outbox_claim(10, 'agent:b', outbox => %1$L)$$),
 (22, 'relay', 'outbox_reclaim_recipient', NULL,
  $$SELECT outbox_reclaim_recipient('agent:b', outbox => %1$L)$$),
 (23, 'operator', 'outbox_reassign', NULL,
  $$SELECT outbox_reassign('agent:b', 'agent:c', outbox => %1$L)$$),
 (24, 'relay', 'outbox_replay', NULL,
  $$SELECT string_agg(kind || ' ' || delivery_state, ', ' ORDER BY id)
      FROM outbox_replay('agent:c', outbox => %1$L)$$),
 (25, 'monitor', 'outbox_stats', NULL,
  $$SELECT format('%%s pending, %%s delivered, %%s acked, %%s dead', pending, delivered, acked, dead)
      FROM outbox_stats(%1$L)$$),
 (26, 'relay', 'outbox_wait', NULL,
  $$SELECT outbox_wait('0 seconds', 'agent:k', outbox => %1$L)$$),
 (27, 'relay', 'outbox_next_due', NULL,
  $$SELECT outbox_next_due('agent:s', outbox => %1$L) > now()$$),
 (28, 'relay', 'outbox_horizon', NULL,
  $$SELECT outbox_horizon(%1$L) > 0$$),
 (29, 'operator', 'outbox_expire', NULL,
  $$SELECT outbox_expire(outbox => %1$L)$$),
 (30, 'relay', 'outbox_claim', NULL,
  $$SELECT count(*) FROM outbox_claim(100, outbox => %1$L)$$),
 (31, 'relay', 'outbox_ack array', $$SELECT array_agg(id) FROM %1$s
        WHERE delivery_state = 'delivered'$$,
  $$SELECT outbox_ack(%2$L::bigint[], outbox => %1$L)$$),
 (32, 'operator', 'outbox_purge', NULL,
  $$SELECT outbox_purge('0 seconds', outbox => %1$L)$$),
 (33, 'owner', 'outbox_configure max_attempts', NULL,
  $$SELECT outbox_configure(%1$L, max_attempts => 1) IS NOT NULL$$),
 (34, 'producer', 'outbox_enqueue', NULL,
  $$SELECT outbox_enqueue('agent:m', 'work', '\x0a', outbox => %1$L) > 0$$),
 (35, 'relay', 'outbox_claim', NULL,
  $$SELECT count(*) FROM outbox_claim(10, 'agent:m', outbox => %1$L)$$),
 (36, 'relay', 'outbox_release max_attempts', $$SELECT array_agg(id) FROM %1$s
        WHERE delivery_state = 'delivered'$$,
  $$SELECT outbox_release(%2$L::bigint[], outbox => %1$L)$$),
 (37, 'owner', 'outbox_configure ordered', NULL,
  $$SELECT outbox_configure(%1$L, max_attempts => 0, ordered => true) IS NOT NULL$$),
 (38, 'producer', 'outbox_enqueue', NULL,
  $$SELECT outbox_enqueue('agent:o', 'work', '\x0b', outbox => %1$L) > 0$$),
 (39, 'relay', 'outbox_claim ordered', NULL,
  $$SELECT count(*) FROM outbox_claim(10, outbox => %1$L)$$),
 (40, 'relay', 'outbox_ack ordered', $$SELECT array_agg(id) FROM %1$s
        WHERE delivery_state = 'delivered'$$,
  $$SELECT outbox_ack(%2$L::bigint[], outbox => %1$L)$$),
 (41, 'owner', 'outbox_configure', NULL,
  $$SELECT outbox_configure(%1$L, ordered => false, channel => 'regress_attack_wake',
                            ttl => '1 day', retain_acked => '1 hour') IS NOT NULL$$),
 (42, 'owner', 'outbox_detach', NULL,
  $$SELECT outbox_detach(%1$L) IS NOT NULL$$),
 (43, 'owner', 'outbox_attach', NULL,
  $$SELECT outbox_attach(%1$L) IS NOT NULL$$),
 (44, 'owner', 'outbox_partition', NULL,
  $$SELECT outbox_partition(%1$L, 4) IS NOT NULL$$),
 (45, 'producer', 'outbox_enqueue_batch', NULL,
  $$SELECT count(*) FROM outbox_enqueue_batch(array_fill('agent:p'::text, '{9}'),
        array_fill('work'::text, '{9}'), array_fill('\x0c'::bytea, '{9}'), outbox => %1$L)$$),
 (46, 'relay', 'outbox_claim', NULL,
  $$SELECT count(*) FROM outbox_claim(100, outbox => %1$L)$$),
 (47, 'relay', 'outbox_ack array', $$SELECT array_agg(id) FROM %1$s
        WHERE delivery_state = 'delivered'$$,
  $$SELECT outbox_ack(%2$L::bigint[], outbox => %1$L)$$),
 (48, 'operator', 'outbox_purge', NULL,
  $$SELECT outbox_purge('0 seconds', outbox => %1$L)$$),
 (49, 'producer', 'outbox_enqueue', NULL,
  $$SELECT outbox_enqueue('agent:q', 'work', '\x0d', outbox => %1$L) > 0$$),
 (50, 'relay', 'outbox_ack_claim nothing to ack', NULL,
  $$SELECT count(*) FROM outbox_ack_claim('{}', 10, outbox => %1$L)$$),
 (51, 'producer', 'outbox_enqueue', NULL,
  $$SELECT outbox_enqueue('agent:r', 'work', '\x0e', outbox => %1$L) > 0$$),
 (52, 'relay', 'outbox_ack_claim', $$SELECT array_agg(id) FROM %1$s
        WHERE delivery_state = 'delivered'$$,
  $$SELECT string_agg(recipient, ',') FROM outbox_ack_claim(%2$L::bigint[], 10, outbox => %1$L)$$),
 (53, 'owner', 'outbox_configure retain_acked 0', NULL,
  $$SELECT outbox_configure(%1$L, retain_acked => '0') IS NOT NULL$$),
 (54, 'relay', 'outbox_ack_claim deletes', $$SELECT array_agg(id) FROM %1$s
        WHERE delivery_state = 'delivered'$$,
  $$SELECT count(*) FROM outbox_ack_claim(%2$L::bigint[], 10, outbox => %1$L)$$),
 -- Citus's entry points, on a server without it: refused or empty, and
 -- nothing of the table's code runs
 (55, 'owner', 'outbox_distribute', NULL,
  $$SELECT count(*) FROM outbox_distribute(%1$L)$$),
 (56, 'relay', 'outbox_shards', NULL,
  $$SELECT count(*) FROM outbox_shards(%1$L)$$);
-- a partitioned outbox cannot be detached and attached again
UPDATE regress_attack_steps SET plain_only = true WHERE n IN (42, 43);

-- Each step in a transaction of its own: pick (as the owner), then the
-- call, as the caller; what it returned (or its error), which pieces of
-- the tenant's code it ran, as whom, and whether any gained anything.
CREATE TABLE regress_attack_results (
    outbox text,
    n      integer,
    step   text,
    caller text,
    result text,
    fired  text,
    ran_as text,
    gained boolean,
    PRIMARY KEY (outbox, n)
);
CREATE PROCEDURE regress_attack_run(tbl text)
LANGUAGE plpgsql AS $p$
DECLARE
    s record;
    caller name;
    picked bigint[];
    result text;
    since bigint;
BEGIN
    FOR s IN SELECT * FROM regress_attack_steps
              WHERE NOT (plain_only AND tbl LIKE '%parted%') ORDER BY n LOOP
        caller := CASE WHEN tbl LIKE '%\_o' OR s.caller = 'owner' THEN 'regress_attack_owner'
                       ELSE 'regress_attack_' || s.caller END;
        SELECT coalesce(max(l.n), 0) INTO since FROM regress_attack.log l;
        picked := NULL;
        BEGIN
            PERFORM set_config('regress_attack.step', s.step, false);
            IF s.pick IS NOT NULL THEN
                PERFORM set_config('role', 'regress_attack_owner', false);
                EXECUTE format(s.pick, tbl) INTO picked;
            END IF;
            PERFORM set_config('role', caller, false);
            EXECUTE format(s.call, tbl, picked) INTO result;
        EXCEPTION WHEN OTHERS THEN
            result := format('%s: %s', SQLSTATE, SQLERRM);
        END;
        PERFORM set_config('role', 'none', false);
        PERFORM set_config('regress_attack.step', '', false);
        INSERT INTO regress_attack_results
        SELECT tbl, s.n, s.step, caller, result,
               string_agg(DISTINCT l.probe, ', ' ORDER BY l.probe)
                   FILTER (WHERE l.probe <> 'folded predicate'),
               string_agg(DISTINCT l.ran_as, ', ' ORDER BY l.ran_as)
                   FILTER (WHERE l.probe <> 'folded predicate'
                              OR l.ran_as <> 'regress_attack_owner'),
               coalesce(bool_or(l.superuser OR l.alter_role = 'GAINED'
                                OR l.vault = 'GAINED'), false)
          FROM regress_attack.log l WHERE l.n > since;
        COMMIT;
    END LOOP;
END
$p$;

CALL regress_attack_run('regress_attack.plain_o');
CALL regress_attack_run('regress_attack.plain_r');
CALL regress_attack_run('regress_attack.parted_o');
CALL regress_attack_run('regress_attack.parted_r');
CALL regress_attack_run('regress_attack.seed_o');
CALL regress_attack_run('regress_attack.seed_r');

\pset format unaligned
\pset fieldsep ' | '
SELECT outbox, n, step, caller, result, fired, ran_as, gained
  FROM regress_attack_results ORDER BY outbox, n;
\pset format aligned

--
-- Nothing was gained, by any piece of code, at any step
--
SELECT count(*) > 0 AS ran, bool_or(superuser) AS as_superuser,
       bool_or(alter_role = 'GAINED') AS altered_role,
       bool_or(vault = 'GAINED') AS wrote_vault,
       string_agg(DISTINCT ran_as, ', ') AS ran_as,
       string_agg(DISTINCT alter_role || ' ' || vault, ', ') AS refused
  FROM regress_attack.log WHERE n > :setup_log;
-- the folded predicate ran too, as the owner
SELECT count(*) > 0 AS ran, string_agg(DISTINCT ran_as, ', ') AS ran_as
  FROM regress_attack.log WHERE n > :setup_log AND probe = 'folded predicate';
SELECT rolname, rolsuper, rolcreaterole, rolcreatedb, rolbypassrls
  FROM pg_roles WHERE rolname LIKE 'regress\_attack\_%' ORDER BY 1;
SELECT count(*) AS vault_rows FROM regress_attack_vault;

--
-- The outboxes kept working for the owner: every row where the steps
-- left it, and its dead letters
--
SET ROLE regress_attack_owner;
SELECT 'plain_o' AS outbox, recipient, kind, delivery_state, delivery_attempts
  FROM regress_attack.plain_o
UNION ALL
SELECT 'plain_r', recipient, kind, delivery_state, delivery_attempts FROM regress_attack.plain_r
UNION ALL
SELECT 'parted_o', recipient, kind, delivery_state, delivery_attempts FROM regress_attack.parted_o
UNION ALL
SELECT 'parted_r', recipient, kind, delivery_state, delivery_attempts FROM regress_attack.parted_r
UNION ALL
SELECT 'seed_o', recipient, kind, delivery_state, delivery_attempts FROM regress_attack.seed_o
UNION ALL
SELECT 'seed_r', recipient, kind, delivery_state, delivery_attempts FROM regress_attack.seed_r
ORDER BY 1, 2, 3, 4, 5;
SELECT 'plain_o' AS outbox, recipient, dead_reason, last_error FROM regress_attack.plain_o_dead
UNION ALL
SELECT 'parted_r', recipient, dead_reason, last_error FROM regress_attack.parted_r_dead
UNION ALL
SELECT 'seed_r', recipient, dead_reason, last_error FROM regress_attack.seed_r_dead
ORDER BY 1, 2, 3, 4;
RESET ROLE;

-- The internal helpers of the functions written in SQL are granted to
-- nobody: an owner or a relay calling one directly gets 42501, and nothing
-- runs (outbox_run_as_owner would run a command as a table's owner).
SET ROLE regress_attack_owner;
SELECT outbox_run_as_owner('regress_attack.plain_o', 'ALTER ROLE regress_attack_owner SUPERUSER');
SELECT outbox_grant_triggers('regress_attack.plain_o');
SELECT outbox_make_indexes('regress_attack.plain_o');
SELECT outbox_invalidate('regress_attack.plain_o');
SELECT outbox_register_local_shards();
SELECT outbox_share_settings('regress_attack.plain_o');
SELECT outbox_distributed('regress_attack.plain_o');
SELECT * FROM outbox_placements('regress_attack.plain_o', 'regress_attack.plain_o_dead');
RESET ROLE;
SET ROLE regress_attack_relay;
SELECT outbox_run_as_owner('regress_attack.plain_r', 'SELECT 1');
RESET ROLE;
SELECT rolsuper AS owner_is_superuser FROM pg_roles WHERE rolname = 'regress_attack_owner';

DROP SCHEMA regress_attack CASCADE;
DROP TABLE regress_attack_vault, regress_attack_steps, regress_attack_results;
DROP PROCEDURE regress_attack_run(text);
DROP EXTENSION delivery_outbox;
DROP ROLE regress_attack_owner, regress_attack_producer, regress_attack_relay,
    regress_attack_monitor, regress_attack_operator;
DROP ROLE regress_attack_producers, regress_attack_relays, regress_attack_monitors,
    regress_attack_admins;
