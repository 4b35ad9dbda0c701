/**
 * `npm run bench:reconcile`: one reconciliation per round over every changed counter, side by side
 * in one run on an embedded PostgreSQL and a redis-server of its own (docs/cache.md, issue 22).
 * Every round first changes every counter (one more like on each item, fed to Redis by the feeder,
 * so there is no drift), then reconciles them all with one variant; rounds cycle through
 * --variants. Variants: one-by-one (the install before issue 22: one EVAL round trip per target,
 * awaited; batches of 500 back to back), unpaced (the batched install, UNPACED: batches of 500 back
 * to back) and paced (the batched install paced by the Pacer at --budget-ms / --duty,
 * LEDGER_BACKGROUND_BATCH_MS / LEDGER_BACKGROUND_DUTY's defaults unless given).
 *
 * With --live, each reconciliation runs under live traffic as bench:rebuild's does (writers liking
 * and unliking items of their own, readers of their counts from PostgreSQL, the consumers running)
 * plus readers of the reconciled counters through Redis (CountReader), and prints the live write,
 * count read and Redis count read p99 during the run ÷ idle (windows just before and just after,
 * pooled), with issue 22's 1.3x goal.
 *
 * Options: --counters N (100000) --rounds N (times through the variants, 2) --variants a,b
 * (one-by-one,unpaced; with --live unpaced,paced) --batch-size N (500) --partitions N (8) --live
 * --writers N (4) --readers N (2) --idle-seconds N (5) --budget-ms N --duty F.
 */
import { parseArgs } from "node:util";
import { loadavg } from "node:os";
import { reconciledKey } from "../src/cache/count-keys.ts";
import { CountFeeder } from "../src/cache/count-feeder.ts";
import { CountReader } from "../src/cache/count-reader.ts";
import { CountStore } from "../src/cache/count-store.ts";
import { LIKE_COUNTS } from "../src/cache/counter-kinds.ts";
import { installBatch, Reconciler, type BatchInstall } from "../src/cache/reconciler.ts";
import { connectRedis } from "../src/cache/redis-connection.ts";
import { Hooks } from "../src/hooks.ts";
import { createWorkers, openLedger, type Ledger } from "../src/ledger.ts";
import { DEFAULT_PACING, UNPACED, type PacingOptions } from "../src/workers/pacer.ts";
import { TestRedis } from "../support/redis-server.ts";
import { BenchCluster } from "./bench-cluster.ts";
import { after, describe, liveTraffic, pooled, ratioLine, type Latencies } from "./live-traffic.ts";

const { values } = parseArgs({
  options: {
    counters: { type: "string", default: "100000" },
    rounds: { type: "string", default: "2" },
    "batch-size": { type: "string", default: "500" },
    partitions: { type: "string", default: "8" },
    variants: { type: "string" },
    live: { type: "boolean", default: false },
    writers: { type: "string", default: "4" },
    readers: { type: "string", default: "2" },
    "idle-seconds": { type: "string", default: "5" },
    "budget-ms": { type: "string", default: String(DEFAULT_PACING.budgetMs) },
    duty: { type: "string", default: String(DEFAULT_PACING.duty) },
  },
});
const n = (
  name: "counters" | "rounds" | "batch-size" | "partitions" | "writers" | "readers" | "idle-seconds" | "budget-ms",
) => {
  const v = Number(values[name]);
  if (!Number.isSafeInteger(v) || v < 0 || (v === 0 && name !== "budget-ms"))
    throw new Error(`--${name} must be a positive integer, got ${values[name]}`);
  return v;
};
const COUNTERS = n("counters"),
  ROUNDS = n("rounds"),
  BATCH = n("batch-size"),
  PARTITIONS = n("partitions");
const LIVE = values.live,
  WRITERS = n("writers"),
  READERS = n("readers"),
  IDLE_S = n("idle-seconds");
const PACED: PacingOptions = { budgetMs: n("budget-ms"), duty: Number(values.duty) };

/** The install before issue 22: one script per target, each awaited before the next. */
const oneByOne: BatchInstall = async (store, kind, entries, bound) => {
  const out: PromiseSettledResult<Awaited<ReturnType<CountStore["install"]>>>[] = [];
  for (const e of entries) {
    out.push(
      await store.install(kind, e.target, e.truth, bound, true).then(
        (value) => ({ status: "fulfilled" as const, value }),
        (reason: unknown) => ({ status: "rejected" as const, reason }),
      ),
    );
  }
  return out;
};

const VARIANTS: Record<string, { install: BatchInstall; pacing: PacingOptions }> = {
  "one-by-one": { install: oneByOne, pacing: UNPACED },
  unpaced: { install: installBatch, pacing: UNPACED },
  paced: { install: installBatch, pacing: PACED },
};
const variants = (values.variants ?? (LIVE ? "unpaced,paced" : "one-by-one,unpaced")).split(",").map((v) => v.trim());
for (const v of variants)
  if (!(v in VARIANTS)) throw new Error(`--variants: unknown variant ${v} (${Object.keys(VARIANTS).join(", ")})`);

interface LiveFigures {
  idle: Latencies;
  during: Latencies;
  cachedIdle: number[];
  cachedDuring: number[];
}

/** Readers of the reconciled counters through Redis (what the HTTP count routes serve) until `stop`; their sorted latencies. */
async function cachedReads(reader: CountReader, stop: Promise<void>): Promise<number[]> {
  let stopped = false;
  void stop.then(() => (stopped = true));
  const out: number[] = [];
  await Promise.all(
    Array.from({ length: READERS }, async (_, r) => {
      for (let i = 0; !stopped; i++) {
        const t0 = performance.now();
        await reader.read(LIKE_COUNTS, `rc-${1 + ((i * 7919 + r * 104_729) % COUNTERS)}`, { allowedLag: 1_000_000 });
        out.push(performance.now() - t0);
      }
    }),
  );
  return out.sort((a, b) => a - b);
}

const bench = await BenchCluster.start("social-ledger-bench-reconcile-");
const server = await TestRedis.start();
try {
  const pool = await bench.ledgerDatabase("bench_reconcile", {
    partitions: PARTITIONS,
    max: LIVE ? WRITERS + READERS + 12 : 4,
  });
  // A long deadline: this measures cost, and the machine it runs on is shared (the 200 ms default is for serving).
  const redis = await connectRedis(server.url, { commandTimeoutMs: 10_000 });
  try {
    const store = new CountStore(redis, 16);
    const t0 = performance.now();
    await pool.query("INSERT INTO item (item_id, kind) SELECT 'rc-' || i, 'plain' FROM generate_series(1, $1::int) i", [
      COUNTERS,
    ]);
    // Through the write function, server-side, 5,000 per statement (one transaction of 100k grew slower than linear).
    const likeAll = async (user: string) => {
      for (let from = 1; from <= COUNTERS; from += 5000) {
        await pool.query(
          "SELECT count(*) FROM generate_series($1::int, $2::int) i, LATERAL like_set($3, 'rc-' || i, true, ledger_partition($3, $4))",
          [from, Math.min(COUNTERS, from + 4999), user, PARTITIONS],
        );
      }
    };
    await likeAll("u-0");
    // Every counter in Redis at the present (what backfills by reads would leave), the feeder's cursor and the reconciled boundary there too.
    const positions = (await pool.query<{ part: number; last: number }>(LIKE_COUNTS.positionsSql)).rows;
    const bound = positions.map((p) => p.last);
    for (let i = 1; i <= COUNTERS; i += 200) {
      const entries = Array.from({ length: Math.min(200, COUNTERS - i + 1) }, (_, k) => ({
        target: `rc-${i + k}`,
        truth: 1,
      }));
      for (const r of await store.installBatch("likes", entries, bound, false))
        if (r.status === "rejected") throw r.reason;
    }
    const feeder = new CountFeeder(pool, store, LIKE_COUNTS, { batchSize: 5000 });
    await feeder.pollOnce();
    await redis.hSet(
      reconciledKey("likes"),
      Object.fromEntries(positions.map((p) => [String(p.part), String(p.last)])),
    );
    process.stdout.write(
      `seeded ${COUNTERS} items with one like each and their counters in Redis in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`,
    );

    // --live: the ledger's writers and consumers, as the service runs them, and readers of counts from PostgreSQL and from Redis.
    let ledger: Ledger | undefined;
    const workers: ReturnType<typeof createWorkers> = [];
    if (LIVE) {
      ledger = await openLedger(pool);
      for (let w = 0; w < WRITERS; w++) for (let i = 0; i < 50; i++) await ledger.likes.createItem(`live-${w}-${i}`);
      await ledger.likeConsumer.drain(2000);
      await ledger.notifications.drain(2000);
      workers.push(...createWorkers(ledger, { loops: 1, idleMs: 50 }));
      for (const w of workers) w.start();
    }
    const cachedReader = new CountReader(pool, store, { localTtlMs: 0 });
    const window = async (stop: Promise<void>) => {
      const [live, cached] = await Promise.all([
        liveTraffic(ledger!, stop, { writers: WRITERS, readers: READERS }),
        cachedReads(cachedReader, stop),
      ]);
      return { live, cached };
    };

    const results: { variant: string; ms: number; msPerCounter: number; batches: number; live?: LiveFigures }[] = [];
    try {
      for (let round = 0; round < ROUNDS * variants.length; round++) {
        const variant = variants[round % variants.length]!;
        await likeAll(`u-${round + 1}`);
        const f0 = performance.now();
        while ((await feeder.pollOnce()) > 0);
        const fedSeconds = (performance.now() - f0) / 1000;
        if (ledger) {
          await ledger.likeConsumer.drain(2000);
          await ledger.notifications.drain(2000);
        }
        // The install timed on its own, so the rest (changed targets, truth statements, rests) is the difference.
        let installMs = 0;
        const timed: BatchInstall = async (...args) => {
          const i0 = performance.now();
          try {
            return await VARIANTS[variant]!.install(...args);
          } finally {
            installMs += performance.now() - i0;
          }
        };
        const hooks = new Hooks();
        let batches = 1;
        hooks.on("reconcile.betweenBatches", () => void batches++);
        const reconciler = new Reconciler(pool, store, {
          batchSize: BATCH,
          alertThreshold: Infinity,
          install: timed,
          pacing: VARIANTS[variant]!.pacing,
          hooks,
        });
        const idleBefore = ledger ? await window(after(IDLE_S * 1000)) : undefined;
        let finished!: () => void;
        const done = new Promise<void>((resolve) => (finished = resolve));
        const during = ledger ? window(done) : undefined;
        const r0 = performance.now();
        const report = await reconciler.reconcile(LIKE_COUNTS).finally(() => finished());
        const ms = performance.now() - r0;
        const busy = await during;
        const idleAfter = ledger ? await window(after(IDLE_S * 1000)) : undefined;
        // With --live the live items changed too (those the ledger's writers liked are visited; absent from Redis, they are not installed).
        if (
          (LIVE ? report.visited < COUNTERS : report.visited !== COUNTERS) ||
          report.installed !== COUNTERS ||
          report.drifted.length > 0 ||
          report.failed.length > 0
        ) {
          throw new Error(
            `round ${round}: unexpected report ${JSON.stringify({ ...report, drifted: report.drifted.length, failed: report.failed.slice(0, 3) })}`,
          );
        }
        const line = {
          variant,
          ms,
          msPerCounter: ms / COUNTERS,
          batches,
          live:
            idleBefore && idleAfter && busy
              ? {
                  idle: pooled(idleBefore.live, idleAfter.live),
                  during: busy.live,
                  cachedIdle: [...idleBefore.cached, ...idleAfter.cached].sort((a, b) => a - b),
                  cachedDuring: busy.cached,
                }
              : undefined,
        };
        results.push(line);
        process.stdout.write(
          `round ${round + 1} ${variant.padEnd(10)} ${COUNTERS} changed counters in ${(ms / 1000).toFixed(2)} s, ${batches} batches: ` +
            `${line.msPerCounter.toFixed(4)} ms per counter, of which Redis installs ${(installMs / COUNTERS).toFixed(4)} (fed in ${fedSeconds.toFixed(1)} s) load ${loadavg()[0]!.toFixed(1)}\n`,
        );
        if (line.live) {
          const l = line.live;
          process.stdout.write(
            [
              `  live writes:         ${ratioLine(l.idle.writes, l.during.writes)}`,
              `  count reads (PG):    ${ratioLine(l.idle.reads, l.during.reads)}`,
              `  count reads (Redis): ${ratioLine(l.cachedIdle, l.cachedDuring)}`,
              `    ${describe("writes idle:        ", l.idle.writes)}`,
              `    ${describe("writes during:      ", l.during.writes)}`,
              `    ${describe("PG reads idle:      ", l.idle.reads)}`,
              `    ${describe("PG reads during:    ", l.during.reads)}`,
              `    ${describe("Redis reads idle:   ", l.cachedIdle)}`,
              `    ${describe("Redis reads during: ", l.cachedDuring)}`,
            ].join("\n") + "\n",
          );
        }
      }
    } finally {
      for (const w of workers) await w.stop();
    }
    const mean = (v: string) => {
      const xs = results.filter((r) => r.variant === v).map((r) => r.msPerCounter);
      return xs.reduce((a, b) => a + b, 0) / xs.length;
    };
    const pacing = (v: string) =>
      VARIANTS[v]!.pacing.budgetMs === 0
        ? `batches of ${BATCH} back to back`
        : `budget ${VARIANTS[v]!.pacing.budgetMs} ms, duty ${VARIANTS[v]!.pacing.duty}`;
    const seen = [...new Set(variants)];
    if (LIVE && ROUNDS > 1) {
      // Every round's windows of a variant as one sample: a single idle window moves with the machine's load.
      const sorted = (xs: number[][]) => xs.flat().sort((x, y) => x - y);
      for (const v of seen) {
        const ls = results.filter((r) => r.variant === v).map((r) => r.live!);
        process.stdout.write(
          [
            `${v}, ${ls.length} rounds pooled:`,
            `  live writes:         ${ratioLine(sorted(ls.map((l) => l.idle.writes)), sorted(ls.map((l) => l.during.writes)))}`,
            `  count reads (PG):    ${ratioLine(sorted(ls.map((l) => l.idle.reads)), sorted(ls.map((l) => l.during.reads)))}`,
            `  count reads (Redis): ${ratioLine(sorted(ls.map((l) => l.cachedIdle)), sorted(ls.map((l) => l.cachedDuring)))}`,
          ].join("\n") + "\n",
        );
      }
    }
    process.stdout.write(
      `mean ms per counter: ${seen.map((v) => `${v} (${pacing(v)}) ${mean(v).toFixed(4)}`).join(", ")}` +
        `${seen.length === 2 ? `: ${(mean(seen[0]!) / mean(seen[1]!)).toFixed(2)}x` : ""} (${PARTITIONS} partitions, load ${loadavg()
          .map((l) => l.toFixed(1))
          .join(" ")})\n`,
    );
  } finally {
    await redis.close().catch(() => {});
  }
} finally {
  await server.kill();
  await bench.stop();
}
