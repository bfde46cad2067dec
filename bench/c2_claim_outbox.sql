-- bench/c2_claim_outbox.sql -- C2: claim 10 from the created outbox
-- t.target (one transaction), ack them (the next), as a relay does.
SELECT coalesce(pg_catalog.array_agg(id), '{}') AS ids
  FROM outbox_claim(10, outbox => 't.target') \gset
SELECT outbox_ack(:ids::bigint[], outbox => 't.target');
