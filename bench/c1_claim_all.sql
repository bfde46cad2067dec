-- bench/c1_claim_all.sql -- C1 whole table: claim 10 (one transaction),
-- ack them (the next), as a relay does.
SELECT coalesce(pg_catalog.array_agg(id), '{}') AS ids
  FROM outbox_claim(10) \gset
SELECT outbox_ack(:ids::bigint[]);
