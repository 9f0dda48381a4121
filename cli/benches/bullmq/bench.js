// BullMQ beside cohort's ledger: the reference half of the lifecycle
// benchmark (cli/benches/lifecycle.rs, COHORT_BENCH_CONFIGS=bullmq), run by
// it as a child process on a private redis-server.
//
//   node bench.js REDIS_PORT JOBS CONCURRENCY PAYLOAD_BYTES
//
// 1. The jobs are added with Queue.addBulk (1,000 a call), as cohort seeds
//    its plan before the lifecycles are timed.
// 2. One Worker, BullMQ's documented processing loop, with the given
//    concurrency and a no-op processor, takes every job to `completed`
//    (completed jobs are kept, as cohort keeps every run's outcome).
// 3. The timed part is 2 only: from the worker's start to the last
//    `completed` event. The CPU this process spent in it is
//    process.cpuUsage()'s delta.
//
// It prints one JSON line: {"jobs", "seconds", "cpu_seconds"} and the
// parent reads Redis's INFO commandstats and the server's CPU around it.

'use strict';

const { Queue, Worker } = require('bullmq');

async function main() {
  const [port, jobs, concurrency, payloadBytes] = process.argv.slice(2).map(Number);
  if (!(port > 0 && jobs > 0 && concurrency > 0 && payloadBytes >= 0)) {
    throw new Error('usage: node bench.js REDIS_PORT JOBS CONCURRENCY PAYLOAD_BYTES');
  }
  const connection = { host: '127.0.0.1', port, maxRetriesPerRequest: null };
  const name = 'cohort-bench';
  const queue = new Queue(name, { connection });
  const payload = 'x'.repeat(payloadBytes);
  for (let i = 0; i < jobs; i += 1000) {
    const chunk = [];
    for (let j = i; j < Math.min(jobs, i + 1000); j++) {
      chunk.push({ name: 'run', data: { run_id: `q${j}:arm:1`, payload } });
    }
    await queue.addBulk(chunk);
  }
  process.stdout.write(JSON.stringify({ added: jobs }) + '\n');
  // The parent reads INFO commandstats between the two lines.
  await new Promise((resolve) => process.stdin.once('data', resolve));

  let completed = 0;
  let failed = 0;
  let started;
  let cpuBefore;
  const done = new Promise((resolve) => {
    const worker = new Worker(name, async () => {}, { connection, concurrency, autorun: false });
    worker.on('completed', () => {
      completed += 1;
      if (completed + failed === jobs) resolve(worker);
    });
    worker.on('failed', () => {
      failed += 1;
      if (completed + failed === jobs) resolve(worker);
    });
    started = process.hrtime.bigint();
    cpuBefore = process.cpuUsage();
    worker.run();
  });
  const worker = await done;
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const cpu = process.cpuUsage(cpuBefore);
  process.stdout.write(
    JSON.stringify({ jobs, completed, failed, seconds, cpu_seconds: (cpu.user + cpu.system) / 1e6 }) + '\n',
  );
  await worker.close();
  await queue.close();
}

main().catch((e) => {
  process.stderr.write(`${e.stack || e}\n`);
  process.exit(1);
});
