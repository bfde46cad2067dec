-- bench/e1_insert.sql -- E1, the reference: a raw INSERT into bench_plain,
-- a table of delivery_outbox's shape, defaults and indexes, with no trigger.
\set r random(0, 99)
INSERT INTO bench_plain (recipient, kind, payload)
VALUES ('agent:' || :r::text, 'work', '\x000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f'::bytea);
