-- bench/e5_enqueue_batch.sql -- E5: outbox_enqueue_batch of 100 rows per
-- transaction (one recipient per batch).
\set r random(0, 99)
SELECT pg_catalog.count(*) FROM outbox_enqueue_batch(
    pg_catalog.array_fill('agent:' || :r::text, ARRAY[100]),
    pg_catalog.array_fill('work'::text, ARRAY[100]),
    pg_catalog.array_fill('\x000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f'::bytea, ARRAY[100]));
