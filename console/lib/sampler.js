/*
 * console/lib/sampler.js: the last hour of each outbox's counters, sampled
 * by the console itself while it runs.
 *
 * Every `interval` ms one read of delivery_outbox_activity (shared memory,
 * O(1)) keeps, per outbox OID, the counters enqueued, acked, dead_lettered
 * and the backlog gauges, in a ring of an hour's samples.  Rates are the
 * differences of consecutive samples over their time; a sample whose
 * stats_since differs from the previous one (the server restarted, the
 * counters began again) starts a new series rather than a negative rate.
 * Without the preload the view raises 55000: the sampler keeps the error
 * for the pages and tries again at the next tick.
 */
'use strict';

const Q = require('./queries');
const { run, extSchema, pgError } = require('./db');

const HOUR_MS = 3600 * 1000;

class Sampler {
  constructor(pool, intervalMs) {
    this.pool = pool;
    this.intervalMs = intervalMs;
    this.series = new Map();      /* oid -> [{t, enqueued, acked, ...}] */
    this.lastError = null;
    this.timer = null;
  }

  start() {
    const tick = async () => {
      try {
        await this.sample();
      } finally {
        this.timer = setTimeout(tick, this.intervalMs);
      }
    };
    tick();
  }

  stop() {
    if (this.timer) clearTimeout(this.timer);
  }

  async sample() {
    let rows;
    try {
      const { ext } = await extSchema(this.pool);
      rows = await run(this.pool, Q.samples(ext));
      this.lastError = null;
    } catch (err) {
      this.lastError = pgError(err);
      return;
    }
    const t = Date.now();
    for (const r of rows) {
      const key = String(r.oid);
      let s = this.series.get(key);
      if (!s) this.series.set(key, (s = []));
      s.push({
        t,
        since: r.stats_since ? new Date(r.stats_since).getTime() : null,
        enqueued: r.enqueued,
        acked: r.acked,
        dead_lettered: r.dead_lettered,
        backlog_pending: r.backlog_pending,
        backlog_delivered: r.backlog_delivered,
      });
      while (s.length && s[0].t < t - HOUR_MS) s.shift();
    }
  }

  /*
   * points(oid): for the chart, one point per sample of the last hour: the
   * time, the backlog gauges, and the enqueued, acked and dead-lettered
   * rates since the previous sample (null for the first of a series).
   */
  points(oid) {
    const s = this.series.get(String(oid)) || [];
    const out = [];
    for (let i = 0; i < s.length; i++) {
      const cur = s[i];
      const prev = i > 0 ? s[i - 1] : null;
      const ok = prev && prev.since === cur.since && cur.t > prev.t;
      const rate = (k) => (ok ? ((cur[k] - prev[k]) * 1000) / (cur.t - prev.t) : null);
      out.push({
        t: cur.t,
        backlog_pending: cur.backlog_pending,
        backlog_delivered: cur.backlog_delivered,
        enqueued_per_s: rate('enqueued'),
        acked_per_s: rate('acked'),
        dead_per_s: rate('dead_lettered'),
      });
    }
    return { interval_ms: this.intervalMs, error: this.lastError, points: out };
  }
}

module.exports = { Sampler };
