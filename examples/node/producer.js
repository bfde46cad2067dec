#!/usr/bin/env node
// examples/node/producer.js -- a delivery_outbox producer in Node.js (pg).
//
// The outbox row is written in the same transaction as the business change
// that caused it.  Creates the business table "orders" if it is missing, then
// runs two transactions:
//
//   1. INSERT an order, outbox_enqueue() its "order_created" message, COMMIT:
//      both rows exist, and relays are woken (at commit, with the row id);
//   2. the same, then an error (the payment was declined) and ROLLBACK:
//      neither row exists and no relay is woken.
//
// and prints one line per transaction:
//
//   committed order=<order id> outbox=<outbox id>
//   rolled_back order=<order id> outbox=<outbox id>
//
// Connection: the environment pg reads (PGHOST, PGPORT, PGDATABASE, PGUSER,
// PGOPTIONS ...).  RECIPIENT (default "service:billing") addresses the
// messages; OUTBOX names the outbox table they go to (e.g.
// tenant_a.delivery_outbox, resolved by the search_path; unset: the
// extension's own).
//
// Run:  cd examples/node && npm ci && PGDATABASE=shop node producer.js

'use strict';

const { Client } = require('pg');

const RECIPIENT = process.env.RECIPIENT || 'service:billing';
const OUTBOX = process.env.OUTBOX || null;

class PaymentDeclined extends Error {}

// Run fn(client) in a transaction: COMMIT if it returns, ROLLBACK if it
// throws (and rethrow).
async function inTransaction(client, fn) {
  await client.query('BEGIN');
  try {
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK');
    throw err;
  }
}

// One order and its outbox message, in the caller's transaction.
async function placeOrder(client, customer, amountCents) {
  const order = await client.query(
    'INSERT INTO orders (customer, amount_cents) VALUES ($1, $2) RETURNING id',
    [customer, amountCents]);
  const orderId = order.rows[0].id;
  const payload = Buffer.from(JSON.stringify(
    { order_id: Number(orderId), customer, amount_cents: amountCents }));
  const outbox = await client.query(
    'SELECT outbox_enqueue($1, $2, $3, outbox => $4::regclass) AS id',
    [RECIPIENT, 'order_created', payload, OUTBOX]);
  return { orderId, outboxId: outbox.rows[0].id };
}

async function main() {
  const client = new Client({ fallback_application_name: 'delivery_outbox-producer-node' });
  await client.connect();
  try {
    await client.query(`
      CREATE TABLE IF NOT EXISTS orders (
          id           bigserial PRIMARY KEY,
          customer     text NOT NULL,
          amount_cents integer NOT NULL,
          created_at   timestamptz NOT NULL DEFAULT now())`);

    // 1. Both rows commit together; relays are woken at COMMIT.
    const ok = await inTransaction(client, (c) => placeOrder(c, 'alice', 4200));
    console.log(`committed order=${ok.orderId} outbox=${ok.outboxId}`);

    // 2. An error after both writes: ROLLBACK, neither row survives, nobody
    //    is notified.
    let placed = null;
    try {
      await inTransaction(client, async (c) => {
        placed = await placeOrder(c, 'bob', 990000);
        throw new PaymentDeclined(`order ${placed.orderId}`);
      });
    } catch (err) {
      if (!(err instanceof PaymentDeclined)) throw err;
      console.log(`rolled_back order=${placed.orderId} outbox=${placed.outboxId}`);
    }
  } finally {
    await client.end();
  }
}

main().catch((err) => {
  process.stderr.write(`producer: ${err.message}\n`);
  process.exitCode = 1;
});
