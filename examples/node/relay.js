#!/usr/bin/env node
// examples/node/relay.js -- a delivery_outbox relay in Node.js (pg).
//
// Copy this file and replace deliver() with the code that pushes a row to its
// recipient (an HTTP call, a websocket frame, a queue publish ...).  The loop
// around it is the one README's "relay loop" describes:
//
//   connect -> SET synchronous_commit = off -> LISTEN -> ack what was
//   pushed before a lost connection -> drain -> wait for a notification (or
//   a timeout) -> drain -> ...
//
//   drain:  rows = outbox_ack_claim('{}', BATCH);
//           loop: deliver() each row;
//                 outbox_release(failed ids, retry_after, error);
//                 outbox_reject(refused ids, error);
//                 rows = outbox_ack_claim(pushed ids, BATCH)
//           until a claim comes back empty (its call acked the last pushed
//           ids).
//
// - One round trip and one commit per batch: outbox_ack_claim acks the ids
//   pushed from the last batch and claims the next in one statement, so one
//   transaction (each query of the relay is its own).  '{}' acks nothing:
//   the first round of a drain.  Failed and refused rows are released or
//   rejected before the next round and never acked.
// - The relay's session runs with synchronous_commit = off
//   (RELAY_SYNCHRONOUS_COMMIT): its commits do not wait for their WAL to
//   reach disk, and at-least-once delivery survives losing the last of them
//   in a server crash.  A lost claim leaves its rows pending (or, reclaimed,
//   puts them back there); a lost ack, release or reject leaves its rows
//   delivered, and the sweep makes them pending again.  Either way the row
//   is pushed again: a duplicate, never a loss.  The rows themselves are
//   committed by the producers, with their own setting.
// - LISTEN comes before the first drain, on every (re)connect: a row
//   committed before LISTEN is found by the drain, one committed after it is
//   notified.
// - Notifications are wake-ups only (the payload is a row id); the relay
//   claims by state, so a missed notification (while disconnected) costs
//   nothing.
// - Ack after the push, never before.  Ids pushed but not acked when the
//   connection broke are acked first thing after reconnecting (a late ack is
//   still proof of delivery).
// - A failed push (deliver() throws: the recipient is down, a timeout, a
//   5xx-like answer) gives its row back with outbox_release(ids,
//   retry_after => RETRY_AFTER_MS, error => ...): no relay claims it before
//   then, and last_error keeps the reason.
// - A refused push (deliver() throws a PushRefused: the recipient can never
//   take this payload, a 4xx-like answer) dead-letters its row at once with
//   outbox_reject(ids, error => ...): it moves to the dead-letter table
//   <outbox>_dead (dead_reason 'rejected'); outbox_redrive() puts it back.
// - Before sleeping, the relay asks outbox_next_due() when the next row not
//   claimable yet (released with retry_after, backed off, scheduled) falls
//   due, and sleeps no longer: without the background worker nothing else
//   wakes it for such a row.
// - Rows claimed by a relay that died stay 'delivered'; every SWEEP_EVERY
//   seconds the relay runs outbox_reclaim(RECLAIM_AFTER seconds) to put them
//   back to pending.  Several relays sweeping is harmless.
// - Connection loss: reconnect with exponential backoff (BACKOFF_MIN_MS,
//   doubling up to BACKOFF_MAX_MS, with jitter).
// - SIGTERM/SIGINT: finish the row being pushed, give the unpushed rows of
//   the batch back, ack what was pushed (outbox_ack), close, exit 0.
//
// Connection: the libpq-style environment pg reads (PGHOST, PGPORT,
// PGDATABASE, PGUSER, PGPASSWORD or ~/.pgpass, PGAPPNAME, PGOPTIONS ...;
// e.g. PGOPTIONS='-c search_path=tenant_a,outbox,public').
// Settings (environment), as in the Python, C and Rust relays:
//   OUTBOX (the outbox table the relay works, e.g. tenant_a.delivery_outbox,
//   resolved by the session's search_path; unset: the extension's own)
//   OUTBOX_CHANNEL (delivery_outbox)  BATCH (100)  WAIT_MS (5000)
//   SWEEP_EVERY (30 s, 0 = never)     RECLAIM_AFTER (60 s)
//   RETRY_AFTER_MS (1000: retry_after of a failed push; 0 = none, the
//   outbox's backoff_base decides)    BACKOFF_MIN_MS (100) BACKOFF_MAX_MS (30000)
//   RELAY_SYNCHRONOUS_COMMIT (off: synchronous_commit of the relay's
//   session, set on every (re)connect; on makes each round wait for its
//   WAL flush)
//   test hooks: FAIL_EVERY (every Nth push fails; 0 = never),
//   FAIL_ONCE_PAYLOAD (the first push of a row with exactly this payload
//   fails), REFUSE_PAYLOAD (the recipient refuses a row with exactly this
//   payload), PUSH_DELAY_MS (each push takes this long)
//
// Each successful push prints "recipient id" on stdout; the log goes to
// stderr (each connection's line names the session's synchronous_commit, as
// the server reports it; the last line counts the rounds of
// outbox_ack_claim).
//
// Run:  cd examples/node && npm ci && PGDATABASE=shop node relay.js

'use strict';

const { Client } = require('pg');

function envInt(name, dflt) {
  const v = (process.env[name] || '').trim();
  return v === '' ? dflt : parseInt(v, 10);
}

const OUTBOX = process.env.OUTBOX || null;   // null: the extension's own
const CHANNEL = process.env.OUTBOX_CHANNEL || 'delivery_outbox';
const BATCH = envInt('BATCH', 100);
const WAIT_MS = envInt('WAIT_MS', 5000);
const SWEEP_EVERY = envInt('SWEEP_EVERY', 30);
const RECLAIM_AFTER = envInt('RECLAIM_AFTER', 60);
const RETRY_AFTER_MS = envInt('RETRY_AFTER_MS', 1000);
const BACKOFF_MIN_MS = envInt('BACKOFF_MIN_MS', 100);
const BACKOFF_MAX_MS = envInt('BACKOFF_MAX_MS', 30000);
const FAIL_EVERY = envInt('FAIL_EVERY', 0);
const PUSH_DELAY_MS = envInt('PUSH_DELAY_MS', 0);
const FAIL_ONCE_PAYLOAD = Buffer.from(process.env.FAIL_ONCE_PAYLOAD || '');
const REFUSE_PAYLOAD = Buffer.from(process.env.REFUSE_PAYLOAD || '');
const SYNCHRONOUS_COMMIT = process.env.RELAY_SYNCHRONOUS_COMMIT || 'off';

function log(msg) {
  process.stderr.write(`relay: ${msg}\n`);
}

// --- the push: replace this --------------------------------------------------

// The recipient can never take this row (a 4xx-like answer: malformed,
// unknown kind, forbidden): the row is dead-lettered, not retried.
class PushRefused extends Error {}

let pushes = 0;

// Push one claimed row to row.recipient.  Throw a PushRefused if the
// recipient refuses the row for good (it is dead-lettered), any other error
// to have it retried later.  row has the outbox columns: id (a string:
// bigint), recipient, kind, tenant_id, payload (a Buffer), delivery_attempts
// (1 on the first push).  Recipients dedupe by row.id: delivery is
// at-least-once.
async function deliver(row) {
  pushes += 1;
  if (PUSH_DELAY_MS > 0) await sleepMs(PUSH_DELAY_MS);
  if (REFUSE_PAYLOAD.length > 0 && row.payload.equals(REFUSE_PAYLOAD)) {
    throw new PushRefused(`${row.recipient} refused the payload (REFUSE_PAYLOAD)`);
  }
  if (FAIL_ONCE_PAYLOAD.length > 0 && row.payload.equals(FAIL_ONCE_PAYLOAD) &&
      row.delivery_attempts === 1) {
    throw new Error(`injected failure (FAIL_ONCE_PAYLOAD, attempt ${row.delivery_attempts})`);
  }
  if (FAIL_EVERY > 0 && pushes % FAIL_EVERY === 0) {
    throw new Error(`injected failure (push ${pushes})`);
  }
  process.stdout.write(`${row.recipient} ${row.id}\n`);
}

// --- the relay loop ----------------------------------------------------------

function sleepMs(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

class Relay {
  constructor(push) {
    this.push = push;
    this.stopping = false;
    this.woken = false;       // a notification (or error) arrived
    this.wakeup = null;       // resolves the current wait
    this.client = null;       // the connection in use
    this.unacked = [];        // pushed, ack not yet confirmed
    this.nextSweep = 0;
    this.synchronousCommit = null;  // as the server reports it
    // acked: rows outbox_ack acked, plus the ids given to outbox_ack_claim,
    // which does not count them; rounds: its calls
    this.counts = {
      pushed: 0, acked: 0, released: 0, failed: 0, rejected: 0, connects: 0, reclaimed: 0,
      rounds: 0,
    };
    const onSignal = (sig) => {
      if (!this.stopping) log(`${sig}: finishing the current batch, then stopping`);
      this.stopping = true;
      this.wake();
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  }

  wake() {
    this.woken = true;
    if (this.wakeup) this.wakeup();
  }

  // Sleep up to ms; return early on wake() (a notification, a lost
  // connection, a signal).
  sleep(ms) {
    if (this.woken || this.stopping) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(done, Math.max(ms, 0));
      const self = this;
      function done() {
        clearTimeout(timer);
        self.wakeup = null;
        resolve();
      }
      this.wakeup = done;
    });
  }

  async connect() {
    const client = new Client({ fallback_application_name: 'delivery_outbox-relay-node' });
    // An idle connection that dies (server restart, pg_terminate_backend)
    // emits 'error' and 'end' rather than failing a query: remember it and
    // wake the loop, whose next query then fails and reconnects.
    // Events of a client we have given up on must not cut the backoff short.
    client.broken = null;
    const wakeIfCurrent = () => { if (client === this.client) this.wake(); };
    client.on('error', (err) => { client.broken = err; wakeIfCurrent(); });
    client.on('end', () => { client.broken = client.broken || new Error('connection ended'); wakeIfCurrent(); });
    client.on('notification', wakeIfCurrent);
    try {
      await client.connect();
      // Safe for at-least-once delivery (see the header): a claim or an ack
      // lost in a crash only means the row is pushed again.  Set on every
      // connection: a reconnect is a new session.
      const res = await client.query(
        "SELECT pg_catalog.set_config('synchronous_commit', $1, false) AS v", [SYNCHRONOUS_COMMIT]);
      this.synchronousCommit = res.rows[0].v;
      await client.query(`LISTEN ${client.escapeIdentifier(CHANNEL)}`);
      this.client = client;
    } catch (err) {
      client.end().catch(() => {});
      throw err;
    }
    return client;
  }

  async ack(client) {
    if (this.unacked.length === 0) return;
    const res = await client.query('SELECT outbox_ack($1::bigint[], outbox => $2::regclass) AS n',
                                   [this.unacked, OUTBOX]);
    this.counts.acked += res.rows[0].n;
    this.unacked = [];
  }

  // Rounds until nothing is claimable: ack the ids pushed from the last
  // batch and claim the next in one statement; push; release failures,
  // reject refusals.  The ids pushed now are acked by the next round.
  async drain(client) {
    while (!this.stopping) {
      this.woken = false;
      const ids = this.unacked;
      // prepared once per connection (named): parsed and planned at the
      // first round, not at every batch
      const { rows } = await client.query({
        name: 'delivery_outbox_round',
        text: 'SELECT id, recipient, kind, tenant_id, payload, delivery_attempts' +
              '  FROM outbox_ack_claim($1::bigint[], $2::integer, outbox => $3::regclass)',
        values: [ids, BATCH, OUTBOX],
      });
      // committed (each query is its own transaction): those ids are acked
      this.counts.rounds += 1;
      this.counts.acked += ids.length;
      this.unacked = [];
      if (rows.length === 0) return;
      const unpushed = [];            // claimed, never pushed
      const failed = [];              // [id, error]: retry later
      const refused = [];             // [id, error]: dead-letter
      for (const row of rows) {
        if (this.stopping) {          // shutting down: not pushed
          unpushed.push(row.id);
          continue;
        }
        try {
          await this.push(row);
          this.counts.pushed += 1;
          this.unacked.push(row.id);
        } catch (err) {
          if (err instanceof PushRefused) {
            log(`push refused: id ${row.id} to ${row.recipient}: ${err.message}`);
            refused.push([row.id, err.message]);
          } else {
            log(`push failed: id ${row.id} to ${row.recipient}: ${err.message}`);
            this.counts.failed += 1;
            failed.push([row.id, err.message]);
          }
        }
      }
      // One call per row: each keeps its own error in last_error.
      for (const [id, error] of failed) {
        const res = await client.query(
          'SELECT outbox_release(ARRAY[$1::bigint],' +
          " retry_after => NULLIF($2::integer, 0) * interval '1 ms'," +
          ' error => $3, outbox => $4::regclass) AS n', [id, RETRY_AFTER_MS, error, OUTBOX]);
        this.counts.released += res.rows[0].n;
      }
      for (const [id, error] of refused) {
        const res = await client.query(
          'SELECT outbox_reject(ARRAY[$1::bigint], error => $2, outbox => $3::regclass) AS n',
          [id, error, OUTBOX]);
        this.counts.rejected += res.rows[0].n;
      }
      if (unpushed.length > 0) {      // back at once, for another relay
        const res = await client.query(
          'SELECT outbox_release($1::bigint[], outbox => $2::regclass) AS n', [unpushed, OUTBOX]);
        this.counts.released += res.rows[0].n;
      }
    }
    // stopping: the last round's pushed ids have no next round
    await this.ack(client);
  }

  // Milliseconds until the earliest row that is pending but not claimable
  // yet falls due (0 if it is due already), or null when there is none.
  async untilNextDue(client) {
    const res = await client.query(
      'SELECT ceil(EXTRACT(epoch FROM outbox_next_due(outbox => $1::regclass)' +
      '                 - clock_timestamp()) * 1000)::float8 AS ms', [OUTBOX]);
    const ms = res.rows[0].ms;
    return ms === null ? null : Math.max(ms, 0);
  }

  async sweep(client) {
    if (SWEEP_EVERY <= 0 || Date.now() < this.nextSweep) return;
    this.nextSweep = Date.now() + SWEEP_EVERY * 1000;
    const res = await client.query(
      'SELECT outbox_reclaim(make_interval(secs => $1::float8), outbox => $2::regclass) AS n',
      [RECLAIM_AFTER, OUTBOX]);
    const n = res.rows[0].n;
    if (n > 0) {
      this.counts.reclaimed += n;
      log(`sweep: ${n} rows delivered more than ${RECLAIM_AFTER} s ago and never acked are pending again`);
    }
  }

  async serve(client) {
    if (this.unacked.length > 0) {
      const n = this.unacked.length;
      await this.ack(client);
      log(`acked ${n} rows pushed before the connection was lost`);
    }
    await this.drain(client);
    while (!this.stopping) {
      let timeout = WAIT_MS;
      const due = await this.untilNextDue(client);
      if (due !== null) timeout = Math.min(timeout, due);
      if (SWEEP_EVERY > 0) timeout = Math.min(timeout, this.nextSweep - Date.now());
      await this.sleep(timeout);
      if (client.broken) throw client.broken;
      await this.sweep(client);
      await this.drain(client);
    }
  }

  async run() {
    let backoff = BACKOFF_MIN_MS;
    while (!this.stopping) {
      let client = null;
      try {
        client = await this.connect();
        this.counts.connects += 1;
        log(`connected (backend pid ${client.processID}, synchronous_commit ${this.synchronousCommit}), ` +
            `listening on ${CHANNEL}, ` +
            `outbox ${OUTBOX || "(the extension's own)"}`);
        backoff = BACKOFF_MIN_MS;
        await this.serve(client);
      } catch (caught) {
        // A query on a dead connection fails with a generic message; the
        // 'error' event had the server's reason.
        const err = (client && client.broken) || caught;
        const msg = (err && err.message ? err.message : String(err)).split('\n')[0];
        log(`connection lost: ${msg}`);
      } finally {
        this.client = null;
        if (client) await client.end().catch(() => {});
      }
      if (this.stopping) break;
      const delay = backoff / 2 + Math.random() * (backoff / 2);
      log(`reconnecting in ${Math.round(delay)} ms`);
      this.woken = false;
      await this.sleep(delay);
      backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
    }
    if (this.unacked.length > 0) {
      log(`${this.unacked.length} pushed rows could not be acked; the sweep (outbox_reclaim) will redeliver them`);
    }
    log('stopped: ' + Object.entries(this.counts).map(([k, v]) => `${k} ${v}`).join(', '));
    return 0;
  }
}

new Relay(deliver).run().then(
  (code) => { process.exitCode = code; },
  (err) => { log(`fatal: ${err.stack || err}`); process.exitCode = 1; });
