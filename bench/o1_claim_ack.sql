-- bench/o1_claim_ack.sql -- O1/O2 (bench/ordered.sh): a relay's loop on the
-- outbox in variable tbl: claim up to 100 rows from the whole table and ack
-- the claimed ids, in one transaction.
BEGIN;
SELECT coalesce(pg_catalog.array_agg(id), '{}') AS ids
  FROM outbox_claim(100, outbox => :tbl::regclass) \gset
SELECT outbox_ack(:ids::bigint[], outbox => :tbl::regclass);
END;
