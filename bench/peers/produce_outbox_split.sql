-- bench/peers/produce_outbox_split.sql -- the producers for outbox_split:
-- produce_outbox.sql's transaction, the enqueue into one of four outboxes
-- by recipient (r % 4), as produce_pgq.sql routes into PgQ's four queues.
\set r random(0, 99)
BEGIN;
INSERT INTO orders (customer, amount) VALUES (:r::int, 42.00);
SELECT outbox_enqueue('agent:' || :r::int, 'order.created',
    convert_to(json_build_object('order', currval('orders_id_seq'), 'customer', :r::int,
        'note', 'an order was created; tell the recipient about it, once')::text, 'UTF8'),
    outbox => ('peers.q' || (:r::int % 4))::regclass);
END;
