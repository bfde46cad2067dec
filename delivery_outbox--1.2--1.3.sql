/* delivery_outbox--1.2--1.3.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION delivery_outbox UPDATE TO '1.3'" to load this file. \quit

--
-- 1.3 (unreleased).  CREATE EXTENSION runs delivery_outbox--1.2.sql and then
-- this script; sql/upgrade.sql proves that every way to 1.3 ends alike.
--

--
-- outbox_grant_triggers(tbl): as in 1.2, and safe when two sessions make
-- outboxes at once.  Two GRANTs on one function update its pg_proc row;
-- the second of two concurrent ones fails with "tuple concurrently
-- updated" (XX000) instead of waiting.  A lock taken with LOCK TABLE (not
-- an advisory lock: only a relation lock makes this backend read the
-- catalogs afresh once granted) serializes the grants, and an owner that
-- already may execute the three functions is granted nothing.  SHARE
-- UPDATE EXCLUSIVE on the registry conflicts with itself, not with the
-- ROW EXCLUSIVE that registering an outbox takes, so holding it cannot
-- deadlock with a session that registered first.  Not for direct use.
--
CREATE OR REPLACE FUNCTION outbox_grant_triggers(tbl regclass)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    owner regrole;
BEGIN
    -- a NULL or missing table: 22004 or 42P01, not a broken statement
    PERFORM @extschema@.outbox_check_relation(tbl);
    SELECT relowner::regrole INTO owner FROM pg_class WHERE oid = tbl;
    LOCK TABLE @extschema@.delivery_outbox_registry IN SHARE UPDATE EXCLUSIVE MODE;
    IF has_function_privilege(owner, '@extschema@.outbox_state_guard()', 'EXECUTE')
       AND has_function_privilege(owner, '@extschema@.outbox_inserted()', 'EXECUTE')
       AND has_function_privilege(owner, '@extschema@.outbox_insert_statement()', 'EXECUTE')
    THEN
        RETURN;
    END IF;
    EXECUTE format('GRANT EXECUTE ON FUNCTION @extschema@.outbox_state_guard(),'
                   ' @extschema@.outbox_inserted(), @extschema@.outbox_insert_statement()'
                   ' TO %s', owner);
END
$$;

--
-- outbox_ack_claim(ids, max_rows, recipient, tenant_id, outbox): a relay's
-- round in one statement and one transaction: ack the rows of its last
-- batch (as outbox_ack(ids, recipient, outbox)), then claim the next (as
-- outbox_claim(max_rows, recipient, tenant_id, outbox)).  A relay's first
-- call passes '{}'.  One commit per batch instead of two.
--
CREATE FUNCTION outbox_ack_claim(ids bigint[], max_rows integer DEFAULT 100,
                                 recipient text DEFAULT NULL,
                                 tenant_id text DEFAULT NULL,
                                 outbox regclass DEFAULT NULL)
RETURNS SETOF delivery_outbox
AS 'MODULE_PATHNAME', 'outbox_ack_claim'
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION outbox_ack_claim(bigint[], integer, text, text, regclass) FROM PUBLIC;

--
-- Citus, Level 2 (docs/scale-out.md): an outbox distributed by tenant_id
-- and co-located with the business tables, so that each enqueue lands on
-- the worker node holding its tenant's rows.  Each shard is an outbox of
-- its own on the node that holds it, with a registry row there (origin
-- 'shard', the distributed table's settings copied): that node's
-- background worker sweeps it, its triggers notify from that node, and
-- relays there claim and ack by the shard's name.  The distributed table
-- itself takes enqueues only (the C functions refuse the rest, 0A000).
--
ALTER TABLE delivery_outbox_registry
    DROP CONSTRAINT delivery_outbox_registry_origin_check,
    ADD CONSTRAINT delivery_outbox_registry_origin_check
        CHECK (origin OPERATOR(pg_catalog.=)
               ANY ('{default,created,attached,shard}'::text[]));

-- outbox_distributed(tbl): whether Citus distributes tbl by hash (false
-- where Citus is not installed).  Not for direct use.
CREATE FUNCTION outbox_distributed(tbl regclass)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    result boolean := false;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition'
                ' WHERE logicalrelid OPERATOR(pg_catalog.=) $1'
                ' AND partmethod OPERATOR(pg_catalog.=) ''h'')'
           INTO result USING tbl;
    END IF;
    RETURN result;
END
$$;

REVOKE ALL ON FUNCTION outbox_distributed(regclass) FROM PUBLIC;

--
-- The settings of each distributed outbox, where every node reads them: a
-- Citus reference table, made by the first outbox_distribute() (Citus
-- writes it on every node in the distributing transaction).  Tables by
-- name, since an OID means nothing on another node.
--
-- outbox_register_local_shards(tbl): on any node, make every shard held
-- there of distributed outbox tbl (NULL: of every one) an outbox, with its
-- settings and its co-located dead-letter shard: a registry row (origin
-- 'shard').  Returns how many rows it made or changed.  The background
-- worker runs it at each sweep, and outbox_shards() before it lists:
-- shards made by a transaction that just committed, moved in by Citus's
-- rebalancer, or with changed settings become outboxes without anyone
-- having to say so.  Not for direct use.
--
CREATE FUNCTION outbox_register_local_shards(tbl regclass DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    setting record;
    sh record;
    logical regclass;
    dead regclass;
    nsp name;
    shard_rel regclass;
    dead_rel regclass;
    n integer := 0;
    changed integer;
BEGIN
    IF to_regclass('@extschema@.delivery_outbox_distributed') IS NULL
       OR to_regclass('pg_catalog.pg_dist_local_group') IS NULL THEN
        RETURN 0;
    END IF;
    FOR setting IN EXECUTE 'SELECT * FROM @extschema@.delivery_outbox_distributed ORDER BY outbox'
    LOOP
        logical := to_regclass(setting.outbox);
        dead := to_regclass(setting.dead);
        CONTINUE WHEN logical IS NULL OR dead IS NULL
            OR (tbl IS NOT NULL AND logical <> tbl)
            OR NOT @extschema@.outbox_distributed(logical);
        SELECT n2.nspname INTO nsp FROM pg_class c JOIN pg_namespace n2 ON n2.oid = c.relnamespace
         WHERE c.oid = logical;
        -- each shard placed on this node, and the dead-letter table's shard
        -- of the same hash range (co-located: on this node too)
        FOR sh IN EXECUTE
            'SELECT pg_catalog.shard_name($1, s.shardid) AS shard,'
            '       pg_catalog.shard_name($2, ds.shardid) AS dead_shard'
            '  FROM pg_catalog.pg_dist_shard s'
            '  JOIN pg_catalog.pg_dist_placement p ON p.shardid OPERATOR(pg_catalog.=) s.shardid'
            '  JOIN pg_catalog.pg_dist_shard ds ON ds.logicalrelid OPERATOR(pg_catalog.=) $2'
            '   AND ds.shardminvalue OPERATOR(pg_catalog.=) s.shardminvalue'
            ' WHERE s.logicalrelid OPERATOR(pg_catalog.=) $1'
            '   AND p.groupid OPERATOR(pg_catalog.=)'
            '       (SELECT groupid FROM pg_catalog.pg_dist_local_group)'
            ' ORDER BY s.shardid'
            USING logical, dead
        LOOP
            SELECT to_regclass(format('%I.%I', nsp, x[cardinality(x)]))
              INTO shard_rel FROM parse_ident(sh.shard) x;
            SELECT to_regclass(format('%I.%I', nsp, x[cardinality(x)]))
              INTO dead_rel FROM parse_ident(sh.dead_shard) x;
            -- not made yet (a placement being copied in) or without the
            -- state guard (made by hand): not an outbox
            CONTINUE WHEN shard_rel IS NULL OR dead_rel IS NULL
                OR NOT EXISTS (SELECT FROM pg_trigger
                                WHERE tgrelid = shard_rel
                                  AND tgfoid = '@extschema@.outbox_state_guard()'::regprocedure);
            -- read first: a pass that finds every shard as it should be
            -- writes (and locks) nothing, so that sweeps and relays calling
            -- outbox_shards() never wait on each other
            CONTINUE WHEN EXISTS (
                SELECT FROM @extschema@.delivery_outbox_registry r
                 WHERE r.outbox = shard_rel AND r.origin = 'shard'
                   AND (r.channel, r.dead, r.max_attempts, r.backoff_base,
                        r.backoff_max, r.ttl, r.retain_acked)
                       IS NOT DISTINCT FROM
                       (setting.channel, dead_rel, setting.max_attempts,
                        setting.backoff_base, setting.backoff_max, setting.ttl,
                        setting.retain_acked));
            INSERT INTO @extschema@.delivery_outbox_registry AS r
                   (outbox, origin, channel, dead, max_attempts, backoff_base,
                    backoff_max, ttl, retain_acked)
            VALUES (shard_rel, 'shard', setting.channel, dead_rel, setting.max_attempts,
                    setting.backoff_base, setting.backoff_max, setting.ttl,
                    setting.retain_acked)
            ON CONFLICT (outbox) DO UPDATE
               SET channel = excluded.channel, dead = excluded.dead,
                   max_attempts = excluded.max_attempts,
                   backoff_base = excluded.backoff_base,
                   backoff_max = excluded.backoff_max, ttl = excluded.ttl,
                   retain_acked = excluded.retain_acked
             WHERE r.origin = 'shard';
            GET DIAGNOSTICS changed = ROW_COUNT;
            IF changed > 0 THEN
                PERFORM @extschema@.outbox_invalidate(shard_rel);
                n := n + changed;
            END IF;
        END LOOP;
    END LOOP;
    RETURN n;
END
$$;

REVOKE ALL ON FUNCTION outbox_register_local_shards(regclass) FROM PUBLIC;

--
-- outbox_placements(tbl): where the shards of distributed outbox tbl are,
-- by Citus's metadata: each shard, its dead-letter shard, and the node
-- holding them.  Not for direct use.
--
CREATE FUNCTION outbox_placements(tbl regclass, dead regclass)
RETURNS TABLE (node_name text, node_port integer, shard text, dead_shard text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY EXECUTE
        'SELECT n.nodename::pg_catalog.text, n.nodeport,'
        '       pg_catalog.shard_name($1, s.shardid), pg_catalog.shard_name($2, ds.shardid)'
        '  FROM pg_catalog.pg_dist_shard s'
        '  JOIN pg_catalog.pg_dist_placement p ON p.shardid OPERATOR(pg_catalog.=) s.shardid'
        '  JOIN pg_catalog.pg_dist_node n ON n.groupid OPERATOR(pg_catalog.=) p.groupid'
        '  LEFT JOIN pg_catalog.pg_dist_shard ds ON ds.logicalrelid OPERATOR(pg_catalog.=) $2'
        '   AND ds.shardminvalue OPERATOR(pg_catalog.=) s.shardminvalue'
        ' WHERE s.logicalrelid OPERATOR(pg_catalog.=) $1'
        ' ORDER BY s.shardminvalue::pg_catalog.int4, n.nodeport'
        USING tbl, dead;
END
$$;

REVOKE ALL ON FUNCTION outbox_placements(regclass, regclass) FROM PUBLIC;

--
-- outbox_share_settings(tbl): distributed outbox tbl's settings (its
-- registry row) written to delivery_outbox_distributed, made first (a
-- reference table) where missing.  Each node registers its shards once
-- the calling transaction has committed (outbox_register_local_shards: its
-- background worker at its next sweep, or the first outbox_shards()
-- there; not before: the shards a transaction makes, and its writes, are
-- invisible to any other).  Not for direct use.
--
CREATE FUNCTION outbox_share_settings(tbl regclass)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    reg record;
BEGIN
    IF to_regclass('@extschema@.delivery_outbox_distributed') IS NULL THEN
        CREATE TABLE @extschema@.delivery_outbox_distributed (
            outbox        text PRIMARY KEY,
            dead          text NOT NULL,
            channel       text,
            max_attempts  integer,
            backoff_base  interval NOT NULL,
            backoff_max   interval NOT NULL,
            ttl           interval,
            retain_acked  interval
        );
        COMMENT ON TABLE @extschema@.delivery_outbox_distributed IS
            'the settings of each outbox distributed by Citus, on every node';
        REVOKE ALL ON TABLE @extschema@.delivery_outbox_distributed FROM PUBLIC;
        PERFORM pg_catalog.create_reference_table('@extschema@.delivery_outbox_distributed');
    END IF;
    SELECT * INTO reg FROM @extschema@.delivery_outbox_registry x WHERE x.outbox = tbl;
    INSERT INTO @extschema@.delivery_outbox_distributed AS d
    VALUES (tbl::text, reg.dead::text, reg.channel, reg.max_attempts, reg.backoff_base,
            reg.backoff_max, reg.ttl, reg.retain_acked)
    ON CONFLICT (outbox) DO UPDATE
       SET dead = excluded.dead, channel = excluded.channel,
           max_attempts = excluded.max_attempts, backoff_base = excluded.backoff_base,
           backoff_max = excluded.backoff_max, ttl = excluded.ttl,
           retain_acked = excluded.retain_acked;
END
$$;

REVOKE ALL ON FUNCTION outbox_share_settings(regclass) FROM PUBLIC;

-- A distributed outbox's settings changed (outbox_configure()): shared
-- with the nodes, which apply them at their next sweep; ordered delivery,
-- a new channel and a detach refused (0A000).
CREATE FUNCTION outbox_registry_changed()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        -- a dropped table's row goes (outbox_table_dropped): only detach
        IF OLD.origin <> 'shard' AND EXISTS (SELECT FROM pg_class WHERE oid = OLD.outbox)
           AND @extschema@.outbox_distributed(OLD.outbox) THEN
            RAISE EXCEPTION 'a distributed outbox cannot be detached'
                USING ERRCODE = 'feature_not_supported',
                      HINT = format('undistribute_table(%L) first.', OLD.outbox);
        END IF;
        RETURN NULL;
    END IF;
    IF NEW.origin <> 'shard' AND @extschema@.outbox_distributed(NEW.outbox) THEN
        -- each shard's triggers carry the channel, made by Citus from the
        -- table's when it distributed it
        IF NEW.channel IS DISTINCT FROM OLD.channel THEN
            RAISE EXCEPTION 'the channel of a distributed outbox cannot change'
                USING ERRCODE = 'feature_not_supported',
                      DETAIL = format('Outbox %s is distributed by Citus: each shard''s triggers carry the channel it had then.', NEW.outbox),
                      HINT = 'Set the channel before outbox_distribute().';
        END IF;
        IF NEW.ordered THEN
            RAISE EXCEPTION 'a distributed outbox cannot be ordered'
                USING ERRCODE = 'feature_not_supported',
                      DETAIL = format('Outbox %s is distributed by Citus: ordered claims read one index of the whole table, and it has one per shard.', NEW.outbox);
        END IF;
        PERFORM @extschema@.outbox_share_settings(NEW.outbox);
    END IF;
    RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION outbox_registry_changed() FROM PUBLIC;

CREATE TRIGGER delivery_outbox_registry_changed
    AFTER UPDATE OR DELETE ON delivery_outbox_registry
    FOR EACH ROW EXECUTE FUNCTION outbox_registry_changed();

--
-- outbox_distribute(tbl, colocate_with, shard_count): distribute outbox
-- tbl (made by outbox_create() or outbox_attach(), on a Citus coordinator)
-- and its dead-letter table by tenant_id, co-located with colocate_with
-- (a table distributed by a text column; NULL: Citus's default
-- co-location), and make each shard an outbox on the node holding it.
-- What Citus requires, done first as the table's owner: tenant_id NOT NULL
-- (rows without one: 23502, nothing changed), the primary keys (tenant_id,
-- id), the dedup keys unique per tenant.  Ids stay unique across nodes:
-- Citus draws them from the coordinator's sequence, and a worker node's
-- own inserts from its range of it.  Each node makes its shards outboxes
-- once this commits (outbox_register_local_shards: at its worker's next
-- sweep, or at the first outbox_shards() there).  Called again on a
-- distributed outbox, it shares its settings afresh and changes nothing
-- else.  Returns each shard and
-- its node.  The caller must own the table.  Ordered and partitioned
-- outboxes are refused (0A000).
--
CREATE FUNCTION outbox_distribute(tbl regclass, colocate_with regclass DEFAULT NULL,
                                  shard_count integer DEFAULT NULL)
RETURNS TABLE (node_name text, node_port integer, shard text, dead_shard text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    reg record;
    pk name;
    dead_pk name;
    dedup name;
    unsafe text;
    res record;
BEGIN
    PERFORM @extschema@.outbox_check_relation(tbl);
    IF NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') THEN
        RAISE EXCEPTION 'Citus is not installed in this database'
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'CREATE EXTENSION citus on a Citus coordinator first.';
    END IF;
    IF tbl = '@extschema@.delivery_outbox'::regclass THEN
        RAISE EXCEPTION 'the extension''s own table cannot be distributed'
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Make an outbox with outbox_create() and distribute that one.';
    END IF;
    SELECT * INTO reg FROM @extschema@.delivery_outbox_registry r
     WHERE r.outbox = tbl AND r.origin = ANY ('{created,attached}');
    IF NOT FOUND THEN
        RAISE EXCEPTION 'relation % is not an outbox', tbl
            USING ERRCODE = 'wrong_object_type',
                  HINT = 'Make it one with outbox_create() or outbox_attach().';
    END IF;
    PERFORM @extschema@.outbox_require_owner(tbl);
    IF @extschema@.outbox_distributed(tbl) THEN
        PERFORM @extschema@.outbox_share_settings(tbl);
        RETURN QUERY SELECT * FROM @extschema@.outbox_placements(tbl, reg.dead);
        RETURN;
    END IF;
    IF reg.ordered THEN
        RAISE EXCEPTION 'an ordered outbox cannot be distributed'
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = format('Outbox %s is ordered: its claims read one index of the whole table, and a distributed table has one per shard.', tbl);
    END IF;
    IF reg.partition_rows IS NOT NULL
       OR (SELECT relkind FROM pg_class WHERE oid = tbl) = 'p' THEN
        RAISE EXCEPTION 'a partitioned outbox cannot be distributed'
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = format('Outbox %s is partitioned by id range; Citus distributes a table by tenant_id.', tbl);
    END IF;
    IF reg.dead IS NULL THEN
        RAISE EXCEPTION 'outbox % has no dead-letter table', tbl
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Its dead-letter table was dropped: detach the outbox and attach it again to recreate it.';
    END IF;
    -- colocate_with: a distributed table (Citus checks the column's type)
    IF colocate_with IS NOT NULL AND NOT @extschema@.outbox_distributed(colocate_with) THEN
        RAISE EXCEPTION 'table % is not distributed by Citus', colocate_with
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF shard_count IS NOT NULL AND shard_count < 1 THEN
        RAISE EXCEPTION 'shard_count must be positive'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF @extschema@.outbox_run_as_owner(
           tbl, format('SELECT EXISTS (SELECT FROM %s WHERE tenant_id IS NULL)', tbl))::boolean THEN
        RAISE EXCEPTION 'outbox % has rows without a tenant_id', tbl
            USING ERRCODE = 'not_null_violation',
                  DETAIL = 'A distributed outbox places each row by its tenant_id.';
    END IF;
    SELECT conname INTO pk FROM pg_constraint WHERE conrelid = tbl AND contype = 'p';
    SELECT conname INTO dead_pk FROM pg_constraint WHERE conrelid = reg.dead AND contype = 'p';
    SELECT c.relname INTO dedup FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
     WHERE i.indrelid = tbl AND i.indisunique
       AND pg_get_indexdef(i.indexrelid) ~ '\(recipient, dedup_key\) WHERE \(dedup_key IS NOT NULL\)$';
    -- the keys Citus requires, as the owner (every step that builds over
    -- the table's rows runs its code: index expressions, CHECKs)
    PERFORM @extschema@.outbox_run_as_owner(tbl,
        format('ALTER TABLE %s ALTER COLUMN tenant_id SET NOT NULL', tbl)
        || CASE WHEN pk IS NULL THEN '' ELSE format(', DROP CONSTRAINT %I', pk) END
        || format(', ADD CONSTRAINT %I PRIMARY KEY (tenant_id, id)',
                  coalesce(pk, left((SELECT relname FROM pg_class WHERE oid = tbl), 58) || '_pkey')));
    IF dedup IS NOT NULL THEN
        PERFORM @extschema@.outbox_run_as_owner(tbl,
            format('DROP INDEX %I.%I', (SELECT n.nspname FROM pg_class c
                                         JOIN pg_namespace n ON n.oid = c.relnamespace
                                        WHERE c.oid = tbl), dedup));
        PERFORM @extschema@.outbox_run_as_owner(tbl,
            format('CREATE UNIQUE INDEX %I ON %s (tenant_id, recipient, dedup_key)'
                   ' WHERE dedup_key IS NOT NULL', dedup, tbl));
    END IF;
    PERFORM @extschema@.outbox_run_as_owner(reg.dead,
        format('ALTER TABLE %s ALTER COLUMN tenant_id SET NOT NULL', reg.dead)
        || CASE WHEN dead_pk IS NULL THEN '' ELSE format(', DROP CONSTRAINT %I', dead_pk) END
        || format(', ADD CONSTRAINT %I PRIMARY KEY (tenant_id, id)',
                  coalesce(dead_pk, left((SELECT relname FROM pg_class WHERE oid = reg.dead), 58) || '_pkey')));
    -- the shards' triggers are made on the worker nodes as the owner, who
    -- must be able to execute their functions there too (outbox_create()
    -- granted it on this node only)
    FOR res IN EXECUTE
        'SELECT nodename, nodeport, success, result'
        '  FROM pg_catalog.run_command_on_workers($1)'
        USING format('GRANT EXECUTE ON FUNCTION @extschema@.outbox_state_guard(),'
                     ' @extschema@.outbox_inserted(), @extschema@.outbox_insert_statement() TO %I',
                     (SELECT rolname FROM pg_class c JOIN pg_roles o ON o.oid = c.relowner
                       WHERE c.oid = tbl))
    LOOP
        IF NOT res.success THEN
            RAISE EXCEPTION 'could not grant the trigger functions to the owner of % on %:%',
                            tbl, res.nodename, res.nodeport
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = res.result,
                      HINT = 'Install delivery_outbox on every node (CREATE EXTENSION on the coordinator does it for the nodes added before).';
        END IF;
    END LOOP;
    -- Citus refuses a table with triggers unless told they are safe: ours
    -- run on each shard, on its node, and touch that shard alone
    unsafe := current_setting('citus.enable_unsafe_triggers');
    PERFORM set_config('citus.enable_unsafe_triggers', 'on', true);
    PERFORM @extschema@.outbox_run_as_owner(tbl,
        format('SELECT pg_catalog.create_distributed_table(%L, %L, colocate_with => %L%s)',
               tbl, 'tenant_id', coalesce(colocate_with::text, 'default'),
               CASE WHEN shard_count IS NULL THEN ''
                    ELSE format(', shard_count => %s', shard_count) END));
    PERFORM @extschema@.outbox_run_as_owner(reg.dead,
        format('SELECT pg_catalog.create_distributed_table(%L, %L, colocate_with => %L)',
               reg.dead, 'tenant_id', tbl));
    PERFORM set_config('citus.enable_unsafe_triggers', unsafe, true);
    PERFORM @extschema@.outbox_invalidate(tbl);
    PERFORM @extschema@.outbox_share_settings(tbl);
    RETURN QUERY SELECT * FROM @extschema@.outbox_placements(tbl, reg.dead);
END
$$;

REVOKE ALL ON FUNCTION outbox_distribute(regclass, regclass, integer) FROM PUBLIC;

--
-- outbox_shards(tbl): on a worker node, the shards of distributed outbox
-- tbl held there, each an outbox a relay claims from and acks to by name
-- (outbox => shard), registered first where not yet.  Empty on a node
-- that holds none (the coordinator).
--
CREATE FUNCTION outbox_shards(tbl regclass)
RETURNS SETOF regclass
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    nsp name;
BEGIN
    PERFORM @extschema@.outbox_check_relation(tbl);
    IF to_regclass('pg_catalog.pg_dist_shard') IS NULL THEN
        RETURN;
    END IF;
    -- shards this node has not registered yet (made or moved in since)
    PERFORM @extschema@.outbox_register_local_shards(tbl);
    SELECT n.nspname INTO nsp FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = tbl;
    -- tbl's shards by Citus's names (in tbl's schema), those registered here
    RETURN QUERY EXECUTE
        'SELECT r.outbox FROM pg_catalog.pg_dist_shard s'
        ' CROSS JOIN LATERAL pg_catalog.parse_ident(pg_catalog.shard_name(s.logicalrelid, s.shardid)) x'
        ' JOIN @extschema@.delivery_outbox_registry r'
        '   ON r.outbox OPERATOR(pg_catalog.=)'
        '      pg_catalog.to_regclass(pg_catalog.format(''%I.%I'', $2, x[pg_catalog.cardinality(x)]))'
        ' WHERE s.logicalrelid OPERATOR(pg_catalog.=) $1'
        '   AND r.origin OPERATOR(pg_catalog.=) ''shard'''
        ' ORDER BY s.shardminvalue::pg_catalog.int4'
        USING tbl, nsp;
END
$$;

REVOKE ALL ON FUNCTION outbox_shards(regclass) FROM PUBLIC;
