-- bench/e3_enqueue.sql -- E3/E4 and the L1 producers: one outbox_enqueue per
-- transaction; run.sh picks delivery_outbox.notify through PGOPTIONS.
\set r random(0, 99)
SELECT outbox_enqueue('agent:' || :r::text, 'work', '\x000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f'::bytea);
