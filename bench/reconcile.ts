/**
 * `npm run bench:reconcile`: the cost of one reconciliation per changed counter, the batched
 * install (one pipelined round trip per batch, the Reconciler's default) against the
 * one-target-at-a-time install it replaced (one EVAL round trip per target), side by side in one
 * run on an embedded PostgreSQL and a redis-server of its own (docs/cache.md, issue 22). Every
 * round first changes every counter (one more like on each item, fed to Redis by the feeder, so
 * there is no drift), then reconciles them all with one path; rounds alternate old, new.
 * Options: --counters N (100000) --rounds N (2 of each) --batch-size N (500) --partitions N (8).
 */
import { parseArgs } from "node:util";
import { loadavg } from "node:os";
import { reconciledKey } from "../src/cache/count-keys.ts";
import { CountFeeder } from "../src/cache/count-feeder.ts";
import { CountStore } from "../src/cache/count-store.ts";
import { LIKE_COUNTS } from "../src/cache/counter-kinds.ts";
import { installBatch, Reconciler, type BatchInstall } from "../src/cache/reconciler.ts";
import { connectRedis } from "../src/cache/redis-connection.ts";
import { TestRedis } from "../test/support/redis-server.ts";
import { BenchCluster } from "./bench-cluster.ts";

const { values } = parseArgs({
  options: {
    counters: { type: "string", default: "100000" }, rounds: { type: "string", default: "2" },
    "batch-size": { type: "string", default: "500" }, partitions: { type: "string", default: "8" },
  },
});
const n = (name: keyof typeof values) => {
  const v = Number(values[name]);
  if (!Number.isSafeInteger(v) || v <= 0) throw new Error(`--${name} must be a positive integer, got ${values[name]}`);
  return v;
};
const COUNTERS = n("counters"), ROUNDS = n("rounds"), BATCH = n("batch-size"), PARTITIONS = n("partitions");

/** The install before issue 22: one script per target, each awaited before the next. */
const oneByOne: BatchInstall = async (store, kind, entries, bound) => {
  const out: PromiseSettledResult<Awaited<ReturnType<CountStore["install"]>>>[] = [];
  for (const e of entries) {
    out.push(await store.install(kind, e.target, e.truth, bound, true).then(
      (value) => ({ status: "fulfilled" as const, value }), (reason: unknown) => ({ status: "rejected" as const, reason })));
  }
  return out;
};

const bench = await BenchCluster.start("social-ledger-bench-reconcile-");
const server = await TestRedis.start();
try {
  const pool = await bench.ledgerDatabase("bench_reconcile", { partitions: PARTITIONS, max: 4 });
  // A long deadline: this measures cost, and the machine it runs on is shared (the 200 ms default is for serving).
  const redis = await connectRedis(server.url, { commandTimeoutMs: 10_000 });
  try {
    const store = new CountStore(redis, 16);
    const t0 = performance.now();
    await pool.query("INSERT INTO item (item_id, kind) SELECT 'rc-' || i, 'plain' FROM generate_series(1, $1::int) i", [COUNTERS]);
    // Through the write function, server-side, 5,000 per statement (one transaction of 100k grew slower than linear).
    const likeAll = async (user: string) => {
      for (let from = 1; from <= COUNTERS; from += 5000) {
        await pool.query(
          "SELECT count(*) FROM generate_series($1::int, $2::int) i, LATERAL like_set($3, 'rc-' || i, true, ledger_partition($3, $4))",
          [from, Math.min(COUNTERS, from + 4999), user, PARTITIONS]);
      }
    };
    await likeAll("u-0");
    // Every counter in Redis at the present (what backfills by reads would leave), the feeder's cursor and the reconciled boundary there too.
    const positions = (await pool.query<{ part: number; last: number }>(LIKE_COUNTS.positionsSql)).rows;
    const bound = positions.map((p) => p.last);
    for (let i = 1; i <= COUNTERS; i += 200) {
      const entries = Array.from({ length: Math.min(200, COUNTERS - i + 1) }, (_, k) => ({ target: `rc-${i + k}`, truth: 1 }));
      for (const r of await store.installBatch("likes", entries, bound, false)) if (r.status === "rejected") throw r.reason;
    }
    const feeder = new CountFeeder(pool, store, LIKE_COUNTS, { batchSize: 5000 });
    await feeder.pollOnce();
    await redis.hSet(reconciledKey("likes"), Object.fromEntries(positions.map((p) => [String(p.part), String(p.last)])));
    process.stdout.write(`seeded ${COUNTERS} items with one like each and their counters in Redis in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`);

    const results: { path: string; msPerCounter: number }[] = [];
    for (let round = 0; round < 2 * ROUNDS; round++) {
      const old = round % 2 === 0;
      await likeAll(`u-${round + 1}`);
      const f0 = performance.now();
      while ((await feeder.pollOnce()) > 0);
      const fedSeconds = (performance.now() - f0) / 1000;
      // The install timed on its own, so the rest (changed targets, truth statements) is the difference.
      let installMs = 0;
      const timed: BatchInstall = async (...args) => {
        const i0 = performance.now();
        try {
          return await (old ? oneByOne : installBatch)(...args);
        } finally {
          installMs += performance.now() - i0;
        }
      };
      const reconciler = new Reconciler(pool, store, { batchSize: BATCH, alertThreshold: Infinity, install: timed });
      const r0 = performance.now();
      const report = await reconciler.reconcile(LIKE_COUNTS);
      const ms = performance.now() - r0;
      if (report.visited !== COUNTERS || report.installed !== COUNTERS || report.drifted.length > 0 || report.failed.length > 0) {
        throw new Error(`round ${round}: unexpected report ${JSON.stringify({ ...report, drifted: report.drifted.length, failed: report.failed.slice(0, 3) })}`);
      }
      const line = { path: old ? "one target at a time" : "batched", msPerCounter: ms / COUNTERS };
      results.push(line);
      process.stdout.write(`round ${round + 1} ${line.path.padEnd(21)} ${COUNTERS} changed counters in ${(ms / 1000).toFixed(2)} s: ` +
        `${line.msPerCounter.toFixed(4)} ms per counter, of which Redis installs ${(installMs / COUNTERS).toFixed(4)} (fed in ${fedSeconds.toFixed(1)} s) load ${loadavg()[0]!.toFixed(1)}\n`);
    }
    const mean = (p: string) => {
      const xs = results.filter((r) => r.path === p).map((r) => r.msPerCounter);
      return xs.reduce((a, b) => a + b, 0) / xs.length;
    };
    const before = mean("one target at a time"), after = mean("batched");
    process.stdout.write(`mean ms per counter: one target at a time ${before.toFixed(4)}, batched ${after.toFixed(4)}: ${(before / after).toFixed(1)}x ` +
      `(batch ${BATCH}, ${PARTITIONS} partitions, load ${loadavg().map((l) => l.toFixed(1)).join(" ")})\n`);
  } finally {
    await redis.close().catch(() => {});
  }
} finally {
  await server.kill();
  await bench.stop();
}
