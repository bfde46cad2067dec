-- bench/p3_produce.sql -- P3: one row for a healthy recipient of the outbox in variable tbl
\set r random(0, 9)
SELECT outbox_enqueue('agent:' || :r::text, 'work', '\x01'::bytea, outbox => :tbl::regclass);
