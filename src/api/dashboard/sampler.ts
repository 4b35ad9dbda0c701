import { monitorEventLoopDelay, type IntervalHistogram } from "node:perf_hooks";
import { CHECKOUT_WAIT_BUCKETS } from "../../db/checkout-waits.ts";
import { checkoutWaitsOf, type Pool } from "../../db/pool.ts";
import { readWatermarks, type LedgerMetrics } from "../metrics.ts";
import { evaluateStatus, type AlarmThresholds } from "./alarms.ts";
import { cacheRates, readCacheLookups, type CacheLookupTotals } from "./cache-rates.ts";
import { RequestRecorder, ROUTE_GROUPS, type RouteGroup } from "./request-recorder.ts";
import { COMMENT_COUNTER } from "../../content/comment-spec.ts";
import type { CounterSpec } from "../../counters/counter-spec.ts";
import { LIKE_COUNTER } from "../../likes/like-spec.ts";
import {
  COUNTER_VIEWS,
  VIEWS,
  type ConsumerLoopState,
  type CounterView,
  type DashboardStatus,
  type DriftRun,
  type LastAudit,
  type PoolSample,
  type Rates,
  type Sample,
  type ViewName,
  type ViewSample,
} from "./types.ts";

export interface SamplerOptions {
  /** Time between samples (default 5 s). */
  sampleMs?: number;
  /** How much history the ring keeps (default one hour). */
  historyMs?: number;
  /** Alarm thresholds of the header (default: lag 60 s, 5 failed passes in a row). */
  thresholds?: Partial<AlarmThresholds>;
  /** Run the periodic audit every this many ms; undefined or 0: only audits asked for through the API are shown. */
  auditEveryMs?: number;
}

export interface SamplerSources {
  pool: Pool;
  metrics: LedgerMetrics;
  /** The periodic audit (the service passes incrementalAudit: what changed since its last run, plus a rotating sample). */
  audit?: () => Promise<{ clean: boolean }>;
  /** The consumer loops of this process, read at each sample (none in a process without workers). */
  consumers?: () => ConsumerLoopState[];
  /** A sample or a periodic audit failed (the database is away, usually); called once per run of failures. */
  onError?: (err: unknown, what: "sample" | "audit") => void;
}

/** Rebuild runs kept in memory for the drift plot; older ones stay in the database. */
const DRIFT_RUNS_KEPT = 500;

interface Totals {
  at: number;
  outcomes: Record<"CHANGED" | "NOOP" | "REJECTED", number>;
  likeChanged: number;
  likeRequests: number;
  applied: Record<ViewName, number>;
  absorbed: Record<ViewName, number>;
  failures: Record<ViewName, number>;
  cacheLookups: CacheLookupTotals;
  checkouts: number;
  slowCheckouts: number;
}

/** A checkout that waited longer than this for a connection counts as slow (the alert LedgerDatabasePoolWaits' bound). */
const SLOW_CHECKOUT_SECONDS = 0.1;
const SLOW_BUCKET = CHECKOUT_WAIT_BUCKETS.indexOf(SLOW_CHECKOUT_SECONDS);

function isView(value: unknown): value is ViewName {
  return (VIEWS as readonly unknown[]).includes(value);
}

/** Zero for every view. */
function perView(): Record<ViewName, number> {
  return Object.fromEntries(VIEWS.map((v) => [v, 0])) as Record<ViewName, number>;
}

/** Where each counter records its rebuild runs. */
const COUNTER_SPECS: Record<CounterView, CounterSpec> = { like_count: LIKE_COUNTER, comment_count: COMMENT_COUNTER };

/**
 * The dashboard's time series: every `sampleMs` it reads the watermarks (one statement), the
 * new rebuild runs, and the deltas of this process's counters and request latencies, and
 * appends one sample to a ring holding the last hour. A page opened later shows that hour; a
 * restart loses it (the drift history, from the database, is kept). In memory on purpose: no
 * table, no migration, and the endpoint answers from the ring while the database is away.
 */
export class DashboardSampler {
  readonly sampleMs: number;
  readonly thresholds: AlarmThresholds;
  private readonly capacity: number;
  private readonly samples: Sample[] = [];
  private readonly requests = new RequestRecorder();
  private readonly driftRuns = Object.fromEntries(COUNTER_VIEWS.map((v) => [v, [] as DriftRun[]])) as Record<
    CounterView,
    DriftRun[]
  >;
  private lastAudit: LastAudit | null = null;
  private previous: Totals | undefined;
  private timer: NodeJS.Timeout | undefined;
  private inFlight: Promise<void> | undefined;
  private running = false;
  private nextAuditAt = 0;
  private failing = { sample: false, audit: false };
  /**
   * The event loop's delay since the previous sample (its own monitor: /metrics' restarts at every
   * scrape). On from the first sample (the timer's or a test's) until stop.
   */
  private readonly eventLoop: IntervalHistogram = monitorEventLoopDelay({ resolution: 10 });
  private eventLoopOn = false;

  constructor(
    private readonly sources: SamplerSources,
    private readonly options: SamplerOptions = {},
  ) {
    this.sampleMs = options.sampleMs ?? 5_000;
    this.capacity = Math.ceil((options.historyMs ?? 3_600_000) / this.sampleMs) + 1;
    this.thresholds = { lagMs: 60_000, consumerFailures: 5, ...options.thresholds };
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    // The first periodic audit comes one period after the start, not with it: a fleet
    // restarting together would otherwise audit all at once (the page has a button for now).
    this.nextAuditAt = Date.now() + (this.options.auditEveryMs ?? 0);
    const tick = () => {
      this.inFlight = this.sampleOnce().finally(() => {
        this.inFlight = undefined;
        if (this.running) this.timer = setTimeout(tick, this.sampleMs).unref();
      });
    };
    tick();
  }

  /** Stops the timer and waits for a sample in progress (which uses the pool). */
  async stop(): Promise<void> {
    this.running = false;
    clearTimeout(this.timer);
    this.eventLoop.disable();
    this.eventLoopOn = false;
    await this.inFlight;
  }

  /** Called for every response, with the route's group and its duration. */
  recordRequest(group: RouteGroup, ms: number): void {
    this.requests.record(group, ms);
  }

  recordAudit(report: { clean: boolean }, source: LastAudit["source"]): void {
    this.lastAudit = { at: Date.now(), clean: report.clean, source, report };
  }

  /** Samples newer than `since` (epoch ms), oldest first. */
  samplesSince(since = 0): Sample[] {
    const first = this.samples.findIndex((s) => s.t > since);
    return first < 0 ? [] : this.samples.slice(first);
  }

  /** The newest sample in which the database answered. */
  newestViews(): { t: number; views: Record<ViewName, ViewSample> } | undefined {
    for (let i = this.samples.length - 1; i >= 0; i--) {
      const { t, views } = this.samples[i]!;
      if (views) return { t, views };
    }
    return undefined;
  }

  drift(): Record<CounterView, DriftRun[]> {
    return Object.fromEntries(COUNTER_VIEWS.map((v) => [v, [...this.driftRuns[v]]])) as Record<CounterView, DriftRun[]>;
  }

  audit(): LastAudit | null {
    return this.lastAudit;
  }

  consumers(): ConsumerLoopState[] {
    return this.sources.consumers?.() ?? [];
  }

  status(now = Date.now()): DashboardStatus {
    return evaluateStatus({
      now,
      samples: this.samples,
      consumers: this.consumers(),
      audit: this.lastAudit,
      thresholds: this.thresholds,
    });
  }

  /** One sample now; the timer calls it, and tests may too. */
  async sampleOnce(): Promise<void> {
    const totals = await this.readTotals();
    const requests = this.requests.take();
    const eventLoop = this.takeEventLoopDelay();
    const { pool } = this.sources;
    const poolNow: PoolSample = {
      connections: pool.totalCount,
      idle: pool.idleCount,
      max: pool.options.max ?? 10,
      waiting: pool.waitingCount,
    };
    const views = await this.readViews();
    const sample: Sample = {
      t: totals.at,
      views,
      rates: this.previous ? rates(this.previous, totals, requests, eventLoop) : null,
      failedInARow: perView(),
      pool: poolNow,
    };
    for (const loop of this.consumers())
      sample.failedInARow[loop.kind] = Math.max(sample.failedInARow[loop.kind], loop.failedInARow);
    this.previous = totals;
    this.samples.push(sample);
    if (this.samples.length > this.capacity) this.samples.splice(0, this.samples.length - this.capacity);
    if (views !== null) await this.auditWhenDue(totals.at);
  }

  /** p99 and max of the event-loop delay since the previous call, in ms (0 at the first). */
  private takeEventLoopDelay(): { p99Ms: number; maxMs: number } {
    const h = this.eventLoop;
    if (!this.eventLoopOn) {
      h.enable();
      this.eventLoopOn = true;
    }
    if (h.count === 0) return { p99Ms: 0, maxMs: 0 };
    const figures = { p99Ms: round(h.percentile(99) / 1e6), maxMs: round(h.max / 1e6) };
    h.reset();
    return figures;
  }

  private report(what: "sample" | "audit", err: unknown): void {
    if (!this.failing[what]) this.sources.onError?.(err, what);
    this.failing[what] = true;
  }

  /** Watermarks and new rebuild runs; null (and one onError per outage) when the database does not answer. */
  private async readViews(): Promise<Record<ViewName, ViewSample> | null> {
    let rows;
    try {
      rows = await readWatermarks(this.sources.pool);
      await this.readNewDriftRuns();
    } catch (err) {
      this.report("sample", err);
      return null;
    }
    this.failing.sample = false;
    const views = Object.fromEntries(VIEWS.map((v) => [v, { lag: [], appliedUpto: [] }])) as unknown as Record<
      ViewName,
      ViewSample
    >;
    for (const r of rows) {
      if (!isView(r.view)) continue;
      views[r.view].lag[r.part] = r.last - r.appliedUpto;
      views[r.view].appliedUpto[r.part] = r.appliedUpto;
    }
    return views;
  }

  private async readNewDriftRuns(): Promise<void> {
    for (const view of COUNTER_VIEWS) {
      const runs = this.driftRuns[view];
      const after = runs.at(-1)?.runId ?? 0;
      const {
        rebuildRun,
        rebuildRunColumns: [checked, drifted],
      } = COUNTER_SPECS[view];
      const { rows } = await this.sources.pool.query<{
        run_id: number;
        started_at: Date;
        checked: number;
        drifted: number;
        total_abs_drift: number;
      }>(
        `SELECT run_id, started_at, ${checked} AS checked, ${drifted} AS drifted, total_abs_drift
           FROM (SELECT * FROM ${rebuildRun} WHERE run_id > $1 ORDER BY run_id DESC LIMIT $2) newest
          ORDER BY run_id`,
        [after, DRIFT_RUNS_KEPT],
      );
      for (const r of rows) {
        runs.push({
          runId: r.run_id,
          at: r.started_at.getTime(),
          itemsChecked: r.checked,
          itemsDrifted: r.drifted,
          totalAbsDrift: r.total_abs_drift,
        });
      }
      if (runs.length > DRIFT_RUNS_KEPT) runs.splice(0, runs.length - DRIFT_RUNS_KEPT);
    }
  }

  private async auditWhenDue(now: number): Promise<void> {
    const every = this.options.auditEveryMs;
    if (!every || !this.sources.audit || now < this.nextAuditAt) return;
    this.nextAuditAt = now + every;
    try {
      this.recordAudit(await this.sources.audit(), "periodic");
      this.failing.audit = false;
    } catch (err) {
      this.report("audit", err);
    }
  }

  private async readTotals(): Promise<Totals> {
    const { metrics } = this.sources;
    const totals: Totals = {
      at: Date.now(),
      outcomes: { CHANGED: 0, NOOP: 0, REJECTED: 0 },
      likeChanged: 0,
      likeRequests: 0,
      applied: perView(),
      absorbed: perView(),
      failures: perView(),
      cacheLookups: await readCacheLookups(metrics.registry),
      checkouts: 0,
      slowCheckouts: 0,
    };
    const waits = checkoutWaitsOf(this.sources.pool);
    if (waits) {
      totals.checkouts = waits.count;
      totals.slowCheckouts = waits.count - waits.buckets.slice(0, SLOW_BUCKET + 1).reduce((a, b) => a + b, 0);
    }
    for (const { labels, value } of (await metrics.outcomes.get()).values) {
      const outcome = labels.outcome;
      if (outcome === "CHANGED" || outcome === "NOOP" || outcome === "REJECTED") totals.outcomes[outcome] += value;
      if (labels.operation === "like") {
        totals.likeRequests += value;
        if (outcome === "CHANGED") totals.likeChanged += value;
      }
    }
    for (const { labels, value } of (await metrics.consumerEvents.get()).values) {
      if (!isView(labels.consumer)) continue;
      if (labels.verdict === "applied") totals.applied[labels.consumer] += value;
      else totals.absorbed[labels.consumer] += value;
    }
    for (const { labels, value } of (await metrics.consumerFailures.get()).values) {
      if (isView(labels.consumer)) totals.failures[labels.consumer] += value;
    }
    return totals;
  }
}

const round = (n: number) => Math.round(n * 100) / 100;

function rates(
  before: Totals,
  after: Totals,
  requests: ReturnType<RequestRecorder["take"]>,
  eventLoop: Rates["eventLoop"],
): Rates {
  const seconds = Math.max(0.001, (after.at - before.at) / 1000);
  const perSec = (a: number, b: number) => round((b - a) / seconds);
  const likeRequests = after.likeRequests - before.likeRequests;
  return {
    seconds: round(seconds),
    consumers: Object.fromEntries(
      VIEWS.map((v) => [
        v,
        {
          appliedPerSec: perSec(before.applied[v], after.applied[v]),
          absorbedPerSec: perSec(before.absorbed[v], after.absorbed[v]),
          failuresPerSec: perSec(before.failures[v], after.failures[v]),
        },
      ]),
    ) as Rates["consumers"],
    outcomes: {
      CHANGED: perSec(before.outcomes.CHANGED, after.outcomes.CHANGED),
      NOOP: perSec(before.outcomes.NOOP, after.outcomes.NOOP),
      REJECTED: perSec(before.outcomes.REJECTED, after.outcomes.REJECTED),
    },
    uniqueInsertRatio: likeRequests > 0 ? round((after.likeChanged - before.likeChanged) / likeRequests) : null,
    countCache: cacheRates(before.cacheLookups, after.cacheLookups, seconds),
    requests: Object.fromEntries(
      ROUTE_GROUPS.map((g) => [
        g,
        {
          perSec: round(requests[g].requests / seconds),
          p99Ms: requests[g].p99Ms === null ? null : round(requests[g].p99Ms),
        },
      ]),
    ) as Rates["requests"],
    eventLoop,
    checkouts: {
      perSec: perSec(before.checkouts, after.checkouts),
      slowPerSec: perSec(before.slowCheckouts, after.slowCheckouts),
    },
  };
}
