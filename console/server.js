#!/usr/bin/env node
/*
 * console/server.js: the operator's console of delivery_outbox.
 *
 *   node server.js --db 'host=/var/run/postgresql dbname=app user=ops'
 *                  [--port 8710] [--host 127.0.0.1] [--token SECRET]
 *                  [--sample-interval 5]
 *
 * Each option also comes from the environment: OUTBOX_CONSOLE_DB,
 * OUTBOX_CONSOLE_PORT, OUTBOX_CONSOLE_HOST, OUTBOX_CONSOLE_TOKEN,
 * OUTBOX_CONSOLE_SAMPLE_INTERVAL (a flag wins).  --db is a libpq connection
 * string (keyword/value or URI); what it leaves out comes from PGHOST,
 * PGPORT, PGDATABASE, PGUSER, PGPASSWORD.  It listens on 127.0.0.1 unless
 * told otherwise; give it a token before you make it listen elsewhere.
 */
'use strict';

const { toPgConfig } = require('./lib/conninfo');
const { makePool } = require('./lib/db');
const { Sampler } = require('./lib/sampler');
const { makeApp } = require('./lib/app');

function usage(msg) {
  if (msg) console.error(`console: ${msg}`);
  console.error("usage: console/run --db 'host=... dbname=...' [--port 8710] [--host 127.0.0.1] [--token SECRET] [--sample-interval SECONDS]");
  process.exit(2);
}

function parseArgs(argv) {
  const o = {
    db: process.env.OUTBOX_CONSOLE_DB || '',
    port: process.env.OUTBOX_CONSOLE_PORT || '8710',
    host: process.env.OUTBOX_CONSOLE_HOST || '127.0.0.1',
    token: process.env.OUTBOX_CONSOLE_TOKEN || '',
    sampleInterval: process.env.OUTBOX_CONSOLE_SAMPLE_INTERVAL || '5',
  };
  const names = { '--db': 'db', '--port': 'port', '--host': 'host', '--token': 'token',
    '--sample-interval': 'sampleInterval' };
  for (let i = 0; i < argv.length; i++) {
    let a = argv[i];
    let v;
    const eq = a.indexOf('=');
    if (a.startsWith('--') && eq > 0) {
      v = a.slice(eq + 1);
      a = a.slice(0, eq);
    }
    if (a === '-h' || a === '--help') usage();
    if (!names[a]) usage(`unknown option ${a}`);
    if (v === undefined) {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      v = argv[++i];
    }
    o[names[a]] = v;
  }
  if (!/^\d+$/.test(o.port) || Number(o.port) > 65535) usage(`bad port "${o.port}"`);
  if (!(Number(o.sampleInterval) >= 1)) usage(`bad sample interval "${o.sampleInterval}" (seconds, at least 1)`);
  return o;
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  let config;
  try {
    config = toPgConfig(o.db);
  } catch (err) {
    usage(err.message);
  }
  const pool = makePool(config);
  /* fail at once on a database we cannot reach, not on the first page */
  try {
    const c = await pool.connect();
    c.release();
  } catch (err) {
    console.error(`console: cannot connect: ${err.message}`);
    process.exit(1);
  }
  const sampler = new Sampler(pool, Number(o.sampleInterval) * 1000);
  sampler.start();
  const app = makeApp({ pool, sampler, token: o.token || null });
  const server = app.listen(Number(o.port), o.host, () => {
    const a = server.address();
    console.log(`console: listening on http://${a.address}:${a.port}/` +
      (o.token ? ' (access token required)' : ''));
  });
  server.on('error', (err) => {
    console.error(`console: ${err.message}`);
    process.exit(1);
  });
  const stop = () => {
    sampler.stop();
    server.close(() => pool.end().then(() => process.exit(0)));
    setTimeout(() => process.exit(0), 2000).unref();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main();
