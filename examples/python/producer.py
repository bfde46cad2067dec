#!/usr/bin/python3
"""examples/python/producer.py -- a delivery_outbox producer (psycopg 3).

The outbox row is written in the same transaction as the business change
that caused it.  Creates the business table "orders" if it is missing, then
runs two transactions:

  1. INSERT an order, outbox_enqueue() its "order_created" message, commit:
     both rows exist, and relays are woken (at commit, with the row id);
  2. the same, then an exception (the payment was declined) rolls the
     transaction back: neither row exists and no relay is woken.

and prints one line per transaction:

  committed order=<order id> outbox=<outbox id>
  rolled_back order=<order id> outbox=<outbox id>

Connection: the libpq environment, whole (PGHOST, PGPORT, PGDATABASE,
PGUSER, PGOPTIONS ...).  RECIPIENT (default "service:billing") addresses the
messages; OUTBOX names the outbox table they go to (tenant_a.delivery_outbox,
or a name resolved by the search_path; default the extension's own).

Run:  PGDATABASE=shop /usr/bin/python3 examples/python/producer.py
"""

import json
import os

import psycopg

RECIPIENT = os.environ.get("RECIPIENT") or "service:billing"
OUTBOX = os.environ.get("OUTBOX") or None


class PaymentDeclined(Exception):
    pass


def place_order(conn, customer, amount_cents):
    """One order and its outbox message, in the caller's transaction."""
    order_id = conn.execute(
        "INSERT INTO orders (customer, amount_cents) VALUES (%s, %s)"
        " RETURNING id", (customer, amount_cents)).fetchone()[0]
    payload = json.dumps({"order_id": order_id, "customer": customer,
                          "amount_cents": amount_cents}).encode()
    outbox_id = conn.execute(
        "SELECT outbox_enqueue(%s, %s, %s, outbox => %s::text::regclass)",
        (RECIPIENT, "order_created", payload, OUTBOX)).fetchone()[0]
    return order_id, outbox_id


def main():
    with psycopg.connect(
            "fallback_application_name=delivery_outbox-producer-python") as conn:
        with conn.transaction():
            conn.execute("""
                CREATE TABLE IF NOT EXISTS orders (
                    id           bigserial PRIMARY KEY,
                    customer     text NOT NULL,
                    amount_cents integer NOT NULL,
                    created_at   timestamptz NOT NULL DEFAULT now())""")

        # 1. Both rows commit together; relays are woken at commit.
        with conn.transaction():
            order_id, outbox_id = place_order(conn, "alice", 4200)
        print(f"committed order={order_id} outbox={outbox_id}", flush=True)

        # 2. An exception after both writes: the block rolls back, neither
        #    row survives, nobody is notified.
        try:
            with conn.transaction():
                order_id, outbox_id = place_order(conn, "bob", 990000)
                raise PaymentDeclined(f"order {order_id}")
        except PaymentDeclined:
            print(f"rolled_back order={order_id} outbox={outbox_id}", flush=True)


if __name__ == "__main__":
    main()
