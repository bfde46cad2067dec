-- bench/o4_enqueue.sql -- O4 (bench/ordered.sh): one outbox_enqueue per
-- transaction into the outbox in variable tbl (ordered or not), for one of
-- 100 recipients, the 64-byte payload of e3_enqueue.sql.
\set r random(0, 99)
SELECT outbox_enqueue('agent:' || :r::text, 'work', '\x000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f'::bytea, outbox => :tbl::regclass);
