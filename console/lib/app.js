/*
 * console/lib/app.js: the console's pages and actions (express).
 *
 *   GET  /                       overview: every outbox, its stats and counters
 *   GET  /o/:oid                 an outbox: counts, ages, plot, top recipients, rows
 *   GET  /o/:oid/row/:id         a row (or dead letter): every column it may read
 *   GET  /o/:oid/dead            dead letters: filters, keyset pages by id
 *   GET  /o/:oid/samples.json    the plot's points (lib/sampler.js)
 *   POST /o/:oid/confirm         an action's confirmation page (nothing runs)
 *   POST /o/:oid/act             the action: one of the extension's functions
 *
 * Every statement is lib/queries.js's; every change goes through one of the
 * extension's functions (queries.ACTIONS), never an UPDATE of our own, so
 * the state machine, the privileges and the counters apply exactly as for
 * any other caller.  An error is shown as PostgreSQL reported it: message,
 * SQLSTATE, detail, hint.  Both POSTs need the session's CSRF token.
 */
'use strict';

const path = require('path');
const express = require('express');
const Q = require('./queries');
const { run, tryRun, pgError, extSchema } = require('./db');
const { makeSecurity } = require('./security');

const MAX_IDS = 1000;

/* a payload for display: text when it is valid UTF-8, else hex */
function showPayload(buf, total) {
  if (!buf) return null;
  const truncated = total > buf.length;
  const dec = new TextDecoder('utf-8', { fatal: true });
  /* a cut at PAYLOAD_SHOWN may split a character: try without its last bytes */
  for (let cut = 0; cut <= (truncated ? 3 : 0); cut++) {
    try {
      const text = dec.decode(buf.subarray(0, buf.length - cut));
      return { utf8: true, text, bytes: total, truncated };
    } catch {
      /* not UTF-8 */
    }
  }
  return { utf8: false, text: buf.toString('hex').replace(/(..)/g, '$1 ').trim(), bytes: total, truncated };
}

function fmt(v) {
  if (v === null || v === undefined) return '';
  if (v instanceof Date) return v.toISOString().replace('T', ' ').replace('Z', ' UTC');
  return String(v);
}

/* ids from a form: checkboxes (ids=1&ids=2) and/or a text field "1, 2 3" */
function parseIds(body) {
  let raw = body.ids;
  if (raw === undefined) raw = [];
  if (!Array.isArray(raw)) raw = [raw];
  const out = [];
  for (const r of raw) {
    for (const s of String(r).split(/[\s,]+/)) {
      if (s === '') continue;
      if (!/^\d{1,19}$/.test(s)) throw new Error(`"${s}" is not a row id`);
      out.push(s);
    }
  }
  const uniq = [...new Set(out)];
  if (uniq.length > MAX_IDS) throw new Error(`at most ${MAX_IDS} ids at once`);
  return uniq;
}

const nullIfEmpty = (v) => (typeof v === 'string' && v.trim() !== '' ? v : null);

function makeApp(opts) {
  const { pool, sampler, token } = opts;
  const app = express();
  const sec = makeSecurity(token);

  app.set('views', path.join(__dirname, '..', 'views'));
  app.set('view engine', 'ejs');
  app.disable('x-powered-by');
  app.locals.fmt = fmt;
  app.locals.Q = Q;

  app.use((req, res, next) => {
    res.setHeader('X-Frame-Options', 'DENY');
    res.setHeader('X-Content-Type-Options', 'nosniff');
    res.setHeader('Referrer-Policy', 'same-origin');
    res.setHeader('Content-Security-Policy',
      "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'");
    res.locals.started = process.hrtime.bigint();
    next();
  });
  app.use('/static', express.static(path.join(__dirname, '..', 'public'), { maxAge: '1h' }));
  /* Chart.js from node_modules (its package "exports" hide dist/ from require.resolve) */
  const chartJs = path.join(__dirname, '..', 'node_modules', 'chart.js', 'dist', 'chart.umd.min.js');
  app.get('/static/chart.umd.min.js', (req, res) => res.sendFile(chartJs, { maxAge: '1h' }));
  app.get('/favicon.ico', (req, res) => res.status(204).end());
  app.use(express.urlencoded({ extended: false, limit: '200kb' }));
  app.use(sec.session);
  app.post('/login', sec.login);

  /* every page knows the role and the extension's schema */
  async function context(res) {
    const [s] = await run(pool, Q.session());
    const x = await extSchema(pool);
    res.locals.role = s.role;
    res.locals.database = s.database;
    res.locals.extSchema = x.schema;
    res.locals.extVersion = x.version;
    return x.ext;
  }

  async function loadMeta(ext, oid) {
    if (!/^\d{1,10}$/.test(oid)) return null;
    const rows = await run(pool, Q.outboxMeta(ext, oid));
    return rows[0] || null;
  }

  function notFound(res, what) {
    res.status(404);
    return res.render('message', { title: 'Not found', text: what });
  }

  function elapsed(res) {
    return Number(process.hrtime.bigint() - res.locals.started) / 1e6;
  }

  /* overview: every outbox of the database */
  app.get('/', async (req, res) => {
    const ext = await context(res);
    const list = await tryRun(pool, Q.outboxes(ext));
    const act = await tryRun(pool, Q.activity(ext));
    const byOid = new Map((act.rows || []).map((r) => [String(r.oid), r]));
    /* outbox_stats() reads its whole outbox: the outboxes side by side, over the pool */
    const items = await Promise.all((list.rows || []).map(async (o) => {
      const st = await tryRun(pool, Q.stats(ext, o.oid));
      return { ...o, stats: st.rows ? st.rows[0] : null, statsError: st.error || null,
        activity: byOid.get(String(o.oid)) || null };
    }));
    res.render('overview', { title: 'Outboxes', listError: list.error || null,
      activityError: act.error || null, items, elapsedMs: () => elapsed(res) });
  });

  /* an outbox */
  app.get('/o/:oid', async (req, res) => {
    const ext = await context(res);
    const meta = await loadMeta(ext, req.params.oid);
    if (!meta) return notFound(res, `There is no outbox with OID ${req.params.oid}.`);
    const qs = Q.outboxPage(ext, meta);
    const r = {};
    for (const [k, q] of Object.entries(qs)) r[k] = await tryRun(pool, q);
    const act = await tryRun(pool, Q.activity(ext));
    const activity = (act.rows || []).find((a) => String(a.oid) === String(meta.oid)) || null;
    res.render('outbox', { title: meta.qname, meta, r, activity, activityError: act.error || null,
      samplerError: sampler ? sampler.lastError : null, elapsedMs: () => elapsed(res) });
  });

  app.get('/o/:oid/samples.json', async (req, res) => {
    if (!/^\d{1,10}$/.test(req.params.oid)) return res.status(404).json({ error: 'no such outbox' });
    res.setHeader('Cache-Control', 'no-store');
    res.json(sampler ? sampler.points(req.params.oid) : { points: [] });
  });

  /* a row, in the outbox or among its dead letters */
  app.get('/o/:oid/row/:id', async (req, res) => {
    const ext = await context(res);
    const meta = await loadMeta(ext, req.params.oid);
    if (!meta) return notFound(res, `There is no outbox with OID ${req.params.oid}.`);
    if (!/^\d{1,19}$/.test(req.params.id)) return notFound(res, 'A row id is a number.');
    const qs = Q.rowDetail(meta, req.params.id);
    let row = null;
    let dead = false;
    let error = null;
    if (qs.row) {
      const r = await tryRun(pool, qs.row);
      if (r.error) error = r.error;
      else row = r.rows[0] || null;
    }
    if (!row && qs.deadRow) {
      const r = await tryRun(pool, qs.deadRow);
      if (r.error) error = error || r.error;
      else if (r.rows[0]) {
        row = r.rows[0];
        dead = true;
      }
    }
    if (!row && !error) return notFound(res, `Row ${req.params.id} is neither in ${meta.qname} nor among the dead letters this role may read.`);
    const readable = dead ? meta.dead_readable : meta.readable;
    const payload = row && row.payload_head !== undefined ? showPayload(row.payload_head, row.payload_bytes) : null;
    res.render('row', { title: `${meta.qname} row ${req.params.id}`, meta, row, dead, error, payload,
      payloadReadable: (readable || []).includes('payload'),
      columns: row ? Object.keys(row).filter((c) => c !== 'payload_head' && c !== 'payload_bytes') : [] });
  });

  /* dead letters */
  app.get('/o/:oid/dead', async (req, res) => {
    const ext = await context(res);
    const meta = await loadMeta(ext, req.params.oid);
    if (!meta) return notFound(res, `There is no outbox with OID ${req.params.oid}.`);
    const f = {
      recipient: nullIfEmpty(req.query.recipient),
      kind: nullIfEmpty(req.query.kind),
      error: nullIfEmpty(req.query.error),
      before: /^\d{1,19}$/.test(req.query.before || '') ? req.query.before : null,
    };
    const permitted = meta.dead_qname &&
      Q.canRead(meta.dead_readable, ['id', 'recipient', 'kind', 'dead_at', 'dead_reason']);
    let rows = [];
    let error = null;
    let next = null;
    let windowLow = null;
    if (permitted) {
      const qs = Q.deadPage(meta, f);
      const r = await tryRun(pool, qs.dead);
      if (r.error) error = r.error;
      else {
        rows = r.rows;
        let win;
        if (rows.length) win = { window_low: rows[0].window_low, window_rows: rows[0].window_rows };
        else {
          const w = await tryRun(pool, qs.window);
          win = w.rows ? w.rows[0] : { window_low: null, window_rows: 0 };
        }
        windowLow = win.window_low;
        if (rows.length === Q.DEAD_PAGE) next = rows[rows.length - 1].id;
        else if (Number(win.window_rows) === Q.DEAD_WINDOW) next = win.window_low;
      }
    }
    const qsOf = (before) => {
      const p = new URLSearchParams();
      for (const k of ['recipient', 'kind', 'error']) if (f[k]) p.set(k, f[k]);
      if (before != null) p.set('before', before);
      return p.toString();
    };
    res.render('dead', { title: `${meta.qname}: dead letters`, meta, f, rows, error, next, windowLow,
      permitted, qsOf, columns: Q.pick(meta.dead_readable, ['id', 'recipient', 'kind', 'tenant_id',
        'delivery_attempts', 'created_at', 'dead_at', 'dead_reason', 'last_error']) });
  });

  /* what an action form asked for, validated; throws a message for the user */
  function actionRequest(body) {
    const action = Q.ACTIONS[body.action];
    if (!action) throw new Error('unknown action');
    const p = {};
    if (action.args.includes('ids')) {
      p.ids = parseIds(body);
      if (p.ids.length === 0) throw new Error('select at least one row');
    }
    if (action.args.includes('error')) p.error = nullIfEmpty(body.error);
    if (action.args.includes('retry_after')) p.retry_after = nullIfEmpty(body.retry_after);
    if (action.args.includes('recipient')) {
      p.recipient = typeof body.recipient === 'string' ? body.recipient : '';
      if (p.recipient === '') throw new Error('a recipient is required');
    }
    if (action.args.includes('tenant_id')) p.tenant_id = nullIfEmpty(body.tenant_id);
    if (action.args.includes('older_than')) {
      p.older_than = nullIfEmpty(body.older_than);
      if (!p.older_than) throw new Error('an interval is required (e.g. 7 days)');
    }
    return { name: body.action, action, p };
  }

  /* the call, as it will be made, for the confirmation page */
  function describe(ext, meta, a) {
    const lit = (v) => (v === null || v === undefined ? 'NULL' : `'${String(v).replace(/'/g, "''")}'`);
    const args = a.action.args.map((k) => {
      if (k === 'ids') return `ARRAY[${a.p.ids.join(', ')}]::bigint[]`;
      return `${k} => ${lit(a.p[k])}`;
    });
    args.push(`outbox => '${meta.qname.replace(/'/g, "''")}'`);
    return `SELECT ${ext}.${a.action.fn}(${args.join(', ')});`;
  }

  app.post('/o/:oid/confirm', sec.requireCsrf, async (req, res) => {
    const ext = await context(res);
    const meta = await loadMeta(ext, req.params.oid);
    if (!meta) return notFound(res, `There is no outbox with OID ${req.params.oid}.`);
    let a;
    try {
      a = actionRequest(req.body);
    } catch (err) {
      res.status(400);
      return res.render('message', { title: 'Nothing to do', text: err.message, back: `/o/${meta.oid}` });
    }
    res.render('confirm', { title: `Confirm: ${a.action.title}`, meta, a, call: describe(ext, meta, a),
      back: typeof req.body.back === 'string' && req.body.back.startsWith('/o/') ? req.body.back : `/o/${meta.oid}` });
  });

  app.post('/o/:oid/act', sec.requireCsrf, async (req, res) => {
    const ext = await context(res);
    const meta = await loadMeta(ext, req.params.oid);
    if (!meta) return notFound(res, `There is no outbox with OID ${req.params.oid}.`);
    let a;
    try {
      a = actionRequest(req.body);
    } catch (err) {
      res.status(400);
      return res.render('message', { title: 'Nothing to do', text: err.message, back: `/o/${meta.oid}` });
    }
    const call = describe(ext, meta, a);
    const back = typeof req.body.back === 'string' && req.body.back.startsWith('/o/') ? req.body.back : `/o/${meta.oid}`;
    try {
      const rows = await run(pool, { text: a.action.sql(ext), values: a.action.values(a.p, meta.oid) });
      const n = Number(rows[0].n);
      console.log(`console: ${res.locals.role} ran ${a.action.fn} on ${meta.qname}: ${n} row(s)`);
      res.render('result', { title: a.action.title, meta, a, call, n, error: null, back });
    } catch (err) {
      res.status(err.code === '42501' ? 403 : 400);
      res.render('result', { title: a.action.title, meta, a, call, n: null, error: pgError(err), back });
    }
  });

  /* express 5 hands a rejected promise here */
  app.use((err, req, res, next) => { // eslint-disable-line no-unused-vars
    console.error('console:', err.message);
    res.status(500);
    res.render('message', { title: 'Error', text: err.message, pgerror: err.severity ? pgError(err) : null });
  });

  return app;
}

module.exports = { makeApp, showPayload, parseIds };
