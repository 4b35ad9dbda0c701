/**
 * The two load generators of the benchmark: a fixed number of library calls spread over N
 * concurrent workers (latency recorded per call), and a lean keep-alive HTTP client (in a worker
 * thread) against a listening server for a fixed amount of requests (latency per response).
 */
import { performance } from "node:perf_hooks";
import { Worker } from "node:worker_threads";
import type { HttpClientJob, HttpClientReport, HttpRequestSpec } from "./http-client.ts";
import { threadCpuMs } from "./thread-cpu.ts";

function cpuUsPerOp(before: number | undefined, after: number | undefined, ops: number): { mainCpuUsPerOp?: number } {
  return before === undefined || after === undefined || ops === 0
    ? {}
    : { mainCpuUsPerOp: (1000 * (after - before)) / ops };
}

export interface Figures {
  /** Operations completed (successful or not). */
  ops: number;
  seconds: number;
  opsPerSec: number;
  p50Ms: number;
  p99Ms: number;
  /** Operations that threw (library) or connection errors / timeouts (HTTP). */
  errors: number;
  /** HTTP only: requests abandoned unanswered at a timed run's cut-off (their waits are in the percentiles as lower bounds). */
  abandoned?: number;
  /** HTTP only: responses outside 2xx, by status. */
  statusCodes?: Record<string, number>;
  firstError?: string;
  /** CPU µs per operation of the main thread (library calls, or the HTTP server) and, for HTTP, of the client's thread. */
  mainCpuUsPerOp?: number;
  clientCpuUsPerOp?: number;
  /** Every operation's latency, ascending (for merging runs; not written to the results file). */
  latencyMs?: Float64Array;
}

/**
 * Several runs of one kind as one: operations and seconds add up, percentiles from all
 * latencies, CPU per operation weighted by operations.
 */
export function mergeFigures(runs: readonly Figures[]): Figures {
  const ops = runs.reduce((a, f) => a + f.ops, 0);
  const seconds = runs.reduce((a, f) => a + f.seconds, 0);
  const all = Float64Array.from(runs.flatMap((f) => [...(f.latencyMs ?? [])])).sort();
  const weighted = (key: "mainCpuUsPerOp" | "clientCpuUsPerOp") =>
    runs.every((f) => f[key] !== undefined) && ops > 0
      ? { [key]: runs.reduce((a, f) => a + f[key]! * f.ops, 0) / ops }
      : {};
  const statusCodes: Record<string, number> = {};
  for (const f of runs)
    for (const [code, n] of Object.entries(f.statusCodes ?? {})) statusCodes[code] = (statusCodes[code] ?? 0) + n;
  const firstError = runs.find((f) => f.firstError !== undefined)?.firstError;
  return {
    ops,
    seconds,
    opsPerSec: ops / seconds,
    p50Ms: percentile(all, 50),
    p99Ms: percentile(all, 99),
    errors: runs.reduce((a, f) => a + f.errors, 0),
    ...(runs.some((f) => f.abandoned) ? { abandoned: runs.reduce((a, f) => a + (f.abandoned ?? 0), 0) } : {}),
    ...(runs.some((f) => f.statusCodes) ? { statusCodes } : {}),
    ...(firstError === undefined ? {} : { firstError }),
    ...weighted("mainCpuUsPerOp"),
    ...weighted("clientCpuUsPerOp"),
  };
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
export function runFixedCount(
  count: number,
  concurrency: number,
  op: (k: number) => Promise<unknown>,
  signal?: AbortSignal,
): Promise<Figures> {
  return runWorkers(concurrency, (k) => k < count, op, signal);
}

/**
 * Runs `op(first)`, `op(first + 1)`, ... on `concurrency` workers until `seconds` have passed
 * (no operation starts after that; those in flight finish and count), so a row of the bench
 * measures seconds of load whatever its rate, not a fixed count that a fast path finishes in
 * a fraction of one.
 */
export function runForSeconds(
  seconds: number,
  concurrency: number,
  op: (k: number) => Promise<unknown>,
  signal?: AbortSignal,
  first = 0,
): Promise<Figures> {
  const deadline = performance.now() + 1000 * seconds;
  return runWorkers(
    concurrency,
    () => performance.now() < deadline,
    (k) => op(first + k),
    signal,
  );
}

async function runWorkers(
  concurrency: number,
  more: (k: number) => boolean,
  op: (k: number) => Promise<unknown>,
  signal?: AbortSignal,
): Promise<Figures> {
  const latencies: number[] = [];
  let next = 0;
  let errors = 0;
  let firstError: string | undefined;
  const worker = async (): Promise<void> => {
    for (let k = next; more(k) && !signal?.aborted; k = next) {
      next++;
      const t0 = performance.now();
      try {
        await op(k);
      } catch (err) {
        errors++;
        firstError ??= err instanceof Error ? `${err.name}: ${err.message}` : String(err);
      }
      latencies.push(performance.now() - t0);
    }
  };
  const started = performance.now();
  const cpu0 = threadCpuMs();
  await Promise.all(Array.from({ length: concurrency }, worker));
  const seconds = (performance.now() - started) / 1000;
  const sorted = Float64Array.from(latencies).sort();
  const done = sorted.length;
  return {
    ops: done,
    seconds,
    opsPerSec: done / seconds,
    p50Ms: percentile(sorted, 50),
    p99Ms: percentile(sorted, 99),
    errors,
    ...(firstError === undefined ? {} : { firstError }),
    ...cpuUsPerOp(cpu0, threadCpuMs(), done),
    latencyMs: sorted,
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
      ops: sorted.length,
      seconds,
      opsPerSec: sorted.length / seconds,
      p50Ms: percentile(sorted, 50),
      p99Ms: percentile(sorted, 99),
      errors: errors[kind]!,
      ...(firstError === undefined ? {} : { firstError }),
    };
  });
}

export type { HttpRequestSpec } from "./http-client.ts";

let clientThread: Promise<Worker> | undefined;

/** The HTTP client's worker thread (bench/http-client.ts), started once and kept for later runs. */
function httpClientThread(): Promise<Worker> {
  clientThread ??= new Promise<Worker>((resolve, reject) => {
    const worker = new Worker(new URL("./ts-worker.mjs", import.meta.url), {
      workerData: { entry: new URL("./http-client.ts", import.meta.url).href },
    });
    worker.unref();
    worker.once("error", reject);
    worker.on("message", (message: { ready?: boolean }) => message.ready && resolve(worker));
  });
  return clientThread;
}

/** Ends the HTTP client's thread (a run in flight fails); the next run starts a new one. */
export async function stopHttpClient(): Promise<void> {
  const thread = clientThread;
  clientThread = undefined;
  if (thread) await (await thread.catch(() => undefined))?.terminate();
}

/** What stops a running HTTP load (the worker thread that runs it). */
export interface HttpLoad {
  stop(): void;
}

/**
 * `amount` requests, or as many as `seconds` allow, over `connections` keep-alive connections
 * (bench/http-client.ts), run in a worker thread of its own so that it does not share the
 * server's event loop; its time and the server's CPU count from when every connection is open. `build(k)` gives request k (all computed here, before the run), so the
 * requests rotate over users and items with a per-request Authorization header; a timed run
 * sends requests `first`, `first + 1`, ... of a cycle of `cycle` built requests (request k is
 * built request k mod cycle).
 */
export async function runHttp(
  options: {
    url: string;
    connections: number;
    build: (k: number) => HttpRequestSpec;
    onInstance?: (load: HttpLoad | undefined) => void;
  } & ({ amount: number } | { seconds: number; cycle: number; first: number; graceSeconds?: number }),
): Promise<Figures> {
  const timed = "seconds" in options;
  const specs = Array.from({ length: timed ? options.cycle : options.amount }, (_, k) => options.build(k));
  const job: HttpClientJob = timed
    ? {
        url: options.url,
        seconds: options.seconds,
        ...(options.graceSeconds === undefined ? {} : { graceSeconds: options.graceSeconds }),
        first: options.first,
        connections: options.connections,
        specs,
      }
    : { url: options.url, amount: options.amount, first: 0, connections: options.connections, specs };
  const worker = await httpClientThread();
  options.onInstance?.({ stop: () => void stopHttpClient() });
  // Read when the client has opened its connections, just before it starts sending.
  let cpu0: number | undefined;
  let report: HttpClientReport;
  try {
    report = await new Promise<HttpClientReport>((resolve, reject) => {
      const onMessage = (message: { report?: HttpClientReport; connected?: boolean }) => {
        if (message.connected) {
          cpu0 = threadCpuMs();
          worker.postMessage({ go: true });
        }
        if (!message.report) return;
        worker.off("message", onMessage);
        worker.off("exit", onExit);
        resolve(message.report);
      };
      const onExit = (code: number) => reject(new Error(`HTTP client worker exited with code ${code}`));
      worker.on("message", onMessage);
      worker.once("exit", onExit);
      worker.postMessage({ job });
    });
  } finally {
    options.onInstance?.(undefined);
  }
  const cpu1 = threadCpuMs();
  const statusCodes: Record<string, number> = {};
  for (const status of report.statuses) {
    if (status < 200 || status > 299) statusCodes[status] = (statusCodes[status] ?? 0) + 1;
  }
  const sorted = Float64Array.from([...report.latencyMs, ...report.abandonedMs]).sort();
  const ops = report.statuses.length;
  const seconds = report.elapsedMs / 1000;
  return {
    ops,
    seconds,
    opsPerSec: ops / seconds,
    p50Ms: percentile(sorted, 50),
    p99Ms: percentile(sorted, 99),
    errors: report.errors,
    ...(report.abandonedMs.length > 0 ? { abandoned: report.abandonedMs.length } : {}),
    statusCodes,
    ...(report.firstError === undefined ? {} : { firstError: report.firstError }),
    ...cpuUsPerOp(cpu0, cpu1, ops),
    ...(report.clientCpuMs === undefined || ops === 0 ? {} : { clientCpuUsPerOp: (1000 * report.clientCpuMs) / ops }),
    latencyMs: sorted,
  };
}
