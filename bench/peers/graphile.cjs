// bench/peers/graphile.cjs -- graphile-worker for bench/peers.sh.
//
//   node graphile.cjs migrate   install graphile-worker's schema
//   node graphile.cjs work      the consumer: one worker, concurrency 4,
//                               localQueue size 100 and
//                               completeJobBatchDelay 0 (the batching of
//                               the docs' performance page: fetch 100 jobs
//                               in one query, complete what finished
//                               together in one), LISTEN on jobs:insert
//                               (built in), pollInterval 2000 (default).
//                               Task "task" does nothing but count the ids.
//                               Prints "ready PID", and on SIGTERM
//                               "executions=N distinct=D".
//
// The package comes from PEERS_NODE_MODULES; the connection from PGHOST,
// PGPORT, PGUSER, PGDATABASE.
'use strict';
const path = require('node:path');
const { run, runMigrations } = require(path.join(process.env.PEERS_NODE_MODULES, 'graphile-worker'));

const connectionString = `postgres:///${process.env.PGDATABASE}?host=${encodeURIComponent(process.env.PGHOST)}` +
  `&port=${process.env.PGPORT}&user=${process.env.PGUSER}`;
const { Logger } = require(path.join(process.env.PEERS_NODE_MODULES, 'graphile-worker'));
const logger = new Logger(() => (level, message) => {
  if (level === 'error' || level === 'warning') console.error(`graphile-worker ${level}: ${message}`);
});

async function main() {
  const mode = process.argv[2];
  if (mode === 'migrate') {
    await runMigrations({ connectionString, logger });
    return;
  }
  if (mode !== 'work') {
    console.error('usage: node graphile.cjs migrate | work');
    process.exit(2);
  }
  const seen = new Set();
  let executions = 0;
  const runner = await run({
    connectionString,
    logger,
    concurrency: 4,
    maxPoolSize: 10,
    noHandleSignals: true,
    pollInterval: 2000,
    preset: {
      worker: {
        localQueue: { size: 100 },
        completeJobBatchDelay: 0,
      },
    },
    taskList: {
      // here a real consumer pushes the job to its recipient
      task: async (payload, helpers) => { executions++; seen.add(helpers.job.id); },
    },
  });
  console.log(`ready ${process.pid}`);
  const stop = async () => {
    await runner.stop();
    console.log(`executions=${executions} distinct=${seen.size}`);
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  await runner.promise;
}
main().catch((e) => { console.error(e); process.exit(1); });
