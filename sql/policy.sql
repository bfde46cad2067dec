--
-- policy.sql: the delivery policy (1.2, issue 12) on the default outbox and
-- on one made by outbox_create: the settings max_attempts, backoff_base,
-- backoff_max and ttl (outbox_configure, delivery_outbox_tables); the
-- columns not_before, expires_at, dedup_key and last_error; the new
-- arguments of outbox_enqueue, outbox_enqueue_batch and outbox_release;
-- claims that never hand out a row before not_before or at/after its
-- expiry, due delayed rows first; dead letters in <table>_dead,
-- outbox_reject, outbox_redrive, outbox_stats.dead; outbox_next_due and
-- outbox_wait (polling, no preload) with delayed rows; dedup_key; every bad
-- input with its SQLSTATE and nothing changed.
--
-- Each bad call shows its message and then its SQLSTATE (psql's :SQLSTATE,
-- 00000 had it succeeded); the look at the outbox after it shows that
-- nothing changed.  Rows are shown by label (the payload as text), never
-- by id: a dedup hit may or may not consume an id, depending on the insert
-- path (this suite also runs with delivery_outbox.direct_insert = off).
-- Times are printed only as facts about them, relative to now().  The worker,
-- its timing and the activity counters are in t/015_policy.pl; the races in
-- specs/iso_dedup.spec.
--
CREATE EXTENSION delivery_outbox;

\set VERBOSITY default
\set SHOW_CONTEXT never

CREATE SCHEMA tenant_p;
SELECT outbox_create('tenant_p');
CREATE TABLE not_an_outbox (id bigint);

-- The companion table of dead letters of outbox t: <table>_dead, same schema.
CREATE FUNCTION dead_of(t regclass) RETURNS regclass
LANGUAGE sql STABLE AS $f$
    SELECT to_regclass(format('%I.%I', n.nspname, c.relname || '_dead'))
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = t
$f$;

-- An outbox's rows, one line in id order, each label:state/attempts, then
-- facts: nb+/nb- (not_before in the future/past), exp+/exp- (expires_at in
-- the future/past), the dedup_key and the last_error.
CREATE FUNCTION rows_of(t regclass) RETURNS text
LANGUAGE plpgsql AS $f$
DECLARE
    r text;
BEGIN
    EXECUTE format($q$
        SELECT coalesce(string_agg(
                 convert_from(payload, 'UTF8') || ':' || delivery_state || '/'
                 || delivery_attempts
                 || CASE WHEN not_before IS NULL THEN ''
                         WHEN not_before > now() THEN ' nb+' ELSE ' nb-' END
                 || CASE WHEN expires_at IS NULL THEN ''
                         WHEN expires_at > now() THEN ' exp+' ELSE ' exp-' END
                 || coalesce(' key=' || dedup_key, '')
                 || coalesce(' err=' || last_error, ''),
                 ', ' ORDER BY id), '-')
          FROM %s$q$, t) INTO r;
    RETURN r;
END
$f$;

-- Its dead letters, one line in id order: label:dead_reason/attempts, the
-- dedup_key and the last_error.
CREATE FUNCTION dead_rows_of(t regclass) RETURNS text
LANGUAGE plpgsql AS $f$
DECLARE
    r text;
BEGIN
    IF dead_of(t) IS NULL THEN
        RETURN 'no dead table';
    END IF;
    EXECUTE format($q$
        SELECT coalesce(string_agg(
                 convert_from(payload, 'UTF8') || ':' || dead_reason || '/'
                 || delivery_attempts
                 || coalesce(' key=' || dedup_key, '')
                 || coalesce(' err=' || last_error, ''),
                 ', ' ORDER BY id), '-')
          FROM %s$q$, dead_of(t)) INTO r;
    RETURN r;
END
$f$;

-- The ids of the rows with these labels, in the outbox or among its dead
-- letters (a dead letter keeps its id), ascending.
CREATE FUNCTION ids(t regclass, VARIADIC labels text[]) RETURNS bigint[]
LANGUAGE plpgsql AS $f$
DECLARE
    r bigint[];
BEGIN
    EXECUTE format($q$
        SELECT coalesce(array_agg(id ORDER BY id), '{}')
          FROM (SELECT id, payload FROM %s
                UNION ALL
                SELECT id, payload FROM %s) s
         WHERE convert_from(payload, 'UTF8') = ANY ($1)$q$,
                   t, dead_of(t)) INTO r USING labels;
    RETURN r;
END
$f$;

-- The labels a claim returned, in label order.
CREATE FUNCTION labels(VARIADIC p bytea[]) RETURNS text
LANGUAGE sql IMMUTABLE AS $f$
    SELECT coalesce(string_agg(convert_from(x, 'UTF8'), ',' ORDER BY 1), '-')
      FROM unnest(p) x
$f$;

CREATE VIEW dflt AS
SELECT rows_of('delivery_outbox') AS rows, dead_rows_of('delivery_outbox') AS dead;
CREATE VIEW tnt AS
SELECT rows_of('tenant_p.delivery_outbox') AS rows,
       dead_rows_of('tenant_p.delivery_outbox') AS dead;
CREATE VIEW settings AS
SELECT outbox, max_attempts, backoff_base, backoff_max, ttl
  FROM delivery_outbox_tables
 ORDER BY outbox::text COLLATE "C";

---------------------------------------------------------------------------
-- The shape: columns, companion tables, the dedup index, settings,
-- signatures
---------------------------------------------------------------------------

-- four nullable columns of the extension's own on every outbox
SELECT a.attrelid::regclass AS outbox, a.attname,
       format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull
  FROM pg_attribute a
 WHERE a.attrelid IN ('delivery_outbox'::regclass, 'tenant_p.delivery_outbox'::regclass)
   AND a.attname IN ('not_before', 'expires_at', 'dedup_key', 'last_error')
   AND NOT a.attisdropped
 ORDER BY a.attrelid::regclass::text COLLATE "C", a.attnum;

-- <table>_dead in the same schema, for the default outbox and a created one:
-- the fourteen columns, dead_at and dead_reason
SELECT dead_of('delivery_outbox') AS default_dead,
       dead_of('tenant_p.delivery_outbox') AS created_dead;
SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type
  FROM pg_attribute a
 WHERE a.attrelid = dead_of('delivery_outbox') AND a.attnum > 0
   AND NOT a.attisdropped
 ORDER BY a.attname COLLATE "C";
-- the created outbox's companion has the same columns and types
SELECT a.attname, format_type(a.atttypid, a.atttypmod)
  FROM pg_attribute a
 WHERE a.attrelid = dead_of('delivery_outbox') AND a.attnum > 0 AND NOT a.attisdropped
EXCEPT
SELECT a.attname, format_type(a.atttypid, a.atttypmod)
  FROM pg_attribute a
 WHERE a.attrelid = dead_of('tenant_p.delivery_outbox') AND a.attnum > 0
   AND NOT a.attisdropped;
SELECT count(*) AS created_dead_columns
  FROM pg_attribute a
 WHERE a.attrelid = dead_of('tenant_p.delivery_outbox') AND a.attnum > 0
   AND NOT a.attisdropped;

-- dedup_key is unique per (recipient, dedup_key), by a partial unique index
SELECT i.indrelid::regclass AS outbox, i.indisunique,
       i.indpred IS NOT NULL AS partial,
       array(SELECT attname FROM pg_attribute
              WHERE attrelid = i.indrelid AND attnum = ANY (i.indkey)
              ORDER BY array_position(i.indkey::int2[], attnum)) AS columns
  FROM pg_index i
 WHERE i.indrelid IN ('delivery_outbox'::regclass, 'tenant_p.delivery_outbox'::regclass)
   AND i.indkey::int2[] @> ARRAY[(SELECT attnum FROM pg_attribute
                                   WHERE attrelid = i.indrelid
                                     AND attname = 'dedup_key')]
 ORDER BY i.indrelid::regclass::text COLLATE "C";

-- the settings and their defaults (1.1 behaviour): unlimited attempts, no
-- backoff, a cap of one hour, no ttl
SELECT * FROM settings;

-- outbox_stats() ends in "dead"
SELECT * FROM outbox_stats();
SELECT * FROM outbox_stats('tenant_p.delivery_outbox');

-- outbox_activity's view gains dead_lettered and redriven after
-- handover_dropped (the counters themselves need the preload: t/015)
SELECT attname FROM pg_attribute
 WHERE attrelid = 'delivery_outbox_activity'::regclass AND attnum > 0
 ORDER BY attnum;

-- the signatures, argument names included (callers use named notation);
-- "= NULL" stands for DEFAULT NULL
\x on
SELECT p.proname AS function,
       regexp_replace(pg_get_function_arguments(p.oid),
                      ' DEFAULT NULL::[a-z ]+(\[\])?', ' = NULL', 'g') AS arguments,
       pg_get_function_result(p.oid) AS result
  FROM pg_proc p
 WHERE p.pronamespace = 'public'::regnamespace
   AND p.proname IN ('outbox_enqueue', 'outbox_enqueue_batch', 'outbox_release',
                     'outbox_reject', 'outbox_redrive', 'outbox_next_due',
                     'outbox_expire', 'outbox_configure')
 ORDER BY p.proname, p.oid::regprocedure::text;
\x off
-- the new functions are, like every other, SECURITY DEFINER with a pinned
-- search_path, not STRICT, and granted to nobody
SELECT p.proname, p.prosecdef, p.proisstrict, p.provolatile, p.proconfig,
       p.proacl IS NOT NULL
         AND NOT EXISTS (SELECT FROM aclexplode(p.proacl) a
                          WHERE a.grantee <> p.proowner) AS owner_only
  FROM pg_proc p
 WHERE p.pronamespace = 'public'::regnamespace
   AND p.proname IN ('outbox_reject', 'outbox_redrive', 'outbox_next_due',
                     'outbox_expire')
 ORDER BY 1;

---------------------------------------------------------------------------
-- outbox_configure: the four settings, per outbox; NULL leaves a setting
---------------------------------------------------------------------------
SELECT outbox_configure('delivery_outbox', max_attempts => 3);
SELECT * FROM settings;
SELECT outbox_configure('delivery_outbox', backoff_base => '2 seconds',
                        backoff_max => '1 minute');
SELECT outbox_configure('tenant_p.delivery_outbox', ttl => '1 day', max_attempts => 5);
SELECT * FROM settings;
-- NULL (and leaving an argument out) changes nothing
SELECT outbox_configure('delivery_outbox');
SELECT outbox_configure('delivery_outbox', max_attempts => NULL, backoff_base => NULL,
                        backoff_max => NULL, ttl => NULL);
SELECT outbox_configure('tenant_p.delivery_outbox', channel => NULL, ttl => NULL);
SELECT * FROM settings;
-- the channel and the policy are set independently
SELECT outbox_configure('tenant_p.delivery_outbox', channel => 'tenant_p_chan');
SELECT outbox_configure('tenant_p.delivery_outbox', backoff_max => '2 hours');
SELECT outbox, channel, channel_is_default, max_attempts, backoff_max, ttl
  FROM delivery_outbox_tables ORDER BY outbox::text COLLATE "C";
SELECT outbox_configure('tenant_p.delivery_outbox', channel => '');
-- a rolled-back configure leaves the settings as they were
BEGIN;
SELECT outbox_configure('delivery_outbox', max_attempts => 9, ttl => '1 minute');
ROLLBACK;
SELECT * FROM settings;
-- back to the defaults: max_attempts => 0, backoff_base => '0', ttl => '0'
-- (and backoff_max set to its default, one hour)
SELECT outbox_configure('delivery_outbox', max_attempts => 0, backoff_base => '0',
                        backoff_max => '1 hour', ttl => '0');
SELECT outbox_configure('tenant_p.delivery_outbox', max_attempts => 0, ttl => '0 seconds',
                        backoff_max => '1 hour');
SELECT * FROM settings;

-- Bad settings: 22023, and no setting changes, not even the good ones
-- given in the same call.
SELECT outbox_configure('delivery_outbox', max_attempts => 4, ttl => '1 hour');
SELECT * FROM settings;
SELECT outbox_configure('delivery_outbox', max_attempts => -1);
\echo :SQLSTATE
SELECT outbox_configure('delivery_outbox', backoff_base => '-1 second');
\echo :SQLSTATE
SELECT outbox_configure('delivery_outbox', backoff_max => '-1 second');
\echo :SQLSTATE
SELECT outbox_configure('delivery_outbox', ttl => '-1 second');
\echo :SQLSTATE
SELECT outbox_configure('delivery_outbox', max_attempts => 7, ttl => '-1 day');
\echo :SQLSTATE
SELECT outbox_configure('delivery_outbox', ttl => '2 hours', backoff_base => '-0.001 s');
\echo :SQLSTATE
SELECT outbox_configure('tenant_p.delivery_outbox', max_attempts => -5);
\echo :SQLSTATE
SELECT outbox_configure('tenant_p.delivery_outbox', backoff_base => '1 s', ttl => '-1 s');
\echo :SQLSTATE
SELECT * FROM settings;
-- not an outbox: 42809
SELECT outbox_configure('not_an_outbox', max_attempts => 2);
\echo :SQLSTATE
SELECT * FROM settings;
\set VERBOSITY sqlstate
SELECT outbox_configure('delivery_outbox', max_attempts => -1);
SELECT outbox_configure('tenant_p.delivery_outbox', ttl => '-1 s');
\set VERBOSITY default
SELECT outbox_configure('delivery_outbox', max_attempts => 0, ttl => '0');
SELECT * FROM settings;

---------------------------------------------------------------------------
-- The new columns through outbox_enqueue, outbox_enqueue_batch and a plain
-- INSERT; claims and not_before/expires_at
---------------------------------------------------------------------------
SELECT outbox_enqueue('agent:c', 'work', 'c1') IS NOT NULL AS enqueued;
SELECT outbox_enqueue('agent:c', 'work', 'c2', NULL, now() + '1 hour') IS NOT NULL AS enqueued;
SELECT outbox_enqueue('agent:c', 'work', 'c3', not_before => now() - interval '1 second',
                      expires_at => now() + '1 hour') IS NOT NULL AS enqueued;
SELECT outbox_enqueue('agent:c', 'work', 'c4', 't1', expires_at => now() + '1 hour',
                      dedup_key => 'k-c4') IS NOT NULL AS enqueued;
SELECT count(*) FROM outbox_enqueue_batch(
    ARRAY['agent:c', 'agent:c', 'agent:c'], ARRAY['work', 'work', 'work'],
    ARRAY['c5', 'c6', 'c7']::bytea[],
    not_befores => ARRAY[now() + '1 hour', NULL, now() - interval '1 second'],
    expires_ats => ARRAY[NULL, now() + '1 hour', NULL],
    dedup_keys => ARRAY['k-c5', NULL, 'k-c7']);
INSERT INTO delivery_outbox (recipient, kind, payload, not_before, expires_at, dedup_key)
VALUES ('agent:c', 'work', 'c8', now() + '1 hour', now() + '2 hours', 'k-c8'),
       ('agent:c', 'work', 'c9', NULL, now() - interval '1 second', NULL);
-- an expires_at already past (and no not_before) is accepted: a row never
-- handed out, nothing for outbox_wait either
SELECT outbox_enqueue('agent:cx', 'work', 'c10', expires_at => now() - interval '1 second')
       IS NOT NULL AS enqueued;
SELECT outbox_wait('0', 'agent:cx') AS found_expired;
SELECT * FROM dflt;
-- the claims take neither a row before its not_before (c2, c5, c8) nor an
-- expired one (c9, c10); the rows they return have the new columns
SELECT convert_from(payload, 'UTF8') AS label, tenant_id,
       not_before IS NOT NULL AS has_not_before, expires_at IS NOT NULL AS has_expires_at,
       dedup_key, last_error
  FROM outbox_claim(100) ORDER BY 1;
SELECT * FROM dflt;
SELECT labels(VARIADIC array_agg(payload)) AS claimed FROM outbox_claim(100);
SELECT labels(VARIADIC array_agg(payload)) AS claimed FROM outbox_claim(100, 'agent:c');
SELECT labels(VARIADIC array_agg(payload)) AS claimed FROM outbox_claim(100, 'agent:c', 't1');
SELECT outbox_ack(ids('delivery_outbox', 'c1', 'c3', 'c4', 'c6', 'c7')) AS acked;
SELECT * FROM dflt;
DELETE FROM delivery_outbox;

-- Claim order: due delayed rows (not_before passed) first, by not_before,
-- then the others, oldest id first; rows not yet due never.
SELECT outbox_enqueue('agent:o', 'work', 'o1') IS NOT NULL AS enqueued;
SELECT outbox_enqueue('agent:o', 'work', 'o2', not_before => now() - interval '10 seconds') IS NOT NULL AS enqueued;
SELECT outbox_enqueue('agent:o', 'work', 'o3', not_before => now() - interval '20 seconds') IS NOT NULL AS enqueued;
SELECT outbox_enqueue('agent:o', 'work', 'o4') IS NOT NULL AS enqueued;
SELECT outbox_enqueue('agent:o', 'work', 'o5', not_before => now() + '1 hour') IS NOT NULL AS enqueued;
SELECT outbox_enqueue('agent:p', 'work', 'o6', not_before => now() - interval '5 seconds') IS NOT NULL AS enqueued;
SELECT outbox_enqueue('agent:p', 'work', 'o7') IS NOT NULL AS enqueued;
SELECT * FROM dflt;
-- o3 (20 s overdue), o2 (10 s), o6 (5 s), then o1, o4, o7; never o5
SELECT labels(VARIADIC array_agg(payload)) AS claimed FROM outbox_claim(1);
SELECT labels(VARIADIC array_agg(payload)) AS claimed FROM outbox_claim(1);
SELECT labels(VARIADIC array_agg(payload)) AS claimed FROM outbox_claim(1);
SELECT labels(VARIADIC array_agg(payload)) AS claimed FROM outbox_claim(2);
SELECT labels(VARIADIC array_agg(payload)) AS claimed FROM outbox_claim(1);
SELECT labels(VARIADIC array_agg(payload)) AS claimed FROM outbox_claim(1);
SELECT * FROM dflt;
DELETE FROM delivery_outbox;
-- ... and the same for one recipient's claim
SELECT count(*) FROM outbox_enqueue_batch(
    ARRAY['agent:o', 'agent:o', 'agent:o', 'agent:q', 'agent:o'],
    ARRAY['work', 'work', 'work', 'work', 'work'],
    ARRAY['r1', 'r2', 'r3', 'r4', 'r5']::bytea[],
    not_befores => ARRAY[NULL, now() - interval '1 second', now() + '1 hour',
                         now() - interval '1 minute', now() - interval '2 seconds']);
-- r5 (2 s overdue), r2 (1 s), r1; never r3, and r4 is agent:q's
SELECT labels(VARIADIC array_agg(payload)) AS claimed FROM outbox_claim(1, 'agent:o');
SELECT labels(VARIADIC array_agg(payload)) AS claimed FROM outbox_claim(1, 'agent:o');
SELECT labels(VARIADIC array_agg(payload)) AS claimed FROM outbox_claim(1, 'agent:o');
SELECT labels(VARIADIC array_agg(payload)) AS claimed FROM outbox_claim(1, 'agent:o');
SELECT * FROM dflt;
DELETE FROM delivery_outbox;

-- ttl: a row not acked within ttl of created_at is never handed out (a
-- plain INSERT with an old created_at, as the seed's DAL may write it)
SELECT outbox_configure('delivery_outbox', ttl => '1 hour');
INSERT INTO delivery_outbox (recipient, kind, payload, created_at)
VALUES ('agent:t', 'work', 't1', now() - interval '2 hours'),
       ('agent:t', 'work', 't2', now() - interval '30 minutes');
SELECT labels(VARIADIC array_agg(payload)) AS claimed FROM outbox_claim(100);
SELECT outbox_configure('delivery_outbox', ttl => '0');
DELETE FROM delivery_outbox;

---------------------------------------------------------------------------
-- outbox_wait and outbox_next_due with delayed rows (no preload here: the
-- wait polls)
---------------------------------------------------------------------------
SELECT outbox_next_due() IS NULL AS nothing_due;
SELECT now() + '1 hour' AS nb1, now() + '2 hours' AS nb2 \gset
SELECT outbox_enqueue('agent:n1', 'work', 'n1', not_before => :'nb1') IS NOT NULL AS enqueued;
SELECT outbox_enqueue('agent:n2', 'work', 'n2', not_before => :'nb2') IS NOT NULL AS enqueued;
-- a row whose not_before has passed is not "to come"
SELECT outbox_enqueue('agent:n2', 'work', 'n3', not_before => now() - interval '1 minute') IS NOT NULL AS enqueued;
SELECT outbox_next_due() = :'nb1'::timestamptz AS earliest,
       outbox_next_due('agent:n2') = :'nb2'::timestamptz AS of_n2,
       outbox_next_due(recipient => 'agent:n1') = :'nb1'::timestamptz AS of_n1,
       outbox_next_due('agent:none') IS NULL AS of_none;
-- a row not yet due is nothing to wait for; a due one is
SELECT outbox_wait('0', 'agent:n1') AS found_n1, outbox_wait('0', 'agent:n2') AS found_n2;
SELECT count(*) FROM outbox_claim(10, 'agent:n2');
SELECT clock_timestamp() AS t0 \gset
SELECT outbox_wait('300 ms') AS found;
SELECT clock_timestamp() - :'t0'::timestamptz >= '300 ms' AS waited_the_timeout;
-- outbox_wait returns when a row falls due: not before its not_before
SELECT clock_timestamp() + '1.5 s' AS nb3 \gset
SELECT outbox_enqueue('agent:n4', 'work', 'n4', not_before => :'nb3') IS NOT NULL AS enqueued;
SELECT outbox_next_due('agent:n4') = :'nb3'::timestamptz AS next_due_n4;
SELECT w AS found,
       clock_timestamp() >= :'nb3'::timestamptz AS not_before_not_before,
       clock_timestamp() < :'nb3'::timestamptz + '20 s' AS soon_after
  FROM (SELECT outbox_wait('30 s', 'agent:n4') AS w OFFSET 0) s;
SELECT outbox_next_due('agent:n4') IS NULL AS no_longer_to_come;
SELECT labels(VARIADIC array_agg(payload)) AS claimed FROM outbox_claim(10, 'agent:n4');
-- the created outbox has its own
SELECT outbox_next_due(outbox => 'tenant_p.delivery_outbox') IS NULL AS tenant_nothing;
SELECT outbox_enqueue('agent:n1', 'work', 'tn1', not_before => :'nb2',
                      outbox => 'tenant_p.delivery_outbox') IS NOT NULL AS enqueued;
SELECT outbox_next_due(outbox => 'tenant_p.delivery_outbox') = :'nb2'::timestamptz AS tenant_earliest,
       outbox_next_due('agent:n1', 'tenant_p.delivery_outbox') = :'nb2'::timestamptz AS tenant_n1,
       outbox_next_due() = :'nb1'::timestamptz AS default_unchanged;
SELECT outbox_wait('0', 'agent:n1', 'tenant_p.delivery_outbox') AS found;
-- bad input: an empty recipient 22023; not an outbox 42809
SELECT outbox_next_due('');
\echo :SQLSTATE
SELECT outbox_next_due(outbox => 'not_an_outbox');
\echo :SQLSTATE
DELETE FROM delivery_outbox;
DELETE FROM tenant_p.delivery_outbox;

---------------------------------------------------------------------------
-- outbox_release: retry_after, error, backoff
---------------------------------------------------------------------------
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:b', 'agent:b', 'agent:b'],
                                          ARRAY['work', 'work', 'work'],
                                          ARRAY['b1', 'b2', 'b3']::bytea[]);
SELECT count(*) FROM outbox_claim(10, 'agent:b');
-- retry_after: pending, not claimable before it; error: kept in last_error
BEGIN;
SELECT outbox_release(ids('delivery_outbox', 'b1'), retry_after => '1 hour',
                      error => 'HTTP 503') AS released;
SELECT not_before - now() BETWEEN '59 minutes' AND '61 minutes' AS one_hour
  FROM delivery_outbox WHERE payload = 'b1';
COMMIT;
SELECT outbox_release(ids('delivery_outbox', 'b2'), '0 seconds', 'refused') AS released;
SELECT outbox_release(ids('delivery_outbox', 'b3'), error => 'timeout') AS released;
SELECT * FROM dflt;
SELECT labels(VARIADIC array_agg(payload)) AS claimed FROM outbox_claim(10);
SELECT outbox_next_due('agent:b') > now() + '59 minutes' AS b1_next_due;
-- positional, with the outbox; a pending row is not released again
SELECT outbox_release(ids('delivery_outbox', 'b1'), NULL, NULL, NULL) AS released_none;
SELECT outbox_release(ids('delivery_outbox', 'b2', 'b3'), '1 hour', 'again', 'delivery_outbox') AS released;
SELECT * FROM dflt;
-- reassign and resync are immediate: they clear not_before
SELECT outbox_reassign('agent:b', 'agent:b2') AS moved;
SELECT * FROM dflt;
SELECT labels(VARIADIC array_agg(payload)) AS claimed FROM outbox_claim(10);
SELECT outbox_release(ids('delivery_outbox', 'b1', 'b2', 'b3'), '1 hour', 'third') AS released;
SELECT count(*) FROM outbox_claim(10);
SELECT * FROM dflt;
DELETE FROM delivery_outbox;

-- Backoff: after a release without retry_after (or a reclaim) the row is
-- not claimable before base * 2^(attempts-1), capped at backoff_max, times
-- a jitter factor in [0.5, 1].  With a base of one hour: attempt 1 in
-- [30 min, 1 h], attempt 2 in [1 h, 2 h], attempt 3 in [2 h, 4 h]; with a
-- cap of 90 minutes, attempt 4 in [45 min, 90 min].  (Each bound has a
-- minute of slack for the time between the release and the check.)
SELECT outbox_configure('delivery_outbox', backoff_base => '1 hour', backoff_max => '1 day');
SELECT outbox_enqueue('agent:x', 'work', 'x1') IS NOT NULL AS enqueued;
SELECT delivery_attempts FROM outbox_claim(1, 'agent:x');
BEGIN;
SELECT outbox_release(ids('delivery_outbox', 'x1')) AS released;
SELECT not_before - now() BETWEEN '29 minutes' AND '61 minutes' AS attempt_1
  FROM delivery_outbox WHERE payload = 'x1';
COMMIT;
SELECT count(*) AS claimed FROM outbox_claim(10);
SELECT outbox_reassign('agent:x', 'agent:y') AS moved;
SELECT delivery_attempts FROM outbox_claim(1, 'agent:y');
BEGIN;
SELECT outbox_release(ids('delivery_outbox', 'x1')) AS released;
SELECT not_before - now() BETWEEN '59 minutes' AND '121 minutes' AS attempt_2
  FROM delivery_outbox WHERE payload = 'x1';
COMMIT;
SELECT outbox_reassign('agent:y', 'agent:x') AS moved;
SELECT delivery_attempts FROM outbox_claim(1, 'agent:x');
BEGIN;
SELECT outbox_release(ids('delivery_outbox', 'x1')) AS released;
SELECT not_before - now() BETWEEN '119 minutes' AND '241 minutes' AS attempt_3
  FROM delivery_outbox WHERE payload = 'x1';
COMMIT;
SELECT outbox_configure('delivery_outbox', backoff_max => '90 minutes');
SELECT outbox_reassign('agent:x', 'agent:y') AS moved;
SELECT delivery_attempts FROM outbox_claim(1, 'agent:y');
BEGIN;
SELECT outbox_release(ids('delivery_outbox', 'x1')) AS released;
SELECT not_before - now() BETWEEN '44 minutes' AND '91 minutes' AS attempt_4_capped
  FROM delivery_outbox WHERE payload = 'x1';
COMMIT;
-- retry_after overrides the backoff, exactly (no jitter), zero included
SELECT outbox_reassign('agent:y', 'agent:x') AS moved;
SELECT delivery_attempts FROM outbox_claim(1, 'agent:x');
BEGIN;
SELECT outbox_release(ids('delivery_outbox', 'x1'), retry_after => '10 minutes') AS released;
SELECT not_before - now() BETWEEN '9 minutes 59 seconds' AND '10 minutes 1 second' AS retry_after_10_min
  FROM delivery_outbox WHERE payload = 'x1';
COMMIT;
SELECT outbox_reassign('agent:x', 'agent:y') AS moved;
SELECT delivery_attempts FROM outbox_claim(1, 'agent:y');
SELECT outbox_release(ids('delivery_outbox', 'x1'), retry_after => '0') AS released;
SELECT labels(VARIADIC array_agg(payload)) AS claimed_at_once FROM outbox_claim(1, 'agent:y');
-- outbox_reclaim backs off too (attempt 7: capped, in [45 min, 90 min])
BEGIN;
SELECT outbox_reclaim('0 seconds') AS reclaimed;
SELECT not_before - now() BETWEEN '44 minutes' AND '91 minutes' AS reclaim_backs_off
  FROM delivery_outbox WHERE payload = 'x1';
COMMIT;
SELECT count(*) AS claimed FROM outbox_claim(10);
-- outbox_reclaim_recipient (a reconnect) is immediate
SELECT outbox_reassign('agent:y', 'agent:x') AS moved;
SELECT delivery_attempts FROM outbox_claim(1, 'agent:x');
SELECT outbox_reclaim_recipient('agent:x') AS resynced;
SELECT * FROM dflt;
SELECT delivery_attempts FROM outbox_claim(1, 'agent:x');
-- jitter: twenty rows released together do not all get one not_before,
-- and every one is within [0.5, 1] of the backoff
SELECT outbox_configure('delivery_outbox', backoff_max => '1 day');
SELECT count(*) FROM outbox_enqueue_batch(array_fill('agent:j'::text, ARRAY[20]),
                                          array_fill('work'::text, ARRAY[20]),
                                          array_fill('j'::bytea, ARRAY[20]));
SELECT count(*) FROM outbox_claim(100, 'agent:j');
BEGIN;
SELECT outbox_release(ARRAY(SELECT id FROM delivery_outbox WHERE recipient = 'agent:j')) AS released;
SELECT count(*) AS rows, count(DISTINCT not_before) > 1 AS jittered,
       bool_and(not_before - now() BETWEEN '29 minutes' AND '61 minutes') AS within_bounds
  FROM delivery_outbox WHERE recipient = 'agent:j';
COMMIT;
DELETE FROM delivery_outbox WHERE recipient = 'agent:j';
-- backoff_base => '0': immediate again
SELECT outbox_configure('delivery_outbox', backoff_base => '0');
SELECT outbox_release(ids('delivery_outbox', 'x1')) AS released;
SELECT labels(VARIADIC array_agg(payload)) AS claimed_at_once FROM outbox_claim(1, 'agent:x');
SELECT outbox_configure('delivery_outbox', backoff_max => '1 hour');
SELECT * FROM settings;
DELETE FROM delivery_outbox;

---------------------------------------------------------------------------
-- max_attempts: a row delivered that many times that comes back is
-- dead-lettered, by release, reclaim and resync; reassign is not a return
---------------------------------------------------------------------------
SELECT outbox_configure('delivery_outbox', max_attempts => 2);
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:m1', 'agent:m2', 'agent:m3', 'agent:m4'],
                                          ARRAY['work', 'work', 'work', 'work'],
                                          ARRAY['m1', 'm2', 'm3', 'm4']::bytea[],
                                          dedup_keys => ARRAY['k-m1', NULL, NULL, NULL]);
SELECT count(*) FROM outbox_claim(10);
-- attempt 1 comes back: pending again (m1 released, m3 resynced, m4
-- reassigned, then m2 reclaimed)
SELECT outbox_release(ids('delivery_outbox', 'm1'), error => 'first') AS released;
SELECT outbox_reclaim_recipient('agent:m3') AS resynced;
SELECT outbox_reassign('agent:m4', 'agent:m4b') AS moved;
SELECT outbox_reclaim('0 seconds') AS reclaimed;
SELECT * FROM dflt;
SELECT count(*) FROM outbox_claim(10);
SELECT * FROM dflt;
-- attempt 2 comes back: dead-lettered ('max_attempts'), counted as given back
SELECT outbox_release(ids('delivery_outbox', 'm1'), error => 'second') AS released;
SELECT outbox_reclaim_recipient('agent:m3') AS resynced;
-- reassign does not dead-letter: m4 is pending with 2 attempts, claimable
SELECT outbox_reassign('agent:m4b', 'agent:m4') AS moved;
SELECT outbox_reclaim('0 seconds', 1) AS reclaimed;
SELECT * FROM dflt;
SELECT pending, delivered, acked, dead FROM outbox_stats();
SELECT delivery_attempts FROM outbox_claim(10, 'agent:m4');
-- more attempts than max_attempts already: dead at the next return
SELECT outbox_release(ids('delivery_outbox', 'm4')) AS released;
SELECT * FROM dflt;
-- the dead letter keeps its id, its dedup_key and the last error, and
-- frees its key (until redriven)
SELECT d.id = (ids('delivery_outbox', 'm1'))[1] AS same_id, d.recipient, d.dedup_key,
       d.last_error, d.dead_reason, d.delivery_attempts,
       d.dead_at BETWEEN now() - interval '1 minute' AND now() AS dead_at_now
  FROM delivery_outbox_dead d WHERE payload = 'm1';
SELECT outbox_enqueue('agent:m1', 'work', 'm1-new', dedup_key => 'k-m1')
       <> (ids('delivery_outbox', 'm1'))[1] AS new_row;
SELECT * FROM dflt;
-- max_attempts => 1: the first return is the last
SELECT outbox_configure('delivery_outbox', max_attempts => 1);
SELECT count(*) FROM outbox_claim(10, 'agent:m1');
SELECT outbox_release(ids('delivery_outbox', 'm1-new'), retry_after => '1 hour') AS released;
SELECT * FROM dflt;
-- a rolled-back return dead-letters nothing
SELECT outbox_enqueue('agent:m5', 'work', 'm5') IS NOT NULL AS enqueued;
SELECT count(*) FROM outbox_claim(10, 'agent:m5');
BEGIN;
SELECT outbox_release(ids('delivery_outbox', 'm5')) AS released;
ROLLBACK;
SELECT * FROM dflt;
SELECT outbox_configure('delivery_outbox', max_attempts => 0);
-- unlimited again: m5 comes back pending
SELECT outbox_release(ids('delivery_outbox', 'm5')) AS released;
SELECT * FROM dflt;
SELECT pending, delivered, acked, dead FROM outbox_stats();
DELETE FROM delivery_outbox;
DELETE FROM delivery_outbox_dead;

---------------------------------------------------------------------------
-- Expiry: a delivered row past its expiry (expires_at or ttl) that comes
-- back is dead-lettered ('expired'); an ack still acks it.  (Rows restored
-- as delivered, with their bookkeeping, so that nothing has to wait.)
---------------------------------------------------------------------------
INSERT INTO delivery_outbox (recipient, kind, payload, delivery_state, delivery_attempts,
                             created_at, delivered_at, expires_at)
VALUES ('agent:e', 'work', 'e1', 'delivered', 1, now(), now(), now() - interval '1 second'),
       ('agent:e', 'work', 'e2', 'delivered', 1, now() - interval '3 hours', now() - interval '2 hours',
        now() - interval '1 second'),
       ('agent:e2', 'work', 'e3', 'delivered', 1, now(), now(), now() - interval '1 second'),
       ('agent:e3', 'work', 'e4', 'delivered', 1, now(), now(), now() - interval '1 second'),
       ('agent:e', 'work', 'e5', 'delivered', 1, now(), now(), now() - interval '1 second'),
       ('agent:e', 'work', 'e6', 'delivered', 1, now(), now(), now() + '1 hour');
SELECT * FROM dflt;
SELECT outbox_release(ids('delivery_outbox', 'e1', 'e6'), error => 'gone') AS released;
SELECT outbox_reclaim('1 hour') AS reclaimed;
SELECT outbox_reclaim_recipient('agent:e2') AS resynced;
-- reassign: pending, never handed out (the worker's sweep dead-letters it)
SELECT outbox_reassign('agent:e3', 'agent:e4') AS moved;
SELECT outbox_ack(ids('delivery_outbox', 'e5')) AS acked;
SELECT * FROM dflt;
SELECT labels(VARIADIC array_agg(payload)) AS claimed FROM outbox_claim(100);
-- ttl: the same for a row older than ttl
SELECT outbox_configure('delivery_outbox', ttl => '1 hour');
INSERT INTO delivery_outbox (recipient, kind, payload, delivery_state, delivery_attempts,
                             delivered_at, created_at)
VALUES ('agent:e', 'work', 'e7', 'delivered', 1, now(), now() - interval '2 hours'),
       ('agent:e', 'work', 'e8', 'delivered', 1, now(), now() - interval '10 minutes');
SELECT outbox_release(ids('delivery_outbox', 'e7', 'e8')) AS released;
SELECT * FROM dflt;
SELECT outbox_configure('delivery_outbox', ttl => '0');
SELECT pending, delivered, acked, dead FROM outbox_stats();
DELETE FROM delivery_outbox;
DELETE FROM delivery_outbox_dead;

---------------------------------------------------------------------------
-- outbox_reject and outbox_redrive
---------------------------------------------------------------------------
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:r', 'agent:r', 'agent:r', 'agent:r'],
                                          ARRAY['work', 'work', 'work', 'work'],
                                          ARRAY['d1', 'd2', 'd3', 'd4']::bytea[],
                                          ARRAY['t1', NULL, NULL, NULL],
                                          ARRAY[NULL, NULL, now() - interval '1 s', NULL]::timestamptz[],
                                          ARRAY[now() + '1 hour', NULL, NULL, NULL]::timestamptz[],
                                          ARRAY['k-d1', 'k-d2', NULL, NULL]);
SELECT count(*) FROM outbox_claim(3, 'agent:r');
SELECT * FROM dflt;
CREATE TEMP TABLE before_reject AS SELECT * FROM delivery_outbox WHERE payload = 'd1';
-- only delivered rows are rejected: d4 is pending, 999999 does not exist
SELECT outbox_reject(ids('delivery_outbox', 'd1', 'd4') || 999999::bigint,
                     'malformed') AS rejected;
SELECT outbox_reject(ids('delivery_outbox', 'd2'), outbox => 'delivery_outbox') AS rejected;
SELECT outbox_reject(ARRAY[]::bigint[]) AS rejected_none;
SELECT * FROM dflt;
SELECT pending, delivered, acked, dead FROM outbox_stats();
-- the dead letter is the row as it was, same id, plus last_error, dead_at
-- and dead_reason
SELECT (b.id, b.recipient, b.kind, b.tenant_id, b.payload, b.delivery_state,
        b.delivery_attempts, b.created_at, b.delivered_at, b.acked_at,
        b.not_before, b.expires_at, b.dedup_key)
       IS NOT DISTINCT FROM
       (d.id, d.recipient, d.kind, d.tenant_id, d.payload, d.delivery_state,
        d.delivery_attempts, d.created_at, d.delivered_at, d.acked_at,
        d.not_before, d.expires_at, d.dedup_key) AS as_it_was,
       d.last_error, d.dead_reason,
       d.dead_at BETWEEN now() - interval '1 minute' AND now() AS dead_at_now
  FROM before_reject b JOIN delivery_outbox_dead d USING (id);
-- a rejected row's key is free: a new row takes it
SELECT outbox_enqueue('agent:r', 'work', 'd5', dedup_key => 'k-d2') IS NOT NULL AS enqueued;
-- an acked row is not rejected
SELECT outbox_ack(ids('delivery_outbox', 'd3')) AS acked;
SELECT outbox_reject(ids('delivery_outbox', 'd3')) AS rejected_none;
-- a rolled-back reject leaves the row delivered
SELECT count(*) FROM outbox_claim(10, 'agent:r');
BEGIN;
SELECT outbox_reject(ids('delivery_outbox', 'd4')) AS rejected;
ROLLBACK;
SELECT * FROM dflt;

-- redrive: back as pending with the same id, zero attempts, no delivery
-- timestamps, no not_before or expires_at, created_at the redrive's time;
-- dedup_key and last_error kept
SELECT clock_timestamp() AS t0 \gset
SELECT outbox_redrive(ids('delivery_outbox', 'd1')) AS redriven;
SELECT id = (SELECT id FROM before_reject) AS same_id, recipient, kind, tenant_id,
       convert_from(payload, 'UTF8') AS payload, delivery_state, delivery_attempts,
       delivered_at IS NULL AS no_delivered_at, acked_at IS NULL AS no_acked_at,
       not_before IS NULL AS no_not_before, expires_at IS NULL AS no_expires_at,
       created_at BETWEEN :'t0'::timestamptz AND now() AS created_at_redrive,
       dedup_key, last_error
  FROM delivery_outbox WHERE payload = 'd1';
SELECT * FROM dflt;
SELECT pending, delivered, acked, dead FROM outbox_stats();
-- not a dead letter (any more, or at all): nothing
SELECT outbox_redrive(ids('delivery_outbox', 'd1')) AS redriven_none;
SELECT outbox_redrive(ARRAY[999999]::bigint[]) AS redriven_none;
SELECT outbox_redrive(ARRAY[]::bigint[]) AS redriven_none;
-- its key is taken again
SELECT outbox_enqueue('agent:r', 'work', 'd1-dup', dedup_key => 'k-d1')
       = (ids('delivery_outbox', 'd1'))[1] AS dedup_to_redriven;
-- it is an ordinary pending row again: claimable, notified (iso_dedup)
SELECT labels(VARIADIC array_agg(payload)) AS claimed FROM outbox_claim(10, 'agent:r', 't1');
-- a dead letter whose key another row took meanwhile stays dead, and is
-- not counted; in the same call, others are redriven
SELECT outbox_reject(ids('delivery_outbox', 'd4')) AS rejected;
SELECT * FROM dflt;
SELECT outbox_redrive(ids('delivery_outbox', 'd2', 'd4')) AS redriven;
SELECT * FROM dflt;
-- a rolled-back redrive leaves the dead letter
SELECT outbox_ack(ids('delivery_outbox', 'd1')) AS acked;
SELECT count(*) FROM outbox_claim(10, 'agent:r');
SELECT outbox_reject(ids('delivery_outbox', 'd4'), 'again') AS rejected;
BEGIN;
SELECT outbox_redrive(ids('delivery_outbox', 'd4')) AS redriven;
ROLLBACK;
SELECT * FROM dflt;
-- two dead letters with one key: one comes back, the other stays dead
SELECT outbox_reject(ids('delivery_outbox', 'd5')) AS rejected;
SELECT * FROM dflt;
SELECT outbox_redrive(ids('delivery_outbox', 'd2', 'd5')) AS redriven;
SELECT count(*) FILTER (WHERE dedup_key = 'k-d2') AS live_with_key FROM delivery_outbox;
SELECT count(*) FILTER (WHERE dedup_key = 'k-d2') AS dead_with_key FROM delivery_outbox_dead;
-- a redriven row of an outbox with a ttl has a new created_at: not expired
SELECT outbox_configure('delivery_outbox', ttl => '1 hour');
INSERT INTO delivery_outbox (recipient, kind, payload, delivery_state, delivery_attempts,
                             delivered_at, created_at)
VALUES ('agent:old', 'work', 'd6', 'delivered', 1, now(), now() - interval '2 hours');
SELECT outbox_release(ids('delivery_outbox', 'd6')) AS released;
SELECT outbox_redrive(ids('delivery_outbox', 'd6')) AS redriven;
SELECT labels(VARIADIC array_agg(payload)) AS claimed FROM outbox_claim(10, 'agent:old');
SELECT outbox_configure('delivery_outbox', ttl => '0');
SELECT * FROM dflt;
SELECT pending, delivered, acked, dead FROM outbox_stats();
DELETE FROM delivery_outbox;
DELETE FROM delivery_outbox_dead;

---------------------------------------------------------------------------
-- dedup_key: per recipient, taken once, whatever the row's state
---------------------------------------------------------------------------
SELECT outbox_enqueue('agent:k', 'work', 'k1', dedup_key => 'order-1') AS k1 \gset
SELECT outbox_enqueue('agent:k', 'work', 'k1-again', dedup_key => 'order-1') = :k1 AS pending_same_id;
SELECT outbox_enqueue('agent:k', 'other', 'k1-other', 't9', dedup_key => 'order-1') = :k1 AS any_kind_tenant_same_id;
SELECT count(*) FROM outbox_claim(10);
SELECT outbox_enqueue('agent:k', 'work', 'k1-again', dedup_key => 'order-1') = :k1 AS delivered_same_id;
SELECT outbox_ack(:k1) AS acked;
SELECT outbox_enqueue('agent:k', 'work', 'k1-again', dedup_key => 'order-1') = :k1 AS acked_same_id;
-- another recipient, another outbox: a key of their own
SELECT outbox_enqueue('agent:k2', 'work', 'k2', dedup_key => 'order-1') <> :k1 AS other_recipient_new_row;
SELECT outbox_enqueue('agent:k', 'work', 'tk1', dedup_key => 'order-1',
                      outbox => 'tenant_p.delivery_outbox') IS NOT NULL AS other_outbox_new_row;
-- the existing row is untouched: payload, state, tenant
SELECT * FROM dflt;
SELECT * FROM tnt;
-- NULL keys do not dedup
SELECT outbox_enqueue('agent:k', 'work', 'k3') <> outbox_enqueue('agent:k', 'work', 'k4')
       AS two_rows;
-- batches: an existing key gives the existing id at its position; a key
-- twice in one batch is one row
SELECT array_agg(b = :k1 ORDER BY n) AS is_k1
  FROM outbox_enqueue_batch(ARRAY['agent:k', 'agent:k', 'agent:k2'],
                            ARRAY['work', 'work', 'work'],
                            ARRAY['k5', 'k6', 'k7']::bytea[],
                            dedup_keys => ARRAY[NULL, 'order-1', 'order-7'])
       WITH ORDINALITY AS x(b, n);
SELECT count(DISTINCT b) AS distinct_ids, count(*) AS positions
  FROM outbox_enqueue_batch(ARRAY['agent:k', 'agent:k', 'agent:k'],
                            ARRAY['work', 'work', 'work'],
                            ARRAY['k8', 'k9', 'k10']::bytea[],
                            dedup_keys => ARRAY['order-8', 'order-8', 'order-7']) b;
SELECT * FROM dflt;
-- a purged row frees its key
SELECT outbox_purge('0 seconds') AS purged;
SELECT outbox_enqueue('agent:k', 'work', 'k11', dedup_key => 'order-1') <> :k1 AS after_purge_new_row;
-- SQL producers: INSERT ... ON CONFLICT DO NOTHING on the key
INSERT INTO delivery_outbox (recipient, kind, payload, dedup_key)
VALUES ('agent:k', 'work', 'k12', 'order-1') ON CONFLICT DO NOTHING;
INSERT INTO delivery_outbox (recipient, kind, payload, dedup_key)
VALUES ('agent:k', 'work', 'k13', 'order-1'), ('agent:k', 'work', 'k14', 'order-14')
ON CONFLICT (recipient, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING;
INSERT INTO tenant_p.delivery_outbox (recipient, kind, payload, dedup_key)
VALUES ('agent:k', 'work', 'tk2', 'order-1') ON CONFLICT DO NOTHING;
-- ... and without ON CONFLICT a plain INSERT of a taken key is 23505
INSERT INTO delivery_outbox (recipient, kind, payload, dedup_key)
VALUES ('agent:k', 'work', 'k15', 'order-1');
\echo :SQLSTATE
-- ... and an empty key is 23514 (the trigger; its message names the row
-- id, so only the SQLSTATE is shown)
\set VERBOSITY sqlstate
INSERT INTO delivery_outbox (recipient, kind, payload, dedup_key)
VALUES ('agent:k', 'work', 'k16', '');
\set VERBOSITY default
SELECT * FROM dflt;
-- re-addressing onto a recipient that holds one of the moved rows' keys:
-- every row moves; a moved row whose key the new recipient holds gives the
-- key up (the holder keeps it), the others keep theirs
SELECT outbox_enqueue('agent:k2', 'work', 'k17') IS NOT NULL AS enqueued;
SELECT recipient, dedup_key, convert_from(payload, 'UTF8') AS row
  FROM delivery_outbox WHERE dedup_key IS NOT NULL ORDER BY id;
SELECT outbox_reassign('agent:k2', 'agent:k') AS moved;
\echo :SQLSTATE
SELECT recipient, string_agg(convert_from(payload, 'UTF8'), ',' ORDER BY id) AS rows
  FROM delivery_outbox GROUP BY 1 ORDER BY 1;
SELECT recipient, dedup_key, convert_from(payload, 'UTF8') AS row
  FROM delivery_outbox WHERE dedup_key IS NOT NULL ORDER BY id;
SELECT * FROM tnt;
DELETE FROM delivery_outbox;
DELETE FROM tenant_p.delivery_outbox;

---------------------------------------------------------------------------
-- Bad input on the default outbox: each error, its SQLSTATE, nothing
-- changed
---------------------------------------------------------------------------
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:z', 'agent:z'], ARRAY['work', 'work'],
                                          ARRAY['z1', 'z2']::bytea[],
                                          dedup_keys => ARRAY['k-z1', NULL]);
SELECT count(*) FROM outbox_claim(1);
SELECT outbox_reject(ids('delivery_outbox', 'z1'), 'dead') AS rejected;
SELECT count(*) FROM outbox_claim(1);
SELECT * FROM dflt;
-- empty dedup_key: 22023
SELECT outbox_enqueue('agent:z', 'work', 'bad', dedup_key => '');
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:z', 'agent:z'], ARRAY['work', 'work'],
                                   ARRAY['bad1', 'bad2']::bytea[],
                                   dedup_keys => ARRAY['k-ok', '']);
\echo :SQLSTATE
SELECT * FROM dflt;
-- expires_at not later than not_before: 22023
SELECT outbox_enqueue('agent:z', 'work', 'bad', not_before => '2030-01-01 00:00:00+00',
                      expires_at => '2030-01-01 00:00:00+00');
\echo :SQLSTATE
SELECT outbox_enqueue('agent:z', 'work', 'bad', not_before => now() + '2 hours',
                      expires_at => now() + '1 hour');
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:z', 'agent:z'], ARRAY['work', 'work'],
                                   ARRAY['bad1', 'bad2']::bytea[],
                                   not_befores => ARRAY[NULL, now() + '2 hours'],
                                   expires_ats => ARRAY[now() + '1 hour', now() + '1 hour']);
\echo :SQLSTATE
SELECT * FROM dflt;
-- batch arrays of another length: 2202E
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:z', 'agent:z'], ARRAY['work', 'work'],
                                   ARRAY['bad1', 'bad2']::bytea[],
                                   not_befores => ARRAY[now()]);
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:z', 'agent:z'], ARRAY['work', 'work'],
                                   ARRAY['bad1', 'bad2']::bytea[],
                                   expires_ats => ARRAY[now(), now(), now()]);
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:z', 'agent:z'], ARRAY['work', 'work'],
                                   ARRAY['bad1', 'bad2']::bytea[],
                                   dedup_keys => '{}');
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:z'], ARRAY['work'], ARRAY['bad1']::bytea[],
                                   dedup_keys => ARRAY[['k1']]);
\echo :SQLSTATE
SELECT * FROM dflt;
-- negative retry_after: 22023, the row stays delivered
SELECT outbox_release(ids('delivery_outbox', 'z2'), retry_after => '-1 second');
\echo :SQLSTATE
SELECT outbox_release(ids('delivery_outbox', 'z2'), '-1 day', 'err');
\echo :SQLSTATE
SELECT * FROM dflt;
-- NULL ids, NULL elements: 22004
SELECT outbox_release(NULL, retry_after => '1 hour');
\echo :SQLSTATE
SELECT outbox_release(ids('delivery_outbox', 'z2') || NULL::bigint, '1 hour');
\echo :SQLSTATE
SELECT outbox_reject(NULL);
\echo :SQLSTATE
SELECT outbox_reject(NULL, 'err');
\echo :SQLSTATE
SELECT outbox_reject(ids('delivery_outbox', 'z2') || NULL::bigint);
\echo :SQLSTATE
SELECT outbox_redrive(NULL);
\echo :SQLSTATE
SELECT outbox_redrive(ids('delivery_outbox', 'z1') || NULL::bigint);
\echo :SQLSTATE
SELECT outbox_redrive(ARRAY[NULL]::bigint[]);
\echo :SQLSTATE
SELECT * FROM dflt;
-- not an outbox: 42809
SELECT outbox_reject(ARRAY[1]::bigint[], outbox => 'not_an_outbox');
\echo :SQLSTATE
SELECT outbox_redrive(ARRAY[1]::bigint[], 'not_an_outbox');
\echo :SQLSTATE
SELECT outbox_release(ARRAY[1]::bigint[], '1 hour', NULL, 'not_an_outbox');
\echo :SQLSTATE
SELECT * FROM dflt;
-- the SQLSTATEs alone, as a client sees them
\set VERBOSITY sqlstate
SELECT outbox_enqueue('agent:z', 'work', 'bad', dedup_key => '');
SELECT outbox_enqueue('agent:z', 'work', 'bad', not_before => now(), expires_at => now());
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:z'], ARRAY['work'], ARRAY['bad']::bytea[],
                                   NULL, ARRAY[now(), now()]);
SELECT outbox_release(ids('delivery_outbox', 'z2'), '-1 s');
SELECT outbox_reject(ARRAY[NULL]::bigint[]);
SELECT outbox_redrive(NULL);
\set VERBOSITY default
-- an error inside a transaction leaves the earlier work to the caller
BEGIN;
SELECT outbox_enqueue('agent:z', 'work', 'z3') IS NOT NULL AS enqueued;
SAVEPOINT s;
SELECT outbox_enqueue('agent:z', 'work', 'bad', dedup_key => '');
ROLLBACK TO SAVEPOINT s;
SELECT outbox_reject(ids('delivery_outbox', 'z2'), 'kept') AS rejected;
COMMIT;
SELECT * FROM dflt;
DELETE FROM delivery_outbox;
DELETE FROM delivery_outbox_dead;

---------------------------------------------------------------------------
-- The created outbox: every function and setting with "outbox =>"; no
-- call touches the default outbox
---------------------------------------------------------------------------
SELECT outbox_enqueue('agent:s', 'work', 'default-row', dedup_key => 'k-s1') IS NOT NULL AS enqueued;
SELECT outbox_configure('tenant_p.delivery_outbox', max_attempts => 2, backoff_base => '1 hour',
                        backoff_max => '1 day', ttl => '1 day');
SELECT * FROM settings;
SELECT outbox_enqueue('agent:s', 'work', 's1', dedup_key => 'k-s1',
                      outbox => 'tenant_p.delivery_outbox') AS s1 \gset
SELECT outbox_enqueue('agent:s', 'work', 's1-again', dedup_key => 'k-s1',
                      outbox => 'tenant_p.delivery_outbox') = :s1 AS same_id;
-- (s5 is a dedup hit on s1 too: no row)
SELECT outbox_enqueue('agent:s', 'work', 's2', NULL, now() + '1 hour', NULL, NULL,
                      'tenant_p.delivery_outbox') IS NOT NULL AS enqueued;
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:s', 'agent:s', 'agent:s'],
                                          ARRAY['work', 'work', 'work'],
                                          ARRAY['s3', 's4', 's5']::bytea[], NULL,
                                          ARRAY[now() - interval '1 s', NULL, NULL]::timestamptz[],
                                          ARRAY[NULL, now() + '1 hour', NULL]::timestamptz[],
                                          ARRAY[NULL, NULL, 'k-s1'],
                                          'tenant_p.delivery_outbox');
INSERT INTO tenant_p.delivery_outbox (recipient, kind, payload, expires_at)
VALUES ('agent:s', 'work', 's6', now() - interval '1 second');
INSERT INTO tenant_p.delivery_outbox (recipient, kind, payload, created_at)
VALUES ('agent:s', 'work', 's7', now() - interval '2 days');
SELECT * FROM tnt;
-- not before not_before (s2), not expired (s6) or past ttl (s7); due
-- delayed first (s3), then by id
SELECT labels(VARIADIC array_agg(payload)) AS claimed
  FROM outbox_claim(1, outbox => 'tenant_p.delivery_outbox');
SELECT labels(VARIADIC array_agg(payload)) AS claimed
  FROM outbox_claim(10, 'agent:s', outbox => 'tenant_p.delivery_outbox');
SELECT * FROM tnt;
-- release with backoff (attempt 1: [30 min, 1 h]), retry_after and error
BEGIN;
SELECT outbox_release(ids('tenant_p.delivery_outbox', 's1'), error => 'no',
                      outbox => 'tenant_p.delivery_outbox') AS released;
SELECT not_before - now() BETWEEN '29 minutes' AND '61 minutes' AS backoff_attempt_1
  FROM tenant_p.delivery_outbox WHERE payload = 's1';
COMMIT;
SELECT outbox_release(ids('tenant_p.delivery_outbox', 's3'), '0', 'retry',
                      'tenant_p.delivery_outbox') AS released;
SELECT outbox_next_due(outbox => 'tenant_p.delivery_outbox') > now() + '29 minutes' AS next_due;
SELECT * FROM tnt;
-- reject s4; max_attempts: s3 at attempt 2 comes back (reclaim) dead
SELECT labels(VARIADIC array_agg(payload)) AS claimed
  FROM outbox_claim(10, outbox => 'tenant_p.delivery_outbox');
SELECT outbox_reject(ids('tenant_p.delivery_outbox', 's4'), 'bad payload',
                     'tenant_p.delivery_outbox') AS rejected;
SELECT outbox_reclaim('0 seconds', outbox => 'tenant_p.delivery_outbox') AS reclaimed;
SELECT * FROM tnt;
-- reclaim_recipient is immediate and dead-letters at max_attempts too
SELECT outbox_reassign('agent:s', 'agent:s2', outbox => 'tenant_p.delivery_outbox') AS moved;
SELECT labels(VARIADIC array_agg(payload)) AS claimed
  FROM outbox_claim(10, 'agent:s2', outbox => 'tenant_p.delivery_outbox');
SELECT outbox_reclaim_recipient('agent:s2', outbox => 'tenant_p.delivery_outbox') AS resynced;
SELECT * FROM tnt;
SELECT pending, delivered, acked, dead FROM outbox_stats('tenant_p.delivery_outbox');
SELECT pending, delivered, acked, dead FROM outbox_stats();
-- s1 (re-addressed to agent:s2 before it died) is dead: its key is free,
-- a new row of agent:s2 (s8) takes it; redriving s1 then leaves it dead,
-- uncounted (s3 and s4 come back)
SELECT outbox_enqueue('agent:s2', 'work', 's8', dedup_key => 'k-s1',
                      outbox => 'tenant_p.delivery_outbox') <> :s1 AS key_freed;
SELECT outbox_redrive(ids('tenant_p.delivery_outbox', 's3', 's4'),
                      'tenant_p.delivery_outbox') AS redriven;
SELECT outbox_redrive(ARRAY[:s1]::bigint[], outbox => 'tenant_p.delivery_outbox') AS redriven_key_taken;
SELECT * FROM tnt;
SELECT * FROM dflt;
-- the default outbox's functions do not see the created outbox's dead
-- letters, nor the other way round
SELECT outbox_redrive(ids('tenant_p.delivery_outbox', 's1')) AS redriven_none;
SELECT outbox_reject(ids('delivery_outbox', 'default-row'),
                     outbox => 'tenant_p.delivery_outbox') AS rejected_none;
-- bad input on the created outbox: 22023, 22004, 2202E; nothing changed
SELECT outbox_configure('tenant_p.delivery_outbox', backoff_max => '-1 hour');
\echo :SQLSTATE
SELECT outbox_enqueue('agent:s', 'work', 'bad', dedup_key => '',
                      outbox => 'tenant_p.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_enqueue('agent:s', 'work', 'bad', not_before => now() + '1 hour',
                      expires_at => now(), outbox => 'tenant_p.delivery_outbox');
\echo :SQLSTATE
SELECT * FROM outbox_enqueue_batch(ARRAY['agent:s'], ARRAY['work'], ARRAY['bad']::bytea[],
                                   dedup_keys => ARRAY['a', 'b'],
                                   outbox => 'tenant_p.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_release(ids('tenant_p.delivery_outbox', 's2'), '-1 s',
                      outbox => 'tenant_p.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_reject(NULL, outbox => 'tenant_p.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_redrive(ARRAY[NULL]::bigint[], outbox => 'tenant_p.delivery_outbox');
\echo :SQLSTATE
SELECT outbox_next_due('', 'tenant_p.delivery_outbox');
\echo :SQLSTATE
SELECT * FROM settings;
SELECT * FROM tnt;
SELECT * FROM dflt;

---------------------------------------------------------------------------
-- outbox_expire: the worker's expiry sweep, by call
---------------------------------------------------------------------------
DELETE FROM delivery_outbox;
DELETE FROM delivery_outbox_dead;
SELECT outbox_enqueue('agent:e', 'work', 'e1',
                      expires_at => now() - interval '1 second') IS NOT NULL AS enqueued;
SELECT outbox_enqueue('agent:e', 'work', 'e2',
                      expires_at => now() + interval '1 hour') IS NOT NULL AS enqueued;
SELECT outbox_enqueue('agent:e', 'work', 'e3') IS NOT NULL AS enqueued;
\set VERBOSITY sqlstate
SELECT outbox_expire(0);
\set VERBOSITY default
SELECT count(*) AS dead_before FROM delivery_outbox_dead;
-- e1 is past its expires_at
SELECT outbox_expire() AS expired;
SELECT convert_from(payload, 'UTF8') AS row, dead_reason FROM delivery_outbox_dead ORDER BY id;
-- a ttl every row has outlived: at most max_rows of each kind a call
SELECT outbox_configure('delivery_outbox', ttl => '1 microsecond');
SELECT pg_sleep(0.01);
SELECT outbox_expire(1) AS expired_by_ttl;
SELECT outbox_expire() AS expired_by_ttl;
SELECT convert_from(payload, 'UTF8') AS row, dead_reason FROM delivery_outbox_dead ORDER BY id;
SELECT count(*) AS left_in_outbox FROM delivery_outbox;
SELECT outbox_configure('delivery_outbox', ttl => '0');
DELETE FROM delivery_outbox_dead;

---------------------------------------------------------------------------
-- Review fixes: bounds, a long backoff, reassign onto itself, an empty key
-- by UPDATE, a dead table taken up with its ids
---------------------------------------------------------------------------
\set VERBOSITY sqlstate
SELECT outbox_configure('delivery_outbox', backoff_max => '101 years');
SELECT outbox_configure('delivery_outbox', backoff_base => '101 years');
SELECT outbox_configure('delivery_outbox', ttl => '1001 years');
\set VERBOSITY default
SELECT outbox_configure('delivery_outbox', backoff_max => '101 years');
SELECT outbox_configure('delivery_outbox', ttl => '1001 years');
SELECT * FROM settings;
-- a row with many attempts backs off by backoff_max, no overflow
SELECT outbox_configure('delivery_outbox', max_attempts => 0, backoff_base => '1 minute',
                        backoff_max => '1 hour');
SELECT outbox_enqueue('agent:l', 'work', 'l1') IS NOT NULL AS enqueued;
DO $$
BEGIN
  FOR i IN 1 .. 60 LOOP
    PERFORM outbox_claim(1, 'agent:l');
    UPDATE delivery_outbox SET delivery_state = 'pending' WHERE recipient = 'agent:l';
    UPDATE delivery_outbox SET not_before = NULL WHERE recipient = 'agent:l';
  END LOOP;
END $$;
SELECT delivery_attempts FROM delivery_outbox WHERE recipient = 'agent:l';
SELECT count(*) FROM outbox_claim(1, 'agent:l');
SELECT outbox_release(ARRAY(SELECT id FROM delivery_outbox WHERE recipient = 'agent:l')) AS released;
SELECT not_before > now() + interval '29 minutes' AND not_before <= now() + interval '1 hour' AS capped
  FROM delivery_outbox WHERE recipient = 'agent:l';
\set VERBOSITY sqlstate
SELECT outbox_release(ARRAY[1]::bigint[], retry_after => '101 years');
\set VERBOSITY default
SELECT outbox_release(ARRAY[1]::bigint[], retry_after => '101 years');
SELECT outbox_configure('delivery_outbox', backoff_base => '0');
-- reassign onto the same recipient keeps its keys
SELECT outbox_enqueue('agent:same', 'work', 's1', dedup_key => 'S1') AS s1 \gset
SELECT outbox_reassign('agent:same', 'agent:same') AS moved;
SELECT dedup_key FROM delivery_outbox WHERE id = :s1;
SELECT outbox_enqueue('agent:same', 'work', 's1-again', dedup_key => 'S1') = :s1 AS same_row;
-- an empty key by UPDATE: 23514, nothing changed
\set VERBOSITY sqlstate
UPDATE delivery_outbox SET dedup_key = '' WHERE id = :s1;
\set VERBOSITY default
SELECT dedup_key FROM delivery_outbox WHERE id = :s1;
DELETE FROM delivery_outbox;
-- a dead-letter table left by DROP TABLE is taken up by the next outbox of
-- that name, and the new outbox's ids start past its letters
CREATE SCHEMA tenant_up;
SELECT outbox_create('tenant_up') IS NOT NULL AS created;
SELECT outbox_configure('tenant_up.delivery_outbox', max_attempts => 1);
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:u', 'agent:u', 'agent:u'],
                                          ARRAY['work', 'work', 'work'],
                                          ARRAY['u1', 'u2', 'u3']::bytea[],
                                          outbox => 'tenant_up.delivery_outbox');
SELECT count(*) FROM outbox_claim(10, outbox => 'tenant_up.delivery_outbox');
SELECT outbox_release(ARRAY(SELECT id FROM tenant_up.delivery_outbox),
                      outbox => 'tenant_up.delivery_outbox') AS dead_lettered;
SELECT max(id) AS top_dead FROM tenant_up.delivery_outbox_dead \gset
SET client_min_messages = warning;
DROP TABLE tenant_up.delivery_outbox;
RESET client_min_messages;
SELECT outbox_create('tenant_up') IS NOT NULL AS created_again;
SELECT count(*) AS letters_kept FROM tenant_up.delivery_outbox_dead;
SELECT outbox_enqueue('agent:u', 'work', 'u4', outbox => 'tenant_up.delivery_outbox') > :top_dead
       AS past_the_letters;
SELECT count(*) FROM outbox_claim(10, outbox => 'tenant_up.delivery_outbox');
SELECT outbox_reject(ARRAY(SELECT id FROM tenant_up.delivery_outbox),
                     outbox => 'tenant_up.delivery_outbox') AS rejected;
SELECT count(*) AS letters FROM tenant_up.delivery_outbox_dead;
SET client_min_messages = warning;
DROP SCHEMA tenant_up CASCADE;
RESET client_min_messages;

DROP VIEW dflt, tnt, settings;
SET client_min_messages = warning;
DROP SCHEMA tenant_p CASCADE;
RESET client_min_messages;
DROP TABLE not_an_outbox;
DROP FUNCTION dead_of(regclass), rows_of(regclass), dead_rows_of(regclass),
              ids(regclass, text[]), labels(bytea[]);
DROP EXTENSION delivery_outbox;
