-- bench/e2_insert_notify.sql -- E2, the seed system's design: the same
-- INSERT into bench_notify, whose PL/pgSQL AFTER INSERT trigger does
-- pg_notify('delivery_outbox', NEW.id::text).
\set r random(0, 99)
INSERT INTO bench_notify (recipient, kind, payload)
VALUES ('agent:' || :r::text, 'work', '\x000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f'::bytea);
