-- console/test/fixture.sql: outboxes with rows in every state, dead letters
-- of every reason, a monitoring role and an operator role (docs/reference.md
-- "Roles and GRANTs"), for console/test.sh and for trying the console out.
--
-- shop.delivery_outbox (max_attempts 2), in the end:
--   acked      1..10
--   dead       11..14 rejected, 17..18 max_attempts, 63 expired
--   pending    15..16 (released with retry_after: scheduled), 31..61, 62 (binary payload)
--   delivered  19..30
-- outbox.delivery_outbox (the default outbox): 3 pending, 2 delivered, 1 acked.
\set ON_ERROR_STOP on
SET client_min_messages = warning;

CREATE SCHEMA outbox;
CREATE EXTENSION delivery_outbox SCHEMA outbox;
CREATE SCHEMA shop;
SELECT outbox.outbox_create('shop');
SELECT outbox.outbox_configure('shop.delivery_outbox', max_attempts => 2);

SELECT count(*) FROM outbox.outbox_enqueue_batch(
    ARRAY(SELECT 'agent:' || (g % 5) FROM generate_series(1, 61) g),
    ARRAY(SELECT CASE WHEN g % 3 = 0 THEN 'invoice' ELSE 'work' END FROM generate_series(1, 61) g),
    ARRAY(SELECT convert_to('{"order": ' || g || ', "note": "café"}', 'UTF8') FROM generate_series(1, 61) g),
    tenant_ids => ARRAY(SELECT CASE WHEN g % 2 = 0 THEN 'acme' END FROM generate_series(1, 61) g),
    outbox => 'shop.delivery_outbox');
-- id 62: a payload that is not UTF-8
SELECT outbox.outbox_enqueue('agent:bin', 'blob', '\xdeadbeefff00'::bytea, outbox => 'shop.delivery_outbox');
SELECT count(*) FROM outbox.outbox_claim(30, outbox => 'shop.delivery_outbox');          -- 1..30
SELECT outbox.outbox_ack(ARRAY(SELECT generate_series(1, 10))::bigint[], outbox => 'shop.delivery_outbox');
SELECT outbox.outbox_reject(ARRAY[11, 12, 13, 14]::bigint[], error => 'HTTP 422: unknown kind',
                            outbox => 'shop.delivery_outbox');
SELECT outbox.outbox_release(ARRAY[15, 16]::bigint[], retry_after => '1 hour', error => 'HTTP 503',
                             outbox => 'shop.delivery_outbox');
SELECT outbox.outbox_release(ARRAY[17, 18]::bigint[], error => 'connection reset',
                             outbox => 'shop.delivery_outbox');
SELECT count(*) FROM outbox.outbox_claim(2, outbox => 'shop.delivery_outbox');           -- 17, 18 again
SELECT outbox.outbox_release(ARRAY[17, 18]::bigint[], error => 'timeout after 30 s',
                             outbox => 'shop.delivery_outbox');                           -- max_attempts
-- id 63: expires at once, then the expiry sweep by call
SELECT outbox.outbox_enqueue('agent:late', 'work', convert_to('too late', 'UTF8'),
                             expires_at => now() - interval '1 second', outbox => 'shop.delivery_outbox');
SELECT outbox.outbox_expire(outbox => 'shop.delivery_outbox');

-- the default outbox
SELECT count(*) FROM outbox.outbox_enqueue_batch(ARRAY['svc:a', 'svc:a', 'svc:b', 'svc:b', 'svc:c', 'svc:c'],
                                                 ARRAY['work', 'work', 'work', 'work', 'work', 'work'],
                                                 ARRAY['\x01', '\x02', '\x03', '\x04', '\x05', '\x06']::bytea[]);
SELECT count(*) FROM outbox.outbox_claim(3);
SELECT outbox.outbox_ack(1);

-- monitoring: statistics, the views, the tables without payloads
CREATE ROLE console_monitor LOGIN;
GRANT USAGE ON SCHEMA outbox, shop TO console_monitor;
GRANT EXECUTE ON FUNCTION outbox.outbox_stats(regclass), outbox.outbox_activity() TO console_monitor;
GRANT SELECT ON outbox.delivery_outbox_activity, outbox.delivery_outbox_tables TO console_monitor;
GRANT SELECT (id, recipient, kind, tenant_id, delivery_state, delivery_attempts,
              created_at, delivered_at, acked_at, not_before, expires_at)
  ON outbox.delivery_outbox, shop.delivery_outbox TO console_monitor;

-- operator: the monitor's rights, every column, the console's actions
CREATE ROLE console_operator LOGIN;
GRANT console_monitor TO console_operator;
GRANT EXECUTE ON FUNCTION
    outbox.outbox_redrive(bigint[], regclass),
    outbox.outbox_reject(bigint[], text, regclass),
    outbox.outbox_release(bigint[], interval, text, regclass),
    outbox.outbox_reclaim_recipient(text, text, regclass),
    outbox.outbox_purge(interval, regclass)
  TO console_operator;
GRANT SELECT, INSERT, UPDATE, DELETE ON outbox.delivery_outbox, shop.delivery_outbox TO console_operator;
GRANT SELECT ON outbox.delivery_outbox_dead, shop.delivery_outbox_dead TO console_operator;
