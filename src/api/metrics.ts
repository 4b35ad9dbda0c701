import client from "prom-client";
import type { Pool } from "../db/pool.ts";
import { transactionStats } from "../db/transaction.ts";

/**
 * Prometheus metrics of one process. Counters are incremented where things happen; lag and
 * watermarks are read from the database on each scrape (a few rows per partition), so they
 * are right even when the consumers run in other processes.
 */
export class LedgerMetrics {
  readonly registry = new client.Registry();
  readonly httpRequests = new client.Counter({
    name: "http_requests_total", help: "HTTP requests by route and status", labelNames: ["method", "route", "status"], registers: [this.registry],
  });
  readonly httpDuration = new client.Histogram({
    name: "http_request_duration_seconds", help: "HTTP request duration", labelNames: ["method", "route"],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1], registers: [this.registry],
  });
  /** CHANGED / NOOP / REJECTED per operation: CHANGED over all is seed 004's "unique insert rate". */
  readonly outcomes = new client.Counter({
    name: "ledger_operation_outcomes_total", help: "Write outcomes per operation", labelNames: ["operation", "outcome"], registers: [this.registry],
  });
  readonly consumerEvents = new client.Counter({
    name: "ledger_consumer_events_total", help: "Events handled by this process's consumers, by verdict",
    labelNames: ["consumer", "verdict"], registers: [this.registry],
  });
  /** Seed 004's "count update failure rate": consumer passes that failed (and were retried). */
  readonly consumerFailures = new client.Counter({
    name: "ledger_consumer_failures_total", help: "Consumer passes that failed and will be retried", labelNames: ["consumer"], registers: [this.registry],
  });
  readonly rebuildDrift = new client.Counter({
    name: "ledger_rebuild_drift_abs_total", help: "Sum of |drift| corrected by rebuilds in this process", registers: [this.registry],
  });
  readonly rebuildDriftedItems = new client.Counter({
    name: "ledger_rebuild_drifted_items_total", help: "Items whose count a rebuild found drifted", registers: [this.registry],
  });

  constructor(pool: Pool) {
    // One database read per scrape, shared by the three gauges below. The registry collects
    // all metrics concurrently (Promise.all), so each gauge must await the read itself: one
    // gauge filling the others from its collect() left them a scrape behind (and empty, or
    // up=0, on the first scrape).
    let inFlight: Promise<WatermarkRow[] | null> | null = null;
    const scrape = () => (inFlight ??= readWatermarks(pool).then((rows) => rows, () => null).finally(() => {
      inFlight = null;
    }));
    new client.Gauge({
      name: "ledger_scrape_database_up", help: "1 when the last scrape could read the watermarks", registers: [this.registry],
      async collect() {
        this.set((await scrape()) ? 1 : 0);
      },
    });
    new client.Gauge({
      name: "ledger_watermark", help: "Contiguous watermark per view and partition", labelNames: ["view", "partition"], registers: [this.registry],
      async collect() {
        const rows = await scrape();
        this.reset();
        for (const r of rows ?? []) this.set({ view: r.view, partition: String(r.part) }, r.appliedUpto);
      },
    });
    new client.Gauge({
      name: "ledger_lag_events", help: "Unprocessed events per view and partition", labelNames: ["view", "partition"], registers: [this.registry],
      async collect() {
        const rows = await scrape();
        this.reset();
        for (const r of rows ?? []) this.set({ view: r.view, partition: String(r.part) }, r.last - r.appliedUpto);
      },
    });
    new client.Gauge({
      name: "ledger_transaction_retries_total", help: "Whole-transaction retries on 40001/40P01 in this process", registers: [this.registry],
      collect() {
        this.set(transactionStats.retries);
      },
    });
  }
}

export interface WatermarkRow {
  view: "like_count" | "follower_projection";
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
     ORDER BY 1, 2`,
  );
  return rows.map((r) => ({ view: r.view, part: r.part, last: r.last, appliedUpto: r.applied_upto }));
}
