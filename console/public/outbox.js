/*
 * console/public/outbox.js: the outbox page's two plots (Chart.js), fed by
 * /o/<oid>/samples.json, which the console samples from
 * delivery_outbox_activity while it runs; refreshed every sample interval.
 */
'use strict';
(function () {
  const box = document.getElementById('charts');
  if (!box || typeof Chart === 'undefined') return;
  const src = box.dataset.src;
  const minutesAgo = (t, now) => -((now - t) / 60000);
  const common = {
    animation: false,
    responsive: true,
    maintainAspectRatio: false,
    parsing: false,
    spanGaps: true,
    scales: {
      x: { type: 'linear', min: -5, max: 0, title: { display: true, text: 'minutes ago' } },
      y: { beginAtZero: true },
    },
    plugins: { legend: { position: 'bottom', labels: { boxWidth: 12 } } },
  };
  const backlog = new Chart(document.getElementById('backlog'), {
    type: 'line',
    data: { datasets: [
      { label: 'pending', data: [], borderColor: '#1c5bb8', pointRadius: 0 },
      { label: 'delivered, not acked', data: [], borderColor: '#d98a00', pointRadius: 0 },
    ] },
    options: { ...common, plugins: { ...common.plugins, title: { display: true, text: 'backlog (rows)' } } },
  });
  const rates = new Chart(document.getElementById('rates'), {
    type: 'line',
    data: { datasets: [
      { label: 'enqueued/s', data: [], borderColor: '#1b6b2a', pointRadius: 0 },
      { label: 'acked/s', data: [], borderColor: '#6a3fb5', pointRadius: 0 },
      { label: 'dead-lettered/s', data: [], borderColor: '#b3261e', pointRadius: 0 },
    ] },
    options: { ...common, plugins: { ...common.plugins, title: { display: true, text: 'per second' } } },
  });
  let every = 5000;
  async function refresh() {
    try {
      const r = await fetch(src, { credentials: 'same-origin' });
      const d = await r.json();
      every = d.interval_ms || every;
      const now = Date.now();
      const pts = (k) => d.points.filter((p) => p[k] !== null && p[k] !== undefined)
        .map((p) => ({ x: minutesAgo(p.t, now), y: p[k] }));
      backlog.data.datasets[0].data = pts('backlog_pending');
      backlog.data.datasets[1].data = pts('backlog_delivered');
      rates.data.datasets[0].data = pts('enqueued_per_s');
      rates.data.datasets[1].data = pts('acked_per_s');
      rates.data.datasets[2].data = pts('dead_per_s');
      /* the axis spans what the console has sampled: 5 minutes at least, the hour at most */
      const oldest = d.points.length ? minutesAgo(d.points[0].t, now) : -5;
      const min = Math.max(-60, Math.min(-5, Math.floor(oldest)));
      backlog.options.scales.x.min = min;
      rates.options.scales.x.min = min;
      backlog.update();
      rates.update();
      box.dataset.points = String(d.points.length);
    } catch (e) {
      box.dataset.error = String(e);
    }
    setTimeout(refresh, every);
  }
  refresh();
})();
