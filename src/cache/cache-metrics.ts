import client from "prom-client";
import type { Pool } from "../db/pool.ts";
import { LAYER_STEPS } from "./layer-failures.ts";

/**
 * count_drift_history aggregated by what the histogram's labels and buckets need: one row per
 * kind, origin, sign and |drift|. The whole table at every scrape: exact whatever process or
 * transaction wrote a row and in which order they committed (an id cursor would skip a row
 * whose insert commits after a higher id was read), and drift rows are few.
 */
/** The cache's hit, miss and fallback counter; the dashboard's sampler reads it by this name. */
export const CACHE_LOOKUPS_METRIC = "ledger_count_cache_lookups_total";

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
 * The drift histogram is the database's, not this process's: it is rebuilt at every scrape from
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
  readonly redisUp: client.Gauge;
  readonly evictedKeys: client.Gauge;
  readonly reconciledTargets: client.Counter<"kind">;
  readonly layerFailures: client.Counter<"kind" | "step">;

  /**
   * `redis` (when the layer has one) is read at scrape time for redis_up and evicted_keys;
   * `driftHistory`, the database whose count_drift_history the drift histogram is rebuilt from.
   */
  constructor(registry: client.Registry, redis?: { up(): boolean; evictedKeys(): Promise<number> }, driftHistory?: Pool) {
    const registers = [registry];
    this.countReads = new client.Counter({
      name: "ledger_count_reads_total", help: "Count reads by counter kind and where they were answered from (cache, database)",
      labelNames: ["kind", "source"], registers,
    });
    this.cacheLookups = new client.Counter({
      name: CACHE_LOOKUPS_METRIC,
      help: "Count reads that asked the cache (all but exact ones), by counter kind and result: hit (this process's memory or Redis), miss (absent from Redis, backfilled from the facts), fallback (Redis failed, PostgreSQL answered)",
      labelNames: ["kind", "result"], registers,
    });
    this.updates = new client.Counter({
      name: "ledger_count_cache_updates_total", help: "Events the count feeder applied to Redis, by counter kind", labelNames: ["kind"], registers,
    });
    this.updateFailures = new client.Counter({
      name: "ledger_count_cache_update_failures_total", help: "Count increments that failed after the database commit, by counter kind",
      labelNames: ["kind"], registers,
    });
    this.drift = new client.Histogram({
      name: "ledger_count_drift", help: "|truth - displayed| found by a reconciliation or rebuild, by counter kind, sign (over: displayed too high) and origin",
      labelNames: ["kind", "sign", "origin"], buckets: [1, 2, 5, 10, 100, 1000], registers,
      async collect() {
        if (!driftHistory) return;
        // While the database does not answer, the previous scrape's figures stay.
        const rows = await driftHistory.query<{ kind: string; origin: string; sign: string; size: number; n: number }>(DRIFT_HISTORY_SQL)
          .then((r) => r.rows, () => undefined);
        if (!rows) return;
        this.reset();
        for (const r of rows) {
          for (let i = 0; i < Number(r.n); i++) this.observe({ kind: r.kind, sign: r.sign, origin: r.origin }, Number(r.size));
        }
      },
    });
    this.driftAlert = new client.Gauge({
      name: "ledger_count_drift_alert", help: "1 when the last reconciliation of the kind found more drifted counters than the threshold",
      labelNames: ["kind"], registers,
    });
    this.redisUp = new client.Gauge({
      name: "ledger_redis_up", help: "1 when the count layer's Redis answers, 0 degraded (reads from PostgreSQL)", registers,
      collect() {
        if (redis) this.set(redis.up() ? 1 : 0);
      },
    });
    this.evictedKeys = new client.Gauge({
      name: "ledger_redis_evicted_keys", help: "Redis INFO evicted_keys: keys dropped under memory pressure", registers,
      async collect() {
        if (redis?.up()) this.set(await redis.evictedKeys().catch(() => 0));
      },
    });
    this.reconciledTargets = new client.Counter({
      name: "ledger_count_reconciled_targets_total", help: "Counters visited by reconciliations, by kind", labelNames: ["kind"], registers,
    });
    this.layerFailures = new client.Counter({
      name: "ledger_count_layer_failures_total",
      help: "Failures of the count layer's loops and reads, by counter kind and step (feed, reconcile, install, increment, read); each is logged too",
      labelNames: ["kind", "step"], registers,
    });
    for (const kind of ["likes", "followers", "comments"]) {
      for (const step of LAYER_STEPS) this.layerFailures.inc({ kind, step }, 0);
      this.updateFailures.inc({ kind }, 0);
      this.driftAlert.set({ kind }, 0);
    }
  }
}
