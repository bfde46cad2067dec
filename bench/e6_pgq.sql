-- bench/e6_pgq.sql -- E6: PgQ's pgq.insert_event into queue bench_q (no
-- ticker runs, so no per-event wake-up either); the payload as hex text.
\set r random(0, 99)
SELECT pgq.insert_event('bench_q', 'work',
    'agent:' || :r::text || ' 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f');
