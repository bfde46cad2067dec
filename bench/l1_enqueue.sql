-- bench/l1_enqueue.sql -- the L1 producers: one outbox_enqueue per
-- transaction, the payload carrying the producer's own transaction id (as
-- text), so that the latency can be measured from that transaction's commit
-- (pg_xact_commit_timestamp; the bench cluster runs with
-- track_commit_timestamp = on).  run.sh picks delivery_outbox.notify
-- through PGOPTIONS.
\set r random(0, 99)
SELECT outbox_enqueue('agent:' || :r::text, 'work', convert_to(txid_current()::text, 'UTF8'));
