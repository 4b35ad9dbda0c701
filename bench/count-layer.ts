/**
 * The Redis count layer's figures for `npm run bench` (issue 10), on one benchmark database and a
 * redis-server of its own (system binary, free port, no persistence): count reads from PostgreSQL
 * vs from Redis side by side, a hot key with and without the in-process cache, and reconciliation
 * time against the number of changed targets; and HTTP write throughput with that Redis up, killed
 * and hung (SIGSTOP), side by side in one run.
 */
import { randomBytes } from "node:crypto";
import { buildApp } from "../src/api/app.ts";
import { signToken } from "../src/api/auth.ts";
import { LedgerMetrics } from "../src/api/metrics.ts";
import { openCountLayer } from "../src/cache/count-layer.ts";
import type { Ledger } from "../src/ledger.ts";
import type { Pool } from "../src/db/pool.ts";
import { CountFeeder } from "../src/cache/count-feeder.ts";
import { CountReader } from "../src/cache/count-reader.ts";
import { CountStore } from "../src/cache/count-store.ts";
import { LIKE_COUNTS } from "../src/cache/counter-kinds.ts";
import { Reconciler } from "../src/cache/reconciler.ts";
import { connectRedis } from "../src/cache/redis-connection.ts";
import type { LikeService } from "../src/likes/like-service.ts";
import { TestRedis } from "../support/redis-server.ts";
import { runHttp, runFixedCount, type Figures, type HttpLoad } from "./load.ts";

export interface CountLayerRow {
  op: string;
  figures: Figures;
  note: string;
}

export async function countLayerRows(
  pool: Pool,
  likes: LikeService,
  o: { reads: number; workers: number; items: readonly string[]; hotItem: string },
  signal?: AbortSignal,
): Promise<CountLayerRow[]> {
  const server = await TestRedis.start();
  const redis = await connectRedis(server.url);
  try {
    const store = new CountStore(redis, 16);
    const database = new CountReader(pool, undefined);
    const redisOnly = new CountReader(pool, store, { localTtlMs: 0 });
    const withLocal = new CountReader(pool, store, { localTtlMs: 250 });
    const feeder = new CountFeeder(pool, store, LIKE_COUNTS);
    await feeder.pollOnce();
    for (const id of o.items) await redisOnly.read(LIKE_COUNTS, id, { allowedLag: 16 }); // backfilled once
    const read = (reader: CountReader, item: (k: number) => string) =>
      runFixedCount(o.reads, o.workers, (k) => reader.read(LIKE_COUNTS, item(k), { allowedLag: 16 }), signal);
    const spread = (k: number) => o.items[k % o.items.length]!;
    const rows: CountLayerRow[] = [
      { op: "count read (PostgreSQL)", figures: await read(database, spread), note: `${o.items.length} items` },
      {
        op: "count read (Redis)",
        figures: await read(redisOnly, spread),
        note: `${o.items.length} items, no local cache`,
      },
      {
        op: "hot count read (Redis)",
        figures: await read(redisOnly, () => o.hotItem),
        note: "one key, no local cache",
      },
      {
        op: "hot count read (Redis + local)",
        figures: await read(withLocal, () => o.hotItem),
        note: "one key, 250 ms local TTL",
      },
    ];
    const reconciler = new Reconciler(pool, store);
    await reconciler.reconcile(LIKE_COUNTS); // the boundary of the runs below starts here
    for (const changed of [10, 100, 1000]) {
      const targets = Array.from({ length: changed }, (_, i) => `rc-${changed}-${i}`);
      for (const id of targets) {
        await likes.createItem(id);
        await redisOnly.read(LIKE_COUNTS, id, { allowedLag: 16 });
        await likes.like("rc-user", id);
      }
      while ((await feeder.pollOnce()) > 0);
      const t0 = performance.now();
      const report = await reconciler.reconcile(LIKE_COUNTS);
      const seconds = (performance.now() - t0) / 1000;
      rows.push({
        op: `reconcile ${changed} changed`,
        figures: {
          ops: report.visited,
          seconds,
          opsPerSec: report.visited / seconds,
          p50Ms: Number.NaN,
          p99Ms: Number.NaN,
          errors: 0,
        },
        note: `${(seconds * 1000).toFixed(1)} ms for ${report.visited} changed counters, ${report.drifted.length} drifted`,
      });
    }
    return rows;
  } finally {
    await redis.close().catch(() => {});
    await server.kill();
  }
}

/**
 * HTTP like/unlike requests against an API with the count layer as `serve` has it (feeder and
 * reconciler loops running, the per-user budgets in Redis): Redis up, then killed (connection
 * refused), then restarted and hung with SIGSTOP (connection open, no answer), then up again.
 * The write path never waits on Redis for the count; the rate limit asks it once per request
 * and skips it on error, and a hung Redis costs one command deadline, then a breaker.
 */
export async function redisOutageWriteRows(
  ledger: Ledger,
  o: { requests: number; connections: number; items: readonly string[] },
  onInstance?: (i: HttpLoad | undefined) => void,
): Promise<CountLayerRow[]> {
  const server = await TestRedis.start();
  const metrics = new LedgerMetrics(ledger.pool);
  const counts = await openCountLayer(ledger.pool, { redisUrl: server.url, registry: metrics.registry });
  for (const w of counts.workers) w.start();
  const secret = new Uint8Array(randomBytes(32));
  const app = await buildApp({
    ledger,
    jwtSecret: secret,
    logger: false,
    metrics,
    counts: counts.reader,
    countsState: counts.state,
    rateLimitRedis: counts.redis,
    writesPerMinute: 1_000_000_000,
    readsPerMinute: 1_000_000_000,
  });
  try {
    const url = await app.listen({ port: 0, host: "127.0.0.1" });
    const users = 200;
    const amount = Math.max(200, Math.round(o.requests / 2));
    const writes = async (phase: string): Promise<Figures> => {
      const auth = await Promise.all(
        Array.from({ length: users }, (_, n) => signToken(secret, `rw-${phase}-${n}`).then((t) => `Bearer ${t}`)),
      );
      return runHttp({
        url,
        amount,
        connections: o.connections,
        onInstance,
        build: (k) => {
          const user = k % users;
          const like = Math.floor(k / users) % 2 === 0;
          return {
            method: like ? "PUT" : "DELETE",
            path: `/v1/items/${o.items[user % o.items.length]!}/likes/me`,
            authorization: auth[user]!,
          };
        },
      });
    };
    // Each outage run sits between two runs with Redis up and is compared with their mean, so a
    // change of the machine's load during the sequence does not pass for the outage's effect.
    await writes("warmup"); // the first HTTP run of a fresh app is slower: not a figure compared
    const up1 = await writes("up1");
    await server.kill();
    const killed = await writes("killed");
    const killedState = counts.state();
    await server.restart();
    for (let i = 0; i < 400 && !counts.redis!.isReady; i++) await new Promise((resolve) => setTimeout(resolve, 25)); // reconnected
    const up2 = await writes("up2");
    server.pause();
    const hung = await writes("hung");
    const hungState = counts.state();
    server.resume();
    const up3 = await writes("up3");
    const vs = (f: Figures, a: Figures, b: Figures) =>
      `${(f.opsPerSec / ((a.opsPerSec + b.opsPerSec) / 2)).toFixed(2)}x the mean of the runs with Redis up around it`;
    const rows: CountLayerRow[] = [
      { op: "HTTP writes, Redis up (1)", figures: up1, note: "count layer up" },
      { op: "HTTP writes, Redis killed", figures: killed, note: `count layer ${killedState}, ${vs(killed, up1, up2)}` },
      { op: "HTTP writes, Redis up (2)", figures: up2, note: "restarted empty" },
      {
        op: "HTTP writes, Redis hung (SIGSTOP)",
        figures: hung,
        note: `count layer ${hungState}, ${vs(hung, up2, up3)}`,
      },
      { op: "HTTP writes, Redis up (3)", figures: up3, note: "resumed" },
    ];
    return rows;
  } finally {
    server.resume();
    await app.close();
    await counts.close();
    await server.kill();
  }
}
