/**
 * The benchmark's HTTP client, run in a worker thread of its own (bench/load.ts) that takes one
 * job per message and answers with its report: `connections`
 * keep-alive HTTP/1.1 connections, one request in flight on each (no pipelining), requests
 * written from a list prepared before the run, each response's status and latency recorded.
 *
 * Why not autocannon: on this 2-core machine the client's CPU is taken from the server and
 * PostgreSQL, and autocannon spent ~150 µs of CPU per request (its parser, histograms and
 * per-request setup hooks), more than half of what the server spends. This client reads only
 * the status line and Content-Length, so it stays a small share of the CPU it measures.
 */
import net from "node:net";
import { parentPort } from "node:worker_threads";
import { threadCpuMs } from "./thread-cpu.ts";

/** One request the client sends: what bench/load.ts's callers build per operation. */
export interface HttpRequestSpec {
  method: "GET" | "PUT" | "DELETE";
  path: string;
  authorization: string;
}

export interface HttpClientJob {
  url: string;
  /** Requests to send, or for how long to send them (no request starts after `seconds`). */
  amount?: number;
  seconds?: number;
  /**
   * With `seconds`: requests still unanswered this long after the deadline are abandoned (their
   * connections closed), their age so far kept in `abandonedMs`.
   */
  graceSeconds?: number;
  /** Request k of the run is specs[(first + k) mod specs.length]. */
  first: number;
  connections: number;
  specs: HttpRequestSpec[];
}

export interface HttpClientReport {
  /** Per response, in completion order. */
  latencyMs: number[];
  statuses: number[];
  /** Requests abandoned at the cut-off (graceSeconds), with how long each had waited then. */
  abandonedMs: number[];
  errors: number;
  firstError?: string;
  elapsedMs: number;
  /** CPU milliseconds of this client's thread during the run. */
  clientCpuMs?: number;
}

const HEADER_END = Buffer.from("\r\n\r\n");

function requestBytes(host: string, spec: HttpRequestSpec): Buffer {
  return Buffer.from(
    `${spec.method} ${spec.path} HTTP/1.1\r\nhost: ${host}\r\nauthorization: ${spec.authorization}\r\ncontent-length: 0\r\n\r\n`,
  );
}

/** An open connection, not yet sending. */
function open(url: URL): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(url.port), url.hostname);
    socket.setNoDelay(true);
    socket.once("connect", () => {
      socket.off("error", reject);
      resolve(socket);
    });
    socket.once("error", reject);
  });
}

/** One connection: sends the next request when the previous response is complete. */
function connection(
  socket: net.Socket,
  requests: readonly Buffer[],
  first: number,
  take: () => number | undefined,
  report: HttpClientReport,
  stops: (() => void)[],
): Promise<void> {
  return new Promise((resolve) => {
    let buffered: Buffer = Buffer.alloc(0);
    let started = 0;
    let bodyNeeded = -1;
    let status = 0;
    let done = false;
    stops.push(() => {
      if (done) return;
      report.abandonedMs.push(performance.now() - started);
      done = true;
      socket.destroy();
      resolve();
    });
    const next = () => {
      const k = take();
      if (k === undefined) {
        done = true;
        socket.end();
        return resolve();
      }
      started = performance.now();
      socket.write(requests[(first + k) % requests.length]!);
    };
    const fail = (err: Error) => {
      if (done) return;
      done = true;
      report.errors++;
      report.firstError ??= err.message;
      socket.destroy();
      resolve();
    };
    socket.on("error", fail);
    socket.on("data", (chunk: Buffer) => {
      buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
      for (;;) {
        if (bodyNeeded < 0) {
          const end = buffered.indexOf(HEADER_END);
          if (end < 0) return;
          const head = buffered.subarray(0, end).toString("latin1");
          status = Number(head.slice(9, 12));
          const length = /\r\ncontent-length: *(\d+)/i.exec(head);
          if (!length) return fail(new Error(`response without content-length: ${head.split("\r\n")[0]}`));
          bodyNeeded = Number(length[1]);
          buffered = buffered.subarray(end + HEADER_END.length);
        }
        if (buffered.length < bodyNeeded) return;
        buffered = buffered.subarray(bodyNeeded);
        bodyNeeded = -1;
        report.latencyMs.push(performance.now() - started);
        report.statuses.push(status);
        next();
        if (buffered.length === 0) return;
      }
    });
    next();
  });
}

/**
 * Runs one job: opens every connection first, says so (`connected`) and waits for the go of the
 * thread that started it (which then reads the server's CPU), so that neither the run's time nor
 * the server's CPU per request includes opening 1024 connections; then sends until `amount`
 * responses (or `seconds`), and reports.
 */
async function run(job: HttpClientJob, go: Promise<void>): Promise<HttpClientReport> {
  const url = new URL(job.url);
  const report: HttpClientReport = { latencyMs: [], statuses: [], abandonedMs: [], errors: 0, elapsedMs: 0 };
  const sockets: net.Socket[] = [];
  for (const opened of await Promise.allSettled(Array.from({ length: job.connections }, () => open(url)))) {
    if (opened.status === "fulfilled") sockets.push(opened.value);
    else {
      report.errors++;
      report.firstError ??= opened.reason instanceof Error ? opened.reason.message : String(opened.reason);
    }
  }
  // Each request's bytes once, before the clock: the client's CPU is taken from the cores it measures.
  const requests = job.specs.map((spec) => requestBytes(url.host, spec));
  parentPort!.postMessage({ connected: true });
  await go;
  let issued = 0;
  const deadline = job.seconds === undefined ? Number.POSITIVE_INFINITY : performance.now() + 1000 * job.seconds;
  const amount = job.amount ?? Number.POSITIVE_INFINITY;
  const take = () => (issued < amount && performance.now() < deadline ? issued++ : undefined);
  const t0 = performance.now();
  const cpu0 = threadCpuMs();
  const stops: (() => void)[] = [];
  const running = Promise.all(sockets.map((socket) => connection(socket, requests, job.first, take, report, stops)));
  // A slow path at 1024 connections answered its last requests tens of seconds after the deadline.
  const cutOff =
    job.seconds === undefined || job.graceSeconds === undefined
      ? undefined
      : setTimeout(() => stops.forEach((stop) => stop()), 1000 * (job.seconds + job.graceSeconds));
  await running;
  clearTimeout(cutOff);
  report.elapsedMs = performance.now() - t0;
  const cpu1 = threadCpuMs();
  if (cpu0 !== undefined && cpu1 !== undefined) report.clientCpuMs = cpu1 - cpu0;
  return report;
}

// The thread stays for the whole benchmark and takes one job per message, so its code is compiled
// and optimised once, not again for every (short) chunk of an alternating phase.
let go: (() => void) | undefined;
parentPort!.on("message", (message: { job?: HttpClientJob; go?: boolean }) => {
  if (message.go) go?.();
  if (message.job) {
    const started = new Promise<void>((resolve) => (go = resolve));
    void run(message.job, started).then((report) => parentPort!.postMessage({ report }));
  }
});
parentPort!.postMessage({ ready: true });
