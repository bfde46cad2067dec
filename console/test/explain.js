/*
 * console/test/explain.js: EXPLAIN every statement the console's pages
 * issue (lib/queries.js, as the pages build them) against a large outbox,
 * as each of the test roles, and check that no plan reads the outbox or
 * its dead-letter table with a Seq Scan (planner settings as the server
 * has them: enable_seqscan on).  Prints TAP lines without numbers
 * ("ok - ..."); console/test.sh numbers them.
 *
 *   node test/explain.js 'host=... dbname=...' big.delivery_outbox console_monitor console_operator
 */
'use strict';

const pg = require('pg');
const { toPgConfig } = require('../lib/conninfo');
const Q = require('../lib/queries');
const { extSchema } = require('../lib/db');

function seqScans(plan, rels, found = []) {
  if (plan['Node Type'] === 'Seq Scan' && rels.has(`${plan.Schema}.${plan['Relation Name']}`)) {
    found.push(`${plan.Schema}.${plan['Relation Name']}`);
  }
  for (const sub of plan.Plans || []) seqScans(sub, rels, found);
  return found;
}

function nodes(plan, out = []) {
  out.push(plan['Node Type'] + (plan['Index Name'] ? ` using ${plan['Index Name']}` : '') +
    (plan['Relation Name'] ? ` on ${plan['Relation Name']}` : ''));
  for (const sub of plan.Plans || []) nodes(sub, out);
  return out;
}

async function main() {
  const [conninfo, outbox, ...roles] = process.argv.slice(2);
  const client = new pg.Client(toPgConfig(conninfo));
  await client.connect();
  let failed = 0;
  const { rows: [{ enable_seqscan: seq }] } = await client.query('SHOW enable_seqscan');
  console.log(`${seq === 'on' ? 'ok' : 'not ok'} - explain: enable_seqscan is on (${seq})`);
  if (seq !== 'on') failed++;
  const { rows: [ids] } = await client.query(
    `SELECT (SELECT max(id) FROM ${outbox}) AS row_id,
            (SELECT max(id) FROM ${outbox}_dead) AS dead_id`);
  for (const role of [null, ...roles]) {
    await client.query(role ? `SET ROLE ${Q.ident(role)}` : 'RESET ROLE');
    const who = role || 'the superuser';
    const { ext } = await extSchema(client);
    const { rows: [{ oid }] } = await client.query('SELECT $1::regclass::oid AS oid', [outbox]);
    const meta = (await client.query(Q.outboxMeta(ext, oid).text, Q.outboxMeta(ext, oid).values)).rows[0];
    const rels = new Set([meta.qname, meta.dead_qname].map((n) => n.replace(/"/g, '')));
    const qs = [Q.extension(), Q.session(), Q.outboxes(ext), Q.outboxMeta(ext, oid),
      Q.activity(ext), Q.samples(ext)];
    const page = Q.outboxPage(ext, meta);
    qs.push(...Object.values(page));
    qs.push(...Object.values(Q.rowDetail(meta, ids.row_id)), ...Object.values(Q.rowDetail(meta, ids.dead_id)));
    if (Q.canRead(meta.dead_readable, ['id', 'recipient', 'kind', 'dead_at', 'dead_reason'])) {
      const filters = [{}, { recipient: 'agent:7' }, { kind: 'invoice' }, { error: 'HTTP 503' },
        { recipient: 'agent:7', kind: 'work', error: '50', before: String(Number(ids.dead_id) - 10000) },
        { before: String(Number(ids.dead_id) - 19990) }];
      for (const f of filters) {
        const d = Q.deadPage(meta, f);
        qs.push({ ...d.dead, name: `${d.dead.name} ${JSON.stringify(f)}` }, { ...d.window, name: `${d.window.name} ${JSON.stringify(f)}` });
      }
    }
    const names = new Set(qs.map((q) => q.name.split(' ')[0]));
    for (const want of ['top_pending', 'top_delivered', 'pending_rows', 'scheduled_rows', 'delivered_rows', 'row']) {
      if (!names.has(want)) {
        console.log(`not ok - explain as ${who}: the page has no statement ${want}`);
        failed++;
      }
    }
    for (const q of qs) {
      let plan;
      try {
        const res = await client.query({ text: `EXPLAIN (FORMAT JSON, VERBOSE) ${q.text}`, values: q.values });
        plan = res.rows[0]['QUERY PLAN'][0].Plan;
      } catch (err) {
        console.log(`not ok - explain as ${who}: ${q.name}: ${err.message}`);
        failed++;
        continue;
      }
      const bad = seqScans(plan, rels);
      if (bad.length) {
        failed++;
        console.log(`not ok - explain as ${who}: ${q.name}: Seq Scan on ${bad.join(', ')}`);
        console.log(`#   ${nodes(plan).join(' > ')}`);
      } else {
        console.log(`ok - explain as ${who}: ${q.name}: no Seq Scan on the outbox or its dead letters (${nodes(plan).filter((n) => /Scan/.test(n)).join('; ') || 'no scan'})`);
      }
    }
  }
  await client.end();
  process.exit(failed ? 1 : 0);
}

main().catch((err) => {
  console.log(`not ok - explain: ${err.message}`);
  process.exit(1);
});
