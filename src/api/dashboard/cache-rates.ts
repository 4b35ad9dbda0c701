import type client from "prom-client";
import { CACHE_LOOKUPS_METRIC } from "../../cache/cache-metrics.ts";

const RESULTS = ["hit", "miss", "fallback"] as const;
type LookupResult = (typeof RESULTS)[number];

/** This process's cache lookups so far, per counter kind and result (ledger_count_cache_lookups_total). */
export type CacheLookupTotals = Record<string, Record<LookupResult, number>>;

/** Per counter kind over one interval: lookups per second, the hit ratio (null without lookups) and fallbacks per second. */
export type CacheRates = Record<string, { lookupsPerSec: number; hitRatio: number | null; fallbacksPerSec: number }>;

export async function readCacheLookups(registry: client.Registry): Promise<CacheLookupTotals> {
  const totals: CacheLookupTotals = {};
  const metric = registry.getSingleMetric(CACHE_LOOKUPS_METRIC);
  if (!metric) return totals;
  for (const { labels, value } of (await metric.get()).values) {
    const kind = String(labels.kind);
    const result = labels.result as LookupResult;
    if (!RESULTS.includes(result)) continue;
    totals[kind] ??= { hit: 0, miss: 0, fallback: 0 };
    totals[kind][result] += value;
  }
  return totals;
}

/** A miss and a fallback both cost a database query, so the hit ratio counts them alike. */
export function cacheRates(before: CacheLookupTotals, after: CacheLookupTotals, seconds: number): CacheRates {
  const rates: CacheRates = {};
  for (const [kind, now] of Object.entries(after)) {
    const then = before[kind] ?? { hit: 0, miss: 0, fallback: 0 };
    const hits = now.hit - then.hit;
    const lookups = hits + (now.miss - then.miss) + (now.fallback - then.fallback);
    rates[kind] = {
      lookupsPerSec: Math.round((lookups / seconds) * 100) / 100,
      hitRatio: lookups > 0 ? Math.round((hits / lookups) * 1000) / 1000 : null,
      fallbacksPerSec: Math.round(((now.fallback - then.fallback) / seconds) * 100) / 100,
    };
  }
  return rates;
}
