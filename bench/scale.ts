/**
 * `npm run bench:scale -- --likes N` (issue 22): on an embedded PostgreSQL of its own, generates
 * a population of N likes (support/scale-population.ts) at each size of --sizes (default N/10 and N,
 * smallest first, each in a database of its own, dropped after), and measures on it the request
 * path (scale-reads.ts), the background jobs under live traffic (scale-jobs.ts), the service's
 * start-up (scale-startup.ts) and the bytes per like (scale-size.ts); prints them and issue 22's
 * goals (scale-report.ts). docs/scale.md has the figures.
 *
 *   node --import tsx bench/scale.ts [--likes 10000000] [--sizes a,b,...] [--partitions 16]
 *        [--writes 20000] [--reads 5000] [--workers 8] [--writers 4] [--idle-seconds 3]
 *        [--reconcile 100000] [--chunk 1000000] [--skip-startup] [--skip-full-audit]
 *
 * --skip-full-audit: no full audit (at 10M it grows with the history); the periodic audit's cursors
 * are set at the generated positions instead (scale-jobs.ts seedAuditCursors) and it is still timed.
 */
import { rm } from "node:fs/promises";
import path from "node:path";
import { parseArgs } from "node:util";
import { connectRedis } from "../src/cache/redis-connection.ts";
import { EmbeddedCluster, clusterTempDir } from "../src/db/embedded-cluster.ts";
import { initLedger } from "../src/db/ledger-config.ts";
import { migrate } from "../src/db/migrate.ts";
import { createPool } from "../src/db/pool.ts";
import { createWorkers, openLedger } from "../src/ledger.ts";
import { TestRedis } from "../support/redis-server.ts";
import { generatePopulation, population } from "../support/scale-population.ts";
import { jobFigures, seedAuditCursors } from "./scale-jobs.ts";
import { LiveLoad } from "./scale-live.ts";
import { readFigures } from "./scale-reads.ts";
import { ReconcileBench } from "./scale-reconcile.ts";
import { formatGoals, formatSize, type SizeRun } from "./scale-report.ts";
import { sizeFigures } from "./scale-size.ts";
import { startupFigure } from "./scale-startup.ts";

export interface ScaleOptions {
  likes: number;
  sizes: number[];
  partitions: number;
  writes: number;
  reads: number;
  workers: number;
  writers: number;
  idleSeconds: number;
  reconcile: number;
  chunk: number;
  startup: boolean;
  fullAudit: boolean;
}

function positive(name: string, raw: string | undefined, fallback: number): number {
  const n = raw === undefined ? fallback : Number(raw);
  if (!Number.isSafeInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer, got ${raw}`);
  return n;
}

export function parseScaleOptions(argv: readonly string[], likesDefault?: number): ScaleOptions {
  const { values: v } = parseArgs({
    args: [...argv],
    options: {
      likes: { type: "string" },
      sizes: { type: "string" },
      partitions: { type: "string" },
      writes: { type: "string" },
      reads: { type: "string" },
      workers: { type: "string" },
      writers: { type: "string" },
      "idle-seconds": { type: "string" },
      reconcile: { type: "string" },
      chunk: { type: "string" },
      "skip-startup": { type: "boolean", default: false },
      "skip-full-audit": { type: "boolean", default: false },
    },
  });
  const likes = positive("likes", v.likes, likesDefault ?? 10_000_000);
  const sizes =
    v.sizes === undefined
      ? [Math.max(100, Math.floor(likes / 10)), likes]
      : v.sizes.split(",").map((t) => positive("sizes", t, 0));
  return {
    likes,
    sizes: [...new Set(sizes)].sort((a, b) => a - b),
    partitions: positive("partitions", v.partitions, 16),
    writes: positive("writes", v.writes, 20_000),
    reads: positive("reads", v.reads, 5_000),
    workers: positive("workers", v.workers, 8),
    writers: positive("writers", v.writers, 4),
    idleSeconds: positive("idle-seconds", v["idle-seconds"], 3),
    reconcile: positive("reconcile", v.reconcile, 100_000),
    chunk: positive("chunk", v.chunk, 1_000_000),
    startup: !v["skip-startup"],
    fullAudit: !v["skip-full-audit"],
  };
}

async function measureSize(
  cluster: EmbeddedCluster,
  redisUrl: string,
  likes: number,
  o: ScaleOptions,
  changed: number[],
): Promise<SizeRun> {
  const database = `bench_scale_${likes}`;
  const admin = createPool({ connectionString: cluster.connectionString("postgres"), max: 1 });
  await admin.query(`DROP DATABASE IF EXISTS ${database}`);
  await admin.query(`CREATE DATABASE ${database}`);
  const pool = createPool({ connectionString: cluster.connectionString(database), max: o.workers + o.writers + 8 });
  // A deadline of 5 s instead of the service's 200 ms: on a shared, loaded machine a stall of the
  // event loop would otherwise fail the feeder's fan-out of 500 increments, not slow it.
  const redis = await connectRedis(redisUrl, { commandTimeoutMs: 5_000 });
  try {
    await migrate(pool);
    await initLedger(pool, { partitions: o.partitions });
    const ledger = await openLedger(pool);
    process.stdout.write(`generating ${likes} likes ...\n`);
    const g0 = performance.now();
    const pop = await generatePopulation(ledger, {
      likes,
      chunk: o.chunk,
      onProgress: (line) => process.stdout.write(line + "\n"),
    });
    const generateSeconds = (performance.now() - g0) / 1000;
    if (!o.fullAudit) await seedAuditCursors(ledger);
    // Right after generation: the state of N likes with their history pruned, none of the bench's own events.
    const size = await sizeFigures(pool);
    // The consumers run throughout, as in the service.
    const workers = createWorkers(ledger, { idleMs: 50 });
    for (const w of workers) w.start();
    try {
      const live = await LiveLoad.open(ledger, pop, { writers: o.writers, idleSeconds: o.idleSeconds });
      const reads = await readFigures(ledger, pop, { writes: o.writes, reads: o.reads, workers: o.workers });
      process.stdout.write("  request path measured\n");
      const jobs = await jobFigures(
        ledger,
        pop,
        live,
        new ReconcileBench(ledger, redis),
        [...new Set(changed.map((k) => Math.min(k, pop.items - 1)))],
        { fullAudit: o.fullAudit },
      );
      process.stdout.write("  jobs measured\n");
      const run: SizeRun = { pop, generateSeconds, reads, jobs, size };
      for (const w of workers) await w.stop();
      workers.length = 0;
      if (o.startup) run.startup = await startupFigure(cluster.connectionString(database));
      process.stdout.write(formatSize(run) + "\n");
      return run;
    } finally {
      for (const w of workers) await w.stop();
    }
  } finally {
    await redis.close().catch(() => {});
    await pool.end();
    await admin.query(`DROP DATABASE IF EXISTS ${database}`);
    await admin.end();
  }
}

export async function runScale(o: ScaleOptions): Promise<void> {
  const root = await clusterTempDir("social-ledger-bench-scale-");
  const cluster = await EmbeddedCluster.start({ dataDir: path.join(root, "pgdata") });
  const redis = await TestRedis.start();
  try {
    // One K common to every size (the smallest size has the fewest items), and the asked-for K.
    const smallest = population(o.sizes[0]!);
    const changed = [...new Set([Math.min(o.reconcile, smallest.items - 1), o.reconcile])];
    const runs: SizeRun[] = [];
    for (const likes of o.sizes) runs.push(await measureSize(cluster, redis.url, likes, o, changed));
    process.stdout.write(formatGoals(runs) + "\n");
    if (runs.some((r) => r.jobs.audit?.result.clean === false || !r.jobs.periodicAudit.result.clean))
      process.exitCode = 1;
  } finally {
    await redis.kill();
    await cluster.stop();
    await rm(root, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await runScale(parseScaleOptions(process.argv.slice(2)));
