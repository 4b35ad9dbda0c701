import type { CacheRates } from "./cache-rates.ts";
import type { RouteGroup } from "./request-recorder.ts";

/** The JSON of GET /v1/admin/dashboard and what the sampler keeps; docs/dashboard.md explains each figure. */

export const VIEWS = ["like_count", "follower_projection", "comment_count"] as const;
/** A derived view, which is also the kind of the consumer that maintains it. */
export type ViewName = (typeof VIEWS)[number];

/** The views that are counters: each has rebuild runs, whose drift the dashboard plots. */
export const COUNTER_VIEWS = ["like_count", "comment_count"] as const;
export type CounterView = (typeof COUNTER_VIEWS)[number];

/** Lag and watermark of every partition of one view (index = partition). */
export interface ViewSample {
  lag: number[];
  appliedUpto: number[];
}

export interface Rates {
  /** Length of the interval the rates are over. */
  seconds: number;
  /** Events this process's consumers applied (applied) or absorbed (covered, dup, stale), and failed passes, per second. */
  consumers: Record<ViewName, { appliedPerSec: number; absorbedPerSec: number; failuresPerSec: number }>;
  /** Write outcomes of every operation (like, unlike, follow, block, post, ...) per second. */
  outcomes: { CHANGED: number; NOOP: number; REJECTED: number };
  /** Seed 004's unique insert rate: CHANGED likes / all like requests; null without like requests. */
  uniqueInsertRatio: number | null;
  /** The Redis count layer's lookups of this process per counter kind (empty without REDIS_URL). */
  countCache: CacheRates;
  requests: Record<RouteGroup, { perSec: number; p99Ms: number | null }>;
  /** This process's event-loop delay over the interval (ms): its 99th percentile and its worst. */
  eventLoop: { p99Ms: number; maxMs: number };
  /** Checkouts of the PostgreSQL pool per second, and those that waited over 100 ms for a connection. */
  checkouts: { perSec: number; slowPerSec: number };
}

/** The PostgreSQL pool of this process at a sample. */
export interface PoolSample {
  connections: number;
  idle: number;
  max: number;
  /** Checkouts waiting for a connection (every connection checked out). */
  waiting: number;
}

export interface Sample {
  /** Epoch milliseconds. */
  t: number;
  /** null when the database did not answer at this sample. */
  views: Record<ViewName, ViewSample> | null;
  /** Over the interval since the previous sample; null on the first one. */
  rates: Rates | null;
  /** The longest run of failed passes among this process's consumer loops, per kind. */
  failedInARow: Record<ViewName, number>;
  pool: PoolSample;
}

export interface ConsumerLoopState {
  name: string;
  kind: ViewName;
  failedInARow: number;
}

export interface LastAudit {
  at: number;
  clean: boolean;
  /** Who ran it: the sampler on its schedule, or GET /v1/admin/audit. */
  source: "periodic" | "api";
  report: unknown;
}

/** One rebuild (or reconciliation) run of a counter, from its table in the database. */
export interface DriftRun {
  runId: number;
  at: number;
  itemsChecked: number;
  itemsDrifted: number;
  totalAbsDrift: number;
}

/** A partition that the lag rule raises an alarm for: its watermark stood still, or its lag grew at every sample. */
export interface PartitionAlarm {
  view: ViewName;
  part: number;
  rule: "stalled" | "growing";
}

export interface DashboardStatus {
  state: "ok" | "alarm";
  /** One sentence per alarm, empty when ok. */
  reasons: string[];
  /** The partitions behind the lag alarms among `reasons`, so the page colours those and no others. */
  partitions: PartitionAlarm[];
}
