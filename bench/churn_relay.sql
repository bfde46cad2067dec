-- bench/churn_relay.sql -- R1 (bench/partitions.sh): a relay on the outbox in
-- variable tbl: claim up to 100 rows and ack them, in one transaction; when
-- fewer than 100 came back (the relay has caught up with the producers), it
-- waits 20 ms before its next claim, as a polling relay does.
BEGIN;
SELECT coalesce(pg_catalog.array_agg(id), '{}') AS ids, pg_catalog.count(*) AS n
  FROM outbox_claim(100, outbox => :tbl::regclass) \gset
SELECT outbox_ack(:ids::bigint[], outbox => :tbl::regclass);
END;
\if :n < 100
\sleep 20 ms
\endif
