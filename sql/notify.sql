--
-- notify.sql: the GUCs behind the wake-ups
--
-- Whether a NOTIFY reaches a listener, and with what payload, is for the
-- isolation specs (psql prints the sender's PID); this file checks the
-- settings and the notification-queue guard's log line.
--
CREATE EXTENSION delivery_outbox;

\set VERBOSITY default
\set SHOW_CONTEXT never

SELECT name, unit, vartype, context, min_val, max_val, boot_val
  FROM pg_settings WHERE name LIKE 'delivery_outbox.%' ORDER BY name;

--
-- delivery_outbox.channel
--
SHOW delivery_outbox.channel;
SET delivery_outbox.channel = 'outbox_wake';
SHOW delivery_outbox.channel;
SELECT outbox_enqueue('agent:a', 'work', '\x01');
RESET delivery_outbox.channel;
SHOW delivery_outbox.channel;
BEGIN;
SET LOCAL delivery_outbox.channel = 'outbox_tx';
SHOW delivery_outbox.channel;
COMMIT;
SHOW delivery_outbox.channel;
-- an empty channel is refused
SET delivery_outbox.channel = '';
\echo :SQLSTATE
-- so is one longer than an identifier
SET delivery_outbox.channel = 'c234567890123456789012345678901234567890123456789012345678901234';
\echo :SQLSTATE
SET delivery_outbox.channel = 'c23456789012345678901234567890123456789012345678901234567890123';
SHOW delivery_outbox.channel;
RESET delivery_outbox.channel;
SHOW delivery_outbox.channel;

--
-- delivery_outbox.max_payload_size
--
SHOW delivery_outbox.max_payload_size;
SET delivery_outbox.max_payload_size = '16B';
SHOW delivery_outbox.max_payload_size;
SET delivery_outbox.max_payload_size = 2048;
SHOW delivery_outbox.max_payload_size;
SET delivery_outbox.max_payload_size = '2MB';
SHOW delivery_outbox.max_payload_size;
-- (the message of an out-of-range setting is PostgreSQL's, and its
-- wording changed in 18: the code alone)
\set VERBOSITY sqlstate
SET delivery_outbox.max_payload_size = -1;
\echo :SQLSTATE
SET delivery_outbox.max_payload_size = '1GB';
\echo :SQLSTATE
\set VERBOSITY default
SET delivery_outbox.max_payload_size = 'lots';
\echo :SQLSTATE
SHOW delivery_outbox.max_payload_size;
RESET delivery_outbox.max_payload_size;
SHOW delivery_outbox.max_payload_size;

--
-- delivery_outbox.notify_queue_limit
--
SHOW delivery_outbox.notify_queue_limit;
SET delivery_outbox.notify_queue_limit = 0;
SHOW delivery_outbox.notify_queue_limit;
SET delivery_outbox.notify_queue_limit = 1;
SHOW delivery_outbox.notify_queue_limit;
SET delivery_outbox.notify_queue_limit = 1.5;
\echo :SQLSTATE
SET delivery_outbox.notify_queue_limit = -0.1;
\echo :SQLSTATE
SHOW delivery_outbox.notify_queue_limit;
RESET delivery_outbox.notify_queue_limit;
SHOW delivery_outbox.notify_queue_limit;

-- the prefix is reserved
SET delivery_outbox.chanel = 'typo';
\echo :SQLSTATE

-- only a superuser sets them; anyone may read them
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_outbox_guc;
RESET client_min_messages;
CREATE ROLE regress_outbox_guc;
SET ROLE regress_outbox_guc;
SHOW delivery_outbox.channel;
SET delivery_outbox.channel = 'mine';
\echo :SQLSTATE
SET delivery_outbox.max_payload_size = '1GB';
\echo :SQLSTATE
SET delivery_outbox.notify_queue_limit = 1;
\echo :SQLSTATE
RESET ROLE;
DROP ROLE regress_outbox_guc;

--
-- Above notify_queue_limit the wake-up is skipped, the row kept, and the
-- skip logged once (until a wake-up goes out again).  A limit of 0 skips
-- every one.  LOG lines reach this client with client_min_messages = log.
--
SET log_statement = 'none';
SET log_duration = off;
SET log_min_duration_statement = -1;
SET client_min_messages = log;
SET delivery_outbox.notify_queue_limit = 0;
SELECT outbox_enqueue('agent:q', 'work', '\x01') AS q1 \gset
SELECT outbox_enqueue('agent:q', 'work', '\x02') > 0 AS enqueued;
SELECT count(*) FROM outbox_claim(10, 'agent:q');
SELECT outbox_release(ARRAY[:q1]::bigint[]);
SELECT id - :q1 AS n, recipient, delivery_state FROM delivery_outbox
 WHERE recipient = 'agent:q' ORDER BY id;
-- a wake-up that goes out re-arms the log line
SET delivery_outbox.notify_queue_limit = 1;
SELECT outbox_enqueue('agent:q', 'work', '\x03') > 0 AS enqueued;
SET delivery_outbox.notify_queue_limit = 0;
SELECT outbox_enqueue('agent:q', 'work', '\x04') > 0 AS enqueued;
SELECT outbox_enqueue('agent:q', 'work', '\x05') > 0 AS enqueued;
RESET delivery_outbox.notify_queue_limit;
RESET client_min_messages;
SELECT count(*) FROM delivery_outbox WHERE recipient = 'agent:q';

DROP EXTENSION delivery_outbox;
