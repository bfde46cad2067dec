/*
 * console/lib/db.js: the connection pool and the one way statements run.
 *
 * Every statement is a lib/queries.js object; its name is a label for the
 * EXPLAIN test and the logs, never handed to node-postgres (which would
 * make it a named prepared statement, planned once generically, where the
 * unnamed statement is planned with its parameters' values).
 */
'use strict';

const pg = require('pg');
const Q = require('./queries');

/* bigint and numeric come back as strings by default: counts fit a double */
pg.types.setTypeParser(20, (v) => (v === null ? null : Number(v)));

function makePool(config) {
  const pool = new pg.Pool({
    ...config,
    max: 4,
    application_name: config.application_name || 'delivery_outbox console',
    idleTimeoutMillis: 30000,
  });
  /* a backend that goes away while idle must not take the process down */
  pool.on('error', (err) => console.error('console: idle connection error:', err.message));
  return pool;
}

async function run(db, q) {
  const res = await db.query({ text: q.text, values: q.values });
  return res.rows;
}

/* like run(), but an error comes back as {error} for the page to show */
async function tryRun(db, q) {
  try {
    return { rows: await run(db, q) };
  } catch (err) {
    return { error: pgError(err) };
  }
}

/* PostgreSQL's own report of an error, as the pages show it */
function pgError(err) {
  return {
    message: err.message,
    code: err.code || null,
    detail: err.detail || null,
    hint: err.hint || null,
    severity: err.severity || null,
  };
}

/*
 * extSchema(db): the quoted schema of the extension, found through
 * pg_extension.extnamespace (it is outbox or public, wherever CREATE
 * EXTENSION put it); throws when the extension is not installed.
 */
async function extSchema(db) {
  const rows = await run(db, Q.extension());
  if (rows.length === 0) {
    const e = new Error('extension "delivery_outbox" is not installed in this database');
    e.code = '42704';
    throw e;
  }
  return { schema: rows[0].schema, ext: Q.ident(rows[0].schema), version: rows[0].version };
}

module.exports = { makePool, run, tryRun, pgError, extSchema };
