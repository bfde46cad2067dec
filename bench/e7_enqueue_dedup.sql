-- bench/e7_enqueue_dedup.sql -- P1: E3 with a dedup_key, unique per row (a
-- random 63-bit number drawn by pgbench, so the key's making costs the
-- server nothing): every call inserts, the cost of the key itself.
\set r random(0, 99)
\set k random(1, 9223372036854775806)
SELECT outbox_enqueue('agent:' || :r::text, 'work', '\x000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f'::bytea, dedup_key => :k::text);
