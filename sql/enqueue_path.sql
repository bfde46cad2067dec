--
-- outbox_enqueue inserts its row without SQL (the executor's row-level
-- insert, with the table's defaults, CHECK constraints and partial-index
-- predicates planned once per session, their states built for each row).
-- Whatever the table gains or loses after the first call -- constraints,
-- defaults, columns, indexes, triggers, rules, row security, privileges --
-- an enqueue must behave exactly as an INSERT would.
--
CREATE EXTENSION delivery_outbox;
\set VERBOSITY default
\set SHOW_CONTEXT never
SET delivery_outbox.notify_queue_limit = 0;  -- no wake-ups needed here

-- a first call prepares the session's expressions
SELECT outbox_enqueue('agent:a', 'work', '\x01') AS first_id \gset
SELECT id = :first_id AS same_id, recipient, kind, tenant_id, payload,
       delivery_state, delivery_attempts, created_at IS NOT NULL AS has_created_at,
       delivered_at, acked_at
  FROM delivery_outbox;

-- several enqueues in one statement: ids in call order, all rows there
SELECT count(DISTINCT outbox_enqueue('agent:b', 'work', '\x02', 't1')) AS enqueued
  FROM generate_series(1, 3);
SELECT recipient, tenant_id, count(*) FROM delivery_outbox
 GROUP BY 1, 2 ORDER BY 1;

--
-- a CHECK constraint added after the first call is enforced, with the
-- message and SQLSTATE of an INSERT; the failed call leaves nothing
--
ALTER TABLE delivery_outbox
  ADD CONSTRAINT regress_short_kind CHECK (length(kind) < 10);
SELECT count(*) AS rows_before FROM delivery_outbox \gset
\set VERBOSITY terse
SELECT outbox_enqueue('agent:a', 'much-too-long-kind', '\x03');
\echo :SQLSTATE
SELECT count(*) = :rows_before AS nothing_inserted FROM delivery_outbox;
-- the same through a plain INSERT, for comparison
INSERT INTO delivery_outbox (recipient, kind, payload)
VALUES ('agent:a', 'much-too-long-kind', '\x03');
\echo :SQLSTATE
\set VERBOSITY default
ALTER TABLE delivery_outbox DROP CONSTRAINT regress_short_kind;
SELECT outbox_enqueue('agent:a', 'much-too-long-kind', '\x03') > :first_id AS accepted_again;

-- NOT NULL still holds (the arguments are checked first, so through a
-- default: a NULL default for delivery_state)
ALTER TABLE delivery_outbox ALTER COLUMN delivery_state DROP DEFAULT;
\set VERBOSITY terse
SELECT outbox_enqueue('agent:a', 'work', '\x03');
\echo :SQLSTATE
\set VERBOSITY default
ALTER TABLE delivery_outbox ALTER COLUMN delivery_state SET DEFAULT 'pending';

-- a CHECK with a long IN list (a hashed array test in a plain INSERT),
-- called again and again in one session
ALTER TABLE delivery_outbox ADD CONSTRAINT regress_kind_list
  CHECK (kind IN ('k01', 'k02', 'k03', 'k04', 'k05', 'k06', 'k07', 'k08',
                  'k09', 'k10', 'k11', 'k12', 'work', 'much-too-long-kind',
                  'special', 'plain', 'once', 'chain', 'chained', 'skip',
                  'bookkeeping'));
SELECT count(outbox_enqueue('agent:list', 'k0' || (i % 9 + 1), '\x03')) AS accepted
  FROM generate_series(1, 20) AS i;
\set VERBOSITY terse
SELECT outbox_enqueue('agent:list', 'k13', '\x03');
\echo :SQLSTATE
SELECT outbox_enqueue('agent:list', 'k14', '\x03');
\echo :SQLSTATE
\set VERBOSITY default
SELECT count(*) AS list_rows FROM delivery_outbox WHERE recipient = 'agent:list';
ALTER TABLE delivery_outbox DROP CONSTRAINT regress_kind_list;

-- a CHECK on the whole row, through a function, called again and again
CREATE FUNCTION regress_row_ok(r delivery_outbox) RETURNS boolean
LANGUAGE plpgsql AS $$ BEGIN RETURN r.kind <> 'forbidden'; END $$;
ALTER TABLE delivery_outbox ADD CONSTRAINT regress_whole_row
  CHECK (regress_row_ok(delivery_outbox));
SELECT count(outbox_enqueue('agent:row', 'work', '\x03')) AS accepted
  FROM generate_series(1, 20);
\set VERBOSITY terse
SELECT outbox_enqueue('agent:row', 'forbidden', '\x03');
\echo :SQLSTATE
\set VERBOSITY default
SELECT count(outbox_enqueue('agent:row', 'work', '\x03')) AS accepted_after
  FROM generate_series(1, 5);
ALTER TABLE delivery_outbox DROP CONSTRAINT regress_whole_row;
DROP FUNCTION regress_row_ok(delivery_outbox);

-- the same in separate statements, with other work between them: nothing
-- of one enqueue's per-query memory (where the row's descriptor is built
-- at the first evaluation of a whole-row reference) is read by the next
CREATE FUNCTION regress_row_text(r delivery_outbox) RETURNS boolean
LANGUAGE plpgsql AS $$ BEGIN RETURN r::text <> ''; END $$;
ALTER TABLE delivery_outbox ADD CONSTRAINT regress_whole_row_text
  CHECK (regress_row_text(delivery_outbox));
SELECT outbox_enqueue('agent:rows', 'work', '\x03') > 0 AS first;
SELECT length(string_agg(x::text, ',')) AS other_work FROM generate_series(1, 5000) AS x;
SELECT outbox_enqueue('agent:rows', 'work', '\x03') > 0 AS second;
SELECT length(string_agg(x::text, ',')) AS other_work FROM generate_series(1, 5000) AS x;
SELECT outbox_enqueue('agent:rows', 'work', '\x03', dedup_key => 'k-rows') > 0 AS third;
SELECT outbox_enqueue('agent:rows', 'work', '\x03') > 0 AS fourth;
SELECT count(*) AS rows_rows FROM delivery_outbox WHERE recipient = 'agent:rows';
ALTER TABLE delivery_outbox DROP CONSTRAINT regress_whole_row_text;
DROP FUNCTION regress_row_text(delivery_outbox);

-- a CHECK through a SQL function that is not inlined, failing half-way
-- through its evaluation inside a savepoint: the next enqueue, in the same
-- transaction and in the next, checks its row afresh
CREATE FUNCTION regress_sql_check(k text) RETURNS boolean LANGUAGE sql AS $$
  SELECT 1;
  SELECT CASE WHEN k = 'boom!' THEN 1 / (length(k) - 5) > 0 ELSE true END
$$;
ALTER TABLE delivery_outbox ADD CONSTRAINT regress_sql_check
  CHECK (regress_sql_check(kind));
BEGIN;
SELECT outbox_enqueue('agent:sp', 'work', '\x03') > 0 AS before_savepoint;
SAVEPOINT s;
\set VERBOSITY terse
SELECT outbox_enqueue('agent:sp', 'boom!', '\x03');
\echo :SQLSTATE
\set VERBOSITY default
ROLLBACK TO SAVEPOINT s;
SELECT outbox_enqueue('agent:sp', 'work', '\x03') > 0 AS after_savepoint;
\set VERBOSITY terse
SELECT outbox_enqueue('agent:sp', 'boom!', '\x03');
\echo :SQLSTATE
\set VERBOSITY default
ROLLBACK;
SELECT outbox_enqueue('agent:sp', 'work', '\x03') > 0 AS next_transaction;
SELECT count(*) AS sp_rows FROM delivery_outbox WHERE recipient = 'agent:sp';
ALTER TABLE delivery_outbox DROP CONSTRAINT regress_sql_check;
DROP FUNCTION regress_sql_check(text);

-- tableoid, read by a CHECK constraint and a stored generated column, is
-- the table's, as for an INSERT; also for a row a BEFORE trigger replaced
ALTER TABLE delivery_outbox ADD CONSTRAINT regress_own_oid
  CHECK (tableoid = 'delivery_outbox'::regclass);
ALTER TABLE delivery_outbox ADD COLUMN regress_oid oid
  GENERATED ALWAYS AS (tableoid) STORED;
SELECT outbox_enqueue('agent:oid', 'work', '\x03') > 0 AS accepted;
CREATE FUNCTION regress_rewrite() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.kind := NEW.kind || '-seen by ' || TG_RELID::regclass::text;
  RETURN NEW;
END $$;
CREATE TRIGGER regress_rewrite BEFORE INSERT ON delivery_outbox
  FOR EACH ROW EXECUTE FUNCTION regress_rewrite();
SELECT outbox_enqueue('agent:oid', 'work', '\x03') > 0 AS accepted_rewritten;
SELECT kind, regress_oid = 'delivery_outbox'::regclass AS own_oid
  FROM delivery_outbox WHERE recipient = 'agent:oid' ORDER BY id;
DROP TRIGGER regress_rewrite ON delivery_outbox;
DROP FUNCTION regress_rewrite();
ALTER TABLE delivery_outbox DROP COLUMN regress_oid;
ALTER TABLE delivery_outbox DROP CONSTRAINT regress_own_oid;

--
-- defaults: a changed default applies to the next call
--
ALTER TABLE delivery_outbox
  ALTER COLUMN created_at SET DEFAULT '2001-02-03 04:05:06+00';
SELECT outbox_enqueue('agent:c', 'work', '\x04') AS c_id \gset
SELECT created_at = '2001-02-03 04:05:06+00' AS default_applied
  FROM delivery_outbox WHERE id = :c_id;
ALTER TABLE delivery_outbox ALTER COLUMN created_at SET DEFAULT pg_catalog.now();

-- a default through a SQL function (inlined when planned): replacing the
-- function changes the next call's value
CREATE FUNCTION regress_note_default() RETURNS text LANGUAGE sql
  AS $$ SELECT 'v1' $$;
ALTER TABLE delivery_outbox ADD COLUMN regress_fn_note text
  DEFAULT regress_note_default();
SELECT outbox_enqueue('agent:fn', 'work', '\x04') AS fn1 \gset
CREATE OR REPLACE FUNCTION regress_note_default() RETURNS text LANGUAGE sql
  AS $$ SELECT 'v2' $$;
SELECT outbox_enqueue('agent:fn', 'work', '\x04') AS fn2 \gset
SELECT id = :fn1 AS first, regress_fn_note FROM delivery_outbox
 WHERE recipient = 'agent:fn' ORDER BY id;
ALTER TABLE delivery_outbox DROP COLUMN regress_fn_note;
DROP FUNCTION regress_note_default();

-- a default that reads the table sees the rows of earlier calls in the same
-- statement (a fresh snapshot and command per call, as for SPI)
CREATE FUNCTION regress_seen() RETURNS bigint LANGUAGE sql STABLE
  AS $$ SELECT count(*) FROM public.delivery_outbox WHERE recipient = 'agent:seen' $$;
ALTER TABLE delivery_outbox ADD COLUMN regress_seen bigint DEFAULT regress_seen();
SELECT count(outbox_enqueue('agent:seen', 'work', '\x04')) FROM generate_series(1, 3);
SELECT regress_seen FROM delivery_outbox WHERE recipient = 'agent:seen' ORDER BY id;
ALTER TABLE delivery_outbox DROP COLUMN regress_seen;
DROP FUNCTION regress_seen();

--
-- columns added and dropped after the first call
--
ALTER TABLE delivery_outbox ADD COLUMN regress_note text DEFAULT 'noted';
SELECT outbox_enqueue('agent:d', 'work', '\x05') AS d_id \gset
SELECT regress_note FROM delivery_outbox WHERE id = :d_id;
ALTER TABLE delivery_outbox ADD COLUMN regress_twice int
  GENERATED ALWAYS AS (delivery_attempts * 2) STORED;
ALTER TABLE delivery_outbox DROP COLUMN regress_note;
SELECT outbox_enqueue('agent:d', 'work', '\x06') AS d2_id \gset
SELECT recipient, delivery_state, regress_twice
  FROM delivery_outbox WHERE id = :d2_id;
ALTER TABLE delivery_outbox DROP COLUMN regress_twice;

-- a column of a domain type: a constraint added to the domain later applies
-- to the default of the next call (ALTER DOMAIN does not touch the table)
CREATE DOMAIN regress_label AS text;
ALTER TABLE delivery_outbox ADD COLUMN regress_label regress_label DEFAULT 'fine';
SELECT outbox_enqueue('agent:dom', 'work', '\x06') > 0 AS accepted;
ALTER DOMAIN regress_label ADD CONSTRAINT regress_not_fine CHECK (VALUE <> 'fine') NOT VALID;
SELECT outbox_enqueue('agent:dom', 'work', '\x06');
\echo :SQLSTATE
SELECT count(*) AS dom_rows FROM delivery_outbox WHERE recipient = 'agent:dom';
ALTER TABLE delivery_outbox DROP COLUMN regress_label;
DROP DOMAIN regress_label;
-- a NOT NULL domain with no default: the NULL an INSERT would coerce fails
CREATE DOMAIN regress_required AS int NOT NULL;
ALTER TABLE delivery_outbox ADD COLUMN regress_required regress_required DEFAULT 1;
ALTER TABLE delivery_outbox ALTER COLUMN regress_required DROP DEFAULT;
SELECT outbox_enqueue('agent:dom', 'work', '\x06');
\echo :SQLSTATE
INSERT INTO delivery_outbox (recipient, kind, payload) VALUES ('agent:dom', 'work', '\x06');
\echo :SQLSTATE
ALTER TABLE delivery_outbox DROP COLUMN regress_required;
DROP DOMAIN regress_required;

--
-- an index created after the first call gets the new rows (partial: only
-- the rows its predicate accepts); a unique one rejects a duplicate with 23505
--
CREATE INDEX regress_special_idx ON delivery_outbox (recipient)
  WHERE kind = 'special';
SELECT outbox_enqueue('agent:e', 'special', '\x07') AS e_id \gset
SELECT outbox_enqueue('agent:e', 'plain', '\x08') AS e2_id \gset
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF)
SELECT id FROM delivery_outbox WHERE recipient = 'agent:e' AND kind = 'special';
SELECT id = :e_id AS found_through_index
  FROM delivery_outbox WHERE recipient = 'agent:e' AND kind = 'special';
RESET enable_seqscan;
RESET enable_bitmapscan;
DROP INDEX regress_special_idx;

CREATE UNIQUE INDEX regress_unique_kind ON delivery_outbox (recipient, kind)
  WHERE recipient = 'agent:u';
SELECT outbox_enqueue('agent:u', 'once', '\x09') > 0 AS first_accepted;
SELECT count(*) AS rows_before FROM delivery_outbox \gset
SELECT outbox_enqueue('agent:u', 'once', '\x0a');
\echo :SQLSTATE
SELECT count(*) = :rows_before AS nothing_inserted FROM delivery_outbox;
DROP INDEX regress_unique_kind;

--
-- a foreign key from the outbox: the RI check (an AFTER trigger) runs
--
CREATE TABLE regress_tenants (id text PRIMARY KEY);
INSERT INTO regress_tenants VALUES ('t1');
ALTER TABLE delivery_outbox ADD CONSTRAINT regress_tenant_fk
  FOREIGN KEY (tenant_id) REFERENCES regress_tenants;
SELECT outbox_enqueue('agent:f', 'work', '\x0b', 't1') > 0 AS known_tenant;
SELECT outbox_enqueue('agent:f', 'work', '\x0b', 'nobody');
\echo :SQLSTATE
SELECT count(*) AS f_rows FROM delivery_outbox WHERE recipient = 'agent:f';
ALTER TABLE delivery_outbox DROP CONSTRAINT regress_tenant_fk;

--
-- user triggers: BEFORE ROW may rewrite the row (the guard judges the result),
-- AFTER ROW and statement triggers fire, and a BEFORE trigger that skips
-- the row makes the enqueue fail (an enqueue that inserts nothing is a bug)
--
CREATE TABLE regress_audit (what text, id bigint, recipient text);
-- (the API functions run with search_path = pg_catalog, pg_temp, and so do
-- the triggers they fire: these set their own)
CREATE FUNCTION regress_before() RETURNS trigger LANGUAGE plpgsql
SET search_path = public AS $$
BEGIN
  IF NEW.kind = 'skip' THEN
    RETURN NULL;
  END IF;
  IF NEW.kind = 'bookkeeping' THEN
    NEW.delivery_attempts := 7;        -- the guard refuses this
  END IF;
  NEW.recipient := upper(NEW.recipient);
  RETURN NEW;
END $$;
CREATE FUNCTION regress_after_row() RETURNS trigger LANGUAGE plpgsql
SET search_path = public AS $$
BEGIN
  INSERT INTO regress_audit VALUES ('row ' || TG_WHEN, NEW.id, NEW.recipient);
  RETURN NULL;
END $$;
CREATE FUNCTION regress_after_stmt() RETURNS trigger LANGUAGE plpgsql
SET search_path = public AS $$
BEGIN
  INSERT INTO regress_audit VALUES ('statement ' || TG_WHEN, NULL, NULL);
  RETURN NULL;
END $$;
CREATE TRIGGER regress_before BEFORE INSERT ON delivery_outbox
  FOR EACH ROW EXECUTE FUNCTION regress_before();
CREATE TRIGGER regress_after_row AFTER INSERT ON delivery_outbox
  FOR EACH ROW EXECUTE FUNCTION regress_after_row();

SELECT outbox_enqueue('agent:g', 'work', '\x0c') AS g_id \gset
SELECT recipient, delivery_attempts, delivery_state
  FROM delivery_outbox WHERE id = :g_id;
SELECT what, id = :g_id AS same_id, recipient FROM regress_audit;

SELECT count(*) AS rows_before FROM delivery_outbox \gset
SELECT outbox_enqueue('agent:g', 'skip', '\x0d');
\echo :SQLSTATE
SELECT outbox_enqueue('agent:g', 'bookkeeping', '\x0d');
\echo :SQLSTATE
-- with a dedup_key too (nothing inserted, nothing holds the key)
SELECT outbox_enqueue('agent:g', 'skip', '\x0d', dedup_key => 'k-skip');
\echo :SQLSTATE
SELECT count(*) = :rows_before AS nothing_inserted FROM delivery_outbox;

CREATE TRIGGER regress_after_stmt AFTER INSERT ON delivery_outbox
  FOR EACH STATEMENT EXECUTE FUNCTION regress_after_stmt();
TRUNCATE regress_audit;
SELECT outbox_enqueue('agent:g', 'work', '\x0e') AS g2_id \gset
SELECT what, id = :g2_id AS same_id, recipient FROM regress_audit ORDER BY what;

DROP TRIGGER regress_after_stmt ON delivery_outbox;
DROP TRIGGER regress_after_row ON delivery_outbox;
DROP TRIGGER regress_before ON delivery_outbox;

-- a trigger that enqueues a follow-up row from inside an enqueue
CREATE FUNCTION regress_follow_up() RETURNS trigger LANGUAGE plpgsql
SET search_path = public AS $$
BEGIN
  IF NEW.kind = 'chain' THEN
    PERFORM outbox_enqueue(NEW.recipient || ':copy', 'chained', NEW.payload);
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER regress_follow_up BEFORE INSERT ON delivery_outbox
  FOR EACH ROW EXECUTE FUNCTION regress_follow_up();
SELECT outbox_enqueue('agent:h', 'chain', '\x0f') > 0 AS chained;
SELECT recipient, kind, delivery_state FROM delivery_outbox
 WHERE recipient LIKE 'agent:h%' ORDER BY id;
DROP TRIGGER regress_follow_up ON delivery_outbox;

--
-- a rule on the table is applied, as for an INSERT
--
CREATE RULE regress_rule AS ON INSERT TO delivery_outbox
  DO ALSO INSERT INTO regress_audit VALUES ('rule', NULL, NEW.recipient);
TRUNCATE regress_audit;
SELECT outbox_enqueue('agent:i', 'work', '\x10') > 0 AS enqueued;
SELECT what, recipient FROM regress_audit;
DROP RULE regress_rule ON delivery_outbox;

--
-- planned expressions are not shared between users: with outbox_enqueue
-- made SECURITY INVOKER (never by default), a default calling a function
-- that only one role may execute still fails for the other, as an INSERT
-- would (the roles may INSERT ... RETURNING id, which is what the SQL path
-- of outbox_enqueue runs)
--
CREATE ROLE regress_may;
CREATE ROLE regress_may_not;
CREATE FUNCTION regress_secret() RETURNS text LANGUAGE sql AS $$ SELECT 'secret' $$;
REVOKE EXECUTE ON FUNCTION regress_secret() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION regress_secret() TO regress_may;
ALTER TABLE delivery_outbox ADD COLUMN regress_secret text DEFAULT regress_secret();
GRANT INSERT, SELECT (id) ON delivery_outbox TO regress_may, regress_may_not;
GRANT USAGE ON SEQUENCE delivery_outbox_id_seq TO regress_may, regress_may_not;
GRANT EXECUTE ON FUNCTION outbox_enqueue(text, text, bytea, text, timestamptz, timestamptz, text, regclass)
  TO regress_may, regress_may_not;
ALTER FUNCTION outbox_enqueue(text, text, bytea, text, timestamptz, timestamptz, text, regclass) SECURITY INVOKER;
SET ROLE regress_may;
SELECT outbox_enqueue('agent:role', 'work', '\x07') > 0 AS may;
SET ROLE regress_may_not;
SELECT outbox_enqueue('agent:role', 'work', '\x07');
\echo :SQLSTATE
RESET ROLE;
SELECT count(*) AS role_rows, min(regress_secret) AS secret
  FROM delivery_outbox WHERE recipient = 'agent:role';
ALTER FUNCTION outbox_enqueue(text, text, bytea, text, timestamptz, timestamptz, text, regclass) SECURITY DEFINER;
REVOKE ALL ON delivery_outbox FROM regress_may, regress_may_not;
REVOKE ALL ON SEQUENCE delivery_outbox_id_seq FROM regress_may, regress_may_not;
REVOKE ALL ON FUNCTION outbox_enqueue(text, text, bytea, text, timestamptz, timestamptz, text, regclass)
  FROM regress_may, regress_may_not;
ALTER TABLE delivery_outbox DROP COLUMN regress_secret;
DROP FUNCTION regress_secret();
DROP ROLE regress_may, regress_may_not;

--
-- EXECUTE on a function a default calls, revoked after an enqueue that used
-- it, is checked at the next one (42501, as for an INSERT): here a built-in
-- function, which invalidates nothing when its privileges change
--
CREATE ROLE regress_producer;
ALTER TABLE delivery_outbox ADD COLUMN regress_draw float8 DEFAULT pg_catalog.random();
GRANT INSERT, SELECT (id) ON delivery_outbox TO regress_producer;
GRANT USAGE ON SEQUENCE delivery_outbox_id_seq TO regress_producer;
GRANT EXECUTE ON FUNCTION outbox_enqueue(text, text, bytea, text, timestamptz, timestamptz, text, regclass)
  TO regress_producer;
ALTER FUNCTION outbox_enqueue(text, text, bytea, text, timestamptz, timestamptz, text, regclass) SECURITY INVOKER;
SET ROLE regress_producer;
SELECT outbox_enqueue('agent:revoke', 'work', '\x07') > 0 AS granted;
RESET ROLE;
REVOKE EXECUTE ON FUNCTION pg_catalog.random() FROM PUBLIC;
SET ROLE regress_producer;
\set VERBOSITY terse
SELECT outbox_enqueue('agent:revoke', 'work', '\x07');
\echo :SQLSTATE
\set VERBOSITY default
RESET ROLE;
GRANT EXECUTE ON FUNCTION pg_catalog.random() TO PUBLIC;
SET ROLE regress_producer;
SELECT outbox_enqueue('agent:revoke', 'work', '\x07') > 0 AS granted_again;
RESET ROLE;
SELECT count(*) AS revoke_rows FROM delivery_outbox WHERE recipient = 'agent:revoke';
ALTER FUNCTION outbox_enqueue(text, text, bytea, text, timestamptz, timestamptz, text, regclass) SECURITY DEFINER;
REVOKE ALL ON delivery_outbox FROM regress_producer;
REVOKE ALL ON SEQUENCE delivery_outbox_id_seq FROM regress_producer;
REVOKE ALL ON FUNCTION outbox_enqueue(text, text, bytea, text, timestamptz, timestamptz, text, regclass)
  FROM regress_producer;
ALTER TABLE delivery_outbox DROP COLUMN regress_draw;
DROP ROLE regress_producer;

--
-- delivery_outbox.direct_insert: only a superuser may change it, and either
-- way the enqueue inserts its row (scripts/test.sh runs this whole suite a
-- second time with it off, through PGOPTIONS)
--
CREATE ROLE regress_plain;
SET ROLE regress_plain;
\set VERBOSITY terse
SET delivery_outbox.direct_insert = off;
\echo :SQLSTATE
\set VERBOSITY default
RESET ROLE;
DROP ROLE regress_plain;
SET delivery_outbox.direct_insert = off;
SELECT outbox_enqueue('agent:sql', 'work', '\x08') > :first_id AS through_sql;
SET delivery_outbox.direct_insert = on;
SELECT outbox_enqueue('agent:direct', 'work', '\x09') > :first_id AS direct;
RESET delivery_outbox.direct_insert;
SELECT recipient, delivery_state, delivery_attempts FROM delivery_outbox
 WHERE recipient IN ('agent:sql', 'agent:direct') ORDER BY id;

--
-- An enqueue nested in another on the same outbox (a CHECK constraint
-- whose function enqueues, evaluated while the outer row is checked): both
-- rows go in whole, each checked (the inner one draws the later id).
--
CREATE FUNCTION regress_nested_enqueue(k text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF k = 'outer' THEN
        PERFORM public.outbox_enqueue('agent:nested', 'inner', '\x0b'::bytea);
    END IF;
    RETURN true;
END
$$;
ALTER TABLE delivery_outbox ADD CONSTRAINT regress_nested
  CHECK (regress_nested_enqueue(kind));
SELECT outbox_enqueue('agent:nested', 'outer', '\x0a') > :first_id AS outer_enqueued;
SELECT outbox_enqueue('agent:nested', 'outer', '\x0c') > :first_id AS again;
SELECT kind, payload, delivery_state FROM delivery_outbox
 WHERE recipient = 'agent:nested' ORDER BY id;
ALTER TABLE delivery_outbox DROP CONSTRAINT regress_nested;
DROP FUNCTION regress_nested_enqueue(text);

--
-- everything enqueued above is pending, with consistent bookkeeping
--
SELECT delivery_state, delivery_attempts, count(*) > 0 AS some,
       bool_and(delivered_at IS NULL AND acked_at IS NULL) AS clean
  FROM delivery_outbox GROUP BY 1, 2;

DROP TABLE regress_audit;
DROP TABLE regress_tenants;
DROP FUNCTION regress_before(), regress_after_row(), regress_after_stmt(),
              regress_follow_up();
DROP EXTENSION delivery_outbox;
