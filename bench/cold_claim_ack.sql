-- bench/cold_claim_ack.sql -- bench/cold_stats.sh: claim 10 rows from the
-- whole outbox in variable tbl and ack them, in one transaction.
BEGIN;
SELECT coalesce(pg_catalog.array_agg(id), '{}') AS ids
  FROM outbox_claim(10, outbox => :tbl::regclass) \gset
SELECT outbox_ack(:ids::bigint[], outbox => :tbl::regclass);
END;
