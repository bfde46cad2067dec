--
-- scripts/fuzz/setup.sql -- the database scripts/fuzz.sh fuzzes
--
-- Run by the superuser in the fresh database "fuzz" (psql -v
-- ON_ERROR_STOP=1).  Makes outboxes of every kind, rows in every state on
-- each, the documented roles, and a scratch schema that the generator may
-- wreck (detach, drop, partition, re-create) without touching the outboxes
-- whose invariants are checked at the end.
--
--   outbox.delivery_outbox   the default outbox (extension in schema outbox)
--   t1.delivery_outbox       created in a schema
--   t2.delivery_outbox       created partitioned, 1000 ids a partition
--   t3.delivery_outbox       created, then ordered, with a delivery policy
--   t4.delivery_outbox       created, then converted by outbox_partition
--   seed.delivery_outbox     cloacina's migrations 027/028, then attached
--   scratch.*                the generator's to break
--
\set ON_ERROR_STOP 1
SET client_min_messages = warning;

CREATE SCHEMA outbox;
CREATE EXTENSION delivery_outbox SCHEMA outbox;
CREATE EXTENSION IF NOT EXISTS amcheck;

CREATE SCHEMA t1;
CREATE SCHEMA t2;
CREATE SCHEMA t3;
CREATE SCHEMA t4;
CREATE SCHEMA seed;
CREATE SCHEMA scratch;

SELECT outbox.outbox_create('t1');
SELECT outbox.outbox_create('t2', partition_rows => 1000);
SELECT outbox.outbox_create('t3', channel => 't3_wake');
SELECT outbox.outbox_configure('t3.delivery_outbox', ordered => true,
                               max_attempts => 4, backoff_base => '10 ms',
                               backoff_max => '1 second', ttl => '1 day');
SELECT outbox.outbox_create('t4');
SELECT outbox.outbox_configure('outbox.delivery_outbox', retain_acked => '1 hour');

-- the seed system's table, as its migrations 027 and 028 make it
CREATE TABLE seed.delivery_outbox (
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
CREATE INDEX idx_delivery_outbox_recipient_open
    ON seed.delivery_outbox (recipient, id) WHERE delivery_state <> 'acked';
CREATE INDEX idx_delivery_outbox_open_age
    ON seed.delivery_outbox (delivery_state, created_at) WHERE delivery_state <> 'acked';
CREATE FUNCTION seed.delivery_outbox_notify() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('delivery_outbox', NEW.id::text);
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER delivery_outbox_notify_trg
    AFTER INSERT ON seed.delivery_outbox
    FOR EACH ROW EXECUTE FUNCTION seed.delivery_outbox_notify();
-- rows of the seed's own making, before the take-over: a pending one, a
-- delivered one, an acked one, a released one
INSERT INTO seed.delivery_outbox
    (recipient, kind, payload, delivery_state, delivery_attempts,
     created_at, delivered_at, acked_at)
VALUES ('r:1', 'work', '\x01', 'pending', 0, now() AT TIME ZONE 'UTC', NULL, NULL),
       ('r:2', 'work', '\x02', 'delivered', 1, now() AT TIME ZONE 'UTC',
        now() AT TIME ZONE 'UTC', NULL),
       ('r:3', 'work', '\x03', 'acked', 1, now() AT TIME ZONE 'UTC',
        now() AT TIME ZONE 'UTC', now() AT TIME ZONE 'UTC'),
       ('r:4', 'work', '\x04', 'pending', 2, now() AT TIME ZONE 'UTC',
        now() AT TIME ZONE 'UTC', NULL);
SELECT outbox.outbox_attach('seed.delivery_outbox');
-- an enqueue from inside another's trigger: a row of kind 'chain' in the
-- seed's table enqueues one into t1
CREATE FUNCTION seed.chain() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM outbox.outbox_enqueue('chained:' || NEW.recipient, 'work', NEW.payload,
                                  outbox => 't1.delivery_outbox');
    RETURN NEW;
END
$$;
CREATE TRIGGER chain AFTER INSERT ON seed.delivery_outbox
    FOR EACH ROW WHEN (NEW.kind = 'chain') EXECUTE FUNCTION seed.chain();

-- the scratch schema: an outbox, a plain table of the right shape, one of
-- the wrong shape, a view, a sequence
SELECT outbox.outbox_create('scratch');
CREATE TABLE scratch.plain (LIKE outbox.delivery_outbox INCLUDING ALL);
CREATE TABLE scratch.wrong (id bigint, recipient int);
CREATE VIEW scratch.v AS SELECT * FROM t1.delivery_outbox;
CREATE SEQUENCE scratch.seq;

-- Rows in every state on every outbox: pending (plain, scheduled for
-- later, expiring soon, with a dedup key), delivered, acked, released with
-- an error (backed off), and dead letters (rejected).
CREATE FUNCTION pg_temp.fill(o regclass, n integer) RETURNS void
LANGUAGE plpgsql AS $f$
DECLARE
    ids bigint[];
BEGIN
    PERFORM outbox.outbox_enqueue_batch(
        array_agg('r:' || (i % 10)), array_agg('work'::text),
        array_agg(convert_to('setup ' || i, 'UTF8')),
        array_agg(CASE WHEN i % 3 = 0 THEN NULL ELSE 'tenant' || (i % 2) END),
        array_agg(CASE WHEN i % 20 = 1 THEN now() + interval '1 hour'
                       WHEN i % 20 = 2 THEN now() + interval '3 seconds' END),
        array_agg(CASE WHEN i % 20 = 3 THEN now() + interval '5 seconds' END),
        array_agg(CASE WHEN i % 7 = 0 THEN 'setup-key-' || i END),
        outbox => o)
      FROM generate_series(1, n) i;
    SELECT array_agg(id) INTO ids FROM outbox.outbox_claim(n / 2, outbox => o);
    PERFORM outbox.outbox_ack(ids[1:n / 5], outbox => o);
    PERFORM outbox.outbox_release(ids[n / 5 + 1:n / 5 + n / 20],
                                  retry_after => '2 seconds',
                                  error => 'setup: HTTP 503', outbox => o);
    PERFORM outbox.outbox_reject(ids[n / 5 + n / 20 + 1:n / 5 + n / 10],
                                 error => 'setup: HTTP 422', outbox => o);
END
$f$;
SELECT pg_temp.fill('outbox.delivery_outbox', 400);
SELECT pg_temp.fill('t1.delivery_outbox', 400);
SELECT pg_temp.fill('t2.delivery_outbox', 2500);
SELECT pg_temp.fill('t3.delivery_outbox', 400);
SELECT pg_temp.fill('t4.delivery_outbox', 400);
SELECT pg_temp.fill('seed.delivery_outbox', 400);
SELECT pg_temp.fill('scratch.delivery_outbox', 100);
-- t4: converted with its rows in every state
SELECT outbox.outbox_partition('t4.delivery_outbox', 500);

-- The documented roles (docs/reference.md, "Roles and GRANTs" and
-- "Per-tenant roles"), and two login roles: fuzz_relay (a tenant relay on
-- every outbox) and fuzz_app (producer and relay).
CREATE ROLE outbox_producer NOLOGIN;
GRANT USAGE ON SCHEMA outbox TO outbox_producer;
GRANT EXECUTE ON FUNCTION
    outbox.outbox_enqueue(text, text, bytea, text, timestamptz, timestamptz, text, regclass),
    outbox.outbox_enqueue_batch(text[], text[], bytea[], text[], timestamptz[], timestamptz[], text[], regclass)
  TO outbox_producer;
CREATE ROLE outbox_relay NOLOGIN;
GRANT USAGE ON SCHEMA outbox TO outbox_relay;
GRANT EXECUTE ON FUNCTION
    outbox.outbox_claim(integer, text, text, regclass),
    outbox.outbox_ack(bigint, text, regclass),
    outbox.outbox_ack(bigint[], text, regclass),
    outbox.outbox_ack_claim(bigint[], integer, text, text, regclass),
    outbox.outbox_release(bigint[], interval, text, regclass),
    outbox.outbox_reject(bigint[], text, regclass),
    outbox.outbox_next_due(text, regclass),
    outbox.outbox_reclaim(interval, integer, regclass),
    outbox.outbox_reclaim_recipient(text, text, regclass),
    outbox.outbox_replay(text, bigint, integer, text, regclass),
    outbox.outbox_horizon(regclass),
    outbox.outbox_wait(interval, text, regclass)
  TO outbox_relay;
CREATE ROLE outbox_monitor NOLOGIN;
GRANT USAGE ON SCHEMA outbox TO outbox_monitor;
GRANT EXECUTE ON FUNCTION outbox.outbox_stats(regclass), outbox.outbox_activity() TO outbox_monitor;
GRANT SELECT ON outbox.delivery_outbox_activity, outbox.delivery_outbox_tables TO outbox_monitor;

CREATE ROLE fuzz_relay LOGIN IN ROLE outbox_relay, outbox_monitor;
CREATE ROLE fuzz_app LOGIN IN ROLE outbox_relay, outbox_producer, outbox_monitor;
GRANT USAGE ON SCHEMA t1, t2, t3, t4, seed, scratch TO fuzz_relay, fuzz_app;
GRANT UPDATE, SELECT ON t1.delivery_outbox, t2.delivery_outbox, t3.delivery_outbox,
                        t4.delivery_outbox, seed.delivery_outbox,
                        scratch.delivery_outbox
  TO fuzz_relay, fuzz_app;
GRANT INSERT ON t1.delivery_outbox, t2.delivery_outbox, t3.delivery_outbox,
                t4.delivery_outbox, seed.delivery_outbox
  TO fuzz_app;
GRANT USAGE ON SEQUENCE seed.delivery_outbox_id_seq TO fuzz_app;

-- No statement may hang the run.
ALTER DATABASE fuzz SET statement_timeout = '10s';
ALTER DATABASE fuzz SET lock_timeout = '3s';
ALTER DATABASE fuzz SET idle_in_transaction_session_timeout = '60s';
