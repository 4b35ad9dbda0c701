import type client from "prom-client";

/** Upper bounds (seconds) of http_request_duration_seconds' buckets. */
export const HTTP_DURATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1] as const;

/** One method of one route: its responses by status and its durations by bucket (not cumulative; the +Inf bucket is `count`). */
class RouteSeries {
  readonly statuses = new Map<number, number>();
  readonly buckets: number[] = HTTP_DURATION_BUCKETS.map(() => 0);
  sum = 0;
  count = 0;

  constructor(readonly labels: { method: string; route: string }) {}
}

/** The part of prom-client's metric interface its Registry uses (registerMetric, metrics(), getMetricsAsJSON, resetMetrics). */
interface CollectedMetric {
  name: string;
  help: string;
  type: "counter" | "histogram";
  aggregator: "sum";
  get(): Promise<{
    name: string;
    help: string;
    type: string;
    aggregator: string;
    values: client.MetricValueWithName<string>[];
  }>;
  reset(): void;
}

/**
 * http_requests_total{method,route,status} and http_request_duration_seconds{method,route}, counted
 * per request in plain numbers looked up by route and method, and turned into prom-client's
 * series only when /metrics is read. prom-client's own Counter and Histogram build and hash a
 * labels object on every call (two per request, a few % of the server's CPU per request); the
 * exposition is the same text.
 */
export class HttpRequestMetrics {
  private readonly routes = new Map<string, Map<string, RouteSeries>>();

  constructor(registry: client.Registry) {
    const metric = (
      name: string,
      help: string,
      type: CollectedMetric["type"],
      values: () => client.MetricValueWithName<string>[],
    ): CollectedMetric => ({
      name,
      help,
      type,
      aggregator: "sum",
      get: async () => ({ name, help, type, aggregator: "sum", values: values() }),
      reset: () => this.routes.clear(),
    });
    for (const m of [
      metric("http_requests_total", "HTTP requests by route and status", "counter", () => this.requestValues()),
      metric("http_request_duration_seconds", "HTTP request duration", "histogram", () => this.durationValues()),
    ])
      registry.registerMetric(m as unknown as client.Metric);
  }

  record(method: string, route: string, status: number, seconds: number): void {
    let methods = this.routes.get(route);
    if (!methods) this.routes.set(route, (methods = new Map()));
    let series = methods.get(method);
    if (!series) methods.set(method, (series = new RouteSeries({ method, route })));
    series.statuses.set(status, (series.statuses.get(status) ?? 0) + 1);
    // prom-client's rule: a value goes into the first bucket whose bound is >= it.
    let bucket = 0;
    while (bucket < HTTP_DURATION_BUCKETS.length && seconds > HTTP_DURATION_BUCKETS[bucket]!) bucket++;
    if (bucket < HTTP_DURATION_BUCKETS.length) series.buckets[bucket]!++;
    series.sum += seconds;
    series.count++;
  }

  private *allSeries(): Generator<RouteSeries> {
    for (const methods of this.routes.values()) yield* methods.values();
  }

  private requestValues(): client.MetricValueWithName<string>[] {
    const values: client.MetricValueWithName<string>[] = [];
    for (const series of this.allSeries()) {
      for (const [status, value] of series.statuses)
        values.push({ labels: { ...series.labels, status: String(status) }, value });
    }
    return values;
  }

  /** As prom-client's Histogram exports them: cumulative buckets, +Inf, _sum, _count; the series' labels as sharedLabels. */
  private durationValues(): client.MetricValueWithName<string>[] {
    const name = "http_request_duration_seconds";
    const values: (client.MetricValueWithName<string> & { sharedLabels: Record<string, string> })[] = [];
    for (const series of this.allSeries()) {
      const sharedLabels = series.labels;
      let cumulative = 0;
      HTTP_DURATION_BUCKETS.forEach((le, i) => {
        cumulative += series.buckets[i]!;
        values.push({ labels: { le }, sharedLabels, value: cumulative, metricName: `${name}_bucket` });
      });
      values.push({ labels: { le: "+Inf" }, sharedLabels, value: series.count, metricName: `${name}_bucket` });
      values.push({ labels: {}, sharedLabels, value: series.sum, metricName: `${name}_sum` });
      values.push({ labels: {}, sharedLabels, value: series.count, metricName: `${name}_count` });
    }
    return values;
  }
}
