import client from "prom-client";
import { CHECKOUT_WAIT_BUCKETS } from "./checkout-waits.ts";
import { checkoutWaitsOf, type Pool } from "./pool.ts";

/**
 * The process's PostgreSQL pool on /metrics: its connections (open, idle, the most it may open),
 * checkouts waiting for one, and how long checkouts waited (a histogram). All read from the
 * pool's own counters when /metrics is scraped: no statement runs.
 */
export function registerPoolMetrics(registry: client.Registry, pool: Pool): void {
  const registers = [registry];
  const gauge = (name: string, help: string, read: () => number) =>
    new client.Gauge({
      name,
      help,
      registers,
      collect() {
        this.set(read());
      },
    });
  gauge(
    "ledger_db_pool_connections",
    "Connections the PostgreSQL pool has open (idle and checked out)",
    () => pool.totalCount,
  );
  gauge(
    "ledger_db_pool_idle_connections",
    "Open connections of the PostgreSQL pool that nobody has checked out",
    () => pool.idleCount,
  );
  gauge(
    "ledger_db_pool_max_connections",
    "The most connections the PostgreSQL pool opens",
    () => pool.options.max ?? 10,
  );
  gauge(
    "ledger_db_pool_waiting_checkouts",
    "Checkouts waiting for a connection of the PostgreSQL pool now (every connection is checked out)",
    () => pool.waitingCount,
  );
  const waits = checkoutWaitsOf(pool);
  if (!waits) return;
  const name = "ledger_db_pool_checkout_wait_seconds";
  const help = "Time from asking the PostgreSQL pool for a connection to getting one (or the error)";
  // As prom-client's Histogram exports one: cumulative buckets, +Inf, _sum, _count.
  const values = (): client.MetricValueWithName<string>[] => {
    let cumulative = 0;
    const rows: client.MetricValueWithName<string>[] = CHECKOUT_WAIT_BUCKETS.map((le, i) => {
      cumulative += waits.buckets[i]!;
      return { labels: { le }, value: cumulative, metricName: `${name}_bucket` };
    });
    rows.push({ labels: { le: "+Inf" }, value: waits.count, metricName: `${name}_bucket` });
    rows.push({ labels: {}, value: waits.sum, metricName: `${name}_sum` });
    rows.push({ labels: {}, value: waits.count, metricName: `${name}_count` });
    return rows;
  };
  // The part of prom-client's metric interface its Registry uses; the figures live in the pool, so reset has nothing of its own.
  const metric = {
    name,
    help,
    type: "histogram",
    aggregator: "sum",
    get: async () => ({ name, help, type: "histogram", aggregator: "sum", values: values() }),
    reset: () => undefined,
  };
  registry.registerMetric(metric as unknown as client.Metric);
}
