-- bench/peers/produce_outbox.sql -- the producers for delivery_outbox: one
-- order and one outbox_enqueue to one of 100 recipients per transaction.
\set r random(0, 99)
BEGIN;
INSERT INTO orders (customer, amount) VALUES (:r::int, 42.00);
SELECT outbox_enqueue('agent:' || :r::int, 'order.created',
    convert_to(json_build_object('order', currval('orders_id_seq'), 'customer', :r::int,
        'note', 'an order was created; tell the recipient about it, once')::text, 'UTF8'));
END;
