import type client from "prom-client";
import type { Pool } from "../db/pool.ts";
import { Hooks } from "../hooks.ts";
import type { PacingOptions } from "../workers/pacer.ts";
import { PartitionWorker } from "../workers/partition-worker.ts";
import { CacheMetrics } from "./cache-metrics.ts";
import { CountFeeder } from "./count-feeder.ts";
import { CountReader } from "./count-reader.ts";
import { CountStore } from "./count-store.ts";
import { COUNTER_KINDS } from "./counter-kinds.ts";
import { failureSink, type LayerLog } from "./layer-failures.ts";
import { Reconciler, type ReconcileReport } from "./reconciler.ts";
import {
  EvictingRedisError,
  evictedKeys,
  openRedis,
  RedisUnreachableError,
  settlesWithin,
  type RedisClient,
} from "./redis-connection.ts";

export interface CountLayerOptions {
  /** REDIS_URL (`redis+cluster://host:port,...` for a Redis Cluster); undefined: every read goes to PostgreSQL and nothing else here runs. */
  redisUrl?: string;
  allowEviction?: boolean;
  /** LEDGER_REDIS_COMMAND_TIMEOUT_MS (default 200) and LEDGER_REDIS_KEEPALIVE_MS (default 10 s). */
  commandTimeoutMs?: number;
  keepAliveMs?: number;
  buckets?: number;
  localTtlMs?: number;
  reconcileIntervalMs?: number;
  /** The reconciler's pacing (LEDGER_BACKGROUND_BATCH_MS / LEDGER_BACKGROUND_DUTY; default DEFAULT_PACING). */
  pacing?: PacingOptions;
  registry?: client.Registry;
  hooks?: Hooks;
  onAlert?: (report: ReconcileReport) => void;
  /** Failures of the loops and reads, and a Redis refused after the start (logged; counted in ledger_count_layer_failures_total). */
  log?: LayerLog;
  /**
   * How long the start waits for Redis (default 1 s): a Redis answering within it is checked
   * before the layer is returned (an evicting one is refused with EvictingRedisError); after it
   * the layer starts degraded and connects in the background.
   */
  startWaitMs?: number;
  /** Throw RedisUnreachableError instead of starting degraded (`social-ledger reconcile`). */
  requireRedis?: boolean;
}

export type CountLayerState = "off" | "up" | "degraded";

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
  state(): CountLayerState;
  /** Calls `listener` with the state now and at every change (degraded, up), with the last Redis error. */
  watchState(listener: (state: CountLayerState, reason: string | undefined) => void): void;
  /** One feeder pass over every kind (what the feeder loop does), for tests and the CLI. */
  feed(): Promise<number>;
  /**
   * One reconciliation of every kind (what the reconciler loop does), for tests and `social-ledger
   * reconcile`. A kind that fails does not stop the kinds after it; when any failed this throws
   * a CountLayerRunError after all of them ran (with the reports of those that completed).
   */
  reconcile(): Promise<ReconcileReport[]>;
  close(): Promise<void>;
}

/** Some kinds of a feeder pass or a reconciliation failed; the others completed (and are in `reports`). */
export class CountLayerRunError extends Error {
  readonly code = "COUNT_LAYER_RUN_FAILED";
  constructor(
    what: string,
    readonly failures: { kind: string; error: unknown }[],
    readonly reports: ReconcileReport[] = [],
  ) {
    super(
      `${what} failed for ${failures.map((f) => `${f.kind} (${f.error instanceof Error ? f.error.message : String(f.error)})`).join(", ")}`,
    );
    this.name = "CountLayerRunError";
  }
}

/** Runs `each` for every kind in a row; one kind's failure never stops the kinds after it. */
async function everyKind<T>(
  what: string,
  each: (kind: (typeof COUNTER_KINDS)[number]) => Promise<T>,
  reportsOf: (done: T[]) => ReconcileReport[] = () => [],
): Promise<T[]> {
  const done: T[] = [];
  const failures: { kind: string; error: unknown }[] = [];
  for (const kind of COUNTER_KINDS) {
    try {
      done.push(await each(kind));
    } catch (error) {
      failures.push({ kind: kind.name, error });
    }
  }
  if (failures.length > 0) throw new CountLayerRunError(what, failures, reportsOf(done));
  return done;
}

export async function openCountLayer(pool: Pool, options: CountLayerOptions = {}): Promise<CountLayer> {
  if (!options.redisUrl) {
    const metrics = options.registry ? new CacheMetrics(options.registry, undefined, pool) : undefined;
    return {
      reader: new CountReader(pool, undefined, { metrics }),
      redis: undefined,
      reconciler: undefined,
      workers: [],
      hooks: options.hooks ?? new Hooks(),
      state: () => "off",
      watchState: (listener) => listener("off", undefined),
      feed: async () => 0,
      reconcile: async () => [],
      close: async () => {},
    };
  }
  const opened = openRedis(options.redisUrl, {
    allowEviction: options.allowEviction,
    commandTimeoutMs: options.commandTimeoutMs,
    keepAliveMs: options.keepAliveMs,
  });
  const redis: RedisClient = opened.redis;
  const log: LayerLog = (level, message, fields) => options.log?.(level, message, fields);
  const startWaitMs = options.startWaitMs ?? 1000;
  const started = await settlesWithin(opened.ready, startWaitMs).catch(async (err: unknown) => {
    await redis.close().catch(() => {});
    throw err;
  });
  if (!started) {
    if (options.requireRedis) {
      await redis.close().catch(() => {});
      throw new RedisUnreachableError(opened.address, startWaitMs, opened.lastError());
    }
    // Connecting goes on in the background; an evicting Redis found then is refused for good.
    opened.ready.catch((err: unknown) => {
      if (err instanceof EvictingRedisError)
        log(
          "error",
          `count layer: Redis at ${opened.address} refused: ${err.message}; counts stay on PostgreSQL until restarted`,
        );
    });
  }
  const metrics = options.registry
    ? new CacheMetrics(options.registry, { up: () => redis.isReady, evictedKeys: () => evictedKeys(redis) }, pool)
    : undefined;
  const failures = failureSink((kind, step) => metrics?.layerFailures.inc({ kind, step }), log);
  const hooks = options.hooks ?? new Hooks();
  const store = new CountStore(redis, options.buckets ?? 16, { hooks });
  const reader = new CountReader(pool, store, { metrics, localTtlMs: options.localTtlMs, hooks, failures });
  const reconciler = new Reconciler(pool, store, {
    hooks,
    metrics,
    onAlert: options.onAlert,
    failures,
    ...(options.pacing ? { pacing: options.pacing } : {}),
  });
  const feeders = new Map(
    COUNTER_KINDS.map((kind) => [
      kind.name,
      new CountFeeder(pool, store, kind, {
        hooks,
        metrics,
        failures,
        onRealigned: (change) =>
          log(
            "warn",
            "count layer emptied: the database's timeline moved (a promotion); counters are backfilled from the facts on their next read (docs/failover.md)",
            { ...change },
          ),
      }),
    ]),
  );
  const interval = options.reconcileIntervalMs ?? 60_000;
  let nextReconcile = Date.now() + interval;
  const feed = async () =>
    (await everyKind("count feeder pass", (kind) => feeders.get(kind.name)!.pollOnce())).reduce((sum, n) => sum + n, 0);
  const reconcile = () =>
    everyKind(
      "reconciliation",
      (kind) => reconciler.reconcile(kind),
      (reports) => reports,
    );
  const workers = [
    new PartitionWorker("count-feeder", feed),
    new PartitionWorker("count-reconciler", async () => {
      if (Date.now() < nextReconcile) return 0;
      nextReconcile = Date.now() + interval;
      await reconcile();
      return 0;
    }),
  ];
  const state = (): CountLayerState => (redis.isReady ? "up" : "degraded");
  return {
    reader,
    redis,
    reconciler,
    workers,
    hooks,
    feed,
    reconcile,
    state,
    watchState(listener) {
      let reported: CountLayerState | undefined;
      const report = (now: CountLayerState, reason: string | undefined) => {
        if (now === reported) return;
        reported = now;
        listener(now, reason);
      };
      opened.onChange((ready, reason) => report(ready ? "up" : "degraded", reason));
      report(state(), opened.lastError());
    },
    async close() {
      await Promise.all(workers.map((w) => w.stop()));
      await redis.close().catch(() => {});
    },
  };
}
