/**
 * The benchmark's HTTP client in a worker thread of its own: autocannon sends a fixed list of
 * requests and posts back its result and every response's timing. On its own thread the client
 * no longer shares the server's event loop (the server's one JavaScript thread would otherwise
 * also run the load generator); it still shares the machine's cores with the server and PostgreSQL.
 */
import autocannon from "autocannon";
import { parentPort, workerData } from "node:worker_threads";
import type { HttpRequestSpec } from "./load.ts";

export interface HttpClientJob {
  url: string;
  amount: number;
  connections: number;
  pipelining: number;
  /** Request k is specs[k mod length]. */
  specs: HttpRequestSpec[];
}

export interface HttpClientReport {
  result: autocannon.Result;
  responseMs: number[];
  /** Milliseconds from the start to the last response (autocannon rounds its duration up to whole seconds). */
  elapsedMs: number;
}

/** autocannon exports this (for its own worker mode) but its type definitions do not declare it. */
interface AggregateResult {
  aggregateResult(results: autocannon.Result[], options: autocannon.Options): autocannon.Result;
}

const job = (workerData as { job: HttpClientJob }).job;
let k = 0;
const responseMs: number[] = [];
let lastResponse = 0;
const started = performance.now();
const instance = autocannon({
  url: job.url,
  connections: job.connections,
  pipelining: job.pipelining,
  amount: job.amount,
  timeout: 30,
  requests: [{
    setupRequest: (request) => {
      const spec = job.specs[k++ % job.specs.length]!;
      return { ...request, method: spec.method, path: spec.path, headers: { ...request.headers, authorization: spec.authorization } };
    },
  }],
}, (err: unknown, raw: autocannon.Result) => {
  if (err) throw err instanceof Error ? err : new Error(String(err));
  // Off the main thread autocannon hands back its raw histograms (as it does to its own workers).
  const result = (autocannon as unknown as AggregateResult).aggregateResult([raw], { url: job.url, connections: job.connections, pipelining: job.pipelining, amount: job.amount });
  const report: HttpClientReport = { result, responseMs, elapsedMs: (lastResponse || performance.now()) - started };
  parentPort!.postMessage({ report });
});
instance.on("response", (_client, _status, _bytes, ms) => {
  responseMs.push(ms);
  lastResponse = performance.now();
});
