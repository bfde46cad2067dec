-- bench/p3_relay.sql -- P3: a relay on outbox (variable tbl) whose pushes to the
-- recipient "failing" all fail (released) and to everyone else succeed (acked).
SELECT coalesce(pg_catalog.array_agg(id) FILTER (WHERE recipient = 'failing'), '{}') AS bad,
       coalesce(pg_catalog.array_agg(id) FILTER (WHERE recipient <> 'failing'), '{}') AS good
  FROM outbox_claim(10, outbox => :tbl::regclass) \gset
SELECT outbox_release(:bad::bigint[], error => 'recipient down', outbox => :tbl::regclass);
SELECT outbox_ack(:good::bigint[], outbox => :tbl::regclass);
\sleep 20 ms
