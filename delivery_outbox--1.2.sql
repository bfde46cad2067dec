/* delivery_outbox--1.2.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION delivery_outbox" to load this file. \quit

--
-- The install script of 1.2: the same objects as 1.0 and its updates
-- (delivery_outbox--1.0.sql, --1.0--1.1.sql, --1.1--1.2.sql) make, in their
-- final form; sql/upgrade.sql compares the two ways.  Released, frozen:
-- changes go into delivery_outbox--1.2--1.3.sql.
--

--
-- The outbox table (the default outbox).  Column names and the three state
-- strings are those of the seed system, so applications written against it
-- work unchanged; the last four columns are the delivery policy's
-- (docs/delivery-policy.md): not_before (not claimable before it),
-- expires_at (never handed out at or after it), dedup_key (taken once per
-- recipient) and last_error.  Operators are schema-qualified so that
-- nothing here depends on the search_path in force at CREATE EXTENSION
-- time.
--
CREATE TABLE delivery_outbox (
    id                bigserial PRIMARY KEY,
    recipient         text NOT NULL
                      CONSTRAINT delivery_outbox_recipient_check
                      CHECK (recipient OPERATOR(pg_catalog.<>) ''),
    kind              text NOT NULL
                      CONSTRAINT delivery_outbox_kind_check
                      CHECK (kind OPERATOR(pg_catalog.<>) ''),
    tenant_id         text,
    payload           bytea NOT NULL,
    delivery_state    text NOT NULL DEFAULT 'pending'
                      CONSTRAINT delivery_outbox_state_check
                      CHECK (delivery_state OPERATOR(pg_catalog.=)
                             ANY ('{pending,delivered,acked}'::text[])),
    delivery_attempts integer NOT NULL DEFAULT 0
                      CONSTRAINT delivery_outbox_attempts_check
                      CHECK (delivery_attempts OPERATOR(pg_catalog.>=) 0),
    created_at        timestamptz NOT NULL DEFAULT pg_catalog.now(),
    delivered_at      timestamptz,
    acked_at          timestamptz,
    not_before        timestamptz,
    expires_at        timestamptz,
    dedup_key         text,
    last_error        text
);

COMMENT ON TABLE delivery_outbox IS
    'push-delivery outbox: pending -> delivered -> acked, enforced by a trigger';

-- Whole-table claim: the pending rows due now, in id order.  Acked rows,
-- however many, and rows scheduled for later are not in this index, so a
-- claim never walks past them.
CREATE INDEX delivery_outbox_pending_idx
    ON delivery_outbox (id)
    WHERE delivery_state OPERATOR(pg_catalog.=) 'pending' AND not_before IS NULL;

-- Per-recipient claim: a recipient's pending rows due now, in id order.  An
-- exact match for the claim's WHERE and ORDER BY, so the planner picks it
-- with or without statistics and the claim reads only the rows it returns.
CREATE INDEX delivery_outbox_pending_recipient_idx
    ON delivery_outbox (recipient, id)
    WHERE delivery_state OPERATOR(pg_catalog.=) 'pending' AND not_before IS NULL;

-- Replay, resync and reassign: a recipient's open rows in
-- id order.  The predicate is written as "= ANY" (not "<> 'acked'") so that
-- the planner can prove it from "delivery_state = 'pending'" as well.
CREATE INDEX delivery_outbox_open_recipient_idx
    ON delivery_outbox (recipient, id)
    WHERE delivery_state OPERATOR(pg_catalog.=) ANY ('{pending,delivered}'::text[]);

-- The sweeper: delivered rows by the time they were pushed.
CREATE INDEX delivery_outbox_delivered_idx
    ON delivery_outbox (delivered_at)
    WHERE delivery_state OPERATOR(pg_catalog.=) 'delivered';

-- Purging (outbox_purge, the sweeper's retain_acked) reads acked rows by
-- the time they were acked, instead of scanning the whole table.
CREATE INDEX delivery_outbox_acked_idx
    ON delivery_outbox (acked_at)
    WHERE delivery_state OPERATOR(pg_catalog.=) 'acked';

-- scheduled and backed-off rows, by the time they fall due
CREATE INDEX delivery_outbox_scheduled_idx
    ON delivery_outbox (not_before, id)
    WHERE delivery_state OPERATOR(pg_catalog.=) 'pending' AND not_before IS NOT NULL;
-- the same per recipient: a recipient's claim never walks past the
-- scheduled rows of the others
CREATE INDEX delivery_outbox_scheduled_recipient_idx
    ON delivery_outbox (recipient, not_before, id)
    WHERE delivery_state OPERATOR(pg_catalog.=) 'pending' AND not_before IS NOT NULL;
-- rows with an expiry, for the worker's sweep
CREATE INDEX delivery_outbox_expiring_idx
    ON delivery_outbox (expires_at)
    WHERE delivery_state OPERATOR(pg_catalog.=) 'pending' AND expires_at IS NOT NULL;
-- each (recipient, dedup_key) once
CREATE UNIQUE INDEX delivery_outbox_dedup_idx
    ON delivery_outbox (recipient, dedup_key)
    WHERE dedup_key IS NOT NULL;

--
-- The state machine.  The trigger function is written in C, does no catalog
-- or search_path lookups, and is the single authority on transitions and
-- bookkeeping; it also sees deletes, so that the open-backlog counters of
-- outbox_activity() follow purges and hand-written DELETEs.  It is named to
-- sort after ordinary BEFORE triggers, so it sees (and judges) the row as
-- any user trigger left it, and it fires ALWAYS, so
-- session_replication_role = replica does not switch it off either.
-- Inserted rows are woken and counted by an AFTER INSERT trigger instead of
-- the guard (argument 'after_insert'), so that a row an INSERT ... ON
-- CONFLICT did not insert neither notifies nor counts.
--
CREATE FUNCTION outbox_state_guard()
RETURNS trigger
AS 'MODULE_PATHNAME', 'outbox_state_guard'
LANGUAGE C;

CREATE TRIGGER zz_delivery_outbox_state_guard
    BEFORE INSERT OR UPDATE OR DELETE ON delivery_outbox
    FOR EACH ROW EXECUTE FUNCTION outbox_state_guard('after_insert');

ALTER TABLE delivery_outbox ENABLE ALWAYS TRIGGER zz_delivery_outbox_state_guard;

CREATE FUNCTION outbox_inserted()
RETURNS trigger
AS 'MODULE_PATHNAME', 'outbox_inserted'
LANGUAGE C;

CREATE TRIGGER zz_delivery_outbox_inserted
    AFTER INSERT ON delivery_outbox
    FOR EACH ROW EXECUTE FUNCTION outbox_inserted();

ALTER TABLE delivery_outbox ENABLE ALWAYS TRIGGER zz_delivery_outbox_inserted;

--
-- The insert markers (docs/ordered-delivery.md): every outbox announces, in
-- shared memory, the ids its running inserts may still make appear, before
-- they are drawn (outbox_horizon) and, on an ordered outbox, until each
-- statement's rows are in the indexes (the ordered claims).  Two statement
-- triggers, fired ALWAYS like the others.
--
CREATE FUNCTION outbox_insert_statement()
RETURNS trigger
AS 'MODULE_PATHNAME', 'outbox_insert_statement'
LANGUAGE C;

REVOKE ALL ON FUNCTION outbox_insert_statement() FROM PUBLIC;

CREATE TRIGGER zz_delivery_outbox_insert_started
    BEFORE INSERT ON delivery_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_insert_statement();
ALTER TABLE delivery_outbox ENABLE ALWAYS TRIGGER zz_delivery_outbox_insert_started;
CREATE TRIGGER zz_delivery_outbox_insert_ended
    AFTER INSERT ON delivery_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_insert_statement();
ALTER TABLE delivery_outbox ENABLE ALWAYS TRIGGER zz_delivery_outbox_insert_ended;

-- pg_dump keeps the rows and the sequence position.
SELECT pg_catalog.pg_extension_config_dump('delivery_outbox', '');
SELECT pg_catalog.pg_extension_config_dump('delivery_outbox_id_seq', '');

REVOKE ALL ON TABLE delivery_outbox FROM PUBLIC;
REVOKE ALL ON SEQUENCE delivery_outbox_id_seq FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_state_guard() FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_inserted() FROM PUBLIC;

--
-- Many outboxes.  Besides the extension's own table (the default outbox),
-- any table made by outbox_create() or taken over by outbox_attach() is an
-- outbox: it has the state guard and the after-insert trigger, and a row in
-- delivery_outbox_registry.  The default outbox has a row there only once
-- outbox_configure() changed one of its settings.  pg_dump keeps the rows
-- (the tables they name are restored first: regclass is dumped by name).
--
CREATE TABLE delivery_outbox_registry (
    outbox            regclass PRIMARY KEY,
    origin            text NOT NULL
                      CONSTRAINT delivery_outbox_registry_origin_check
                      CHECK (origin OPERATOR(pg_catalog.=)
                             ANY ('{default,created,attached}'::text[])),
    channel           text
                      CONSTRAINT delivery_outbox_registry_channel_check
                      CHECK (channel OPERATOR(pg_catalog.<>) ''
                             AND pg_catalog.octet_length(channel) OPERATOR(pg_catalog.<) 64),
    -- notifying triggers outbox_attach() found and disabled, for detach
    disabled_triggers name[] NOT NULL DEFAULT '{}',
    -- the delivery policy (docs/delivery-policy.md); NULL: unlimited, none
    max_attempts      integer
                      CONSTRAINT delivery_outbox_registry_max_attempts_check
                      CHECK (max_attempts OPERATOR(pg_catalog.>) 0),
    backoff_base      interval NOT NULL DEFAULT '0'
                      CONSTRAINT delivery_outbox_registry_backoff_base_check
                      CHECK (backoff_base OPERATOR(pg_catalog.>=) '0'),
    backoff_max       interval NOT NULL DEFAULT '1 hour'
                      CONSTRAINT delivery_outbox_registry_backoff_max_check
                      CHECK (backoff_max OPERATOR(pg_catalog.>=) '0'),
    ttl               interval
                      CONSTRAINT delivery_outbox_registry_ttl_check
                      CHECK (ttl OPERATOR(pg_catalog.>) '0'),
    -- the dead-letter table (NULL for the default outbox: delivery_outbox_dead)
    dead              regclass,
    -- per-recipient ordered delivery (docs/ordered-delivery.md)
    ordered           boolean NOT NULL DEFAULT false,
    -- how long acked rows are kept (NULL: delivery_outbox.retain_acked)
    retain_acked      interval
                      CONSTRAINT delivery_outbox_registry_retain_acked_check
                      CHECK (retain_acked OPERATOR(pg_catalog.>=) '0'),
    -- ids per partition of a partitioned outbox (docs/partitions.md); NULL:
    -- not partitioned
    partition_rows    bigint
                      CONSTRAINT delivery_outbox_registry_partition_rows_check
                      CHECK (partition_rows OPERATOR(pg_catalog.>) 0)
);

COMMENT ON TABLE delivery_outbox_registry IS
    'the outboxes besides the extension''s own table, and the settings of each';

SELECT pg_catalog.pg_extension_config_dump('delivery_outbox_registry', '');
REVOKE ALL ON TABLE delivery_outbox_registry FROM PUBLIC;

--
-- Dead letters: rows a recipient could not take leave the outbox for its
-- companion table <table>_dead (same schema, same id), with the time and
-- the reason.  outbox_redrive() puts them back.
--
CREATE TABLE delivery_outbox_dead (
    id                bigint PRIMARY KEY,
    recipient         text NOT NULL,
    kind              text NOT NULL,
    tenant_id         text,
    payload           bytea NOT NULL,
    delivery_state    text NOT NULL,
    delivery_attempts integer NOT NULL,
    created_at        timestamptz NOT NULL,
    delivered_at      timestamptz,
    acked_at          timestamptz,
    not_before        timestamptz,
    expires_at        timestamptz,
    dedup_key         text,
    last_error        text,
    dead_at           timestamptz NOT NULL DEFAULT pg_catalog.now(),
    dead_reason       text NOT NULL
                      CONSTRAINT delivery_outbox_dead_reason_check
                      CHECK (dead_reason OPERATOR(pg_catalog.=)
                             ANY ('{max_attempts,expired,rejected}'::text[]))
);

COMMENT ON TABLE delivery_outbox_dead IS
    'dead letters of delivery_outbox: rows its recipients could not take';

SELECT pg_catalog.pg_extension_config_dump('delivery_outbox_dead', '');
REVOKE ALL ON TABLE delivery_outbox_dead FROM PUBLIC;

-- A dropped table's outbox ends: its row goes (DROP TABLE, DROP SCHEMA).
-- It runs for every such command, whoever issues it: as the extension's
-- owner, since nobody else may write the registry.
CREATE FUNCTION outbox_table_dropped()
RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- the registry itself may go in the same command (DROP SCHEMA CASCADE)
    IF pg_catalog.to_regclass('@extschema@.delivery_outbox_registry') IS NULL THEN
        RETURN;
    END IF;
    DELETE FROM @extschema@.delivery_outbox_registry r
     USING pg_event_trigger_dropped_objects() d
     WHERE d.classid = 'pg_class'::regclass
       AND d.objsubid = 0
       AND r.outbox::oid = d.objid;
END
$$;

CREATE EVENT TRIGGER delivery_outbox_table_dropped ON sql_drop
    WHEN TAG IN ('DROP TABLE', 'DROP SCHEMA', 'DROP OWNED')
    EXECUTE FUNCTION outbox_table_dropped();
-- also under session_replication_role = replica (a replication apply, a
-- restore): a dropped outbox leaves no registry row behind
ALTER EVENT TRIGGER delivery_outbox_table_dropped ENABLE ALWAYS;

REVOKE ALL ON FUNCTION outbox_table_dropped() FROM PUBLIC;

-- Helpers of the functions below (not for direct use): the role that
-- called (the current role outside any SECURITY DEFINER function), and a
-- relcache invalidation that makes every session re-read a table's
-- settings.
CREATE FUNCTION outbox_calling_role()
RETURNS regrole
AS 'MODULE_PATHNAME', 'outbox_calling_role'
LANGUAGE C STABLE;

CREATE FUNCTION outbox_invalidate(outbox regclass)
RETURNS void
AS 'MODULE_PATHNAME', 'outbox_invalidate'
LANGUAGE C VOLATILE;

REVOKE ALL ON FUNCTION outbox_calling_role() FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_invalidate(regclass) FROM PUBLIC;

-- outbox_run_as_owner(tbl, command): one SQL command run as tbl's owner,
-- under SECURITY_RESTRICTED_OPERATION with search_path = pg_catalog,
-- pg_temp; the first column of its first row as text (NULL without one).
-- The functions below run through it every step that reads or writes a
-- table's rows or builds over them, so that the table's code (triggers,
-- CHECKs, defaults, index expressions and predicates) never runs with
-- their definer's rights.  Raises 22004 on a NULL argument itself (not
-- STRICT: a step must not be skipped).  Not for direct use.
CREATE FUNCTION outbox_run_as_owner(tbl regclass, command text)
RETURNS text
AS 'MODULE_PATHNAME', 'outbox_run_as_owner'
LANGUAGE C VOLATILE;

REVOKE ALL ON FUNCTION outbox_run_as_owner(regclass, text) FROM PUBLIC;

--
-- outbox_partitions_ahead(tbl): make the missing partitions of partitioned
-- outbox tbl, from the one of its sequence's next id through the one after
-- it, as its owner; the worker and the enqueue functions do the same.
-- Returns how many were made.  Not for direct use.
--
CREATE FUNCTION outbox_partitions_ahead(tbl regclass)
RETURNS integer
AS 'MODULE_PATHNAME', 'outbox_partitions_ahead'
LANGUAGE C VOLATILE STRICT;

REVOKE ALL ON FUNCTION outbox_partitions_ahead(regclass) FROM PUBLIC;

--
-- outbox_create(schema_name, table_name, channel, partition_rows): a new
-- outbox with the default outbox's columns, defaults, constraints, indexes
-- and triggers, owned by the calling role, which needs CREATE on the
-- schema.  With partition_rows, the table is partitioned by id range,
-- partition_rows ids per partition, and the first two partitions are made
-- (docs/partitions.md).
--
CREATE FUNCTION outbox_create(schema_name name,
                              table_name name DEFAULT 'delivery_outbox',
                              channel text DEFAULT NULL,
                              partition_rows bigint DEFAULT NULL)
RETURNS regclass
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller regrole := @extschema@.outbox_calling_role();
    tbl text;
    t regclass;
BEGIN
    IF schema_name IS NULL OR table_name IS NULL THEN
        RAISE EXCEPTION 'schema_name and table_name must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF schema_name = '' OR table_name = '' THEN
        RAISE EXCEPTION '% must not be empty',
            CASE WHEN schema_name = '' THEN 'schema_name' ELSE 'table_name' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF schema_name = 'pg_temp' OR schema_name LIKE 'pg\_temp\_%' OR schema_name LIKE 'pg\_toast\_temp\_%' THEN
        RAISE EXCEPTION 'an outbox cannot be a temporary table'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Its registry row would outlive the session that owns the table.';
    END IF;
    IF channel IS NOT NULL AND (channel = '' OR octet_length(channel) >= 64) THEN
        RAISE EXCEPTION 'channel must be a non-empty name shorter than 64 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF partition_rows < 1 THEN
        RAISE EXCEPTION 'partition_rows must be positive'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass NULL for an outbox that is not partitioned.';
    END IF;
    IF NOT EXISTS (SELECT FROM pg_namespace WHERE nspname = schema_name) THEN
        RAISE EXCEPTION 'schema "%" does not exist', schema_name
            USING ERRCODE = 'invalid_schema_name';
    END IF;
    IF NOT has_schema_privilege(caller, schema_name, 'CREATE') THEN
        RAISE EXCEPTION 'permission denied for schema %', schema_name
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    tbl := format('%I.%I', schema_name, table_name);
    EXECUTE format($ddl$
        CREATE TABLE %1$s (
            id                bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
            recipient         text NOT NULL CHECK (recipient OPERATOR(pg_catalog.<>) ''),
            kind              text NOT NULL CHECK (kind OPERATOR(pg_catalog.<>) ''),
            tenant_id         text,
            payload           bytea NOT NULL,
            delivery_state    text NOT NULL DEFAULT 'pending'
                              CHECK (delivery_state OPERATOR(pg_catalog.=)
                                     ANY ('{pending,delivered,acked}'::text[])),
            delivery_attempts integer NOT NULL DEFAULT 0
                              CHECK (delivery_attempts OPERATOR(pg_catalog.>=) 0),
            created_at        timestamptz NOT NULL DEFAULT pg_catalog.now(),
            delivered_at      timestamptz,
            acked_at          timestamptz,
            not_before        timestamptz,
            expires_at        timestamptz,
            dedup_key         text,
            last_error        text
        )%2$s$ddl$, tbl,
        CASE WHEN partition_rows IS NOT NULL THEN ' PARTITION BY RANGE (id)' ELSE '' END);
    t := tbl::regclass;
    PERFORM @extschema@.outbox_make_outbox(t, channel, 'created');
    EXECUTE format('ALTER TABLE %s OWNER TO %s', t, caller);
    EXECUTE format('ALTER TABLE %s OWNER TO %s',
                   (SELECT r.dead FROM @extschema@.delivery_outbox_registry r
                     WHERE r.outbox = t), caller);
    PERFORM @extschema@.outbox_grant_triggers(t);
    IF partition_rows IS NOT NULL THEN
        UPDATE @extschema@.delivery_outbox_registry r
           SET partition_rows = outbox_create.partition_rows WHERE r.outbox = t;
        PERFORM @extschema@.outbox_invalidate(t);
        -- the first partitions, made by (and owned by) the outbox's owner
        PERFORM @extschema@.outbox_partitions_ahead(t);
    END IF;
    RETURN t;
END
$$;

--
-- outbox_set_triggers(tbl, channel): (re)create an outbox's triggers: the
-- state guard and the AFTER INSERT wake-up, which carry its channel (NULL:
-- delivery_outbox.channel) as an argument, and the insert markers' two
-- statement triggers.
-- Both fire ALWAYS, so session_replication_role = replica does not switch
-- them off.  Not for direct use.
--
CREATE FUNCTION outbox_set_triggers(tbl regclass, channel text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    arg text := coalesce(', ' || quote_literal(channel), '');
    trg name;
BEGIN
    -- a NULL or missing table: 22004 or 42P01, not a broken statement
    PERFORM @extschema@.outbox_check_relation(tbl);
    -- as the caller (the definer of outbox_attach and the others): CREATE
    -- TRIGGER needs EXECUTE on the extension's trigger functions, which the
    -- table's owner lacks, and making, dropping or enabling a trigger runs
    -- none of the table's code
    FOR trg IN SELECT tgname FROM pg_trigger
                WHERE tgrelid = tbl
                  AND tgname IN ('zz_delivery_outbox_state_guard', 'zz_delivery_outbox_inserted',
                                 'zz_delivery_outbox_insert_started',
                                 'zz_delivery_outbox_insert_ended')
    LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', trg, tbl);
    END LOOP;
    -- the insert markers (outbox_horizon, ordered delivery): before a
    -- statement draws an id, and after its rows are in
    EXECUTE format('CREATE TRIGGER zz_delivery_outbox_insert_started'
                   ' BEFORE INSERT ON %s FOR EACH STATEMENT'
                   ' EXECUTE FUNCTION @extschema@.outbox_insert_statement()', tbl);
    EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER zz_delivery_outbox_insert_started', tbl);
    EXECUTE format('CREATE TRIGGER zz_delivery_outbox_insert_ended'
                   ' AFTER INSERT ON %s FOR EACH STATEMENT'
                   ' EXECUTE FUNCTION @extschema@.outbox_insert_statement()', tbl);
    EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER zz_delivery_outbox_insert_ended', tbl);
    EXECUTE format('CREATE TRIGGER zz_delivery_outbox_state_guard'
                   ' BEFORE INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW'
                   ' EXECUTE FUNCTION @extschema@.outbox_state_guard(''after_insert''%s)',
                   tbl, arg);
    EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER zz_delivery_outbox_state_guard', tbl);
    EXECUTE format('CREATE TRIGGER zz_delivery_outbox_inserted'
                   ' AFTER INSERT ON %s FOR EACH ROW'
                   ' EXECUTE FUNCTION @extschema@.outbox_inserted(%s)',
                   tbl, coalesce(quote_literal(channel), ''));
    EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER zz_delivery_outbox_inserted', tbl);
END
$$;

REVOKE ALL ON FUNCTION outbox_set_triggers(regclass, text) FROM PUBLIC;

--
-- outbox_grant_triggers(tbl): EXECUTE on the extension's trigger functions
-- for the owner of outbox tbl, so that what ATTACH PARTITION and the like
-- run on its tables can run as that owner (outbox_owner.c): PostgreSQL
-- copies a partitioned table's row triggers to a new partition as the role
-- attaching it, which must be allowed to execute their functions.  The
-- owner may then put these triggers on other tables of its own, where they
-- do what they do on an outbox (or fail, on a table of another shape);
-- it gains nothing else.  Not for direct use.
--
CREATE FUNCTION outbox_grant_triggers(tbl regclass)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- a NULL or missing table: 22004 or 42P01, not a broken statement
    PERFORM @extschema@.outbox_check_relation(tbl);
    EXECUTE format('GRANT EXECUTE ON FUNCTION @extschema@.outbox_state_guard(),'
                   ' @extschema@.outbox_inserted(), @extschema@.outbox_insert_statement()'
                   ' TO %s', (SELECT relowner::regrole FROM pg_class WHERE oid = tbl));
END
$$;

REVOKE ALL ON FUNCTION outbox_grant_triggers(regclass) FROM PUBLIC;

--
-- outbox_make_dead(tbl): the dead-letter table of outbox tbl: <table>_dead
-- (the name shortened to fit) in the same schema, with tbl's columns (its timestamps of the same type)
-- and when and why each row died, owned by tbl's owner; one of that name
-- and shape already there (left by outbox_detach() or DROP EXTENSION) is
-- taken up, any other relation of that name is an error.  Not for direct
-- use.
--
CREATE FUNCTION outbox_make_dead(tbl regclass)
RETURNS regclass
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel name := (SELECT relname FROM pg_class WHERE oid = tbl);
    nsp name := (SELECT n.nspname FROM pg_class c
                   JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.oid = tbl);
    ts text := (SELECT format_type(atttypid, NULL) FROM pg_attribute
                 WHERE attrelid = tbl AND attname = 'created_at');
    dead name;
BEGIN
    -- a NULL or missing table: 22004 or 42P01, not a broken statement
    PERFORM @extschema@.outbox_check_relation(tbl);
    -- <table>_dead, the table's name shortened as needed to fit in 63 bytes
    dead := rel;
    WHILE octet_length(dead) > 58 LOOP
        dead := left(dead, -1);
    END LOOP;
    dead := dead || '_dead';
    -- one left by outbox_detach() or DROP EXTENSION is taken up again
    IF EXISTS (SELECT FROM pg_class c
                WHERE c.oid = to_regclass(format('%I.%I', nsp, dead))
                  AND c.relkind = 'r'
                  -- another role's table of that name is nobody's to take
                  AND c.relowner = (SELECT relowner FROM pg_class WHERE oid = tbl)
                  AND NOT EXISTS (SELECT FROM @extschema@.delivery_outbox_registry r
                                   WHERE r.dead = c.oid)
                  AND (SELECT count(*) FROM pg_attribute a
                        WHERE a.attrelid = c.oid AND NOT a.attisdropped
                          AND a.attname IN ('id', 'recipient', 'kind', 'tenant_id', 'payload',
                                            'delivery_state', 'delivery_attempts', 'created_at',
                                            'delivered_at', 'acked_at', 'not_before', 'expires_at',
                                            'dedup_key', 'last_error', 'dead_at', 'dead_reason')) = 16) THEN
        RETURN format('%I.%I', nsp, dead)::regclass;
    END IF;
    IF to_regclass(format('%I.%I', nsp, dead)) IS NOT NULL THEN
        RAISE EXCEPTION 'relation "%" already exists', dead
            USING ERRCODE = 'duplicate_table',
                  DETAIL = format('Outbox %s keeps its dead letters in %I.%I.', tbl, nsp, dead),
                  HINT = 'Rename or drop that relation first.';
    END IF;
    -- as the definer: a new, empty table in the schema (where the owner
    -- may lack CREATE), of the extension's making, then given to the
    -- owner; none of a table's code runs
    EXECUTE format($ddl$
        CREATE TABLE %1$I.%2$I (
            id                bigint PRIMARY KEY,
            recipient         text NOT NULL,
            kind              text NOT NULL,
            tenant_id         text,
            payload           bytea NOT NULL,
            delivery_state    text NOT NULL,
            delivery_attempts integer NOT NULL,
            created_at        %3$s NOT NULL,
            delivered_at      %3$s,
            acked_at          %3$s,
            not_before        timestamptz,
            expires_at        timestamptz,
            dedup_key         text,
            last_error        text,
            dead_at           timestamptz NOT NULL DEFAULT pg_catalog.now(),
            dead_reason       text NOT NULL
                              CHECK (dead_reason OPERATOR(pg_catalog.=)
                                     ANY ('{max_attempts,expired,rejected}'::text[]))
        )$ddl$, nsp, dead, ts);
    EXECUTE format('ALTER TABLE %I.%I OWNER TO %I', nsp, dead,
                   (SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = tbl));
    RETURN format('%I.%I', nsp, dead)::regclass;
END
$$;

REVOKE ALL ON FUNCTION outbox_make_dead(regclass) FROM PUBLIC;

--
-- outbox_make_indexes(tbl): the indexes the claims, the policy and the
-- dedup keys need, named after the table (kept where an index of that name
-- is the table's; PostgreSQL picks a free name where the name is another
-- relation's).  (recipient, dedup_key) is unique, but on a partitioned
-- table, which cannot have such an index: its state guard takes the keys.
-- Not for direct use.
--
CREATE FUNCTION outbox_make_indexes(tbl regclass)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel name := (SELECT relname FROM pg_class WHERE oid = tbl);
    nsp name := (SELECT n.nspname FROM pg_class c
                   JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.oid = tbl);
    partitioned boolean := (SELECT relkind = 'p' FROM pg_class WHERE oid = tbl);
    idx record;
    idxname name;
BEGIN
    -- a NULL or missing table: 22004 or 42P01, not a broken statement
    PERFORM @extschema@.outbox_check_relation(tbl);
    FOR idx IN
        SELECT * FROM (VALUES
            ('pending_idx', '(id) WHERE delivery_state OPERATOR(pg_catalog.=) ''pending'' AND not_before IS NULL'),
            ('pending_recipient_idx', '(recipient, id) WHERE delivery_state OPERATOR(pg_catalog.=) ''pending'' AND not_before IS NULL'),
            ('open_recipient_idx', '(recipient, id) WHERE delivery_state OPERATOR(pg_catalog.=) ANY (''{pending,delivered}''::text[])'),
            ('delivered_idx', '(delivered_at) WHERE delivery_state OPERATOR(pg_catalog.=) ''delivered'''),
            ('acked_idx', '(acked_at) WHERE delivery_state OPERATOR(pg_catalog.=) ''acked'''),
            ('scheduled_idx', '(not_before, id) WHERE delivery_state OPERATOR(pg_catalog.=) ''pending'' AND not_before IS NOT NULL'),
            ('scheduled_recipient_idx', '(recipient, not_before, id) WHERE delivery_state OPERATOR(pg_catalog.=) ''pending'' AND not_before IS NOT NULL'),
            ('expiring_idx', '(expires_at) WHERE delivery_state OPERATOR(pg_catalog.=) ''pending'' AND expires_at IS NOT NULL'),
            ('dedup_idx', '(recipient, dedup_key) WHERE dedup_key IS NOT NULL')
        ) AS v(suffix, def)
    LOOP
        idxname := left(rel, 63 - length(idx.suffix) - 1) || '_' || idx.suffix;
        -- as the definer, not through outbox_run_as_owner: CREATE INDEX
        -- itself builds the index (its expressions, predicate and unique
        -- checks) as the table's owner under SECURITY_RESTRICTED_OPERATION,
        -- and these indexes hold only the outbox's own columns of built-in
        -- types and pg_catalog's operators; run as the owner, it would
        -- also need CREATE on the schema, which the owner may lack
        IF to_regclass(format('%I.%I', nsp, idxname)) IS NULL THEN
            EXECUTE format('CREATE %sINDEX %I ON %s %s',
                           CASE WHEN idx.suffix = 'dedup_idx' AND NOT partitioned THEN 'UNIQUE ' ELSE '' END,
                           idxname, tbl, idx.def);
        ELSIF NOT EXISTS (SELECT FROM pg_index
                           WHERE indexrelid = to_regclass(format('%I.%I', nsp, idxname))
                             AND indrelid = tbl) THEN
            -- the name is another relation's: PostgreSQL picks a free one
            EXECUTE format('CREATE %sINDEX ON %s %s',
                           CASE WHEN idx.suffix = 'dedup_idx' AND NOT partitioned THEN 'UNIQUE ' ELSE '' END,
                           tbl, idx.def);
        END IF;
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION outbox_make_indexes(regclass) FROM PUBLIC;

--
-- outbox_drop_triggers(tbl): drop the extension's four triggers of outbox
-- tbl.  Not for direct use.
--
CREATE FUNCTION outbox_drop_triggers(tbl regclass)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- a NULL or missing table: 22004 or 42P01, not a broken statement
    PERFORM @extschema@.outbox_check_relation(tbl);
    -- as the caller: dropping a trigger runs none of the table's code
    EXECUTE format('DROP TRIGGER zz_delivery_outbox_state_guard ON %s', tbl);
    EXECUTE format('DROP TRIGGER zz_delivery_outbox_inserted ON %s', tbl);
    EXECUTE format('DROP TRIGGER IF EXISTS zz_delivery_outbox_insert_started ON %s', tbl);
    EXECUTE format('DROP TRIGGER IF EXISTS zz_delivery_outbox_insert_ended ON %s', tbl);
END
$$;

REVOKE ALL ON FUNCTION outbox_drop_triggers(regclass) FROM PUBLIC;

--
-- outbox_make_outbox(tbl, channel, origin): what makes a table an outbox,
-- for outbox_create() and outbox_attach(): the delivery policy's columns
-- (where missing: nullable, no default, so no rewrite), the indexes the
-- claims need (kept where an index of that name exists), the dead-letter
-- table, the triggers, the registry row.  Not for direct use.
--
CREATE FUNCTION outbox_make_outbox(tbl regclass, channel text, origin text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel name := (SELECT relname FROM pg_class WHERE oid = tbl);
    nsp name := (SELECT n.nspname FROM pg_class c
                   JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.oid = tbl);
    col record;
    have oid;
    dead regclass;
    seq text;
    top bigint;
    last_id bigint;
    partitioned boolean := (SELECT relkind = 'p' FROM pg_class WHERE oid = tbl);
BEGIN
    -- a NULL or missing table: 22004 or 42P01, not a broken statement
    PERFORM @extschema@.outbox_check_relation(tbl);
    FOR col IN
        SELECT * FROM (VALUES
            ('not_before', 'timestamptz'::regtype), ('expires_at', 'timestamptz'::regtype),
            ('dedup_key', 'text'::regtype), ('last_error', 'text'::regtype)) AS v(name, type)
    LOOP
        SELECT atttypid INTO have FROM pg_attribute
         WHERE attrelid = tbl AND attname = col.name AND NOT attisdropped;
        IF NOT FOUND THEN
            -- as the owner, like every step that changes the table's
            -- layout or reads its rows (ALTER TABLE needs ownership only)
            PERFORM @extschema@.outbox_run_as_owner(
                tbl, format('ALTER TABLE %s ADD COLUMN %I %s', tbl, col.name, col.type));
        ELSIF have <> col.type THEN
            RAISE EXCEPTION 'column "%" of table % must be of type %', col.name, tbl, col.type
                USING ERRCODE = 'datatype_mismatch';
        END IF;
    END LOOP;
    PERFORM @extschema@.outbox_make_indexes(tbl);
    -- dedup keys need exactly this index (ON CONFLICT infers it); a
    -- partitioned table cannot have it: its state guard takes the keys
    IF NOT partitioned AND NOT EXISTS (SELECT FROM pg_index i
                    WHERE i.indrelid = tbl AND i.indisunique AND i.indisvalid
                      AND pg_get_indexdef(i.indexrelid)
                          ~ '\(recipient, dedup_key\) WHERE \(dedup_key IS NOT NULL\)$') THEN
        RAISE EXCEPTION 'table % has no unique index on (recipient, dedup_key) WHERE dedup_key IS NOT NULL', tbl
            USING ERRCODE = 'invalid_table_definition',
                  HINT = format('An index named %s of another definition is in the way: drop or rename it.',
                                left(rel, 63 - length('dedup_idx') - 1) || '_dedup_idx');
    END IF;
    PERFORM @extschema@.outbox_set_triggers(tbl, channel);
    dead := @extschema@.outbox_make_dead(tbl);
    -- the registry's own row, as the definer (nobody else may write it)
    INSERT INTO @extschema@.delivery_outbox_registry (outbox, origin, channel, dead)
    VALUES (tbl, origin, channel, dead);
    -- a dead-letter table taken up keeps its ids: the outbox's sequence
    -- must not hand them out again
    seq := pg_get_serial_sequence(tbl::text, 'id');
    IF seq IS NOT NULL THEN
        -- the dead-letter table's rows, as its owner (a table taken up may
        -- carry code of its own: row security policies); the sequence,
        -- which has no code, as the definer
        top := @extschema@.outbox_run_as_owner(
                   dead, format('SELECT max(id) FROM %s', dead))::bigint;
        EXECUTE format('SELECT last_value FROM %s', seq) INTO last_id;
        IF top IS NOT NULL AND top >= last_id THEN
            PERFORM setval(seq, top);
        END IF;
    END IF;
    PERFORM @extschema@.outbox_invalidate(tbl);
END
$$;

REVOKE ALL ON FUNCTION outbox_make_outbox(regclass, text, text) FROM PUBLIC;

--
-- The settings of each outbox, one row per outbox.  channel is the one its
-- wake-ups go to (the outbox's own, else delivery_outbox.channel).
--
CREATE VIEW delivery_outbox_tables AS
    SELECT o.outbox,
           coalesce(r.origin, 'default') AS origin,
           coalesce(r.channel,
                    pg_catalog.current_setting('delivery_outbox.channel', true),
                    'delivery_outbox') AS channel,
           r.channel IS NULL AS channel_is_default,
           r.max_attempts,
           coalesce(r.backoff_base, '0') AS backoff_base,
           coalesce(r.backoff_max, '1 hour') AS backoff_max,
           r.ttl,
           coalesce(r.ordered, false) AS ordered,
           coalesce(r.dead, CASE WHEN o.outbox OPERATOR(pg_catalog.=) 'delivery_outbox'::regclass
                                 THEN 'delivery_outbox_dead'::regclass END) AS dead_table,
           r.retain_acked,
           r.partition_rows
      FROM (SELECT 'delivery_outbox'::regclass AS outbox
            UNION ALL
            SELECT outbox FROM delivery_outbox_registry
             WHERE origin OPERATOR(pg_catalog.<>) 'default') o
      LEFT JOIN delivery_outbox_registry r ON r.outbox OPERATOR(pg_catalog.=) o.outbox;

REVOKE ALL ON TABLE delivery_outbox_tables FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_create(name, name, text, bigint) FROM PUBLIC;

--
-- outbox_check_relation(tbl) and outbox_require_owner(tbl): the checks
-- outbox_attach, outbox_detach and outbox_configure share: tbl given
-- (22004) and naming a relation (42P01); the calling role a member of the
-- table's owner (42501).  Not for direct use.
--
CREATE FUNCTION outbox_check_relation(tbl regclass)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF tbl IS NULL THEN
        RAISE EXCEPTION 'tbl must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF NOT EXISTS (SELECT FROM pg_class WHERE oid = tbl) THEN
        RAISE EXCEPTION 'relation with OID % does not exist', tbl::oid
            USING ERRCODE = 'undefined_table';
    END IF;
END
$$;

CREATE FUNCTION outbox_require_owner(tbl regclass)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT pg_has_role(@extschema@.outbox_calling_role(),
                       (SELECT relowner FROM pg_class WHERE oid = tbl), 'MEMBER') THEN
        RAISE EXCEPTION 'must be owner of table %', tbl
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END
$$;

REVOKE ALL ON FUNCTION outbox_check_relation(regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_require_owner(regclass) FROM PUBLIC;

--
-- outbox_attach(tbl, channel): make an existing table of the seed
-- system's shape an outbox, rows and all, without rewriting it.  The caller
-- must own the table.  Every row is checked first against the rules a
-- restored row must follow (the state guard's INSERT rules); one that
-- breaks them is an error naming the first offending ids, and nothing
-- changes.  Then: a default for created_at where there is none (the seed's
-- INSERT sets it; outbox_enqueue does not), the claims' indexes, the
-- triggers, and the registry row.  Triggers on the table that send NOTIFY
-- (the seed's delivery_outbox_notify_trg) are disabled, so a plain INSERT
-- wakes relays once; outbox_detach() enables them again.  Locks the table
-- in SHARE ROW EXCLUSIVE mode (reads go on, writes wait) for the whole call,
-- index builds included, and in ACCESS EXCLUSIVE mode from adding the
-- delivery policy's columns (before the index builds, which need them) or
-- a missing default to the commit: add them beforehand to keep reads going
-- (docs/operations.md, "Adopting an existing table").  A NOTICE counts the
-- rows left delivered: the worker's reclaim puts them back to pending and
-- they are pushed again, which at-least-once allows but nobody expects of
-- an adoption.
--
CREATE FUNCTION outbox_attach(tbl regclass, channel text DEFAULT NULL)
RETURNS regclass
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    want record;
    att record;
    ts_type oid;
    bad bigint[];
    notifying name[];
    trg name;
    delivered bigint;
    reclaim_after text;
BEGIN
    PERFORM @extschema@.outbox_check_relation(tbl);
    IF channel IS NOT NULL AND (channel = '' OR octet_length(channel) >= 64) THEN
        RAISE EXCEPTION 'channel must be a non-empty name shorter than 64 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM @extschema@.outbox_require_owner(tbl);
    IF tbl = '@extschema@.delivery_outbox'::regclass
       OR EXISTS (SELECT FROM @extschema@.delivery_outbox_registry r
                   WHERE r.outbox = tbl AND r.origin <> 'default') THEN
        RAISE EXCEPTION 'table % is already an outbox', tbl
            USING ERRCODE = 'duplicate_object';
    END IF;
    IF (SELECT relpersistence FROM pg_class WHERE oid = tbl) = 't' THEN
        RAISE EXCEPTION 'an outbox cannot be a temporary table'
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = format('%s is a temporary table, whose registry row would outlive the session that owns it.', tbl);
    END IF;
    IF (SELECT relkind FROM pg_class WHERE oid = tbl) <> 'r'
       OR (SELECT relispartition FROM pg_class WHERE oid = tbl) THEN
        RAISE EXCEPTION '% is not a plain table', tbl
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'Only an ordinary table that is not a partition can be attached.';
    END IF;

    -- the table's steps run as its owner (outbox_run_as_owner), who may
    -- lock it, alter it and read its rows
    PERFORM @extschema@.outbox_run_as_owner(
        tbl, format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', tbl));

    -- the columns, by name and type
    FOR want IN
        SELECT * FROM (VALUES
            ('id', 'bigint'), ('recipient', 'text'), ('kind', 'text'),
            ('tenant_id', 'text'), ('payload', 'bytea'),
            ('delivery_state', 'text'), ('delivery_attempts', 'integer'),
            ('created_at', 'timestamp'), ('delivered_at', 'timestamp'),
            ('acked_at', 'timestamp')) AS v(name, type)
    LOOP
        SELECT a.atttypid, a.attnotnull, a.attidentity, a.atthasdef
          INTO att
          FROM pg_attribute a
         WHERE a.attrelid = tbl AND a.attname = want.name AND NOT a.attisdropped;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'column "%" not found in table %', want.name, tbl
                USING ERRCODE = 'undefined_column';
        END IF;
        IF want.type = 'timestamp' THEN
            IF att.atttypid NOT IN ('timestamptz'::regtype, 'timestamp'::regtype) THEN
                RAISE EXCEPTION 'column "%" of table % must be of type timestamp with time zone or timestamp without time zone',
                    want.name, tbl USING ERRCODE = 'datatype_mismatch';
            END IF;
            IF ts_type IS NULL THEN
                ts_type := att.atttypid;
            ELSIF ts_type <> att.atttypid THEN
                RAISE EXCEPTION 'the timestamps of table % must all be of one type', tbl
                    USING ERRCODE = 'datatype_mismatch',
                          DETAIL = 'created_at, delivered_at and acked_at are either all timestamp with time zone or all timestamp without time zone (UTC).';
            END IF;
        ELSIF att.atttypid <> want.type::regtype THEN
            RAISE EXCEPTION 'column "%" of table % must be of type %', want.name, tbl, want.type
                USING ERRCODE = 'datatype_mismatch';
        END IF;
        IF want.name IN ('id', 'recipient', 'kind', 'payload', 'delivery_state',
                         'delivery_attempts', 'created_at') AND NOT att.attnotnull THEN
            RAISE EXCEPTION 'column "%" of table % must be NOT NULL', want.name, tbl
                USING ERRCODE = 'invalid_table_definition';
        END IF;
        IF want.name = 'id' AND att.attidentity = '' AND NOT att.atthasdef THEN
            RAISE EXCEPTION 'column "id" of table % must take its values from a sequence', tbl
                USING ERRCODE = 'invalid_table_definition',
                      HINT = 'Give it an identity or a nextval() default.';
        END IF;
    END LOOP;
    IF NOT EXISTS (SELECT FROM pg_index i
                    WHERE i.indrelid = tbl AND i.indisunique AND i.indisvalid
                      AND i.indnkeyatts = 1 AND i.indpred IS NULL AND i.indexprs IS NULL
                      AND i.indkey[0] = (SELECT attnum FROM pg_attribute
                                          WHERE attrelid = tbl AND attname = 'id')) THEN
        RAISE EXCEPTION 'column "id" of table % must be unique', tbl
            USING ERRCODE = 'invalid_table_definition',
                  HINT = 'Make it the primary key.';
    END IF;

    -- every row, by the rules of a restored row
    bad := @extschema@.outbox_run_as_owner(tbl, format($q$
        SELECT array_agg(id ORDER BY id) FROM (
            SELECT id FROM %s
             WHERE NOT coalesce(
                   delivery_attempts >= 0 AND CASE delivery_state
                   WHEN 'pending' THEN acked_at IS NULL
                        AND (delivery_attempts = 0) = (delivered_at IS NULL)
                   WHEN 'delivered' THEN delivered_at IS NOT NULL
                        AND delivery_attempts >= 1 AND acked_at IS NULL
                   WHEN 'acked' THEN acked_at IS NOT NULL
                   ELSE false END, false)
             ORDER BY id LIMIT 10) b$q$, tbl))::bigint[];
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'table % has rows that are not valid outbox rows', tbl
            USING ERRCODE = 'check_violation',
                  DETAIL = format('First offending ids: %s.', array_to_string(bad, ', ')),
                  HINT = 'delivery_state must be pending, delivered or acked; a pending row has delivered_at exactly when delivery_attempts >= 1 and no acked_at; a delivered row has delivered_at, delivery_attempts >= 1 and no acked_at; an acked row has acked_at.  A pending row re-addressed with delivered_at = NULL can be repaired with UPDATE ... SET delivered_at = created_at WHERE delivery_state = ''pending'' AND delivery_attempts > 0 AND delivered_at IS NULL before attaching.';
    END IF;

    -- rows the seed left delivered and never acked: reported at the end
    delivered := @extschema@.outbox_run_as_owner(tbl, format(
        'SELECT count(*) FROM %s WHERE delivery_state = ''delivered''', tbl))::bigint;

    -- notifying triggers would double the wake-ups (disabled as the
    -- definer: no code of the table runs)
    SELECT coalesce(array_agg(t.tgname ORDER BY t.tgname), '{}') INTO notifying
      FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
     WHERE t.tgrelid = tbl AND NOT t.tgisinternal AND t.tgenabled <> 'D'
       AND p.prosrc ~* '(pg_notify|\mnotify\M)';
    FOREACH trg IN ARRAY notifying LOOP
        EXECUTE format('ALTER TABLE %s DISABLE TRIGGER %I', tbl, trg);
    END LOOP;

    PERFORM @extschema@.outbox_make_outbox(tbl, channel, 'attached');
    -- the registry's own row, as the definer
    UPDATE @extschema@.delivery_outbox_registry
       SET disabled_triggers = notifying WHERE outbox = tbl;

    -- the enqueue functions leave created_at to its default; last, since
    -- ALTER TABLE takes ACCESS EXCLUSIVE (reads wait) until the commit (as
    -- the definer: SET DEFAULT evaluates nothing, and the defaults are the
    -- extension's)
    IF NOT (SELECT atthasdef FROM pg_attribute WHERE attrelid = tbl AND attname = 'created_at') THEN
        EXECUTE format('ALTER TABLE %s ALTER COLUMN created_at SET DEFAULT %s', tbl,
                       CASE WHEN ts_type = 'timestamp'::regtype
                            THEN 'pg_catalog.timezone(''UTC''::text, pg_catalog.now())'
                            ELSE 'pg_catalog.now()' END);
    END IF;
    IF NOT (SELECT atthasdef FROM pg_attribute WHERE attrelid = tbl AND attname = 'delivery_state') THEN
        EXECUTE format('ALTER TABLE %s ALTER COLUMN delivery_state SET DEFAULT ''pending''', tbl);
    END IF;
    IF NOT (SELECT atthasdef FROM pg_attribute WHERE attrelid = tbl AND attname = 'delivery_attempts') THEN
        EXECUTE format('ALTER TABLE %s ALTER COLUMN delivery_attempts SET DEFAULT 0', tbl);
    END IF;

    PERFORM @extschema@.outbox_grant_triggers(tbl);

    -- The worker's sweep puts each back to pending once delivered_at (the
    -- seed's, often long past) is older than reclaim_after, and relays push
    -- it again: say so, once, where the adoption is run.
    IF delivered > 0 THEN
        reclaim_after := current_setting('delivery_outbox.reclaim_after', true);
        RAISE NOTICE '% delivered rows of table % were never acked', delivered, tbl
            USING DETAIL = CASE WHEN reclaim_after IN ('-1', '-1s')
                THEN 'delivery_outbox.reclaim_after is -1: the background worker leaves them delivered; outbox_reclaim() puts them back to pending, to be pushed again.'
                ELSE format('Where the background worker serves this database, it puts a row delivered longer ago than delivery_outbox.reclaim_after (%s) back to pending, and relays push it again.',
                            coalesce(reclaim_after, '60s')) END,
                  HINT = 'If they reached their recipients, ack them (outbox_ack, or before attaching UPDATE ... SET delivery_state = ''acked'', acked_at = ...); see "Adopting an existing table" in docs/operations.md.';
    END IF;
    RETURN tbl;
END
$$;

--
-- outbox_detach(tbl): the table is no longer an outbox: its state guard,
-- after-insert trigger and registry row go; the triggers outbox_attach()
-- disabled are enabled again; table, rows, indexes and defaults stay.
-- The extension's own table cannot be detached.
--
CREATE FUNCTION outbox_detach(tbl regclass)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    reg record;
    trg name;
BEGIN
    PERFORM @extschema@.outbox_check_relation(tbl);
    IF tbl = '@extschema@.delivery_outbox'::regclass THEN
        RAISE EXCEPTION 'the extension''s own table cannot be detached'
            USING ERRCODE = 'wrong_object_type',
                  HINT = 'DROP EXTENSION removes it.';
    END IF;
    SELECT * INTO reg FROM @extschema@.delivery_outbox_registry r
     WHERE r.outbox = tbl AND r.origin <> 'default';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'relation % is not an outbox', tbl
            USING ERRCODE = 'wrong_object_type';
    END IF;
    PERFORM @extschema@.outbox_require_owner(tbl);
    -- all as the definer: dropping and enabling triggers and the
    -- registry's row run none of the table's code, and read no row of it
    PERFORM @extschema@.outbox_drop_triggers(tbl);
    FOREACH trg IN ARRAY reg.disabled_triggers LOOP
        IF EXISTS (SELECT FROM pg_trigger WHERE tgrelid = tbl AND tgname = trg) THEN
            EXECUTE format('ALTER TABLE %s ENABLE TRIGGER %I', tbl, trg);
        END IF;
    END LOOP;
    DELETE FROM @extschema@.delivery_outbox_registry WHERE outbox = tbl;
    PERFORM @extschema@.outbox_invalidate(tbl);
END
$$;

--
-- outbox_configure(tbl, channel, max_attempts, backoff_base, backoff_max,
-- ttl): change an outbox's settings; NULL leaves a setting as it is.
-- channel => '' goes back to delivery_outbox.channel, max_attempts => 0 to
-- no limit, ttl => '0' to no expiry (docs/delivery-policy.md).  The caller
-- must own the table (the default outbox: its owner, the extension's,
-- normally a superuser).
--
CREATE FUNCTION outbox_configure(tbl regclass, channel text DEFAULT NULL,
                                 max_attempts integer DEFAULT NULL,
                                 backoff_base interval DEFAULT NULL,
                                 backoff_max interval DEFAULT NULL,
                                 ttl interval DEFAULT NULL,
                                 ordered boolean DEFAULT NULL,
                                 retain_acked interval DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    is_default boolean;
    chan text;
    seq regclass;
    idx regclass;
    idxname text;
BEGIN
    PERFORM @extschema@.outbox_check_relation(tbl);
    is_default := tbl = '@extschema@.delivery_outbox'::regclass;
    IF NOT is_default AND NOT EXISTS (SELECT FROM @extschema@.delivery_outbox_registry r
                                       WHERE r.outbox = tbl) THEN
        RAISE EXCEPTION 'relation % is not an outbox', tbl
            USING ERRCODE = 'wrong_object_type';
    END IF;
    PERFORM @extschema@.outbox_require_owner(tbl);
    IF channel IS NOT NULL AND octet_length(channel) >= 64 THEN
        RAISE EXCEPTION 'channel must be shorter than 64 bytes'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF backoff_base > interval '100 years' OR backoff_max > interval '100 years' THEN
        RAISE EXCEPTION '% must not exceed 100 years',
            CASE WHEN backoff_base > interval '100 years' THEN 'backoff_base' ELSE 'backoff_max' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF ttl > interval '1000 years' THEN
        RAISE EXCEPTION 'ttl must not exceed 1000 years'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'ttl => ''0'' means no expiry.';
    END IF;
    IF max_attempts < 0 THEN
        RAISE EXCEPTION 'max_attempts must not be negative'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'max_attempts => 0 means no limit.';
    END IF;
    IF backoff_base < interval '0' OR backoff_max < interval '0' THEN
        RAISE EXCEPTION '% must not be negative',
            CASE WHEN backoff_base < interval '0' THEN 'backoff_base' ELSE 'backoff_max' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF ttl < interval '0' THEN
        RAISE EXCEPTION 'ttl must not be negative'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'ttl => ''0'' means no expiry.';
    END IF;
    IF outbox_configure.retain_acked > interval '1000 years' THEN
        RAISE EXCEPTION 'retain_acked must not exceed 1000 years'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'retain_acked => ''-1 second'' (any negative interval) makes delivery_outbox.retain_acked apply.';
    END IF;
    IF outbox_configure.ordered AND
       (SELECT relkind FROM pg_class WHERE oid = tbl) = 'p' THEN
        RAISE EXCEPTION 'a partitioned outbox cannot be ordered'
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = format('Outbox %s is partitioned; ordered claims read one index of the whole table.', tbl);
    END IF;
    IF outbox_configure.ordered THEN
        -- the horizon and the markers read the id sequence's position
        seq := pg_get_serial_sequence(tbl::text, 'id')::regclass;
        IF seq IS NULL THEN
            RAISE EXCEPTION 'outbox % cannot be ordered: its id column has no sequence', tbl
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'Give the id column an identity, or a sequence owned by it.';
        END IF;
        IF NOT EXISTS (SELECT FROM pg_sequence
                        WHERE seqrelid = seq AND seqincrement > 0 AND seqcache = 1) THEN
            RAISE EXCEPTION 'outbox % cannot be ordered: its id sequence % must count up with CACHE 1', tbl, seq
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = 'With a cache, a session may insert ids below the sequence''s last value at any time.',
                      HINT = format('ALTER SEQUENCE %s CACHE 1, with a positive INCREMENT.', seq);
        END IF;
    END IF;
    IF channel IS NULL AND max_attempts IS NULL AND backoff_base IS NULL
       AND backoff_max IS NULL AND ttl IS NULL AND outbox_configure.ordered IS NULL
       AND outbox_configure.retain_acked IS NULL THEN
        RETURN;
    END IF;
    IF is_default THEN
        INSERT INTO @extschema@.delivery_outbox_registry (outbox, origin, dead)
        VALUES (tbl, 'default', '@extschema@.delivery_outbox_dead'::regclass)
        ON CONFLICT (outbox) DO NOTHING;
    END IF;
    UPDATE @extschema@.delivery_outbox_registry r
       SET max_attempts = CASE WHEN outbox_configure.max_attempts IS NULL THEN r.max_attempts
                               ELSE nullif(outbox_configure.max_attempts, 0) END,
           backoff_base = coalesce(outbox_configure.backoff_base, r.backoff_base),
           backoff_max = coalesce(outbox_configure.backoff_max, r.backoff_max),
           ttl = CASE WHEN outbox_configure.ttl IS NULL THEN r.ttl
                      ELSE nullif(outbox_configure.ttl, interval '0') END,
           retain_acked = CASE WHEN outbox_configure.retain_acked IS NULL THEN r.retain_acked
                               WHEN outbox_configure.retain_acked < interval '0' THEN NULL
                               ELSE outbox_configure.retain_acked END
     WHERE r.outbox = tbl;
    IF channel IS NOT NULL THEN
        chan := nullif(channel, '');
        -- the registry's row and the triggers, as the definer (no code of
        -- the table runs)
        UPDATE @extschema@.delivery_outbox_registry r SET channel = chan WHERE r.outbox = tbl;
        -- the triggers carry the channel
        PERFORM @extschema@.outbox_set_triggers(tbl, chan);
    END IF;
    IF outbox_configure.ordered IS NOT NULL THEN
        IF outbox_configure.ordered IS DISTINCT FROM
           (SELECT r.ordered FROM @extschema@.delivery_outbox_registry r WHERE r.outbox = tbl) THEN
            -- running inserts finish first: each one is marked as the
            -- setting it started under says, which must be the one claims
            -- go by (locked as the table's owner, who may)
            PERFORM @extschema@.outbox_run_as_owner(
                tbl, format('LOCK TABLE %s IN SHARE MODE', tbl));
            UPDATE @extschema@.delivery_outbox_registry r
               SET ordered = outbox_configure.ordered WHERE r.outbox = tbl;
        END IF;
        -- the claims find a recipient's runs in flight by this index (made
        -- again by a repeated call: a restored default outbox lacks it)
        SELECT i.indexrelid INTO idx FROM pg_index i
         WHERE i.indrelid = tbl
           AND pg_get_indexdef(i.indexrelid)
               ~ ' \(recipient, id\) WHERE \(delivery_state = ''delivered''::text\)$';
        IF outbox_configure.ordered AND idx IS NULL THEN
            -- as the definer, as outbox_make_indexes does (CREATE INDEX
            -- builds it as the table's owner itself; the owner may lack
            -- CREATE on the schema); so is DROP INDEX, which runs no code
            idxname := left((SELECT relname FROM pg_class WHERE oid = tbl),
                            63 - length('delivered_recipient_idx') - 1) || '_delivered_recipient_idx';
            IF to_regclass(format('%I.%I', (SELECT n.nspname FROM pg_class c
                                              JOIN pg_namespace n ON n.oid = c.relnamespace
                                             WHERE c.oid = tbl), idxname)) IS NULL THEN
                EXECUTE format('CREATE INDEX %I ON %s (recipient, id)'
                               ' WHERE delivery_state OPERATOR(pg_catalog.=) ''delivered''',
                               idxname, tbl);
            ELSE
                EXECUTE format('CREATE INDEX ON %s (recipient, id)'
                               ' WHERE delivery_state OPERATOR(pg_catalog.=) ''delivered''', tbl);
            END IF;
        ELSIF NOT outbox_configure.ordered AND idx IS NOT NULL THEN
            EXECUTE format('DROP INDEX %s', idx);
        END IF;
    END IF;
    PERFORM @extschema@.outbox_invalidate(tbl);
END
$$;

--
-- outbox_partition(tbl, partition_rows): turn outbox tbl (made by
-- outbox_create or taken over by outbox_attach) into a partitioned one, the
-- table itself, rows and all, becoming its first partition
-- (docs/partitions.md, "Converting an outbox").  A new partitioned table
-- takes tbl's name, columns, defaults, constraints, id sequence, grants,
-- owner, registry row and triggers; tbl, renamed <table>_p<k>, is attached
-- for the ids below the next partition boundary, without a rewrite (one
-- scan validates its ids).  ACCESS EXCLUSIVE on tbl to the commit.  The
-- caller must own it.  Returns the new outbox.
--
CREATE FUNCTION outbox_partition(tbl regclass, partition_rows bigint)
RETURNS regclass
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    reg record;
    rel name;
    nsp name;
    owner name;
    seq regclass;
    seqname name;
    is_identity boolean;
    next_id bigint;
    k bigint;
    bound bigint;
    part name;
    tmp name;
    t regclass;
    idx record;
    deps text;
    g record;
BEGIN
    PERFORM @extschema@.outbox_check_relation(tbl);
    IF partition_rows IS NULL OR partition_rows < 1 THEN
        RAISE EXCEPTION 'partition_rows must be positive'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF tbl = '@extschema@.delivery_outbox'::regclass THEN
        RAISE EXCEPTION 'the extension''s own table cannot be partitioned'
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Make a partitioned outbox with outbox_create(..., partition_rows => ...).';
    END IF;
    SELECT * INTO reg FROM @extschema@.delivery_outbox_registry r
     WHERE r.outbox = tbl AND r.origin <> 'default';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'relation % is not an outbox', tbl
            USING ERRCODE = 'wrong_object_type';
    END IF;
    PERFORM @extschema@.outbox_require_owner(tbl);
    IF reg.partition_rows IS NOT NULL OR (SELECT relkind FROM pg_class WHERE oid = tbl) <> 'r' THEN
        RAISE EXCEPTION 'outbox % is already partitioned', tbl
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF reg.ordered THEN
        RAISE EXCEPTION 'a partitioned outbox cannot be ordered'
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = format('Outbox %s is ordered.', tbl),
                  HINT = format('outbox_configure(%L, ordered => false) first.', tbl::text);
    END IF;
    seq := pg_get_serial_sequence(tbl::text, 'id')::regclass;
    IF seq IS NULL THEN
        RAISE EXCEPTION 'outbox % cannot be partitioned: its id column has no sequence', tbl
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Give the id column an identity, or a sequence owned by it.';
    END IF;
    -- the steps that lock the table or read its rows run as its owner
    -- (outbox_run_as_owner); those that make the new, empty parent in the
    -- schema (where the owner may lack CREATE), rename, re-own, grant and
    -- move triggers and defaults run as the definer: none runs any of the
    -- table's code
    PERFORM @extschema@.outbox_run_as_owner(
        tbl, format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', tbl));
    -- what would follow the table, not its new parent: refused
    SELECT string_agg(DISTINCT pg_describe_object(d.classid, d.objid, d.objsubid), ', ')
      INTO deps
      FROM pg_depend d
     WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = tbl
       AND d.deptype = 'n'
       AND (d.classid = 'pg_rewrite'::regclass
            OR (d.classid = 'pg_constraint'::regclass
                AND EXISTS (SELECT FROM pg_constraint c
                             WHERE c.oid = d.objid AND c.contype = 'f'
                               AND c.confrelid = tbl)));
    SELECT nullif(concat_ws(', ', deps, string_agg(format('publication %I', p.pubname), ', ')), '')
      INTO deps
      FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
     WHERE pr.prrelid = tbl;
    SELECT nullif(concat_ws(', ', deps,
                     CASE WHEN c.relrowsecurity THEN 'row-level security' END,
                     (SELECT string_agg(format('policy %I', p.polname), ', ')
                        FROM pg_policy p WHERE p.polrelid = tbl),
                     (SELECT string_agg(format('rule %I', r.rulename), ', ')
                        FROM pg_rewrite r WHERE r.ev_class = tbl)), '')
      INTO deps
      FROM pg_class c WHERE c.oid = tbl;
    IF deps IS NOT NULL THEN
        RAISE EXCEPTION 'cannot partition outbox % because other objects depend on it or would not follow it', tbl
            USING ERRCODE = 'dependent_objects_still_exist',
                  DETAIL = format('In the way: %s.', deps),
                  HINT = 'Drop them first, and make them again on the partitioned outbox.';
    END IF;
    rel := (SELECT relname FROM pg_class WHERE oid = tbl);
    nsp := (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE c.oid = tbl);
    owner := (SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = tbl);
    is_identity := (SELECT attidentity <> '' FROM pg_attribute
                     WHERE attrelid = tbl AND attname = 'id');
    -- the table keeps the ids below the first boundary above its next id
    -- (a sequence has no code: read as the definer)
    EXECUTE format('SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM %s', seq)
       INTO next_id;
    next_id := greatest(next_id, 1);
    k := (next_id - 1) / partition_rows;
    -- (the bound of the last partition a huge partition_rows allows would
    -- pass the largest bigint: it stops there, as the partitions made ahead do)
    bound := CASE WHEN k + 1 > (9223372036854775807 - 1) / partition_rows
                  THEN 9223372036854775807
                  ELSE (k + 1) * partition_rows + 1 END;
    part := left(rel, 63 - length('_p' || k)) || '_p' || k;
    IF to_regclass(format('%I.%I', nsp, part)) IS NOT NULL
       OR EXISTS (SELECT FROM pg_type WHERE typname = part
                   AND typnamespace = (SELECT relnamespace FROM pg_class WHERE oid = tbl)) THEN
        RAISE EXCEPTION 'relation "%" already exists', part
            USING ERRCODE = 'duplicate_table',
                  HINT = 'Rename or drop that relation first.';
    END IF;
    -- the extension's triggers move to the new table
    PERFORM @extschema@.outbox_drop_triggers(tbl);
    -- the indexes named after the table (outbox_make_outbox's) take the
    -- partition's name, so that the new table's get theirs
    FOR idx IN SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                WHERE i.indrelid = tbl AND starts_with(c.relname, rel || '_')
    LOOP
        EXECUTE format('ALTER INDEX %I.%I RENAME TO %I', nsp, idx.relname,
                       left(part || substr(idx.relname, length(rel) + 1), 63));
    END LOOP;
    EXECUTE format('ALTER TABLE %s RENAME TO %I', tbl, part);
    tmp := rel;
    EXECUTE format('CREATE TABLE %I.%I (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS'
                   ' INCLUDING STORAGE INCLUDING COMPRESSION%s) PARTITION BY RANGE (id)',
                   nsp, tmp, tbl, CASE WHEN is_identity THEN ' INCLUDING IDENTITY' ELSE '' END);
    t := format('%I.%I', nsp, tmp)::regclass;
    EXECUTE format('ALTER TABLE %s ADD PRIMARY KEY (id)', t);
    IF is_identity THEN
        -- the new identity goes on from the old one, which goes, and takes
        -- its name
        PERFORM setval(pg_get_serial_sequence(t::text, 'id'),
                       greatest(next_id - 1, 1), next_id > 1);
        seqname := (SELECT relname FROM pg_class WHERE oid = seq);
        EXECUTE format('ALTER TABLE %s ALTER COLUMN id DROP IDENTITY', tbl);
        IF to_regclass(format('%I.%I', nsp, seqname)) IS NULL THEN
            EXECUTE format('ALTER SEQUENCE %s RENAME TO %I',
                           pg_get_serial_sequence(t::text, 'id'), seqname);
        END IF;
    END IF;
    EXECUTE format('ALTER TABLE %s OWNER TO %I', t, owner);
    IF NOT is_identity THEN
        -- the default (nextval of the sequence) came along: so does the
        -- sequence (owned by the table's owner, as OWNED BY needs)
        EXECUTE format('ALTER SEQUENCE %s OWNED BY %s.id', seq, t);
        EXECUTE format('ALTER TABLE %s ALTER COLUMN id DROP DEFAULT', tbl);
    END IF;
    -- the grants, table and columns
    FOR g IN SELECT a.grantee, a.privilege_type, a.is_grantable
               FROM pg_class c, aclexplode(c.relacl) a
              WHERE c.oid = tbl AND a.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT %s ON %s TO %s%s', g.privilege_type, t,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END,
                       CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
    FOR g IN SELECT at.attname, a.grantee, a.privilege_type, a.is_grantable
               FROM pg_attribute at, aclexplode(at.attacl) a
              WHERE at.attrelid = tbl AND at.attacl IS NOT NULL AND NOT at.attisdropped
                AND a.grantee <> (SELECT relowner FROM pg_class WHERE oid = tbl)
    LOOP
        EXECUTE format('GRANT %s (%I) ON %s TO %s%s', g.privilege_type, g.attname, t,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END,
                       CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
    -- the registry row is the new table's; outbox_make_outbox's indexes
    -- and triggers, which the old table gets back as a partition
    UPDATE @extschema@.delivery_outbox_registry r
       SET outbox = t, partition_rows = outbox_partition.partition_rows
     WHERE r.outbox = tbl;
    PERFORM @extschema@.outbox_make_indexes(t);
    -- the unique (recipient, dedup_key) index gives way to the partitions'
    -- plain one: the state guard takes the keys now
    FOR idx IN SELECT i.indexrelid::regclass AS name FROM pg_index i
                WHERE i.indrelid = tbl AND i.indisunique
                  AND pg_get_indexdef(i.indexrelid)
                      ~ '\(recipient, dedup_key\) WHERE \(dedup_key IS NOT NULL\)$'
    LOOP
        EXECUTE format('DROP INDEX %s', idx.name);
    END LOOP;
    -- as the owner of both tables (made so above): ATTACH PARTITION scans
    -- the rows and builds the parent's indexes the table lacks.  Before the
    -- new table has its row triggers, which ATTACH would clone onto the
    -- table with the owner's rights (EXECUTE on the extension's trigger
    -- functions, which the owner lacks): CREATE TRIGGER on the new table,
    -- as the definer, clones them onto it instead.
    PERFORM @extschema@.outbox_run_as_owner(
        tbl, format('ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (MINVALUE) TO (%s)',
                    t, tbl, bound));
    PERFORM @extschema@.outbox_set_triggers(t, reg.channel);
    PERFORM @extschema@.outbox_invalidate(tbl);
    PERFORM @extschema@.outbox_invalidate(t);
    PERFORM @extschema@.outbox_grant_triggers(t);
    PERFORM @extschema@.outbox_partitions_ahead(t);
    RETURN t;
END
$$;

REVOKE ALL ON FUNCTION outbox_partition(regclass, bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION outbox_attach(regclass, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_detach(regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_configure(regclass, text, integer, interval, interval, interval, boolean, interval) FROM PUBLIC;

--
-- The API.  Every function is implemented in C, runs in the caller's
-- transaction, and raises on a NULL where a value is required (none is
-- STRICT).  They are SECURITY DEFINER so that producers and relays need
-- EXECUTE only, never privileges on the table itself.  Each takes as its
-- last argument "outbox regclass DEFAULT NULL": the outbox to work on, NULL
-- for the default one.  For the default outbox EXECUTE is all a role
-- needs; for any other the calling role also needs the privilege on that
-- table the call uses (INSERT to enqueue; UPDATE to claim, ack, release,
-- reclaim, resync and reassign; SELECT to replay, wait and count; DELETE to
-- purge).
--
CREATE FUNCTION outbox_enqueue(recipient text, kind text, payload bytea,
                               tenant_id text DEFAULT NULL,
                               not_before timestamptz DEFAULT NULL,
                               expires_at timestamptz DEFAULT NULL,
                               dedup_key text DEFAULT NULL,
                               outbox regclass DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'outbox_enqueue'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION outbox_claim(max_rows integer DEFAULT 100,
                             recipient text DEFAULT NULL,
                             tenant_id text DEFAULT NULL,
                             outbox regclass DEFAULT NULL)
RETURNS SETOF delivery_outbox
AS 'MODULE_PATHNAME', 'outbox_claim'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION outbox_ack(id bigint, recipient text DEFAULT NULL,
                           outbox regclass DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'outbox_ack'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION outbox_ack(ids bigint[], recipient text DEFAULT NULL,
                           outbox regclass DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'outbox_ack_array'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION outbox_release(ids bigint[], retry_after interval DEFAULT NULL,
                               error text DEFAULT NULL,
                               outbox regclass DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'outbox_release'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

-- delivered rows the recipient can never take: dead letters now
CREATE FUNCTION outbox_reject(ids bigint[], error text DEFAULT NULL,
                              outbox regclass DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'outbox_reject'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

-- dead letters back into the outbox, pending, with their ids
CREATE FUNCTION outbox_redrive(ids bigint[], outbox regclass DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'outbox_redrive'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

-- when the next scheduled row (of a recipient) falls due, for relays
-- without the worker
CREATE FUNCTION outbox_next_due(recipient text DEFAULT NULL,
                                outbox regclass DEFAULT NULL)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'outbox_next_due'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION outbox_reject(bigint[], text, regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_redrive(bigint[], regclass) FROM PUBLIC;
-- the worker's expiry sweep, by call (for a database no worker serves)
CREATE FUNCTION outbox_expire(max_rows integer DEFAULT NULL,
                              outbox regclass DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'outbox_expire'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION outbox_next_due(text, regclass) FROM PUBLIC;

-- the gap-safe cursor's fence (docs/ordered-delivery.md#cursors)
CREATE FUNCTION outbox_horizon(outbox regclass DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'outbox_horizon'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION outbox_horizon(regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_expire(integer, regclass) FROM PUBLIC;

CREATE FUNCTION outbox_reclaim(older_than interval DEFAULT '60 seconds',
                               max_rows integer DEFAULT NULL,
                               outbox regclass DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'outbox_reclaim'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION outbox_reclaim_recipient(recipient text,
                                         tenant_id text DEFAULT NULL,
                                         outbox regclass DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'outbox_reclaim_recipient'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION outbox_reassign(from_recipient text, to_recipient text,
                                outbox regclass DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'outbox_reassign'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION outbox_replay(recipient text, after_id bigint DEFAULT 0,
                              max_rows integer DEFAULT 100,
                              tenant_id text DEFAULT NULL,
                              outbox regclass DEFAULT NULL)
RETURNS SETOF delivery_outbox
AS 'MODULE_PATHNAME', 'outbox_replay'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION outbox_purge(older_than interval, outbox regclass DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'outbox_purge'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION outbox_stats(outbox regclass DEFAULT NULL,
                             OUT pending bigint,
                             OUT delivered bigint,
                             OUT acked bigint,
                             OUT oldest_pending_age interval,
                             OUT oldest_delivered_age interval,
                             OUT open_recipients bigint,
                             OUT dead bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'outbox_stats'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION outbox_enqueue_batch(recipients text[], kinds text[],
                                     payloads bytea[],
                                     tenant_ids text[] DEFAULT NULL,
                                     not_befores timestamptz[] DEFAULT NULL,
                                     expires_ats timestamptz[] DEFAULT NULL,
                                     dedup_keys text[] DEFAULT NULL,
                                     outbox regclass DEFAULT NULL)
RETURNS SETOF bigint
AS 'MODULE_PATHNAME', 'outbox_enqueue_batch'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION outbox_wait(timeout interval, recipient text DEFAULT NULL,
                            outbox regclass DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'outbox_wait'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

-- Counters since server start, from shared memory: a row per outbox (of
-- every database shared memory tracks).
CREATE FUNCTION outbox_activity(OUT datname text,
                                OUT outbox regclass,
                                OUT enqueued bigint,
                                OUT claimed bigint,
                                OUT acked bigint,
                                OUT released bigint,
                                OUT reclaimed bigint,
                                OUT purged bigint,
                                OUT notified bigint,
                                OUT notify_skipped bigint,
                                OUT handover_dropped bigint,
                                OUT dead_lettered bigint,
                                OUT redriven bigint,
                                OUT backlog_pending bigint,
                                OUT backlog_delivered bigint,
                                OUT stats_since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'outbox_activity'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;
CREATE VIEW delivery_outbox_activity AS
    SELECT * FROM outbox_activity();

-- Nothing is granted to PUBLIC: README shows the GRANTs per role.
REVOKE ALL ON FUNCTION outbox_enqueue(text, text, bytea, text, timestamptz, timestamptz, text, regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_claim(integer, text, text, regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_ack(bigint, text, regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_ack(bigint[], text, regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_release(bigint[], interval, text, regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_reclaim(interval, integer, regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_reclaim_recipient(text, text, regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_reassign(text, text, regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_replay(text, bigint, integer, text, regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_purge(interval, regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_stats(regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_enqueue_batch(text[], text[], bytea[], text[], timestamptz[], timestamptz[], text[], regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_wait(interval, text, regclass) FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_activity() FROM PUBLIC;
REVOKE ALL ON TABLE delivery_outbox_activity FROM PUBLIC;
