import client from "prom-client";
import type { Pool } from "../db/pool.ts";
import { HttpRequestMetrics } from "./http-metrics.ts";
import { OutcomeCounter } from "./outcome-counter.ts";
import { transactionStats } from "../db/transaction.ts";
import { readNotificationWatermarks, type NotificationWatermark } from "../notifications/notification-audit.ts";
import { refresherOf } from "../metrics-refresh.ts";
import { readFeedFigures, type FeedFigures } from "../feed/feed-audit.ts";
import { registerPoolMetrics } from "../db/pool-metrics.ts";
import { registerProcessMetrics } from "../runtime/process-metrics.ts";
import { DATABASE_REFUSAL_REASONS, databaseRefusals } from "./database-refusals.ts";

/** How often the figures from the database are read by default (LEDGER_METRICS_REFRESH_MS). */
export const METRICS_REFRESH_MS = 10_000;

/**
 * Prometheus metrics of one process. Counters are incremented where things happen; lag and
 * watermarks are read from the database on a timer (a few rows per partition, every
 * LEDGER_METRICS_REFRESH_MS), so they are right even when the consumers run in other
 * processes, and a scrape itself runs no query (src/metrics-refresh.ts).
 */
export class LedgerMetrics {
  readonly registry = new client.Registry();
  private readonly refresher = refresherOf(this.registry);
  /** The last refresh's figures; null before the first or when it could not read the database. */
  private figures: DatabaseFigures | null = null;
  readonly http = new HttpRequestMetrics(this.registry);
  /** CHANGED / NOOP / REJECTED per operation: CHANGED over all is seed 004's "unique insert rate". */
  readonly outcomes = new OutcomeCounter(this.registry);
  readonly consumerEvents = new client.Counter({
    name: "ledger_consumer_events_total",
    help: "Events handled by this process's consumers, by verdict",
    labelNames: ["consumer", "verdict"],
    registers: [this.registry],
  });
  /** Seed 004's "count update failure rate": consumer passes that failed (and were retried). */
  readonly consumerFailures = new client.Counter({
    name: "ledger_consumer_failures_total",
    help: "Consumer passes that failed and will be retried",
    labelNames: ["consumer"],
    registers: [this.registry],
  });
  constructor(pool: Pool) {
    // Every command that serves /metrics (serve, worker, webhook-worker, relay) builds one of these on its pool.
    registerProcessMetrics(this.registry);
    registerPoolMetrics(this.registry, pool);
    new client.Counter({
      name: "ledger_database_refusals_total",
      help: "Requests answered 503 because of the database, by reason (deadline, connection_lost, disk_full)",
      labelNames: ["reason"],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const reason of DATABASE_REFUSAL_REASONS) this.inc({ reason }, databaseRefusals[reason]);
      },
    });
    // A series per consumer from the start: a failure ratio reads 0, not nothing, before the first failure.
    for (const consumer of ["like_count", "follower_projection", "comment_count", "notifications", "feed"])
      this.consumerFailures.inc({ consumer }, 0);
    // What describes the database (lag, watermarks, rebuild drift) comes from the database,
    // whichever process wrote it: a rebuild run by the CLI counts too.
    this.refresher.add(async () => {
      this.figures = await readDatabaseFigures(pool).catch(() => null);
    });
    const figures = () => this.figures;
    new client.Gauge({
      name: "ledger_scrape_database_up",
      help: "1 when the last refresh of the database figures could read the database",
      registers: [this.registry],
      collect() {
        this.set(figures() ? 1 : 0);
      },
    });
    new client.Gauge({
      name: "ledger_watermark",
      help: "Contiguous watermark per view and partition",
      labelNames: ["view", "partition"],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const r of figures()?.watermarks ?? [])
          this.set({ view: r.view, partition: String(r.part) }, r.appliedUpto);
        for (const r of figures()?.notificationWatermarks ?? [])
          this.set({ view: `notifications_${r.source}`, partition: String(r.part) }, r.appliedUpto);
        for (const r of figures()?.feed.watermarks ?? [])
          this.set({ view: `feed_${r.source}`, partition: String(r.part) }, r.appliedUpto);
      },
    });
    new client.Gauge({
      name: "ledger_lag_events",
      help: "Unprocessed events per view and partition",
      labelNames: ["view", "partition"],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const r of figures()?.watermarks ?? [])
          this.set({ view: r.view, partition: String(r.part) }, r.last - r.appliedUpto);
        for (const r of figures()?.notificationWatermarks ?? [])
          this.set({ view: `notifications_${r.source}`, partition: String(r.part) }, r.lag);
        // The home timeline's two consumers (docs/feed.md): view feed_posts, feed_relations.
        for (const r of figures()?.feed.watermarks ?? [])
          this.set({ view: `feed_${r.source}`, partition: String(r.part) }, r.lag);
      },
    });
    // Counters whose value is a total kept elsewhere (the database, this process's retry
    // counter) are set at collect time; reset + inc is prom-client's way to set a counter.
    const totalFrom = (name: string, help: string, read: () => number | undefined) =>
      new client.Counter({
        name,
        help,
        registers: [this.registry],
        collect() {
          const value = read();
          if (value === undefined) return;
          this.reset();
          this.inc(value);
        },
      });
    totalFrom(
      "ledger_rebuild_runs_total",
      "Rebuild runs recorded in like_rebuild_run (by any process)",
      () => figures()?.rebuild.runs,
    );
    totalFrom(
      "ledger_rebuild_drift_abs_total",
      "Sum of |drift| corrected by rebuilds (like_rebuild_run, by any process)",
      () => figures()?.rebuild.driftAbs,
    );
    totalFrom(
      "ledger_rebuild_drifted_items_total",
      "Items whose count a rebuild found drifted (like_rebuild_run, by any process)",
      () => figures()?.rebuild.driftedItems,
    );
    // The feed invariant's lies (feed_audit: extra or missing rows no pending event explains), summed
    // over every audit's runs (feed_audit_run: the periodic audit, `audit`, GET /v1/admin/audit):
    // zero series from the start, so a rule sees the first.
    new client.Counter({
      name: "ledger_feed_drift_rows_total",
      help: "Home timeline inbox rows the audits (periodic and full) found extra or missing (feed_audit_run, by any process)",
      labelNames: ["kind"],
      registers: [this.registry],
      collect() {
        const drift = figures()?.feed.drift;
        if (!drift) return;
        this.reset();
        this.inc({ kind: "extra" }, drift.extra);
        this.inc({ kind: "missing" }, drift.missing);
      },
    });
    new client.Counter({
      name: "ledger_feed_rebuild_rows_total",
      help: "Home timeline inbox rows the feed rebuilds added or removed (feed_rebuild_run, by any process)",
      labelNames: ["kind"],
      registers: [this.registry],
      collect() {
        const rebuild = figures()?.feed.rebuild;
        if (!rebuild) return;
        this.reset();
        this.inc({ kind: "added" }, rebuild.added);
        this.inc({ kind: "removed" }, rebuild.removed);
      },
    });
    new client.Gauge({
      name: "ledger_feed_skipped_readers",
      help: "Readers fan-out skips as absent (LEDGER_FEED_ABSENT_MS): their next read installs their inbox",
      registers: [this.registry],
      collect() {
        const current = figures();
        if (current) this.set(current.feed.skippedReaders);
      },
    });
    // A negative count is an invariant violation: shown as it is (never clamped) and counted here.
    new client.Gauge({
      name: "ledger_negative_counts",
      help: "Derived count rows below zero (an invariant violation; the audit names them)",
      labelNames: ["view"],
      registers: [this.registry],
      collect() {
        const current = figures();
        this.reset();
        if (current) this.set({ view: "comment_count" }, current.negativeCommentCounts);
      },
    });
    totalFrom(
      "ledger_transaction_retries_total",
      "Whole-transaction retries on 40001/40P01 in this process",
      () => transactionStats.retries,
    );
  }

  /** Reads every figure of this registry that comes from the database or Redis now (tests; the timer does it otherwise). */
  refresh(): Promise<void> {
    return this.refresher.refresh();
  }

  /** Reads them now and then every `everyMs`, until stopRefreshing. */
  startRefreshing(everyMs: number = METRICS_REFRESH_MS): Promise<void> {
    return this.refresher.start(everyMs);
  }

  stopRefreshing(): Promise<void> {
    return this.refresher.stop();
  }
}

export interface WatermarkRow {
  view: "like_count" | "follower_projection" | "comment_count";
  part: number;
  last: number;
  appliedUpto: number;
}

/** Sequence and watermark of every partition of both derived views, in one statement. */
export async function readWatermarks(pool: Pool): Promise<WatermarkRow[]> {
  const { rows } = await pool.query<{ view: WatermarkRow["view"]; part: number; last: number; applied_upto: number }>(
    `SELECT 'like_count' AS view, s.part, s.last, w.applied_upto FROM like_seq s JOIN counter_watermark w USING (part)
     UNION ALL
     SELECT 'follower_projection', s.part, s.last, w.applied_upto FROM event_seq s JOIN proj_watermark w USING (part)
     UNION ALL
     SELECT 'comment_count', s.part, s.last, w.applied_upto FROM comment_seq s JOIN comment_watermark w USING (part)
     ORDER BY 1, 2`,
  );
  return rows.map((r) => ({ view: r.view, part: r.part, last: r.last, appliedUpto: r.applied_upto }));
}

export interface DatabaseFigures {
  watermarks: WatermarkRow[];
  /** The notification view's, per source outbox (view label notifications_<source>). */
  notificationWatermarks: NotificationWatermark[];
  rebuild: { runs: number; driftAbs: number; driftedItems: number };
  negativeCommentCounts: number;
  feed: FeedFigures;
}

/** What /metrics shows of the database: watermarks and the rebuild totals, in two statements. */
export async function readDatabaseFigures(pool: Pool): Promise<DatabaseFigures> {
  const [watermarks, notificationWatermarks, rebuild, negative, feed] = await Promise.all([
    readWatermarks(pool),
    readNotificationWatermarks(pool),
    pool.query<{ runs: number; drift_abs: number; drifted_items: number }>(
      "SELECT count(*)::bigint AS runs, coalesce(sum(total_abs_drift), 0)::bigint AS drift_abs, coalesce(sum(items_drifted), 0)::bigint AS drifted_items FROM like_rebuild_run",
    ),
    pool.query<{ n: number }>("SELECT count(*)::int AS n FROM comment_count WHERE n < 0"),
    readFeedFigures(pool),
  ]);
  const r = rebuild.rows[0]!;
  return {
    watermarks,
    notificationWatermarks,
    rebuild: { runs: r.runs, driftAbs: r.drift_abs, driftedItems: r.drifted_items },
    negativeCommentCounts: negative.rows[0]!.n,
    feed,
  };
}
