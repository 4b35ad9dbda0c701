import client from "prom-client";
import type { Pool } from "../db/pool.ts";
import { refresherOf } from "../metrics-refresh.ts";
import { LAYER_STEPS } from "./layer-failures.ts";

/** The cache's hit, miss and fallback counter; the dashboard's sampler reads it by this name. */
export const CACHE_LOOKUPS_METRIC = "ledger_count_cache_lookups_total";

/** Who records drift of which counter kind: the reconciler (every Redis counter) and the database rebuilds (likes, comments). */
const DRIFT_SOURCES = [
  ["likes", "reconcile"],
  ["followers", "reconcile"],
  ["comments", "reconcile"],
  ["likes", "rebuild"],
  ["comments", "rebuild"],
] as const;

/**
 * count_drift_history aggregated by what the histogram's labels and buckets need: one row per
 * kind, origin, sign and |drift|. The whole table at every refresh: exact whatever process or
 * transaction wrote a row and in which order they committed (an id cursor would skip a row
 * whose insert commits after a higher id was read), and drift rows are few.
 */
const DRIFT_HISTORY_SQL = `
  SELECT kind, origin, CASE WHEN drift > 0 THEN 'under' ELSE 'over' END AS sign, abs(drift)::bigint AS size, count(*)::bigint AS n
    FROM count_drift_history
   WHERE drift <> 0
   GROUP BY 1, 2, 3, 4`;

/**
 * The count layer's figures (seed 004's four numbers, with ledger_operation_outcomes_total for
 * the unique insert rate): request volume by source, counter update failures, reconciliation
 * drift by kind and sign, and the alert it raises. One instance per registry.
 *
 * The drift histogram is the database's, not this process's: it is rebuilt at every refresh of
 * the registry's figures (src/metrics-refresh.ts: on a timer, never by a scrape) from
 * count_drift_history, which every writer of drift (the reconciler in the service, `social-ledger
 * reconcile`, the rebuild from the CLI or the HTTP route) records to. A short-lived CLI process
 * has no /metrics of its own, so its drift reaches the service's /metrics through the table; and
 * every serving process exports the same figures (aggregate them with max, not sum).
 */
export class CacheMetrics {
  readonly countReads: client.Counter<"kind" | "source">;
  readonly cacheLookups: client.Counter<"kind" | "result">;
  readonly updates: client.Counter<"kind">;
  readonly updateFailures: client.Counter<"kind">;
  readonly drift: client.Histogram<"kind" | "sign" | "origin">;
  readonly driftAlert: client.Gauge<"kind">;
  /** Only with Redis: without it there is nothing to be up or degraded, and a 0 would read as an outage. */
  readonly redisUp: client.Gauge | undefined;
  readonly evictedKeys: client.Gauge | undefined;
  readonly reconciledTargets: client.Counter<"kind">;
  readonly layerFailures: client.Counter<"kind" | "step">;

  /**
   * `redis` (when the layer has one) is asked for redis_up at scrape time (no command) and for
   * evicted_keys at each refresh;
   * `driftHistory`, the database whose count_drift_history the drift histogram is rebuilt from.
   */
  constructor(
    registry: client.Registry,
    redis?: { up(): boolean; evictedKeys(): Promise<number> },
    driftHistory?: Pool,
  ) {
    const registers = [registry];
    const refresher = refresherOf(registry);
    // While the database does not answer, the previous refresh's figures stay.
    let driftRows: { kind: string; origin: string; sign: string; size: number; n: number }[] | undefined;
    if (driftHistory) {
      refresher.add(async () => {
        driftRows = await driftHistory
          .query<{ kind: string; origin: string; sign: string; size: number; n: number }>(DRIFT_HISTORY_SQL)
          .then(
            (r) => r.rows,
            () => driftRows,
          );
      });
    }
    let evicted: number | undefined;
    if (redis) {
      refresher.add(async () => {
        if (redis.up()) evicted = await redis.evictedKeys().catch(() => 0);
      });
    }
    this.countReads = new client.Counter({
      name: "ledger_count_reads_total",
      help: "Count reads by counter kind and where they were answered from (cache, database)",
      labelNames: ["kind", "source"],
      registers,
    });
    this.cacheLookups = new client.Counter({
      name: CACHE_LOOKUPS_METRIC,
      help: "Count reads that asked the cache (all but exact ones), by counter kind and result: hit (this process's memory or Redis), miss (absent from Redis, backfilled from the facts), fallback (Redis failed, PostgreSQL answered)",
      labelNames: ["kind", "result"],
      registers,
    });
    this.updates = new client.Counter({
      name: "ledger_count_cache_updates_total",
      help: "Events the count feeder applied to Redis, by counter kind",
      labelNames: ["kind"],
      registers,
    });
    this.updateFailures = new client.Counter({
      name: "ledger_count_cache_update_failures_total",
      help: "Count increments that failed after the database commit, by counter kind",
      labelNames: ["kind"],
      registers,
    });
    this.drift = new client.Histogram({
      name: "ledger_count_drift",
      help: "|truth - displayed| found by a reconciliation or rebuild, by counter kind, sign (over: displayed too high) and origin",
      labelNames: ["kind", "sign", "origin"],
      buckets: [1, 2, 5, 10, 100, 1000],
      registers,
      collect() {
        const rows = driftRows;
        if (!rows) return;
        this.reset();
        // A zero series per kind, sign and origin from the start: a rule's increase() sees the first drift ever found (deploy/prometheus).
        for (const [kind, origin] of DRIFT_SOURCES)
          for (const sign of ["under", "over"]) this.zero({ kind, sign, origin });
        for (const r of rows) {
          for (let i = 0; i < Number(r.n); i++)
            this.observe({ kind: r.kind, sign: r.sign, origin: r.origin }, Number(r.size));
        }
      },
    });
    this.driftAlert = new client.Gauge({
      name: "ledger_count_drift_alert",
      help: "1 when the last reconciliation of the kind found more drifted counters than the threshold",
      labelNames: ["kind"],
      registers,
    });
    this.redisUp =
      redis &&
      new client.Gauge({
        name: "ledger_redis_up",
        help: "1 when the count layer's Redis answers, 0 degraded (reads from PostgreSQL); absent without Redis",
        registers,
        collect() {
          this.set(redis.up() ? 1 : 0);
        },
      });
    this.evictedKeys =
      redis &&
      new client.Gauge({
        name: "ledger_redis_evicted_keys",
        help: "Redis INFO evicted_keys: keys dropped under memory pressure; absent without Redis",
        registers,
        collect() {
          if (evicted !== undefined) this.set(evicted);
        },
      });
    this.reconciledTargets = new client.Counter({
      name: "ledger_count_reconciled_targets_total",
      help: "Counters visited by reconciliations, by kind",
      labelNames: ["kind"],
      registers,
    });
    this.layerFailures = new client.Counter({
      name: "ledger_count_layer_failures_total",
      help: "Failures of the count layer's loops and reads, by counter kind and step (feed, reconcile, install, increment, read); each is logged too",
      labelNames: ["kind", "step"],
      registers,
    });
    for (const kind of ["likes", "followers", "comments"]) {
      for (const step of LAYER_STEPS) this.layerFailures.inc({ kind, step }, 0);
      this.updateFailures.inc({ kind }, 0);
      this.driftAlert.set({ kind }, 0);
    }
  }
}
