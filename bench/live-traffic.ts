/**
 * The live traffic the background-job benches (bench/erase.ts, bench/rebuild.ts) run beside a
 * job: writers that like and unlike items of their own one at a time each, and readers that read
 * those items' counts, until told to stop; their latencies, and the p99 ratio during ÷ idle that
 * issue 22 bounds at 1.3.
 */
import type { Ledger } from "../src/ledger.ts";
import { readCount } from "../src/likes/like-audit.ts";
import { percentile } from "./load.ts";

/** Issue 22's goal: live p99 during a background job at most this many times the idle p99. */
export const P99_GOAL = 1.3;

export interface Latencies {
  writes: number[];
  reads: number[];
}

export const fmt = (ms: number) => `${ms.toFixed(2)} ms`;

export function liveItems(writers: number, perWriter = 50): string[] {
  return Array.from({ length: writers * perWriter }, (_, i) => `live-${Math.floor(i / perWriter)}-${i % perWriter}`);
}

/**
 * `writers` writers each toggling its own `perWriter` items (by its own user), plus extra items
 * (`alsoLike`) every 10th write, and `readers` readers reading the counts of those items, until
 * `stop` resolves.
 */
export async function liveTraffic(
  ledger: Ledger,
  stop: Promise<void>,
  options: { writers: number; readers: number; perWriter?: number; alsoLike?: readonly string[] },
): Promise<Latencies> {
  let stopped = false;
  void stop.then(() => (stopped = true));
  const perWriter = options.perWriter ?? 50;
  const writes: number[] = [];
  const reads: number[] = [];
  const also = options.alsoLike ?? [];
  const items = liveItems(options.writers, perWriter);
  await Promise.all([
    ...Array.from({ length: options.writers }, async (_, w) => {
      for (let i = 0; !stopped; i++) {
        const item =
          also.length > 0 && i % 10 === 9 ? also[((i / 10) % also.length) | 0]! : `live-${w}-${i % perWriter}`;
        const like = Math.floor(i / perWriter) % 2 === 0;
        const t0 = performance.now();
        await (like ? ledger.likes.like(`live-user-${w}`, item) : ledger.likes.unlike(`live-user-${w}`, item));
        writes.push(performance.now() - t0);
      }
    }),
    ...Array.from({ length: options.readers }, async (_, r) => {
      for (let i = 0; !stopped; i++) {
        const t0 = performance.now();
        await readCount(ledger.pool, items[(i * 7 + r) % items.length]!, 1_000_000);
        reads.push(performance.now() - t0);
      }
    }),
  ]);
  return { writes: writes.sort((a, b) => a - b), reads: reads.sort((a, b) => a - b) };
}

/** Two windows' latencies as one sorted sample. */
export function pooled(a: Latencies, b: Latencies): Latencies {
  return {
    writes: [...a.writes, ...b.writes].sort((x, y) => x - y),
    reads: [...a.reads, ...b.reads].sort((x, y) => x - y),
  };
}

export function describe(label: string, sorted: readonly number[]): string {
  return `${label} n=${sorted.length} p50=${fmt(percentile(sorted, 50))} p99=${fmt(percentile(sorted, 99))} max=${fmt(sorted.at(-1) ?? NaN)}`;
}

/** "p99 8.40 -> 9.90 ms: 1.18x (goal <= 1.3x: met)". */
export function ratioLine(idle: readonly number[], during: readonly number[]): string {
  const a = percentile(idle, 99);
  const b = percentile(during, 99);
  const r = b / a;
  return `p99 ${a.toFixed(2)} -> ${b.toFixed(2)} ms: ${r.toFixed(2)}x (goal <= ${P99_GOAL}x: ${r <= P99_GOAL ? "met" : "NOT met"})`;
}

/** Sleeps for the idle window (a bench's own timer, not a test's synchronisation). */
export function after(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
