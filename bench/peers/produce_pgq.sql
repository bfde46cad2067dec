-- bench/peers/produce_pgq.sql -- the producers for PgQ: one order and one
-- pgq.insert_event per transaction, into queue peers_q0..peers_q3 by
-- recipient (one consumer per queue: PgQ gives every consumer of a queue
-- every event), the recipient in ev_extra1.
\set r random(0, 99)
BEGIN;
INSERT INTO orders (customer, amount) VALUES (:r::int, 42.00);
SELECT pgq.insert_event('peers_q' || (:r::int % 4), 'order.created',
    json_build_object('order', currval('orders_id_seq'), 'customer', :r::int,
        'note', 'an order was created; tell the recipient about it, once')::text,
    'agent:' || :r::int, NULL, NULL, NULL);
END;
