/*
 * console/test/browser.js: the console driven through Debian's chromium
 * (playwright-core, no browser download), against the cluster and the two
 * consoles console/test.sh started: OP_URL as console_operator with the
 * access token TOKEN, MON_URL as console_monitor without one.  DB is a
 * superuser's connection string, for checking the database itself; OUT
 * the directory for the screenshots.  Prints TAP lines without numbers;
 * console/test.sh numbers them.
 */
'use strict';

const path = require('path');
const pg = require('pg');
const { chromium } = require('playwright-core');
const { toPgConfig } = require('../lib/conninfo');

const { OP_URL, MON_URL, TOKEN, DB, OUT } = process.env;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
let failed = 0;

function ok(cond, name, diag) {
  console.log(`${cond ? 'ok' : 'not ok'} - ${name}`);
  if (!cond) {
    failed++;
    if (diag !== undefined) console.log(`#   ${String(diag).split('\n').join('\n#   ')}`);
  }
  return cond;
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(OUT, `${name}.png`), fullPage: true });
}

async function cards(page) {
  const out = {};
  for (const el of await page.$$('#counts [data-k]')) {
    out[await el.getAttribute('data-k')] = (await el.innerText()).trim();
  }
  return out;
}

async function main() {
  const db = new pg.Client(toPgConfig(DB));
  await db.connect();
  const one = async (sql, v = []) => (await db.query(sql, v)).rows[0];
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await ctx.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));

  /* the access token */
  let r = await page.goto(OP_URL + '/');
  ok(r.status() === 401 && (await page.isVisible('input[name=token]')),
    'operator console with a token: the overview asks for it first (401, login form)', r.status());
  await shot(page, '01-login');
  await page.fill('input[name=token]', 'wrong');
  await page.click('button[type=submit]');
  ok((await page.textContent('body')).includes('not the access token'), 'a wrong token is refused');
  await page.fill('input[name=token]', TOKEN);
  await page.click('button[type=submit]');
  await page.waitForSelector('#outboxes');

  /* the overview */
  const names = await page.$$eval('#outboxes tbody tr', (trs) => trs.map((t) => t.dataset.outbox));
  ok(['outbox.delivery_outbox', 'shop.delivery_outbox', 'big.delivery_outbox'].every((n) => names.includes(n)),
    'overview lists every outbox of the database (delivery_outbox_tables)', names.join(', '));
  const shopRow = await page.$$eval('#outboxes tr[data-outbox="shop.delivery_outbox"] [data-k]',
    (tds) => Object.fromEntries(tds.map((t) => [t.dataset.k, t.innerText.trim()])));
  const st0 = await one("SELECT * FROM outbox.outbox_stats('shop.delivery_outbox')");
  ok(['pending', 'delivered', 'acked', 'dead'].every((k) => Number(shopRow[k]) === Number(st0[k])),
    'overview: shop.delivery_outbox counts equal outbox_stats()', JSON.stringify({ page: shopRow, db: st0 }));
  ok((await page.textContent('#role')).trim() === 'console_operator', 'overview names the role it connects as');
  await shot(page, '02-overview');

  /* an outbox */
  await page.click('a:text-is("shop.delivery_outbox")');
  await page.waitForSelector('#counts');
  const c = await cards(page);
  const st = await one("SELECT * FROM outbox.outbox_stats('shop.delivery_outbox')");
  ok(['pending', 'delivered', 'acked', 'dead', 'open_recipients'].every((k) => Number(c[k]) === Number(st[k])),
    'outbox page: counts by state, dead letters and open recipients equal outbox_stats()',
    JSON.stringify({ page: c, db: st }));
  ok(c.oldest_pending_age && c.oldest_pending_age !== '—' && c.oldest_delivered_age !== '—',
    'outbox page: oldest pending and oldest delivered ages shown', JSON.stringify(c));
  const topPending = await page.$$eval('#topPending tbody tr', (trs) => trs.map((t) => t.innerText));
  const tp = await db.query(`SELECT recipient, count(*) AS n FROM shop.delivery_outbox
                              WHERE delivery_state = 'pending' GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 1`);
  ok(topPending.length > 0 && topPending[0].startsWith(tp.rows[0].recipient) &&
    topPending[0].trim().endsWith(String(tp.rows[0].n)),
  'outbox page: the top pending recipient and its count', `${topPending[0]} vs ${JSON.stringify(tp.rows[0])}`);
  ok((await page.$$('#topDelivered tbody tr')).length > 0 && (await page.$$('#topDead tbody tr')).length > 0,
    'outbox page: top recipients by delivered-unacked and by dead rows');
  /* the plot: the console samples every second in the test; wait for two points */
  await page.waitForFunction(() => Number(document.getElementById('charts').dataset.points) >= 2,
    null, { timeout: 15000 }).then(() => ok(true, 'outbox page: the plot has the console\'s samples (chart.js)'),
    (e) => ok(false, 'outbox page: the plot has the console\'s samples (chart.js)', e.message));
  await shot(page, '03-outbox');

  /* a row: text payload, binary payload */
  await page.goto(OP_URL + (await page.getAttribute('#pendingRows a:text-is("31")', 'href')));
  ok((await page.textContent('td[data-col=payload] pre')).includes('"note": "café"') &&
    (await page.textContent('td[data-col=payload]')).includes('UTF-8 text'),
  'row page: a UTF-8 payload is shown as text');
  ok((await page.$$eval('table#row th', (ths) => ths.map((t) => t.innerText))).join(',') ===
    'id,recipient,kind,tenant_id,delivery_state,delivery_attempts,created_at,delivered_at,acked_at,not_before,expires_at,dedup_key,last_error,payload',
  'row page: every column');
  await page.goto(page.url().replace(/\/row\/31$/, '/row/62'));
  ok((await page.textContent('td[data-col=payload] pre')).trim() === 'de ad be ef ff 00',
    'row page: a payload that is not UTF-8 is shown as hex');
  await shot(page, '04-row');
  await page.goto(page.url().replace(/\/row\/62$/, '/row/15'));
  ok((await page.textContent('td[data-col=last_error]')).trim() === 'HTTP 503' &&
    (await page.textContent('td[data-col=not_before]')).trim() !== '' &&
    (await page.textContent('td[data-col=delivery_attempts]')).trim() === '1',
  'row page: last_error, attempts and not_before of a released row');

  /* dead letters: filters, then redrive one */
  const shopOid = (await one("SELECT 'shop.delivery_outbox'::regclass::oid AS o")).o;
  await page.goto(`${OP_URL}/o/${shopOid}/dead`);
  let ids = await page.$$eval('#dead tbody tr[data-id]', (trs) => trs.map((t) => Number(t.dataset.id)));
  ok(JSON.stringify(ids) === JSON.stringify([63, 18, 17, 14, 13, 12, 11]), 'dead letters: all of them, newest first', ids);
  await page.fill('#filters input[name=error]', '422');
  await page.click('#filters button');
  ids = await page.$$eval('#dead tbody tr[data-id]', (trs) => trs.map((t) => Number(t.dataset.id)));
  ok(JSON.stringify(ids) === JSON.stringify([14, 13, 12, 11]), 'dead letters: filtered by an error substring', ids);
  await page.fill('#filters input[name=recipient]', 'agent:2');
  await page.click('#filters button');
  ids = await page.$$eval('#dead tbody tr[data-id]', (trs) => trs.map((t) => Number(t.dataset.id)));
  ok(JSON.stringify(ids) === JSON.stringify([12]), 'dead letters: filtered by recipient and error', ids);
  await page.fill('#filters input[name=recipient]', '');
  await page.fill('#filters input[name=error]', '');
  await page.fill('#filters input[name=kind]', 'invoice');
  await page.click('#filters button');
  ids = await page.$$eval('#dead tbody tr[data-id]', (trs) => trs.map((t) => Number(t.dataset.id)));
  ok(JSON.stringify(ids) === JSON.stringify([18, 12]), 'dead letters: filtered by kind', ids);
  await page.fill('#filters input[name=kind]', '');
  await page.fill('#filters input[name=recipient]', 'agent:2');
  await page.click('#filters button');
  await shot(page, '05-dead');
  await page.check('#dead input[value="12"]');
  await page.click('#dead-form button[value=redrive]');
  await page.waitForSelector('#confirm');
  ok((await page.textContent('#call')).includes('outbox_redrive(ARRAY[12]::bigint[]'),
    'redrive: a confirmation step shows the call', await page.textContent('#call'));
  ok((await one('SELECT count(*)::int AS n FROM shop.delivery_outbox_dead WHERE id = 12')).n === 1,
    'redrive: nothing happened before the confirmation');
  await shot(page, '06-confirm');
  await page.click('#confirm');
  await page.waitForSelector('#changed');
  ok((await page.getAttribute('#changed', 'data-n')) === '1' &&
    (await page.textContent('#changed')).includes('changed 1 row'), 'redrive: the result says 1 row changed');
  await shot(page, '07-result');
  const back = await one('SELECT delivery_state, delivery_attempts FROM shop.delivery_outbox WHERE id = 12');
  ok(back && back.delivery_state === 'pending' && back.delivery_attempts === 0 &&
    (await one('SELECT count(*)::int AS n FROM shop.delivery_outbox_dead WHERE id = 12')).n === 0,
  'redrive: the letter is pending in the outbox again, gone from the dead letters', JSON.stringify(back));

  /* a selection: release two delivered rows with a delay */
  await page.goto(`${OP_URL}/o/${shopOid}`);
  await page.check('#deliveredRows input[value="19"]');
  await page.check('#deliveredRows input[value="20"]');
  await page.fill('#delivered-form input[name=retry_after]', '10 minutes');
  await page.fill('#delivered-form input[name=error]', 'console test');
  await page.click('#delivered-form button[value=release]');
  await page.click('#confirm');
  await page.waitForSelector('#changed');
  const rel = await db.query(`SELECT id, delivery_state, not_before > now() AS later, last_error
                                FROM shop.delivery_outbox WHERE id IN (19, 20) ORDER BY id`);
  ok((await page.getAttribute('#changed', 'data-n')) === '2' &&
    rel.rows.every((x) => x.delivery_state === 'pending' && x.later && x.last_error === 'console test'),
  'release of a selection: 2 rows changed, pending with not_before and last_error', JSON.stringify(rel.rows));

  /* reclaim a recipient's delivered rows; reject one; purge */
  const rc = await one(`SELECT count(*)::int AS n FROM shop.delivery_outbox
                         WHERE recipient = 'agent:0' AND tenant_id = 'acme' AND delivery_state = 'delivered'`);
  await page.goto(`${OP_URL}/o/${shopOid}`);
  await page.click('#topDelivered tr:has(td:text-is("agent:0")):has(td:text-is("acme")) button');
  await page.click('#confirm');
  await page.waitForSelector('#changed');
  ok(rc.n > 0 && Number(await page.getAttribute('#changed', 'data-n')) === rc.n &&
    (await one(`SELECT count(*)::int AS n FROM shop.delivery_outbox WHERE recipient = 'agent:0'
                 AND tenant_id = 'acme' AND delivery_state = 'delivered'`)).n === 0,
  `reclaim recipient: agent:0/acme's ${rc.n} delivered rows back to pending`);
  await page.goto(`${OP_URL}/o/${shopOid}/row/21`);
  await page.fill('input[name=error]', 'HTTP 422: console test');
  await page.click('button[value=reject]');
  await page.click('#confirm');
  await page.waitForSelector('#changed');
  ok((await one("SELECT dead_reason, last_error FROM shop.delivery_outbox_dead WHERE id = 21"))?.dead_reason === 'rejected',
    'reject from the row page: the row is a dead letter (rejected)');
  await page.goto(`${OP_URL}/o/${shopOid}`);
  await page.fill('#purge-form input[name=older_than]', '0 seconds');
  await page.click('#purge-form button');
  await page.click('#confirm');
  await page.waitForSelector('#changed');
  ok((await page.getAttribute('#changed', 'data-n')) === '10' &&
    (await one("SELECT count(*)::int AS n FROM shop.delivery_outbox WHERE delivery_state = 'acked'")).n === 0,
  'purge: the 10 acked rows deleted');

  /* CSRF: a POST without the session's token changes nothing */
  const forged = await ctx.request.post(`${OP_URL}/o/${shopOid}/act`, {
    form: { action: 'redrive', ids: '11' }, maxRedirects: 0,
  });
  ok(forged.status() === 403 && (await one('SELECT count(*)::int AS n FROM shop.delivery_outbox_dead WHERE id = 11')).n === 1,
    'an action without the CSRF token is refused (403), nothing changed', forged.status());

  /* the monitoring role: reads, no payload, no dead letters, refused actions */
  const mon = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
  await mon.goto(MON_URL + '/');
  ok((await mon.$$('#outboxes tbody tr')).length >= 3 && (await mon.textContent('#role')).trim() === 'console_monitor',
    'monitoring role: the overview, without a token');
  await mon.goto(`${MON_URL}/o/${shopOid}`);
  const mc = await cards(mon);
  const ms = await one("SELECT * FROM outbox.outbox_stats('shop.delivery_outbox')");
  ok(['pending', 'delivered', 'acked', 'dead'].every((k) => Number(mc[k]) === Number(ms[k])),
    'monitoring role: the outbox page counts equal outbox_stats()', JSON.stringify({ page: mc, db: ms }));
  ok((await mon.textContent('#topDead')).includes('Not permitted'), 'monitoring role: top dead recipients not permitted');
  await shot(mon, '08-outbox-monitor');
  await mon.goto(`${MON_URL}/o/${shopOid}/row/31`);
  ok((await mon.textContent('td[data-col=payload]')).includes('not shown') && !(await mon.$('td[data-col=last_error]')),
    'monitoring role: the row page shows no payload (no SELECT on it)');
  await shot(mon, '09-row-monitor');
  await mon.goto(`${MON_URL}/o/${shopOid}/dead`);
  ok(await mon.isVisible('#not-permitted'), 'monitoring role: the dead letters page says not permitted');
  await shot(mon, '10-dead-monitor');
  await mon.goto(`${MON_URL}/o/${shopOid}`);
  const delivered = await mon.$$eval('#deliveredRows input[name=ids]', (xs) => xs.map((x) => x.value));
  await mon.check(`#deliveredRows input[value="${delivered[0]}"]`);
  await mon.click('#delivered-form button[value=release]');
  await mon.click('#confirm');
  await mon.waitForSelector('.pgerror');
  const refusal = await mon.textContent('.pgerror');
  ok(refusal.includes('permission denied for function outbox_release') && refusal.includes('SQLSTATE 42501'),
    "monitoring role: an action is refused with PostgreSQL's message and SQLSTATE", refusal);
  ok((await one('SELECT delivery_state FROM shop.delivery_outbox WHERE id = $1', [delivered[0]])).delivery_state === 'delivered',
    'monitoring role: the refused release changed nothing');
  await shot(mon, '11-refused-monitor');

  ok(errors.length === 0, 'no script error in any page', errors.join('\n'));
  await browser.close();
  await db.end();
  process.exit(failed ? 1 : 0);
}

main().catch((err) => {
  console.log(`not ok - browser: ${err.stack || err.message}`);
  process.exit(1);
});
