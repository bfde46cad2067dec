-- console/test/big.sql: a large outbox, big.delivery_outbox, for
-- console/test/explain.js and console/bench.sh: :rows rows (default
-- 200,000) and :dead dead letters (default 20,000).  Mostly acked, as an
-- outbox that keeps its acked rows is: 90 % acked, 2.5 % delivered, 7.5 %
-- pending (a fifteenth of those scheduled for later), over 500 recipients;
-- analyzed.  Rows go in by plain INSERT in their final state, which the
-- state guard accepts when the bookkeeping agrees (a restore's path); the
-- dead letters straight into the dead-letter table.
\set ON_ERROR_STOP on
\if :{?rows}
\else
\set rows 200000
\endif
\if :{?dead}
\else
\set dead 20000
\endif
SET client_min_messages = warning;
CREATE SCHEMA big;
SELECT outbox.outbox_create('big');
SELECT (:rows * 0.9)::bigint AS acked_to, (:rows * 0.925)::bigint AS delivered_to,
       (:rows * 0.995)::bigint AS due_to \gset
INSERT INTO big.delivery_outbox (id, recipient, kind, tenant_id, payload, delivery_state,
                                 delivery_attempts, created_at, delivered_at, acked_at)
SELECT g, 'agent:' || (g % 500), 'work', CASE WHEN g % 3 = 0 THEN 'acme' END, '\x00',
       'acked', 1, now() - interval '2 days' + g * interval '1 ms',
       now() - interval '2 days' + g * interval '1 ms', now() - interval '1 day'
  FROM generate_series(1, :acked_to) g;
INSERT INTO big.delivery_outbox (id, recipient, kind, payload, delivery_state,
                                 delivery_attempts, created_at, delivered_at)
SELECT g, 'agent:' || (g % 500), 'work', '\x00', 'delivered', 1,
       now() - interval '1 hour', now() - interval '30 minutes' + g * interval '1 us'
  FROM generate_series(:acked_to + 1, :delivered_to) g;
INSERT INTO big.delivery_outbox (id, recipient, kind, payload, created_at, not_before)
SELECT g, 'agent:' || (g % 500), 'work', '\x00', now() - interval '10 minutes',
       CASE WHEN g > :due_to THEN now() + interval '1 hour' END
  FROM generate_series(:delivered_to + 1, :rows) g;
SELECT pg_catalog.setval(pg_get_serial_sequence('big.delivery_outbox', 'id'), :rows);
INSERT INTO big.delivery_outbox_dead (id, recipient, kind, payload, delivery_state,
                                      delivery_attempts, created_at, delivered_at,
                                      last_error, dead_at, dead_reason)
SELECT :rows + g, 'agent:' || (g % 500), CASE WHEN g % 7 = 0 THEN 'invoice' ELSE 'work' END,
       '\x00', 'delivered', 3, now() - interval '3 hours', now() - interval '2 hours',
       'HTTP ' || (500 + g % 4), now() - interval '1 hour' + g * interval '1 us',
       CASE WHEN g % 2 = 0 THEN 'max_attempts' ELSE 'rejected' END
  FROM generate_series(1, :dead) g;
GRANT USAGE ON SCHEMA big TO console_monitor;
GRANT SELECT (id, recipient, kind, tenant_id, delivery_state, delivery_attempts,
              created_at, delivered_at, acked_at, not_before, expires_at)
  ON big.delivery_outbox TO console_monitor;
GRANT SELECT, INSERT, UPDATE, DELETE ON big.delivery_outbox TO console_operator;
GRANT SELECT ON big.delivery_outbox_dead TO console_operator;
VACUUM ANALYZE big.delivery_outbox, big.delivery_outbox_dead;
