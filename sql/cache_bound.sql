--
-- cache_bound.sql: a session keeps the prepared statements of at most
-- delivery_outbox.max_cached_outboxes outboxes; past it, those of the one
-- used least recently go, and are prepared again at its next use.
--
CREATE EXTENSION delivery_outbox;
SET client_min_messages = warning;
DO $$
BEGIN
    FOR i IN 1..5 LOOP
        EXECUTE format('CREATE SCHEMA cache_t%s', i);
        PERFORM outbox_create(format('cache_t%s', i));
    END LOOP;
END
$$;
RESET client_min_messages;

-- the outboxes whose statements this session keeps, from the plan cache
CREATE FUNCTION cached_outboxes() RETURNS text[] LANGUAGE sql AS $$
    SELECT coalesce(array_agg(DISTINCT m[1] ORDER BY m[1]), '{}')
      FROM pg_backend_memory_contexts c,
           regexp_matches(c.ident, '(cache_t[0-9]+)\.delivery_outbox') m
     WHERE c.name = 'CachedPlanSource'
$$;
CREATE FUNCTION work_on(n int) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    t regclass := format('cache_t%s.delivery_outbox', n)::regclass;
BEGIN
    PERFORM outbox_enqueue('agent:a', 'work', '\x01', outbox => t);
    PERFORM count(*) FROM outbox_claim(10, outbox => t);
END
$$;

SET delivery_outbox.max_cached_outboxes = 2;
SELECT work_on(1), work_on(2), work_on(3);
SELECT cached_outboxes();
-- the first again: prepared anew, the least recently used (2) gives way
SELECT work_on(1);
SELECT cached_outboxes();
SELECT (SELECT count(*) FROM cache_t1.delivery_outbox WHERE delivery_state = 'delivered') AS t1_delivered;
-- a larger bound keeps them all
SET delivery_outbox.max_cached_outboxes = 10;
SELECT work_on(4), work_on(5), work_on(2);
SELECT cached_outboxes();
\set VERBOSITY sqlstate
SET delivery_outbox.max_cached_outboxes = 0;
\set VERBOSITY default
RESET delivery_outbox.max_cached_outboxes;

DROP FUNCTION work_on(int);
DROP FUNCTION cached_outboxes();
DO $$
BEGIN
    FOR i IN 1..5 LOOP
        EXECUTE format('DROP SCHEMA cache_t%s CASCADE', i);
    END LOOP;
END
$$;
DROP EXTENSION delivery_outbox;
