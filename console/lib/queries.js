/*
 * console/lib/queries.js: every statement the console sends, page by page.
 *
 * The builders return {name, text, values} objects, so that the pages run
 * them and console/test/explain.js EXPLAINs exactly the same statements
 * (it checks that none reads an outbox or its dead-letter table with a Seq
 * Scan).  Invariants:
 *
 * - Table names come from the catalogs (format('%I.%I')), never from the
 *   request; values are always $n parameters.  An outbox is named by OID in
 *   URLs and passed to the extension's functions as $n::oid::regclass.
 * - Every read of an outbox or a dead-letter table is bounded: a LIMIT over
 *   the order one of the extension's indexes gives (docs/reference.md, "The
 *   table"): pending rows by id (<table>_pending_idx), scheduled ones by
 *   (not_before, id) (<table>_scheduled_idx), delivered ones by
 *   delivered_at (<table>_delivered_idx), a row by id and dead letters by
 *   id (the primary keys).  A dead-letter table has no index but its
 *   primary key, so its filters (recipient, kind, error) are applied to a
 *   window of at most DEAD_WINDOW letters read by id, newest first, and
 *   paging continues below the window (keyset by id, never OFFSET).  The
 *   "top recipients" tables count a sample of the same kind (the oldest
 *   SAMPLE_ROWS pending rows, ...), which is the whole set whenever the
 *   outbox holds fewer; the page says which.
 * - Only outbox_stats() reads the whole outbox (it counts every state; the
 *   extension's own function, run once per outbox and page).
 * - Columns the console's role may not read (a monitoring role has no
 *   payload) are left out of the select lists (meta.readable), rather than
 *   letting the statement fail.
 */
'use strict';

const SAMPLE_ROWS = 10000;      /* rows behind each "top recipients" table */
const TOP_RECIPIENTS = 10;
const LIST_ROWS = 50;           /* rows listed per state on an outbox page */
const DEAD_PAGE = 50;
const DEAD_WINDOW = 5000;       /* dead letters one page reads at most */
const PAYLOAD_SHOWN = 65536;    /* bytes of payload a row page shows */

/* the columns of an outbox and of a dead-letter table, in display order */
const OUTBOX_COLUMNS = ['id', 'recipient', 'kind', 'tenant_id', 'delivery_state',
  'delivery_attempts', 'created_at', 'delivered_at', 'acked_at', 'not_before',
  'expires_at', 'dedup_key', 'last_error', 'payload'];
const DEAD_COLUMNS = OUTBOX_COLUMNS.concat(['dead_at', 'dead_reason']);

function ident(name) {
  return '"' + String(name).replace(/"/g, '""') + '"';
}

/* the extension's schema: wherever CREATE EXTENSION put it */
function extension() {
  return {
    name: 'extension',
    text: `SELECT n.nspname AS schema, e.extversion AS version
             FROM pg_catalog.pg_extension e
             JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
            WHERE e.extname = 'delivery_outbox'`,
    values: [],
  };
}

/* who we are, and whether the activity counters can be read (the preload) */
function session() {
  return {
    name: 'session',
    text: `SELECT current_user AS role, current_database() AS database,
                  pg_catalog.version() AS server_version`,
    values: [],
  };
}

/* every outbox of the database, and what this role may read of each */
function outboxes(ext) {
  return {
    name: 'outboxes',
    text: `SELECT t.outbox::oid AS oid,
                  pg_catalog.format('%I.%I', n.nspname, c.relname) AS qname,
                  t.origin, t.channel, t.max_attempts, t.backoff_base::text AS backoff_base,
                  t.backoff_max::text AS backoff_max, t.ttl::text AS ttl, t.ordered,
                  t.retain_acked::text AS retain_acked, t.partition_rows,
                  t.dead_table::oid AS dead_oid,
                  CASE WHEN t.dead_table IS NOT NULL
                       THEN pg_catalog.format('%I.%I', dn.nspname, d.relname) END AS dead_qname
             FROM ${ext}.delivery_outbox_tables t
             JOIN pg_catalog.pg_class c ON c.oid = t.outbox
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             LEFT JOIN pg_catalog.pg_class d ON d.oid = t.dead_table
             LEFT JOIN pg_catalog.pg_namespace dn ON dn.oid = d.relnamespace
            ORDER BY t.origin <> 'default', 2`,
    values: [],
  };
}

/* one outbox, with the columns of it and of its dead table this role reads */
function outboxMeta(ext, oid) {
  const readable = (rel) => `ARRAY(SELECT a.attname::text FROM pg_catalog.pg_attribute a
                                   WHERE a.attrelid = ${rel} AND a.attnum > 0 AND NOT a.attisdropped
                                     AND pg_catalog.has_column_privilege(${rel}, a.attnum, 'SELECT')
                                   ORDER BY a.attnum)`;
  return {
    name: 'outbox_meta',
    text: `SELECT t.outbox::oid AS oid,
                  pg_catalog.format('%I.%I', n.nspname, c.relname) AS qname,
                  t.origin, t.channel, t.max_attempts, t.backoff_base::text AS backoff_base,
                  t.backoff_max::text AS backoff_max, t.ttl::text AS ttl, t.ordered,
                  t.retain_acked::text AS retain_acked, t.partition_rows,
                  t.dead_table::oid AS dead_oid,
                  CASE WHEN t.dead_table IS NOT NULL
                       THEN pg_catalog.format('%I.%I', dn.nspname, d.relname) END AS dead_qname,
                  ${readable('c.oid')} AS readable,
                  CASE WHEN d.oid IS NOT NULL THEN ${readable('d.oid')} END AS dead_readable
             FROM ${ext}.delivery_outbox_tables t
             JOIN pg_catalog.pg_class c ON c.oid = t.outbox
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             LEFT JOIN pg_catalog.pg_class d ON d.oid = t.dead_table
             LEFT JOIN pg_catalog.pg_namespace dn ON dn.oid = d.relnamespace
            WHERE t.outbox = $1::pg_catalog.oid::pg_catalog.regclass`,
    values: [String(oid)],
  };
}

function stats(ext, oid) {
  return {
    name: 'outbox_stats',
    text: `SELECT pending, delivered, acked, oldest_pending_age::text AS oldest_pending_age,
                  oldest_delivered_age::text AS oldest_delivered_age,
                  open_recipients, dead
             FROM ${ext}.outbox_stats($1::pg_catalog.oid::pg_catalog.regclass)`,
    values: [String(oid)],
  };
}

/* the counters of this database's outboxes (shared memory: O(1)) */
function activity(ext) {
  return {
    name: 'activity',
    text: `SELECT outbox::oid AS oid, enqueued, claimed, acked, released, reclaimed, purged,
                  notified, notify_skipped, handover_dropped, dead_lettered, redriven,
                  backlog_pending, backlog_delivered, stats_since
             FROM ${ext}.delivery_outbox_activity
            WHERE datname = pg_catalog.current_database()`,
    values: [],
  };
}

/* the columns of want that the role may read in a table (meta.readable) */
function pick(readable, want) {
  const r = new Set(readable || []);
  return want.filter((c) => r.has(c));
}

function canRead(readable, need) {
  const r = new Set(readable || []);
  return need.every((c) => r.has(c));
}

/*
 * The statements of an outbox page, keyed by name; a statement whose
 * columns the role cannot read is left out (the page says so).
 */
function outboxPage(ext, meta) {
  const t = meta.qname;
  const q = {};
  q.stats = stats(ext, meta.oid);
  if (canRead(meta.readable, ['id', 'recipient', 'delivery_state', 'not_before'])) {
    q.topPending = {
      name: 'top_pending',
      text: `SELECT recipient, pg_catalog.count(*) AS rows, pg_catalog.min(id) AS oldest_id
               FROM ((SELECT recipient, id FROM ${t}
                       WHERE delivery_state = 'pending' AND not_before IS NULL
                       ORDER BY id LIMIT $1)
                     UNION ALL
                     (SELECT recipient, id FROM ${t}
                       WHERE delivery_state = 'pending' AND not_before IS NOT NULL
                       ORDER BY not_before, id LIMIT $1)) s
              GROUP BY recipient
              ORDER BY pg_catalog.count(*) DESC, recipient
              LIMIT $2`,
      values: [SAMPLE_ROWS, TOP_RECIPIENTS],
    };
  }
  if (canRead(meta.readable, ['recipient', 'tenant_id', 'delivery_state', 'delivered_at'])) {
    q.topDelivered = {
      name: 'top_delivered',
      text: `SELECT recipient, tenant_id, pg_catalog.count(*) AS rows,
                    pg_catalog.min(delivered_at) AS oldest_delivered_at
               FROM (SELECT recipient, tenant_id, delivered_at FROM ${t}
                      WHERE delivery_state = 'delivered'
                      ORDER BY delivered_at LIMIT $1) s
              GROUP BY recipient, tenant_id
              ORDER BY pg_catalog.count(*) DESC, recipient, tenant_id
              LIMIT $2`,
      values: [SAMPLE_ROWS, TOP_RECIPIENTS],
    };
  }
  if (meta.dead_qname && canRead(meta.dead_readable, ['id', 'recipient'])) {
    q.topDead = {
      name: 'top_dead',
      text: `SELECT recipient, pg_catalog.count(*) AS rows, pg_catalog.max(id) AS newest_id
               FROM (SELECT recipient, id FROM ${meta.dead_qname}
                      ORDER BY id DESC LIMIT $1) s
              GROUP BY recipient
              ORDER BY pg_catalog.count(*) DESC, recipient
              LIMIT $2`,
      values: [SAMPLE_ROWS, TOP_RECIPIENTS],
    };
  }
  const listCols = pick(meta.readable, ['id', 'recipient', 'kind', 'tenant_id',
    'delivery_attempts', 'created_at', 'delivered_at', 'not_before', 'expires_at', 'last_error']);
  if (canRead(meta.readable, ['id', 'delivery_state', 'not_before'])) {
    q.pendingRows = {
      name: 'pending_rows',
      text: `SELECT ${listCols.map(ident).join(', ')} FROM ${t}
              WHERE delivery_state = 'pending' AND not_before IS NULL
              ORDER BY id LIMIT $1`,
      values: [LIST_ROWS],
    };
    q.scheduledRows = {
      name: 'scheduled_rows',
      text: `SELECT ${listCols.map(ident).join(', ')} FROM ${t}
              WHERE delivery_state = 'pending' AND not_before IS NOT NULL
              ORDER BY not_before, id LIMIT $1`,
      values: [LIST_ROWS],
    };
  }
  if (canRead(meta.readable, ['id', 'delivery_state', 'delivered_at'])) {
    q.deliveredRows = {
      name: 'delivered_rows',
      text: `SELECT ${listCols.map(ident).join(', ')} FROM ${t}
              WHERE delivery_state = 'delivered'
              ORDER BY delivered_at, id LIMIT $1`,
      values: [LIST_ROWS],
    };
  }
  return q;
}

/*
 * A row's page: the row in the outbox, else among its dead letters; the
 * payload's first PAYLOAD_SHOWN bytes and its length.
 */
function rowDetail(meta, id) {
  const q = {};
  const sel = (readable, all) => {
    const cols = pick(readable, all).filter((c) => c !== 'payload');
    let s = cols.map(ident).join(', ');
    if ((readable || []).includes('payload')) {
      s += `, pg_catalog.octet_length(payload) AS payload_bytes,
              pg_catalog.substr(payload, 1, ${PAYLOAD_SHOWN}) AS payload_head`;
    }
    return s;
  };
  if (canRead(meta.readable, ['id'])) {
    q.row = {
      name: 'row',
      text: `SELECT ${sel(meta.readable, OUTBOX_COLUMNS)} FROM ${meta.qname} WHERE id = $1`,
      values: [String(id)],
    };
  }
  if (meta.dead_qname && canRead(meta.dead_readable, ['id'])) {
    q.deadRow = {
      name: 'dead_row',
      text: `SELECT ${sel(meta.dead_readable, DEAD_COLUMNS)} FROM ${meta.dead_qname} WHERE id = $1`,
      values: [String(id)],
    };
  }
  return q;
}

/*
 * A page of dead letters, newest first, below the id `before` (NULL: from
 * the newest), matching the filters: the newest DEAD_WINDOW letters below
 * `before` are read by the primary key, the filters applied to them, and
 * the window's lowest id and size returned, so that the next page starts
 * below the window when it held fewer than DEAD_PAGE matches.
 */
function deadPage(meta, f) {
  const cols = pick(meta.dead_readable, ['id', 'recipient', 'kind', 'tenant_id',
    'delivery_attempts', 'created_at', 'dead_at', 'dead_reason', 'last_error']);
  const values = [f.before == null ? null : String(f.before), DEAD_WINDOW];
  const where = [];
  if (f.recipient) {
    values.push(f.recipient);
    where.push(`recipient = $${values.length}`);
  }
  if (f.kind) {
    values.push(f.kind);
    where.push(`kind = $${values.length}`);
  }
  if (f.error) {
    values.push(f.error);
    where.push(`pg_catalog.strpos(pg_catalog.lower(last_error), pg_catalog.lower($${values.length})) > 0`);
  }
  values.push(DEAD_PAGE);
  const list = cols.map(ident).join(', ');
  return {
    dead: {
      name: 'dead_letters',
      text: `WITH w AS MATERIALIZED (
                 SELECT ${list} FROM ${meta.dead_qname}
                  WHERE ($1::bigint IS NULL OR id < $1::bigint)
                  ORDER BY id DESC LIMIT $2)
             SELECT m.*, (SELECT pg_catalog.min(id) FROM w) AS window_low,
                    (SELECT pg_catalog.count(*) FROM w) AS window_rows
               FROM (SELECT * FROM w ${where.length ? 'WHERE ' + where.join(' AND ') : ''}
                      ORDER BY id DESC LIMIT $${values.length}) m
              ORDER BY m.id DESC`,
      values,
    },
    /* the window alone, for a page whose window held no match */
    window: {
      name: 'dead_window',
      text: `SELECT pg_catalog.min(id) AS window_low, pg_catalog.count(*) AS window_rows
               FROM (SELECT id FROM ${meta.dead_qname}
                      WHERE ($1::bigint IS NULL OR id < $1::bigint)
                      ORDER BY id DESC LIMIT $2) w`,
      values: values.slice(0, 2),
    },
  };
}

/*
 * The actions: each one of the extension's functions, nothing else; the
 * outbox is the last argument, as an OID.
 */
const ACTIONS = {
  redrive: {
    title: 'Redrive dead letters',
    fn: 'outbox_redrive',
    args: ['ids'],
    sql: (ext) => `SELECT ${ext}.outbox_redrive($1::bigint[], $2::pg_catalog.oid::pg_catalog.regclass) AS n`,
    values: (p, oid) => [p.ids, String(oid)],
  },
  reject: {
    title: 'Reject delivered rows (dead-letter them now)',
    fn: 'outbox_reject',
    args: ['ids', 'error'],
    sql: (ext) => `SELECT ${ext}.outbox_reject($1::bigint[], $2::text, $3::pg_catalog.oid::pg_catalog.regclass) AS n`,
    values: (p, oid) => [p.ids, p.error, String(oid)],
  },
  release: {
    title: 'Release delivered rows (back to pending)',
    fn: 'outbox_release',
    args: ['ids', 'retry_after', 'error'],
    sql: (ext) => `SELECT ${ext}.outbox_release($1::bigint[], $2::interval, $3::text,
                                                $4::pg_catalog.oid::pg_catalog.regclass) AS n`,
    values: (p, oid) => [p.ids, p.retry_after, p.error, String(oid)],
  },
  reclaim_recipient: {
    title: "Reclaim a recipient's delivered rows",
    fn: 'outbox_reclaim_recipient',
    args: ['recipient', 'tenant_id'],
    sql: (ext) => `SELECT ${ext}.outbox_reclaim_recipient($1::text, $2::text,
                                                          $3::pg_catalog.oid::pg_catalog.regclass) AS n`,
    values: (p, oid) => [p.recipient, p.tenant_id, String(oid)],
  },
  purge: {
    title: 'Purge acked rows',
    fn: 'outbox_purge',
    args: ['older_than'],
    sql: (ext) => `SELECT ${ext}.outbox_purge($1::interval, $2::pg_catalog.oid::pg_catalog.regclass) AS n`,
    values: (p, oid) => [p.older_than, String(oid)],
  },
};

/* the sampler's statement: the counters of every outbox of the database */
function samples(ext) {
  return {
    name: 'samples',
    text: `SELECT outbox::oid AS oid, enqueued, acked, dead_lettered, redriven,
                  backlog_pending, backlog_delivered, stats_since
             FROM ${ext}.delivery_outbox_activity
            WHERE datname = pg_catalog.current_database()`,
    values: [],
  };
}

module.exports = {
  SAMPLE_ROWS, TOP_RECIPIENTS, LIST_ROWS, DEAD_PAGE, DEAD_WINDOW, PAYLOAD_SHOWN,
  OUTBOX_COLUMNS, DEAD_COLUMNS, ACTIONS,
  ident, pick, canRead,
  extension, session, outboxes, outboxMeta, stats, activity, outboxPage, rowDetail,
  deadPage, samples,
};
