import type { Registry } from "prom-client";

/**
 * What /metrics shows from the database (lag, watermarks, rebuild and drift totals) or from
 * Redis (evicted keys), read on a timer into memory, never by a scrape: anyone who can reach
 * /metrics could otherwise make the process run queries as often as they like. One refresher
 * per registry, shared by every group of metrics registered in it; each task keeps its previous
 * figures (or says it could not read them) when a read fails.
 */
export class MetricsRefresher {
  private readonly tasks: (() => Promise<void>)[] = [];
  private chain: Promise<void> = Promise.resolve();
  private pending = 0;
  private timer: NodeJS.Timeout | undefined;

  /** A task that reads its figures into memory; it handles its own errors. */
  add(task: () => Promise<void>): void {
    this.tasks.push(task);
  }

  /** One read of every task that starts after this call (so a test sees what it wrote before). */
  refresh(): Promise<void> {
    this.pending++;
    this.chain = this.chain
      .then(async () => {
        await Promise.all(this.tasks.map((task) => task().catch(() => undefined)));
      })
      .finally(() => {
        this.pending--;
      });
    return this.chain;
  }

  /** Reads now, then every `everyMs` (a tick is skipped while the previous read is still running). */
  async start(everyMs: number): Promise<void> {
    if (this.timer) return;
    this.timer = setInterval(() => {
      if (this.pending === 0) void this.refresh();
    }, everyMs).unref();
    await this.refresh();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.chain;
  }
}

const refreshers = new WeakMap<Registry, MetricsRefresher>();

/** The refresher of a registry: every metric group of the registry adds its tasks to it. */
export function refresherOf(registry: Registry): MetricsRefresher {
  let refresher = refreshers.get(registry);
  if (!refresher) {
    refresher = new MetricsRefresher();
    refreshers.set(registry, refresher);
  }
  return refresher;
}
