--
-- upgrade.sql: installing an old version and updating it gives exactly what a
-- fresh install of the default version gives, and keeps the rows
--
-- Written so that it stays meaningful, and its expected output stays the
-- same, as versions are added: it names no version but 1.0 (the first), and
-- prints the differences (none), never the objects or version names.  The
-- one exception is the section on the 1.1 -> 1.2 update, which recreated
-- the functions with a new last argument: the GRANTs a role had on the 1.1
-- functions must be carried to their successors.
--
\set VERBOSITY default
\set SHOW_CONTEXT never

-- Everything that makes up the installed extension, as text, under a label:
-- its member objects; each member function's signature, result, language,
-- volatility, strictness, parallel safety, SECURITY DEFINER, proconfig,
-- ACL, C symbol and comment; each member relation's kind, options, ACL,
-- row security, comment, columns (in order), constraints, indexes,
-- triggers (and whether they fire ALWAYS), rules, policies and view
-- definition; each member sequence's parameters; each member event
-- trigger's event, tags, state and function; the tables registered with
-- pg_extension_config_dump; the extension's own flags; the initial
-- privileges pg_dump goes by (pg_init_privs); the owners.  The fresh
-- install runs the default version's own install script where there is
-- one (delivery_outbox--1.2.sql for 1.2), so this also proves that script
-- makes what the update scripts make.
CREATE TEMP TABLE outbox_snap (label text, kind text, item text);
CREATE FUNCTION pg_temp.outbox_snapshot(label text) RETURNS bigint
LANGUAGE plpgsql AS $f$
DECLARE
    ext oid := (SELECT oid FROM pg_extension WHERE extname = 'delivery_outbox');
    n bigint;
BEGIN
    CREATE TEMP TABLE outbox_members AS
        SELECT classid, objid, objsubid FROM pg_depend
         WHERE refclassid = 'pg_extension'::regclass AND refobjid = ext
           AND deptype = 'e';

    INSERT INTO outbox_snap
    SELECT label, 'member', pg_describe_object(classid, objid, objsubid)
      FROM outbox_members;

    INSERT INTO outbox_snap
    SELECT label, 'extension',
           format('relocatable=%s schema=%s', e.extrelocatable,
                  e.extnamespace::regnamespace)
      FROM pg_extension e WHERE e.oid = ext;

    INSERT INTO outbox_snap
    SELECT label, 'config_dump', format('%s where=%L', c.tab::regclass, c.cond)
      FROM pg_extension e,
           unnest(e.extconfig, e.extcondition) AS c(tab, cond)
     WHERE e.oid = ext;

    INSERT INTO outbox_snap
    SELECT label, 'function',
           format('%s(%s) returns %s | lang=%s volatility=%s strict=%s '
                  'security_definer=%s leakproof=%s parallel=%s cost=%s '
                  'rows=%s kind=%s config=%s acl=%s symbol=%s library=%s '
                  'owner=%s comment=%L',
                  p.proname, pg_get_function_arguments(p.oid),
                  pg_get_function_result(p.oid), l.lanname, p.provolatile,
                  p.proisstrict, p.prosecdef, p.proleakproof, p.proparallel,
                  p.procost, p.prorows, p.prokind, p.proconfig, p.proacl,
                  p.prosrc, p.probin, pg_get_userbyid(p.proowner),
                  obj_description(p.oid, 'pg_proc'))
      FROM outbox_members m
      JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid
      JOIN pg_language l ON l.oid = p.prolang;

    CREATE TEMP TABLE outbox_rels AS
        SELECT c.* FROM outbox_members m
          JOIN pg_class c ON m.classid = 'pg_class'::regclass
                         AND c.oid = m.objid;

    INSERT INTO outbox_snap
    SELECT label, 'relation',
           format('%s kind=%s persistence=%s options=%s acl=%s '
                  'row_security=%s/%s replica_identity=%s owner=%s comment=%L',
                  c.relname, c.relkind, c.relpersistence, c.reloptions,
                  c.relacl, c.relrowsecurity, c.relforcerowsecurity,
                  c.relreplident, pg_get_userbyid(c.relowner),
                  obj_description(c.oid, 'pg_class'))
      FROM outbox_rels c;

    INSERT INTO outbox_snap
    SELECT label, 'column',
           format('%s #%s %s %s notnull=%s default=%s identity=%s '
                  'generated=%s collation=%s storage=%s compression=%s '
                  'statistics=%s acl=%s comment=%L',
                  c.relname,
                  row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum),
                  a.attname, format_type(a.atttypid, a.atttypmod),
                  a.attnotnull, pg_get_expr(d.adbin, d.adrelid),
                  a.attidentity, a.attgenerated, a.attcollation,
                  a.attstorage, a.attcompression, a.attstattarget,
                  a.attacl, col_description(c.oid, a.attnum))
      FROM outbox_rels c
      JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
                         AND NOT a.attisdropped
      LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
     WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f');

    INSERT INTO outbox_snap
    SELECT label, 'constraint',
           format('%s %s %s deferrable=%s/%s validated=%s local=%s '
                  'noinherit=%s', c.relname, k.conname,
                  pg_get_constraintdef(k.oid), k.condeferrable,
                  k.condeferred, k.convalidated, k.conislocal,
                  k.connoinherit)
      FROM outbox_rels c JOIN pg_constraint k ON k.conrelid = c.oid;

    INSERT INTO outbox_snap
    SELECT label, 'index',
           format('%s valid=%s primary=%s', pg_get_indexdef(i.indexrelid),
                  i.indisvalid, i.indisprimary)
      FROM outbox_rels c JOIN pg_index i ON i.indrelid = c.oid;

    INSERT INTO outbox_snap
    SELECT label, 'trigger',
           format('%s enabled=%s', pg_get_triggerdef(t.oid), t.tgenabled)
      FROM outbox_rels c JOIN pg_trigger t ON t.tgrelid = c.oid
     WHERE NOT t.tgisinternal;

    INSERT INTO outbox_snap
    SELECT label, 'rule', pg_get_ruledef(r.oid)
      FROM outbox_rels c JOIN pg_rewrite r ON r.ev_class = c.oid;

    INSERT INTO outbox_snap
    SELECT label, 'policy',
           format('%s %s cmd=%s permissive=%s roles=%s using=%s check=%s',
                  c.relname, p.polname, p.polcmd, p.polpermissive,
                  p.polroles::regrole[], pg_get_expr(p.polqual, p.polrelid),
                  pg_get_expr(p.polwithcheck, p.polrelid))
      FROM outbox_rels c JOIN pg_policy p ON p.polrelid = c.oid;

    INSERT INTO outbox_snap
    SELECT label, 'sequence',
           format('%s type=%s start=%s increment=%s min=%s max=%s cache=%s '
                  'cycle=%s owned_by=%s',
                  c.relname, s.seqtypid::regtype, s.seqstart,
                  s.seqincrement, s.seqmin, s.seqmax, s.seqcache,
                  s.seqcycle, pg_get_serial_sequence_owner.owner)
      FROM outbox_rels c
      JOIN pg_sequence s ON s.seqrelid = c.oid
      LEFT JOIN LATERAL (
          SELECT format('%s.%s', d.refobjid::regclass, a.attname) AS owner
            FROM pg_depend d
            JOIN pg_attribute a ON a.attrelid = d.refobjid
                               AND a.attnum = d.refobjsubid
           WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
             AND d.refclassid = 'pg_class'::regclass AND d.deptype = 'a'
      ) pg_get_serial_sequence_owner ON true;

    INSERT INTO outbox_snap
    SELECT label, 'type',
           format('%s type=%s category=%s acl=%s', t.oid::regtype,
                  t.typtype, t.typcategory, t.typacl)
      FROM outbox_members m
      JOIN pg_type t ON m.classid = 'pg_type'::regclass AND t.oid = m.objid;

    INSERT INTO outbox_snap
    SELECT label, 'view', format('%s %s', c.relname, pg_get_viewdef(c.oid))
      FROM outbox_rels c WHERE c.relkind IN ('v', 'm');

    INSERT INTO outbox_snap
    SELECT label, 'event trigger',
           format('%s on %s tags=%s enabled=%s function=%s', t.evtname,
                  t.evtevent, t.evttags, t.evtenabled,
                  t.evtfoid::regprocedure)
      FROM outbox_members m
      JOIN pg_event_trigger t ON m.classid = 'pg_event_trigger'::regclass
                             AND t.oid = m.objid;

    INSERT INTO outbox_snap
    SELECT label, 'init privs',
           format('%s %s privtype=%s initprivs=%s',
                  pg_describe_object(ip.classoid, ip.objoid, 0),
                  CASE WHEN ip.objsubid > 0
                       THEN (SELECT attname FROM pg_attribute
                              WHERE attrelid = ip.objoid
                                AND attnum = ip.objsubid) END,
                  ip.privtype, ip.initprivs)
      FROM pg_init_privs ip
     WHERE EXISTS (SELECT FROM outbox_members m
                    WHERE m.classid = ip.classoid AND m.objid = ip.objoid);

    DROP TABLE outbox_members, outbox_rels;
    SELECT count(*) INTO n FROM outbox_snap s WHERE s.label = outbox_snapshot.label;
    RETURN n;
END
$f$;

-- The differences between two labels, both ways.
CREATE FUNCTION pg_temp.outbox_diff(a text, b text)
RETURNS TABLE (side text, kind text, item text) LANGUAGE sql AS $f$
    (SELECT 'only ' || a, kind, item FROM outbox_snap WHERE label = a
     EXCEPT ALL
     SELECT 'only ' || a, kind, item FROM outbox_snap WHERE label = b)
    UNION ALL
    (SELECT 'only ' || b, kind, item FROM outbox_snap WHERE label = b
     EXCEPT ALL
     SELECT 'only ' || b, kind, item FROM outbox_snap WHERE label = a)
    ORDER BY 1, 2, 3
$f$;

-- The rows as text, and whether the extension is at the default version.
CREATE TEMP TABLE outbox_row_text (label text, id bigint, row text);
CREATE FUNCTION pg_temp.outbox_at_default() RETURNS boolean
LANGUAGE sql AS $f$
    SELECT e.extversion = a.default_version
      FROM pg_extension e JOIN pg_available_extensions a ON a.name = e.extname
     WHERE e.extname = 'delivery_outbox'
$f$;

--
-- Every version shipped can be updated to the default one.
--
SELECT coalesce(bool_and(p.path IS NOT NULL), true)
         AS every_version_reaches_default,
       count(*) FILTER (WHERE p.source = '1.0' AND p.path IS NOT NULL)
         = count(*) FILTER (WHERE p.source = '1.0') AS from_1_0
  FROM pg_available_extensions a
  JOIN pg_extension_update_paths('delivery_outbox') p
    ON p.target = a.default_version AND p.source <> p.target
 WHERE a.name = 'delivery_outbox';
SELECT count(*) >= 1 AS ships_1_0 FROM pg_available_extension_versions
 WHERE name = 'delivery_outbox' AND version = '1.0';

--
-- A fresh install of the default version: the reference
--
CREATE EXTENSION delivery_outbox;
SELECT pg_temp.outbox_at_default() AS fresh_at_default;
SELECT pg_temp.outbox_snapshot('fresh') > 20 AS fresh_captured;
SELECT count(DISTINCT kind) >= 8 AS fresh_kinds_captured
  FROM outbox_snap WHERE label = 'fresh';
DROP EXTENSION delivery_outbox;

--
-- 1.0, with rows in every state, then ALTER EXTENSION ... UPDATE
--
CREATE EXTENSION delivery_outbox VERSION '1.0';
SELECT extversion AS installed FROM pg_extension
 WHERE extname = 'delivery_outbox';
SELECT outbox_enqueue('agent:a', 'work', '\x01');
SELECT outbox_enqueue('agent:a', 'work', '\x02', 'tenant-1');
SELECT outbox_enqueue('agent:b', 'work', '\x03');
SELECT outbox_enqueue('agent:b', 'work', '\x04');
SELECT id FROM outbox_claim(2, 'agent:b');
SELECT outbox_ack(3);
SELECT id FROM outbox_claim(1, 'agent:a');
SELECT outbox_release(ARRAY[1]::bigint[]);
INSERT INTO outbox_row_text SELECT 'before', id, o::text FROM delivery_outbox o;

-- (the NOTICE when 1.0 is already the default would differ between versions)
SET client_min_messages = warning;
ALTER EXTENSION delivery_outbox UPDATE;
RESET client_min_messages;
SELECT pg_temp.outbox_at_default() AS updated_at_default;
SELECT pg_temp.outbox_snapshot('from 1.0') > 20 AS updated_captured;

-- the same extension as a fresh install: no difference either way
SELECT * FROM pg_temp.outbox_diff('fresh', 'from 1.0');

-- the rows came through the update untouched
-- (the seed's ten columns; 1.2 adds four of its own, NULL in every row)
INSERT INTO outbox_row_text SELECT 'after', id,
       (o.id, o.recipient, o.kind, o.tenant_id, o.payload, o.delivery_state, o.delivery_attempts, o.created_at, o.delivered_at, o.acked_at)::text
  FROM delivery_outbox o
 WHERE o.not_before IS NULL AND o.expires_at IS NULL AND o.dedup_key IS NULL AND o.last_error IS NULL;
SELECT count(*) AS rows_kept FROM outbox_row_text WHERE label = 'before';
SELECT b.id, b.row = a.row AS unchanged
  FROM outbox_row_text b FULL JOIN outbox_row_text a
    ON a.id = b.id AND a.label = 'after'
 WHERE b.label = 'before'
 ORDER BY b.id;
\i sql/include/outbox_rows.sql
SELECT id, recipient, tenant_id, delivery_state, delivery_attempts,
       has_delivered_at, has_acked_at
  FROM outbox_rows;

-- and keep moving through the state machine, which is still enforced
\set VERBOSITY sqlstate
UPDATE delivery_outbox SET delivery_state = 'pending' WHERE id = 3;
UPDATE delivery_outbox SET delivery_state = 'acked' WHERE id = 2;
\set VERBOSITY default
SELECT id, delivery_state, delivery_attempts FROM outbox_claim(10);
SELECT outbox_ack(ARRAY[1, 2, 4]::bigint[]);
SELECT outbox_enqueue('agent:c', 'work', '\x05');
SELECT pending, delivered, acked FROM outbox_stats();
DROP VIEW outbox_rows;
DROP EXTENSION delivery_outbox;

--
-- 1.0 again, with rows in every state, then one update at a time along the
-- path to the default version (1.0 -> 1.1 -> 1.2 -> ...): each step lands
-- on its version, and the end is the fresh install, rows untouched
--
CREATE TEMP TABLE outbox_steps AS
SELECT s.n, s.version
  FROM pg_extension_update_paths('delivery_outbox') p
  JOIN pg_available_extensions a ON a.name = 'delivery_outbox'
   AND p.target = a.default_version,
       unnest(string_to_array(p.path, '--')) WITH ORDINALITY AS s(version, n)
 WHERE p.source = '1.0';
SELECT count(*) >= 3 AS at_least_two_steps,
       bool_or(version = '1.1') AS through_1_1
  FROM outbox_steps;

CREATE EXTENSION delivery_outbox VERSION '1.0';
SELECT outbox_enqueue('agent:a', 'work', '\x01');
SELECT outbox_enqueue('agent:a', 'work', '\x02', 'tenant-1');
SELECT outbox_enqueue('agent:b', 'work', '\x03');
SELECT outbox_enqueue('agent:b', 'work', '\x04');
SELECT id FROM outbox_claim(2, 'agent:b');
SELECT outbox_ack(3);
SELECT id FROM outbox_claim(1, 'agent:a');
SELECT outbox_release(ARRAY[1]::bigint[]);
DELETE FROM outbox_row_text;
INSERT INTO outbox_row_text SELECT 'before', id, o::text FROM delivery_outbox o;
DO $$
DECLARE
    v text;
BEGIN
    FOR v IN SELECT version FROM outbox_steps WHERE n > 1 ORDER BY n
    LOOP
        EXECUTE format('ALTER EXTENSION delivery_outbox UPDATE TO %L', v);
        IF (SELECT extversion FROM pg_extension
             WHERE extname = 'delivery_outbox') <> v THEN
            RAISE EXCEPTION 'ALTER EXTENSION ... UPDATE TO % did not get there', v;
        END IF;
    END LOOP;
END
$$;
SELECT pg_temp.outbox_at_default() AS stepped_to_default;
SELECT pg_temp.outbox_snapshot('step by step') > 20 AS stepped_captured;
SELECT * FROM pg_temp.outbox_diff('fresh', 'step by step');
-- (the seed's ten columns; 1.2 adds four of its own, NULL in every row)
INSERT INTO outbox_row_text SELECT 'after', id,
       (o.id, o.recipient, o.kind, o.tenant_id, o.payload, o.delivery_state, o.delivery_attempts, o.created_at, o.delivered_at, o.acked_at)::text
  FROM delivery_outbox o
 WHERE o.not_before IS NULL AND o.expires_at IS NULL AND o.dedup_key IS NULL AND o.last_error IS NULL;
SELECT b.id, b.row = a.row AS unchanged
  FROM outbox_row_text b FULL JOIN outbox_row_text a
    ON a.id = b.id AND a.label = 'after'
 WHERE b.label = 'before'
 ORDER BY b.id;
SELECT count(*) AS rows_after FROM outbox_row_text WHERE label = 'after';
DROP EXTENSION delivery_outbox;

--
-- The 1.1 -> 1.2 update recreates every function with a trailing "outbox
-- regclass" argument (and outbox_activity() and its view with a new
-- column): a role's EXECUTE on a 1.1 function (with GRANT OPTION, or
-- PUBLIC's) and SELECT on the view are carried to their successors,
-- nothing more is granted, and the role's 1.1 calls keep working.
--
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_upgrade_producer;
DROP ROLE IF EXISTS regress_upgrade_admin;
RESET client_min_messages;
CREATE ROLE regress_upgrade_producer;
CREATE ROLE regress_upgrade_admin;
CREATE EXTENSION delivery_outbox VERSION '1.1';
GRANT EXECUTE ON FUNCTION outbox_enqueue(text, text, bytea, text),
                          outbox_claim(integer, text, text)
   TO regress_upgrade_producer;
GRANT EXECUTE ON FUNCTION outbox_ack(bigint, text), outbox_ack(bigint[], text)
   TO regress_upgrade_admin WITH GRANT OPTION;
GRANT EXECUTE ON FUNCTION outbox_stats() TO PUBLIC;
-- (1.2 recreates outbox_activity() and its view too, with a new column)
GRANT EXECUTE ON FUNCTION outbox_activity() TO regress_upgrade_admin;
GRANT SELECT ON delivery_outbox_activity TO regress_upgrade_admin;

-- the grants on the extension's functions, by signature (the owner's left
-- out)
CREATE FUNCTION pg_temp.outbox_grants()
RETURNS TABLE (function regprocedure, grantee text, grantable boolean)
LANGUAGE sql AS $f$
    SELECT p.oid::regprocedure,
           CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                ELSE a.grantee::regrole::text END,
           a.is_grantable
      FROM pg_depend d
      JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND p.oid = d.objid,
           aclexplode(p.proacl) a
     WHERE d.refclassid = 'pg_extension'::regclass
       AND d.refobjid = (SELECT oid FROM pg_extension
                          WHERE extname = 'delivery_outbox')
       AND d.deptype = 'e'
       AND a.grantee <> p.proowner AND a.privilege_type = 'EXECUTE'
     ORDER BY p.oid::regprocedure::text, 2
$f$;
SELECT * FROM pg_temp.outbox_grants();

ALTER EXTENSION delivery_outbox UPDATE TO '1.2';
SELECT extversion FROM pg_extension WHERE extname = 'delivery_outbox';
SELECT * FROM pg_temp.outbox_grants();
SELECT has_table_privilege('regress_upgrade_admin', 'delivery_outbox_activity',
                           'SELECT') AS admin_activity_view,
       has_table_privilege('regress_upgrade_producer', 'delivery_outbox_activity',
                           'SELECT') AS producer_activity_view;
-- the 1.1 signatures are gone
SELECT to_regprocedure('outbox_enqueue(text,text,bytea,text)') IS NULL AS old_enqueue_gone,
       to_regprocedure('outbox_claim(integer,text,text)') IS NULL AS old_claim_gone;
SELECT has_function_privilege('regress_upgrade_producer',
                              'outbox_enqueue(text,text,bytea,text,timestamptz,timestamptz,text,regclass)',
                              'EXECUTE') AS producer_enqueue,
       has_function_privilege('regress_upgrade_producer',
                              'outbox_claim(integer,text,text,regclass)',
                              'EXECUTE') AS producer_claim,
       has_function_privilege('regress_upgrade_producer',
                              'outbox_ack(bigint,text,regclass)',
                              'EXECUTE') AS producer_ack,
       has_function_privilege('regress_upgrade_admin',
                              'outbox_ack(bigint[],text,regclass)',
                              'EXECUTE WITH GRANT OPTION') AS admin_ack_grantable;
-- the role's 1.1 calls, unchanged
SET ROLE regress_upgrade_producer;
SELECT outbox_enqueue('agent:g', 'work', '\x01', 't1') AS id;
SELECT outbox_enqueue('agent:g', 'work', '\x02') AS id;
SELECT id, recipient, tenant_id, delivery_state FROM outbox_claim(10, 'agent:g', 't1');
SELECT id, recipient, delivery_state FROM outbox_claim(10);
SELECT pending, delivered, acked FROM outbox_stats();
\set VERBOSITY terse
SELECT outbox_ack(1);
\echo :SQLSTATE
\set VERBOSITY default
RESET ROLE;
SET ROLE regress_upgrade_admin;
SELECT outbox_ack(ARRAY[1, 2]::bigint[]) AS acked;
RESET ROLE;
DROP EXTENSION delivery_outbox;
DROP ROLE regress_upgrade_producer;
DROP ROLE regress_upgrade_admin;

--
-- Every version shipped, installed and updated to the default, is the same
-- as the fresh install (for 1.0 alone this repeats the above without rows)
--
DO $$
DECLARE
    v text;
BEGIN
    FOR v IN SELECT version FROM pg_available_extension_versions
              WHERE name = 'delivery_outbox' ORDER BY version
    LOOP
        EXECUTE format('CREATE EXTENSION delivery_outbox VERSION %L', v);
        SET LOCAL client_min_messages = warning;
        ALTER EXTENSION delivery_outbox UPDATE;
        RESET client_min_messages;
        IF NOT pg_temp.outbox_at_default() THEN
            RAISE EXCEPTION 'version % did not update to the default', v;
        END IF;
        PERFORM pg_temp.outbox_snapshot('version ' || v);
        DROP EXTENSION delivery_outbox;
    END LOOP;
END
$$;
SELECT count(DISTINCT label) >= 1 AS versions_checked
  FROM outbox_snap WHERE label LIKE 'version %';
SELECT d.*
  FROM (SELECT DISTINCT label FROM outbox_snap WHERE label LIKE 'version %') v,
       LATERAL pg_temp.outbox_diff('fresh', v.label) d;
