--
-- wait.sql: outbox_wait, outbox_activity and the 1.1 settings without
-- shared_preload_libraries
--
-- This suite's server does not preload the library: outbox_wait polls (every
-- 100 ms), outbox_activity() and the view refuse with 55000, and the
-- postmaster-only settings do not exist.  The latch-driven wait, the worker
-- and the counters are in t/010-012.  Durations are never printed, only
-- facts about them.
--
CREATE EXTENSION delivery_outbox;

\set VERBOSITY default
\set SHOW_CONTEXT never

--
-- outbox_wait on an empty outbox: false once the timeout has passed, not
-- before
--
SELECT clock_timestamp() AS t0 \gset
SELECT outbox_wait('300 ms') AS found;
SELECT clock_timestamp() - :'t0'::timestamptz >= '300 ms' AS waited_the_timeout,
       clock_timestamp() - :'t0'::timestamptz < '1 min' AS returned;
-- a zero timeout looks once
SELECT outbox_wait('0') AS found;
SELECT outbox_wait('0 seconds', 'agent:a') AS found;

--
-- a pending row: true at once, for any recipient or for its own
--
SELECT outbox_enqueue('agent:a', 'work', '\x01') AS id \gset
SELECT clock_timestamp() AS t0 \gset
SELECT outbox_wait('1 min') AS found;
SELECT outbox_wait('1 min', 'agent:a') AS found;
SELECT clock_timestamp() - :'t0'::timestamptz < '30 s' AS returned_at_once;
-- named notation
SELECT outbox_wait(recipient => 'agent:a', timeout => '1 min') AS found;

-- the recipient filter: agent:b has no pending row
SELECT clock_timestamp() AS t0 \gset
SELECT outbox_wait('200 ms', 'agent:b') AS found;
SELECT clock_timestamp() - :'t0'::timestamptz >= '200 ms' AS waited_the_timeout;
-- nor has a recipient whose name only differs in case
SELECT outbox_wait('0', 'AGENT:A') AS found;

-- only pending rows count: a delivered row and an acked row are not
-- something to claim
SELECT count(*) FROM outbox_claim(10);
SELECT outbox_wait('100 ms') AS found;
SELECT outbox_wait('100 ms', 'agent:a') AS found;
SELECT outbox_ack(:id);
SELECT outbox_wait('0') AS found;
-- back to pending (release): true again
SELECT outbox_enqueue('agent:b', 'work', '\x02', 'tenant-1') AS id2 \gset
SELECT count(*) FROM outbox_claim(10);
SELECT outbox_wait('0', 'agent:b') AS found;
SELECT outbox_release(ARRAY[:id2]::bigint[]);
SELECT outbox_wait('0', 'agent:b') AS found;
SELECT outbox_wait('0') AS found;
SELECT outbox_wait('0', 'agent:a') AS found;

-- uncommitted rows of the caller's own transaction are seen (same
-- snapshot rules as any query); a rolled-back one is gone
BEGIN;
SELECT outbox_enqueue('agent:c', 'work', '\x03') IS NOT NULL AS enqueued;
SELECT outbox_wait('0', 'agent:c') AS found;
ROLLBACK;
SELECT outbox_wait('0', 'agent:c') AS found;

-- a large timeout is accepted (and the wait still returns at once)
SELECT outbox_wait('100 years', 'agent:b') AS found;

--
-- Bad input: each error, its SQLSTATE
--
SELECT outbox_wait(NULL);
\echo :SQLSTATE
SELECT outbox_wait(NULL, 'agent:a');
\echo :SQLSTATE
SELECT outbox_wait('-1 second');
\echo :SQLSTATE
SELECT outbox_wait('-1 day', 'agent:a');
\echo :SQLSTATE
SELECT outbox_wait('1 second', '');
\echo :SQLSTATE
SELECT outbox_wait('0', '');
\echo :SQLSTATE
\set VERBOSITY sqlstate
SELECT outbox_wait(NULL);
SELECT outbox_wait('-0.001 s');
SELECT outbox_wait('1 s', '');
\set VERBOSITY default

-- statement_timeout interrupts the polling wait: 57014
SET statement_timeout = '300ms';
SELECT clock_timestamp() AS t0 \gset
SELECT outbox_wait('1 min', 'agent:nobody');
\echo :SQLSTATE
RESET statement_timeout;
SELECT clock_timestamp() - :'t0'::timestamptz < '30 s' AS interrupted_early;

--
-- outbox_activity() and the view need the preload: 55000
--
SELECT * FROM outbox_activity();
\echo :SQLSTATE
SELECT * FROM delivery_outbox_activity;
\echo :SQLSTATE
SELECT datname FROM delivery_outbox_activity;
\echo :SQLSTATE
\set VERBOSITY sqlstate
SELECT count(*) FROM outbox_activity();
\set VERBOSITY default
-- the view is the function's columns
SELECT attname, format_type(atttypid, atttypmod) AS type
  FROM pg_attribute
 WHERE attrelid = 'delivery_outbox_activity'::regclass AND attnum > 0
 ORDER BY attnum;

--
-- Settings of 1.1 without the preload
--
SELECT name, setting, unit, vartype, context, min_val, max_val, boot_val,
       enumvals
  FROM pg_settings
 WHERE name IN ('delivery_outbox.notify', 'delivery_outbox.sweep_interval',
                'delivery_outbox.reclaim_after', 'delivery_outbox.retain_acked')
 ORDER BY name;
-- the postmaster-only ones exist only when preloaded; the prefix is reserved
SELECT count(*) FROM pg_settings
 WHERE name IN ('delivery_outbox.database', 'delivery_outbox.handover_size');
SHOW delivery_outbox.database;
\echo :SQLSTATE
SET delivery_outbox.handover_size = 2048;
\echo :SQLSTATE

-- delivery_outbox.notify takes commit, deferred, off
SHOW delivery_outbox.notify;
SET delivery_outbox.notify = deferred;
SHOW delivery_outbox.notify;
SET delivery_outbox.notify = 'off';
SHOW delivery_outbox.notify;
SET delivery_outbox.notify = commit;
SHOW delivery_outbox.notify;
SET delivery_outbox.notify = 'sometimes';
\echo :SQLSTATE
SET delivery_outbox.notify = '';
\echo :SQLSTATE
BEGIN;
SET LOCAL delivery_outbox.notify = off;
SHOW delivery_outbox.notify;
COMMIT;
SHOW delivery_outbox.notify;
RESET delivery_outbox.notify;

-- the worker's settings are reload-only: SET refuses them (55P02)
SET delivery_outbox.sweep_interval = '1s';
\echo :SQLSTATE
SET delivery_outbox.reclaim_after = 5;
\echo :SQLSTATE
SET delivery_outbox.retain_acked = 5;
\echo :SQLSTATE

-- In every mode the rows are written, and outbox_wait sees them (it does
-- not depend on notifications).
SET delivery_outbox.notify = off;
SELECT outbox_enqueue('agent:off', 'work', '\x04') IS NOT NULL AS enqueued;
SELECT outbox_wait('0', 'agent:off') AS found;
SET delivery_outbox.notify = deferred;
SELECT count(*) FROM outbox_enqueue_batch(ARRAY['agent:deferred'], ARRAY['work'],
                                          ARRAY['\x05']::bytea[]);
SELECT outbox_wait('0', 'agent:deferred') AS found;
RESET delivery_outbox.notify;
SELECT recipient, delivery_state FROM delivery_outbox
 WHERE recipient IN ('agent:off', 'agent:deferred') ORDER BY id;

DROP EXTENSION delivery_outbox;
