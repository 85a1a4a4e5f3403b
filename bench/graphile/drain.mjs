// Graphile Worker peer for pgdrain's `make bench` section 3: drains N pre-inserted no-op jobs and
// reports jobs/s. The database comes from $DATABASE_URL (the Go bench points it at a fresh
// database on the server under test); N from $JOBS (default 20000).
//
//   node drain.mjs           migrate, insert N jobs, drain them with one worker, print one JSON line
//   node drain.mjs prepare   migrate and insert N jobs, print {"jobs":N,...}
//   node drain.mjs work      migrate (no-op when done), print "ready", wait for a line on stdin, then
//                            drain until no job is left (other processes may drain too) and print
//                            one JSON line; the Go bench starts several of these together
// The JSON line's "executed" counts the task calls of this process (the check that the jobs ran).
//
// Output on stdout is only the "ready" line and the JSON line; Graphile Worker's own log goes to
// stderr at warning level and above.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import pg from "pg";
import { Logger, run, runMigrations } from "graphile-worker";

const connectionString = process.env.DATABASE_URL;
if (!connectionString) {
  console.error("drain.mjs: DATABASE_URL must be set");
  process.exit(2);
}
const jobs = Number(process.env.JOBS ?? 20000);
const concurrency = Number(process.env.CONCURRENCY ?? 32);
const localQueueSize = Number(process.env.LOCAL_QUEUE ?? 500);
const pollInterval = 20;
const maxPoolSize = concurrency + 8;
const version = JSON.parse(
  readFileSync(new URL("./node_modules/graphile-worker/package.json", import.meta.url)),
).version;
const settings =
  `concurrency ${concurrency}, localQueue ${localQueueSize}, completeJobBatchDelay 0, ` +
  `failJobBatchDelay 0, pollInterval ${pollInterval}ms, maxPoolSize ${maxPoolSize}`;

const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`graphile-worker ${level}: ${message}`);
});

const preset = {
  worker: {
    connectionString,
    concurrentJobs: concurrency,
    maxPoolSize,
    pollInterval,
    localQueue: { size: localQueueSize },
    completeJobBatchDelay: 0,
    failJobBatchDelay: 0,
    logger,
  },
};

async function migrate() {
  await runMigrations({ preset });
}

// prepare inserts the jobs in one SQL call through graphile_worker.add_jobs.
async function prepare(client) {
  await client.query("delete from graphile_worker._private_jobs");
  await client.query(
    `select count(*) from graphile_worker.add_jobs(array(
       select row('noop', json_build_object('n', g), null, null, null, null, null, null)::graphile_worker.job_spec
       from generate_series(1, $1::int) g))`,
    [jobs],
  );
  await client.query("vacuum analyze graphile_worker._private_jobs");
}

// work runs the worker until the jobs table is empty and returns the seconds that took.
let executed = 0;
async function work(client) {
  const start = performance.now();
  const runner = await run({
    preset,
    noHandleSignals: true,
    taskList: {
      noop: async () => {
        executed++;
      },
    },
  });
  let seconds;
  for (;;) {
    const { rows } = await client.query("select exists (select 1 from graphile_worker._private_jobs) as left");
    if (!rows[0].left) {
      seconds = (performance.now() - start) / 1000;
      break;
    }
    if (performance.now() - start > 300_000) throw new Error(`jobs left after 5 minutes`);
    await new Promise((r) => setTimeout(r, 5));
  }
  await runner.stop();
  return seconds;
}

async function main() {
  const mode = process.argv[2] ?? "all";
  const client = new pg.Client({ connectionString });
  await client.connect();
  try {
    await migrate();
    if (mode === "prepare" || mode === "all") await prepare(client);
    if (mode === "prepare") {
      console.log(JSON.stringify({ jobs, version }));
      return;
    }
    if (mode === "work") {
      console.log("ready");
      const rl = createInterface({ input: process.stdin });
      await new Promise((resolve) => rl.once("line", resolve));
      rl.close();
    } else if (mode !== "all") {
      throw new Error(`unknown mode ${mode}`);
    }
    const seconds = await work(client);
    console.log(JSON.stringify({ jobs, seconds, rate: jobs / seconds, executed, version, settings }));
  } finally {
    await client.end();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error("drain.mjs:", err);
    process.exit(1);
  },
);
