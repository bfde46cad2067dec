--
-- cold_statistics.sql: scans that cost their batch whatever the statistics say (issue 22): the
-- claims (whole outbox, per recipient, per tenant, scheduled rows first),
-- outbox_wait's probe, the reclaim and the expiry walk their partial index
-- in order and stop after the batch, on a table nobody analyzed and on one
-- analyzed while empty and filled since.  A plan that scans every pending
-- row (a bitmap heap scan and a sort, as the planner picks with default
-- selectivities) reads every page of the table; each check below allows a
-- tenth of them.
--
CREATE EXTENSION delivery_outbox;
SET client_min_messages = warning;
CREATE SCHEMA cold;
SELECT outbox_create('cold') IS NOT NULL AS created;
SELECT outbox_create('cold', 'analyzed_empty') IS NOT NULL AS created;
ALTER TABLE cold.delivery_outbox SET (autovacuum_enabled = false);
ALTER TABLE cold.analyzed_empty SET (autovacuum_enabled = false);
ANALYZE cold.analyzed_empty;

-- 100,000 pending rows for 100 recipients in 10 tenants, 20,000 delivered
-- long ago, 1,000 scheduled rows due and 20,000 with a far expiry
-- (each row inserted in its state, as a restore does: no dead row versions,
-- whose index entries any scan, however planned, would walk past)
CREATE FUNCTION cold_fill(t regclass) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format($q$
        INSERT INTO %s (recipient, kind, payload, tenant_id, delivery_state,
                        delivery_attempts, delivered_at)
        SELECT 'agent:' || (g %% 100), 'work', '\x00', 'tenant' || (g %% 10),
               'delivered', 1, now() - interval '1 day'
          FROM generate_series(1, 20000) g$q$, t);
    EXECUTE format($q$
        INSERT INTO %s (recipient, kind, payload, tenant_id, expires_at)
        SELECT 'agent:' || (g %% 100), 'work', '\x00', 'tenant' || (g %% 10),
               CASE WHEN g %% 5 = 0 THEN now() + interval '1 year' END
          FROM generate_series(1, 100000) g$q$, t);
    EXECUTE format($q$
        INSERT INTO %s (recipient, kind, payload, not_before)
        SELECT 'agent:due', 'work', '\x00', now() - interval '1 hour'
          FROM generate_series(1, 1000)$q$, t);
END
$$;
SELECT cold_fill('cold.delivery_outbox');
SELECT cold_fill('cold.analyzed_empty');
-- neither has statistics for its rows
SELECT c.relname, c.reltuples < 1 AS no_statistics, c.relpages < 10 AS pages_unknown
  FROM pg_class c
 WHERE c.oid IN ('cold.delivery_outbox'::regclass, 'cold.analyzed_empty'::regclass)
 ORDER BY 1;

-- the heap blocks a call reads, against a tenth of the table's pages
CREATE FUNCTION cold_blocks(t regclass, call text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    before bigint := pg_stat_get_xact_blocks_fetched(t);
    used bigint;
    pages bigint := pg_relation_size(t) / current_setting('block_size')::int;
BEGIN
    EXECUTE call;
    used := pg_stat_get_xact_blocks_fetched(t) - before;
    RETURN CASE WHEN used < pages / 10 THEN 'batch-sized'
                ELSE format('%s of %s pages', used, pages) END;
END
$$;

BEGIN;
SELECT t AS outbox,
       cold_blocks(t, format('SELECT count(*) FROM outbox_claim(10, outbox => %L)', t)) AS claim,
       cold_blocks(t, format('SELECT count(*) FROM outbox_claim(10, recipient => %L, outbox => %L)', 'agent:7', t)) AS claim_recipient,
       cold_blocks(t, format('SELECT count(*) FROM outbox_claim(10, tenant_id => %L, outbox => %L)', 'tenant3', t)) AS claim_tenant,
       cold_blocks(t, format('SELECT count(*) FROM outbox_claim(10, recipient => %L, outbox => %L)', 'agent:due', t)) AS claim_due,
       cold_blocks(t, format('SELECT outbox_wait(%L, outbox => %L)', '0 s', t)) AS wait_probe,
       cold_blocks(t, format('SELECT outbox_wait(%L, recipient => %L, outbox => %L)', '0 s', 'agent:9', t)) AS wait_probe_recipient,
       cold_blocks(t, format('SELECT outbox_reclaim(%L, 10, outbox => %L)', '1 hour', t)) AS reclaim,
       cold_blocks(t, format('SELECT outbox_expire(10, outbox => %L)', t)) AS expire
  FROM unnest(ARRAY['cold.delivery_outbox'::regclass, 'cold.analyzed_empty'::regclass]) t
 ORDER BY 1;
ROLLBACK;

-- and the claims did what they always do: the oldest pending rows first
SELECT (SELECT array_agg(id ORDER BY id) FROM outbox_claim(3, outbox => 'cold.delivery_outbox')) AS claimed;

-- The rows-by-id statements (the ack's lock and update, the ordered claim's)
-- are walks too: a session that ran them while its outbox was nearly empty
-- (a relay started before the first burst) has its plans cached from then
-- (a generic plan for arrays of a few ids beats the custom ones there), and
-- a sequential scan kept from an empty table would read every page of the
-- full one at each ack.
SELECT outbox_create('cold', 'warm') IS NOT NULL AS created;
ALTER TABLE cold.warm SET (autovacuum_enabled = false);
SELECT outbox_create('cold', 'warm_ordered') IS NOT NULL AS created;
SELECT outbox_configure('cold.warm_ordered', ordered => true) IS NOT NULL AS configured;
ALTER TABLE cold.warm_ordered SET (autovacuum_enabled = false);
CREATE FUNCTION cold_rounds(t regclass, n int) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    acked bigint := 0;
    ids bigint[];
BEGIN
    FOR i IN 1 .. n LOOP
        PERFORM outbox_enqueue('agent:' || g, 'work', '\x00', outbox => t)
           FROM generate_series(1, 4) g;
        SELECT array_agg(id) INTO ids FROM outbox_claim(4, outbox => t);
        acked := acked + outbox_ack(ids, outbox => t);
    END LOOP;
    RETURN acked;
END
$$;
SELECT cold_rounds('cold.warm', 10) AS acked, cold_rounds('cold.warm_ordered', 10) AS acked_ordered;
SELECT cold_fill('cold.warm');
SELECT cold_fill('cold.warm_ordered');
-- the ids to ack are read before, so that only the ack's own reads count
SELECT array_agg(id)::text AS warm_ids FROM outbox_claim(10, outbox => 'cold.warm') \gset
SELECT array_agg(id)::text AS ordered_ids FROM outbox_claim(10, outbox => 'cold.warm_ordered') \gset
SELECT cold_blocks('cold.warm', format('SELECT outbox_ack(%L::bigint[], outbox => %L)', :'warm_ids', 'cold.warm')) AS ack,
       cold_blocks('cold.warm_ordered', format('SELECT outbox_ack(%L::bigint[], outbox => %L)', :'ordered_ids', 'cold.warm_ordered')) AS ordered_ack;
SELECT cold_rounds('cold.warm', 1) AS acked_after;
DROP FUNCTION cold_rounds(regclass, int);
DROP SCHEMA cold CASCADE;
DROP FUNCTION cold_fill(regclass);
DROP FUNCTION cold_blocks(regclass, text);
DROP EXTENSION delivery_outbox;
