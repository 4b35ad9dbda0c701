/**
 * Issue 14's Redis Cluster figure for `npm run bench`: count reads from one redis-server against
 * a local Redis Cluster (3 masters + 3 replicas, support/redis-cluster.ts), side by side on the
 * same database and items, without the in-process cache. On one node a read is one HMGET of one
 * hash; on the cluster it is the base and N bucket keys, one pipelined round trip per master, so
 * the cluster is also measured with a smaller N.
 */
import type { Pool } from "../src/db/pool.ts";
import { CountFeeder } from "../src/cache/count-feeder.ts";
import { CountReader } from "../src/cache/count-reader.ts";
import { CountStore } from "../src/cache/count-store.ts";
import { LIKE_COUNTS } from "../src/cache/counter-kinds.ts";
import { connectRedis, type RedisClient } from "../src/cache/redis-connection.ts";
import { TestRedis } from "../support/redis-server.ts";
import { TestRedisCluster } from "../support/redis-cluster.ts";
import { runFixedCount } from "./load.ts";
import type { CountLayerRow } from "./count-layer.ts";

export async function clusterCountRows(
  pool: Pool,
  o: { reads: number; workers: number; items: readonly string[]; hotItem: string; buckets?: number },
  signal?: AbortSignal,
): Promise<CountLayerRow[]> {
  const buckets = o.buckets ?? 16;
  const single = await TestRedis.start();
  const cluster = await TestRedisCluster.start();
  const clients: RedisClient[] = [];
  try {
    const rows: CountLayerRow[] = [];
    const variants = [
      ["one node", single.url, buckets],
      ["cluster, 3 masters", cluster.url, buckets],
      ["cluster, 3 masters", cluster.url, 4],
    ] as const;
    for (const [label, url, n] of variants) {
      const redis = await connectRedis(url);
      clients.push(redis);
      const store = new CountStore(redis, n);
      const reader = new CountReader(pool, store, { localTtlMs: 0 });
      await new CountFeeder(pool, store, LIKE_COUNTS).pollOnce();
      for (const id of [...o.items, o.hotItem]) await reader.read(LIKE_COUNTS, id, { allowedLag: 16 }); // backfilled once
      const read = (item: (k: number) => string) =>
        runFixedCount(o.reads, o.workers, (k) => reader.read(LIKE_COUNTS, item(k), { allowedLag: 16 }), signal);
      rows.push(
        {
          op: `count read (Redis ${label}, N=${n})`,
          figures: await read((k) => o.items[k % o.items.length]!),
          note: `${o.items.length} items, ${n} buckets, no local cache`,
        },
        {
          op: `hot count read (Redis ${label}, N=${n})`,
          figures: await read(() => o.hotItem),
          note: `one key, ${n} buckets, no local cache`,
        },
      );
      // Each run uses its own key space: a store with another N must not read the previous one's counters.
      await redis.flushAll();
    }
    return rows;
  } finally {
    for (const c of clients) await c.close().catch(() => {});
    await cluster.stop();
    await single.kill();
  }
}
