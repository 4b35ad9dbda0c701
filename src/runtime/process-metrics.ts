import client from "prom-client";

/** prom-client's default metrics under the project's prefix: ledger_process_cpu_seconds_total, ledger_nodejs_eventloop_lag_p99_seconds, ... */
export const PROCESS_METRICS_PREFIX = "ledger_";

let processRegistry: client.Registry | undefined;

/**
 * The process and Node runtime figures (CPU, resident memory, heap, event-loop delay, GC pauses,
 * handles, file descriptors) in `registry`. They describe the process, not a registry, so they
 * are collected once per process and the same metric objects are registered in every registry
 * that asks: a test process building many apps starts one event-loop monitor and one GC
 * observer, not one per app. The event-loop delay gauges (min, max, mean, percentiles) cover the
 * time since the previous scrape: their monitor restarts at each one.
 */
export function registerProcessMetrics(registry: client.Registry): void {
  if (!processRegistry) {
    processRegistry = new client.Registry();
    client.collectDefaultMetrics({ register: processRegistry, prefix: PROCESS_METRICS_PREFIX });
  }
  // getMetricsAsArray returns the metric objects themselves (typed as their JSON shape).
  for (const metric of processRegistry.getMetricsAsArray()) registry.registerMetric(metric as unknown as client.Metric);
}
