-- bench/o3_enqueue.sql -- O3 (bench/ordered.sh): the producers, one
-- outbox_enqueue per transaction into the default outbox (made ordered), for
-- one of 100 recipients; bench/relay.c claims and acks them.
\set r random(0, 99)
SELECT outbox_enqueue('agent:' || :r::text, 'work', '\x000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f'::bytea);
