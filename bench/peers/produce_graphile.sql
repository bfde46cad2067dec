-- bench/peers/produce_graphile.sql -- the producers for graphile-worker: one
-- order and one graphile_worker.add_job per transaction (add_job NOTIFYs
-- jobs:insert itself).
\set r random(0, 99)
BEGIN;
INSERT INTO orders (customer, amount) VALUES (:r::int, 42.00);
SELECT graphile_worker.add_job('task',
    json_build_object('recipient', 'agent:' || :r::int, 'order', currval('orders_id_seq'), 'customer', :r::int,
        'note', 'an order was created; tell the recipient about it, once'));
END;
