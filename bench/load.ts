/**
 * The two load generators of the benchmark: a fixed number of library calls spread over N
 * concurrent workers (latency recorded per call), and autocannon (in a worker thread) against a
 * listening server for a fixed amount of requests (latency from autocannon's own histogram).
 */
import { performance } from "node:perf_hooks";
import { Worker } from "node:worker_threads";
import type { HttpClientJob, HttpClientReport } from "./http-client.ts";

export interface Figures {
  /** Operations completed (successful or not). */
  ops: number;
  seconds: number;
  opsPerSec: number;
  p50Ms: number;
  p99Ms: number;
  /** Operations that threw (library) or connection errors / timeouts (HTTP). */
  errors: number;
  /** HTTP only: percentiles of autocannon's per-response timings (sub-millisecond). */
  exactP50Ms?: number;
  exactP99Ms?: number;
  /** HTTP only: responses outside 2xx, by status. */
  statusCodes?: Record<string, number>;
  firstError?: string;
}

/** Nearest-rank percentile of an ascending array. */
export function percentile(sorted: ArrayLike<number>, q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((q / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!;
}

/**
 * Runs `op(k)` for k = 0 .. count-1 on `concurrency` workers that take the next k from a
 * shared counter, so the run ends after a fixed number of operations, not a fixed time.
 * An operation that throws is counted (and its latency kept); the run goes on.
 */
export async function runFixedCount(
  count: number,
  concurrency: number,
  op: (k: number) => Promise<unknown>,
  signal?: AbortSignal,
): Promise<Figures> {
  const latencies = new Float64Array(count);
  let next = 0;
  let done = 0;
  let errors = 0;
  let firstError: string | undefined;
  const worker = async (): Promise<void> => {
    for (let k = next++; k < count && !signal?.aborted; k = next++) {
      const t0 = performance.now();
      try {
        await op(k);
      } catch (err) {
        errors++;
        firstError ??= err instanceof Error ? `${err.name}: ${err.message}` : String(err);
      }
      latencies[done++] = performance.now() - t0;
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: concurrency }, worker));
  const seconds = (performance.now() - started) / 1000;
  const sorted = latencies.subarray(0, done).sort();
  return {
    ops: done, seconds, opsPerSec: done / seconds,
    p50Ms: percentile(sorted, 50), p99Ms: percentile(sorted, 99),
    errors, ...(firstError === undefined ? {} : { firstError }),
  };
}

/**
 * Like runFixedCount for several kinds of operation at once: operation k is of kind
 * k mod kinds.length, so the kinds interleave on the same workers and meet the same load
 * (other processes, checkpoints, autovacuum), and a ratio of their percentiles compares them
 * and not two moments of a noisy machine. Returns the figures of each kind, in order.
 */
export async function runInterleaved(
  count: number,
  concurrency: number,
  kinds: readonly ((k: number) => Promise<unknown>)[],
  signal?: AbortSignal,
): Promise<Figures[]> {
  const latencies = kinds.map(() => [] as number[]);
  const errors = kinds.map(() => 0);
  const firstErrors: (string | undefined)[] = kinds.map(() => undefined);
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let k = next++; k < count && !signal?.aborted; k = next++) {
      const kind = k % kinds.length;
      const t0 = performance.now();
      try {
        await kinds[kind]!(Math.floor(k / kinds.length));
      } catch (err) {
        errors[kind]!++;
        firstErrors[kind] ??= err instanceof Error ? `${err.name}: ${err.message}` : String(err);
      }
      latencies[kind]!.push(performance.now() - t0);
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: concurrency }, worker));
  const seconds = (performance.now() - started) / 1000;
  return kinds.map((_, kind) => {
    const sorted = Float64Array.from(latencies[kind]!).sort();
    const firstError = firstErrors[kind];
    return {
      ops: sorted.length, seconds, opsPerSec: sorted.length / seconds,
      p50Ms: percentile(sorted, 50), p99Ms: percentile(sorted, 99),
      errors: errors[kind]!, ...(firstError === undefined ? {} : { firstError }),
    };
  });
}

export interface HttpRequestSpec {
  method: "GET" | "PUT" | "DELETE";
  path: string;
  authorization: string;
}

/** What stops a running HTTP load (the worker thread that runs it). */
export interface HttpLoad {
  stop(): void;
}

/**
 * autocannon with `amount` requests over `connections` connections, run in a worker thread of
 * its own (bench/http-client.ts) so that it does not share the server's event loop. `build(k)`
 * gives request k (computed here, before the run), so the requests rotate over users and items
 * with a per-request Authorization header.
 */
export async function runAutocannon(options: {
  url: string;
  amount: number;
  connections: number;
  pipelining?: number;
  build: (k: number) => HttpRequestSpec;
  onInstance?: (load: HttpLoad | undefined) => void;
}): Promise<Figures> {
  // A few more than `amount`: autocannon may set up a request per connection beyond the last one it counts.
  const specs = Array.from({ length: options.amount + options.connections }, (_, k) => options.build(k));
  const job: HttpClientJob = { url: options.url, amount: options.amount, connections: options.connections, pipelining: options.pipelining ?? 1, specs };
  const worker = new Worker(new URL("./ts-worker.mjs", import.meta.url), { workerData: { entry: new URL("./http-client.ts", import.meta.url).href, job } });
  options.onInstance?.({ stop: () => void worker.terminate() });
  let report: HttpClientReport;
  try {
    report = await new Promise<HttpClientReport>((resolve, reject) => {
      worker.on("message", (message: { report?: HttpClientReport }) => message.report && resolve(message.report));
      worker.once("error", reject);
      worker.once("exit", (code) => reject(new Error(`HTTP client worker exited with code ${code}`)));
    });
  } finally {
    options.onInstance?.(undefined);
    void worker.terminate();
  }
  const { result, responseMs } = report;
  const seconds = report.elapsedMs / 1000;
  const ops = result["2xx"] + result.non2xx;
  const statusCodes: Record<string, number> = {};
  for (const [code, stat] of Object.entries(result.statusCodeStats ?? {})) {
    if (!code.startsWith("2")) statusCodes[code] = stat.count ?? 0;
  }
  const sorted = Float64Array.from(responseMs).sort();
  return {
    ops, seconds, opsPerSec: ops / seconds,
    // autocannon keeps 2xx latencies in a histogram of whole milliseconds.
    p50Ms: result.latency.p50, p99Ms: result.latency.p99,
    // The same from every response's own timing (all statuses), for the JSON.
    exactP50Ms: percentile(sorted, 50), exactP99Ms: percentile(sorted, 99),
    errors: result.errors, statusCodes,
  };
}
