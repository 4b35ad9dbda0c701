/**
 * The two load generators of the benchmark: a fixed number of library calls spread over N
 * concurrent workers (latency recorded per call), and autocannon against a listening server
 * for a fixed amount of requests (latency from autocannon's own histogram).
 */
import autocannon from "autocannon";
import { performance } from "node:perf_hooks";

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

/**
 * autocannon with `amount` requests over `connections` connections. `build(k)` is called
 * once per request, k counting up across all connections (autocannon's setupRequest), so the
 * requests rotate over users and items with a per-request Authorization header.
 */
export async function runAutocannon(options: {
  url: string;
  amount: number;
  connections: number;
  build: (k: number) => HttpRequestSpec;
  onInstance?: (instance: autocannon.Instance | undefined) => void;
}): Promise<Figures> {
  let k = 0;
  // autocannon notices the end of an `amount` run only at its next sampling tick (each
  // second), so its duration is rounded up to whole seconds: the clock stops at the last response.
  const responseMs: number[] = [];
  let lastResponse = 0;
  const started = performance.now();
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon({
      url: options.url,
      connections: options.connections,
      amount: options.amount,
      timeout: 30,
      requests: [{
        setupRequest: (request) => {
          const spec = options.build(k++);
          return { ...request, method: spec.method, path: spec.path, headers: { ...request.headers, authorization: spec.authorization } };
        },
      }],
    }, (err: unknown, res: autocannon.Result) => (err ? reject(err instanceof Error ? err : new Error(String(err))) : resolve(res)));
    instance.on("response", (_client, _status, _bytes, ms) => {
      responseMs.push(ms);
      lastResponse = performance.now();
    });
    options.onInstance?.(instance);
  });
  options.onInstance?.(undefined);
  const seconds = ((lastResponse || performance.now()) - started) / 1000;
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
