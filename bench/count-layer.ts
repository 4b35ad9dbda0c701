/**
 * The Redis count layer's figures for `npm run bench` (issue 10), on one benchmark database and a
 * redis-server of its own (system binary, free port, no persistence): count reads from PostgreSQL
 * vs from Redis side by side, a hot key with and without the in-process cache, and reconciliation
 * time against the number of changed targets.
 */
import type { Pool } from "../src/db/pool.ts";
import { CountFeeder } from "../src/cache/count-feeder.ts";
import { CountReader } from "../src/cache/count-reader.ts";
import { CountStore } from "../src/cache/count-store.ts";
import { LIKE_COUNTS } from "../src/cache/counter-kinds.ts";
import { Reconciler } from "../src/cache/reconciler.ts";
import { connectRedis } from "../src/cache/redis-connection.ts";
import type { LikeService } from "../src/likes/like-service.ts";
import { TestRedis } from "../test/support/redis-server.ts";
import { runFixedCount, type Figures } from "./load.ts";

export interface CountLayerRow {
  op: string;
  figures: Figures;
  note: string;
}

export async function countLayerRows(
  pool: Pool, likes: LikeService, o: { reads: number; workers: number; items: readonly string[]; hotItem: string }, signal?: AbortSignal,
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
      { op: "count read (Redis)", figures: await read(redisOnly, spread), note: `${o.items.length} items, no local cache` },
      { op: "hot count read (Redis)", figures: await read(redisOnly, () => o.hotItem), note: "one key, no local cache" },
      { op: "hot count read (Redis + local)", figures: await read(withLocal, () => o.hotItem), note: "one key, 250 ms local TTL" },
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
        figures: { ops: report.visited, seconds, opsPerSec: report.visited / seconds, p50Ms: Number.NaN, p99Ms: Number.NaN, errors: 0 },
        note: `${(seconds * 1000).toFixed(1)} ms for ${report.visited} changed counters, ${report.drifted.length} drifted`,
      });
    }
    return rows;
  } finally {
    await redis.close().catch(() => {});
    await server.kill();
  }
}
