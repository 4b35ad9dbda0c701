/**
 * The scale bench's live traffic: a few writers toggling likes of items of their own and a reader
 * of like counts, run for an idle window and then for as long as a background job runs, so every
 * job's figure comes with the live write and read p99 next to it, idle and during, side by side.
 */
import { readCount } from "../src/likes/like-audit.ts";
import type { Ledger } from "../src/ledger.ts";
import { percentile } from "./load.ts";
import { itemId, type Population } from "../support/scale-population.ts";

export interface Latencies {
  n: number;
  p50Ms: number;
  p99Ms: number;
}

export interface UnderJob<T> {
  result: T;
  jobSeconds: number;
  idle: { writes: Latencies; reads: Latencies };
  during: { writes: Latencies; reads: Latencies };
}

const LIVE_ITEMS = 50;

function summary(latencies: number[]): Latencies {
  const sorted = Float64Array.from(latencies).sort();
  return { n: sorted.length, p50Ms: percentile(sorted, 50), p99Ms: percentile(sorted, 99) };
}

export class LiveLoad {
  private constructor(
    private readonly ledger: Ledger,
    private readonly pop: Population,
    private readonly writers: number,
    private readonly idleMs: number,
  ) {}

  static async open(
    ledger: Ledger,
    pop: Population,
    options: { writers: number; idleSeconds: number },
  ): Promise<LiveLoad> {
    for (let w = 0; w < options.writers; w++)
      for (let i = 0; i < LIVE_ITEMS; i++) await ledger.likes.createItem(`live-${w}-${i}`);
    return new LiveLoad(ledger, pop, options.writers, options.idleSeconds * 1000);
  }

  /** Writers and one count reader until `stop` settles; their latencies. */
  private async traffic(stop: Promise<unknown>): Promise<{ writes: Latencies; reads: Latencies }> {
    let stopped = false;
    void stop.finally(() => (stopped = true)).catch(() => {});
    const writes: number[] = [];
    const reads: number[] = [];
    const writer = async (w: number) => {
      for (let i = 0; !stopped; i++) {
        const item = `live-${w}-${i % LIVE_ITEMS}`;
        const t0 = performance.now();
        await (Math.floor(i / LIVE_ITEMS) % 2 === 0
          ? this.ledger.likes.like(`live-user-${w}`, item)
          : this.ledger.likes.unlike(`live-user-${w}`, item));
        writes.push(performance.now() - t0);
      }
    };
    const reader = async () => {
      for (let k = 0; !stopped; k++) {
        const t0 = performance.now();
        await readCount(this.ledger.pool, itemId(2 + ((k * 7919) % (this.pop.items - 1))), 1_000_000_000);
        reads.push(performance.now() - t0);
      }
    };
    await Promise.all([...Array.from({ length: this.writers }, (_, w) => writer(w)), reader()]);
    return { writes: summary(writes), reads: summary(reads) };
  }

  /** The idle window, then `job` with the same traffic for as long as it runs. */
  async under<T>(job: () => Promise<T>): Promise<UnderJob<T>> {
    const idle = await this.traffic(new Promise((resolve) => setTimeout(resolve, this.idleMs)));
    let jobSeconds = 0;
    const running = (async () => {
      const t0 = performance.now();
      try {
        return await job();
      } finally {
        jobSeconds = (performance.now() - t0) / 1000;
      }
    })();
    const [during, result] = await Promise.all([this.traffic(running), running]);
    return { result, jobSeconds, idle, during };
  }
}

export function ratio(u: UnderJob<unknown>): { writeP99: number; readP99: number } {
  return { writeP99: u.during.writes.p99Ms / u.idle.writes.p99Ms, readP99: u.during.reads.p99Ms / u.idle.reads.p99Ms };
}
