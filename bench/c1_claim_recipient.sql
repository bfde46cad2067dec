-- bench/c1_claim_recipient.sql -- C1 per recipient: claim 10 of one of the
-- 100 recipients' rows (one transaction), ack them as that recipient.
\set r random(0, 99)
SELECT coalesce(pg_catalog.array_agg(id), '{}') AS ids
  FROM outbox_claim(10, 'agent:' || :r::text) \gset
SELECT outbox_ack(:ids::bigint[], 'agent:' || :r::text);
