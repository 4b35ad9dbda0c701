import type client from "prom-client";
import type { Pool } from "../db/pool.ts";
import { Hooks } from "../hooks.ts";
import { PartitionWorker } from "../workers/partition-worker.ts";
import { CacheMetrics } from "./cache-metrics.ts";
import { CountFeeder } from "./count-feeder.ts";
import { CountReader } from "./count-reader.ts";
import { CountStore } from "./count-store.ts";
import { COUNTER_KINDS } from "./counter-kinds.ts";
import { Reconciler, type ReconcileReport } from "./reconciler.ts";
import { connectRedis, evictedKeys, type RedisClient } from "./redis-connection.ts";

export interface CountLayerOptions {
  /** REDIS_URL (`redis+cluster://host:port,...` for a Redis Cluster); undefined: every read goes to PostgreSQL and nothing else here runs. */
  redisUrl?: string;
  allowEviction?: boolean;
  buckets?: number;
  localTtlMs?: number;
  reconcileIntervalMs?: number;
  registry?: client.Registry;
  hooks?: Hooks;
  onAlert?: (report: ReconcileReport) => void;
}

/** The count layer as the service uses it: the reader for the routes, the feeder and reconciliation loops, close. */
export interface CountLayer {
  reader: CountReader;
  /** The layer's Redis client (undefined without REDIS_URL): the API keeps its rate limits there too. */
  redis: RedisClient | undefined;
  reconciler: Reconciler | undefined;
  workers: PartitionWorker[];
  /** The hook points of the layer's reader, feeder and reconciler (tests inject faults there). */
  hooks: Hooks;
  /** "off" without Redis, "up", or "degraded" while Redis does not answer (reads come from PostgreSQL). */
  state(): "off" | "up" | "degraded";
  /** One feeder pass over every kind (what the feeder loop does), for tests and the CLI. */
  feed(): Promise<number>;
  /** One reconciliation of every kind (what the reconciler loop does), for tests and `social-ledger reconcile`. */
  reconcile(): Promise<ReconcileReport[]>;
  close(): Promise<void>;
}

export async function openCountLayer(pool: Pool, options: CountLayerOptions = {}): Promise<CountLayer> {
  if (!options.redisUrl) {
    const metrics = options.registry ? new CacheMetrics(options.registry, undefined, pool) : undefined;
    return { reader: new CountReader(pool, undefined, { metrics }), redis: undefined, reconciler: undefined, workers: [], hooks: options.hooks ?? new Hooks(), state: () => "off",
      feed: async () => 0, reconcile: async () => [], close: async () => {},
    };
  }
  const redis: RedisClient = await connectRedis(options.redisUrl, { allowEviction: options.allowEviction });
  const metrics = options.registry
    ? new CacheMetrics(options.registry, { up: () => redis.isReady, evictedKeys: () => evictedKeys(redis) }, pool)
    : undefined;
  const hooks = options.hooks ?? new Hooks();
  const store = new CountStore(redis, options.buckets ?? 16, { hooks });
  const reader = new CountReader(pool, store, { metrics, localTtlMs: options.localTtlMs, hooks });
  const reconciler = new Reconciler(pool, store, { hooks, metrics, onAlert: options.onAlert });
  const feeders = COUNTER_KINDS.map((kind) => new CountFeeder(pool, store, kind, { hooks, metrics }));
  const interval = options.reconcileIntervalMs ?? 60_000;
  let nextReconcile = Date.now() + interval;
  const feed = async () => {
    let handled = 0;
    for (const feeder of feeders) handled += await feeder.pollOnce();
    return handled;
  };
  const reconcile = async () => {
    const reports: ReconcileReport[] = [];
    for (const kind of COUNTER_KINDS) reports.push(await reconciler.reconcile(kind));
    return reports;
  };
  const workers = [
    new PartitionWorker("count-feeder", feed),
    new PartitionWorker("count-reconciler", async () => {
      if (Date.now() < nextReconcile) return 0;
      nextReconcile = Date.now() + interval;
      await reconcile();
      return 0;
    }),
  ];
  return {
    reader, redis, reconciler, workers, hooks, feed, reconcile,
    state: () => (redis.isReady ? "up" : "degraded"),
    async close() {
      await Promise.all(workers.map((w) => w.stop()));
      await redis.close().catch(() => {});
    },
  };
}
