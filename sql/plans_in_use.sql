--
-- plans_in_use.sql: a statement's kept plan is never freed while it runs
-- (issue 21).  A trigger of the claim's UPDATE renames the outbox's schema
-- and grants on the table: the next row's state guard finds the outbox
-- renamed and drops its statements, among them the one running.  It is
-- retired, freed once no statement runs; the claim completes and the next
-- call prepares its statements under the new name.
--
CREATE EXTENSION delivery_outbox;
CREATE ROLE regress_plans_reader;
CREATE SCHEMA plans_a;
SELECT outbox_create('plans_a') AS t \gset
SELECT outbox_enqueue('agent:p', 'work', '\x01', outbox => :'t') > 0 AS enqueued
  FROM generate_series(1, 3);

CREATE FUNCTION plans_rename() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT FROM pg_namespace WHERE nspname = 'plans_a') THEN
        ALTER SCHEMA plans_a RENAME TO plans_b;
        -- a relcache invalidation of the table: its guard looks again
        GRANT SELECT ON plans_b.delivery_outbox TO regress_plans_reader;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER a_plans_rename BEFORE UPDATE ON plans_a.delivery_outbox
    FOR EACH ROW EXECUTE FUNCTION plans_rename();

SELECT id, delivery_state FROM outbox_claim(10, outbox => :'t') ORDER BY id;
SELECT count(*) AS renamed FROM pg_class WHERE oid = 'plans_b.delivery_outbox'::regclass;
-- the statements come back under the new name
SELECT outbox_ack(ARRAY[1, 2, 3]::bigint[], outbox => 'plans_b.delivery_outbox') AS acked;
SELECT outbox_enqueue('agent:p', 'work', '\x02', outbox => 'plans_b.delivery_outbox') AS id;
SELECT id, delivery_state FROM outbox_claim(10, outbox => 'plans_b.delivery_outbox') ORDER BY id;

DROP SCHEMA plans_b CASCADE;
DROP FUNCTION plans_rename();
DROP ROLE regress_plans_reader;
DROP EXTENSION delivery_outbox;
