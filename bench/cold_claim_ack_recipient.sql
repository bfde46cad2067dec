-- bench/cold_claim_ack_recipient.sql -- bench/cold_stats.sh: claim 10 rows
-- of one of the 100 recipients from the outbox in variable tbl and ack
-- them, in one transaction.
\set r random(0, 99)
BEGIN;
SELECT coalesce(pg_catalog.array_agg(id), '{}') AS ids
  FROM outbox_claim(10, recipient => 'agent:' || :r::text, outbox => :tbl::regclass) \gset
SELECT outbox_ack(:ids::bigint[], 'agent:' || :r::text, outbox => :tbl::regclass);
END;
