/** The route groups of the dashboard: the first OpenAPI tag of a route, "other" for untagged routes (docs, static files, 404s). */
export const ROUTE_GROUPS = ["likes", "relations", "posts", "comments", "admin", "health", "other"] as const;
export type RouteGroup = (typeof ROUTE_GROUPS)[number];

export function routeGroup(tag: unknown): RouteGroup {
  return (ROUTE_GROUPS as readonly unknown[]).includes(tag) ? (tag as RouteGroup) : "other";
}

/**
 * Durations kept per group and interval for the p99. Below this every request is kept and the
 * p99 is exact; above it a uniform reservoir sample (algorithm R) of this size stands in, which
 * keeps memory fixed under any load at the cost of a p99 estimated from 4096 draws.
 */
const RESERVOIR_SIZE = 4096;

class GroupInterval {
  count = 0;
  readonly durations: number[] = [];

  add(ms: number): void {
    this.count++;
    if (this.durations.length < RESERVOIR_SIZE) {
      this.durations.push(ms);
      return;
    }
    const slot = Math.floor(Math.random() * this.count);
    if (slot < RESERVOIR_SIZE) this.durations[slot] = ms;
  }

  p99(): number | null {
    if (this.durations.length === 0) return null;
    const sorted = [...this.durations].sort((a, b) => a - b);
    return sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.99) - 1)]!;
  }
}

export interface GroupFigures {
  requests: number;
  /** Milliseconds; null when the group had no request in the interval. */
  p99Ms: number | null;
}

/**
 * Request counts and latencies per route group since the last `take()`. The histogram of
 * /metrics cannot give this: its p99 is only as fine as its buckets and covers the process's
 * whole life, where the dashboard wants each sample interval on its own.
 */
export class RequestRecorder {
  private current = new Map<RouteGroup, GroupInterval>();

  record(group: RouteGroup, ms: number): void {
    let interval = this.current.get(group);
    if (!interval) this.current.set(group, (interval = new GroupInterval()));
    interval.add(ms);
  }

  /** The figures of the interval that ends now, for every group; starts the next interval. */
  take(): Record<RouteGroup, GroupFigures> {
    const ended = this.current;
    this.current = new Map();
    const figures = {} as Record<RouteGroup, GroupFigures>;
    for (const group of ROUTE_GROUPS) {
      const interval = ended.get(group);
      figures[group] = { requests: interval?.count ?? 0, p99Ms: interval?.p99() ?? null };
    }
    return figures;
  }
}
