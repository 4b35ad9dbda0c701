/**
 * The soak's report (bench/soak.ts): the per-sample table, each series' slope with its noise
 * judgement, the p99 ratio end ÷ start, the goals, and the run as JSON in .tmp/soak-results/.
 */
import { mkdir, writeFile } from "node:fs/promises";
import path from "node:path";
import {
  evaluateGoals,
  judgeFlat,
  judgedFrom,
  p99Of,
  p99Windows,
  type FlatVerdict,
  type GoalResult,
  type Tolerance,
} from "../support/soak-goals.ts";
import { windowLatencies } from "./soak-load.ts";
import { NODE_NAMES } from "./soak-processes.ts";
import type { Sample } from "./soak-sampler.ts";

/** The series whose slope is judged, how each is read from a sample, and what drift is noise. */
const MEMORY: Tolerance = { relative: 0.05, absolute: 2 };
const COUNT: Tolerance = { relative: 0.05, absolute: 2 };
export const FLAT_SERIES: Record<string, { read: (s: Sample) => number; tolerance: Tolerance }> = {
  ...Object.fromEntries(
    NODE_NAMES.flatMap((name) => [
      [`${name} rss MB`, { read: (s: Sample) => s.processes[name].rssMb, tolerance: MEMORY }],
      [`${name} heap MB`, { read: (s: Sample) => s.heapMb[name], tolerance: MEMORY }],
      [`${name} fds`, { read: (s: Sample) => s.processes[name].fds, tolerance: COUNT }],
    ]),
  ),
  // Private memory: a backend's VmRSS grows with the shared buffers it touches, which is not a leak.
  "postgres anon MB": { read: (s) => s.processes.postgres.anonMb, tolerance: MEMORY },
  "postgres fds": { read: (s) => s.processes.postgres.fds, tolerance: { relative: 0.1, absolute: 10 } },
  "redis rss MB": { read: (s) => s.processes.redis.rssMb, tolerance: MEMORY },
  "redis fds": { read: (s) => s.processes.redis.fds, tolerance: COUNT },
  "pg connections": { read: (s) => s.connections.postgres, tolerance: COUNT },
  "redis connections": { read: (s) => s.connections.redis, tolerance: COUNT },
};

/** Series shown with their slope but not judged flat (they are bounded, or not expected to be flat). */
const SHOWN_SERIES: Record<string, (s: Sample) => number> = {
  ...Object.fromEntries(
    NODE_NAMES.flatMap((name) => [
      [`${name} heap total MB`, (s: Sample) => s.heapTotalMb[name]],
      [`${name} external MB`, (s: Sample) => s.externalMb[name]],
    ]),
  ),
  "postgres rss MB": (s) => s.processes.postgres.rssMb,
  "soak rss MB": (s) => s.processes.soak.rssMb,
  "outbox rows": (s) => s.outboxRows,
  "dedup rows": (s) => s.dedupRows,
  "unpruned post outbox+keys": (s) => s.unprunedRows,
  "lag events": (s) => s.lagEvents,
  "webhook backlog": (s) => s.webhookBacklog,
  "p99 ms": (s) => s.p99Ms,
};

export interface SoakOutcome {
  samples: Sample[];
  /** Latencies (ms) of each sample's window by operation of the mix (LoadWindow.byKind), for the p99 of several windows together. */
  windowLatenciesByKind: Partial<Record<string, number[]>>[];
  sampleMinutes: number;
  errors: Record<string, number>;
  firstErrors: string[];
  auditClean: boolean;
  periodicAudits: { seen: number; unclean: number; uncleanReports: { minute: number; report: unknown }[] };
  outboxBound: number;
  webhook: { deliveries: number; distinct: number };
  settings: Record<string, unknown>;
}

export interface SoakVerdict {
  flat: Record<string, FlatVerdict>;
  shown: Record<string, FlatVerdict>;
  p99: { startMs: number; endMs: number; ratio: number; start: [number, number]; end: [number, number] };
  /** The same two windows' p99 per operation of the mix, the largest ratio first: what moved. */
  p99ByKind: { kind: string; startMs: number; endMs: number; ratio: number; requests: number }[];
  outboxMax: number;
  errorTotal: number;
  goals: GoalResult[];
}

export function judge(outcome: SoakOutcome): SoakVerdict {
  const { samples } = outcome;
  const from = judgedFrom(samples.length);
  const judged = samples.slice(from);
  const minutes = judged.map((s) => s.minute);
  const flat = Object.fromEntries(
    Object.entries(FLAT_SERIES).map(([name, { read, tolerance }]) => [
      name,
      judgeFlat(minutes, judged.map(read), tolerance),
    ]),
  );
  const shown = Object.fromEntries(
    Object.entries(SHOWN_SERIES).map(([name, read]) => [
      name,
      judgeFlat(minutes, judged.map(read), { relative: 0.05, absolute: 0 }),
    ]),
  );
  const windows = p99Windows(samples.length, outcome.sampleMinutes);
  const pooled = (range: [number, number]) =>
    outcome.windowLatenciesByKind.slice(range[0], range[1]).flatMap((w) => windowLatencies(w));
  const startMs = p99Of(pooled(windows.start));
  const endMs = p99Of(pooled(windows.end));
  const kinds = [...new Set(outcome.windowLatenciesByKind.flatMap((w) => Object.keys(w)))];
  const pooledKind = (kind: string, range: [number, number]) =>
    outcome.windowLatenciesByKind.slice(range[0], range[1]).flatMap((w) => w[kind] ?? []);
  const p99ByKind = kinds
    .map((kind) => {
      const start = p99Of(pooledKind(kind, windows.start));
      const end = p99Of(pooledKind(kind, windows.end));
      const requests = outcome.windowLatenciesByKind.reduce((a, w) => a + (w[kind]?.length ?? 0), 0);
      return { kind, startMs: start, endMs: end, ratio: end / start, requests };
    })
    .sort((a, b) => b.ratio - a.ratio);
  const outboxMax = Math.max(...judged.map((s) => Math.max(s.outboxRows, s.dedupRows)));
  const errorTotal = Object.values(outcome.errors).reduce((a, n) => a + n, 0);
  return {
    flat,
    shown,
    p99: { startMs, endMs, ratio: endMs / startMs, ...windows },
    p99ByKind,
    outboxMax,
    errorTotal,
    goals: evaluateGoals({
      flat,
      p99Ratio: endMs / startMs,
      errors: errorTotal,
      auditClean: outcome.auditClean && outcome.periodicAudits.unclean === 0,
      outboxMax,
      outboxBound: outcome.outboxBound,
    }),
  };
}

const f1 = (n: number) => (Number.isFinite(n) ? n.toFixed(1) : "-");

export function printSamples(samples: readonly Sample[], withHeader = true): void {
  const header = [
    "min",
    "req",
    "err",
    "p99ms",
    "lag",
    "hook",
    "outbox",
    "dedup",
    "srvRSS",
    "srvHeap",
    "srvFd",
    "wrkRSS",
    "wrkHeap",
    "hookRSS",
    "pgAnon",
    "pgFd",
    "pgConn",
    "rdsRSS",
    "rdsConn",
  ];
  if (withHeader) console.log(header.map((h) => h.padStart(7)).join(" "));
  for (const s of samples) {
    const row = [
      s.minute.toFixed(1),
      String(s.requests),
      String(s.errors),
      f1(s.p99Ms),
      String(s.lagEvents),
      String(s.webhookBacklog),
      String(s.outboxRows),
      String(s.dedupRows),
      f1(s.processes.serve.rssMb),
      f1(s.heapMb.serve),
      String(s.processes.serve.fds),
      f1(s.processes.worker.rssMb),
      f1(s.heapMb.worker),
      f1(s.processes["webhook-worker"].rssMb),
      f1(s.processes.postgres.anonMb),
      String(s.processes.postgres.fds),
      String(s.connections.postgres),
      f1(s.processes.redis.rssMb),
      String(s.connections.redis),
    ];
    console.log(row.map((c) => c.padStart(7)).join(" "));
  }
}

export function printVerdict(outcome: SoakOutcome, verdict: SoakVerdict): void {
  const from = judgedFrom(outcome.samples.length);
  console.log(
    `\nslopes over samples ${from + 1}..${outcome.samples.length} (the first ${from} are warm-up): change per hour ± standard error, fitted change over the span vs what is noise`,
  );
  const line = (name: string, v: FlatVerdict, verdict: string) =>
    console.log(
      `  ${name.padEnd(26)} mean ${f1(v.mean).padStart(9)}  slope ${f1(v.perHour).padStart(9)}/h ± ${f1(v.standardErrorPerHour).padStart(8)}  change ${f1(v.fittedChange).padStart(8)} (noise ${f1(v.allowedChange)})  ${verdict}`,
    );
  for (const [name, v] of Object.entries(verdict.flat))
    line(name, v, v.flat ? "flat" : v.fittedChange > 0 ? "GROWS" : "SHRINKS");
  for (const [name, v] of Object.entries(verdict.shown)) line(name, v, "(shown)");
  const { p99 } = verdict;
  console.log(
    `\np99 samples ${p99.start[0] + 1}..${p99.start[1]}: ${f1(p99.startMs)} ms; samples ${p99.end[0] + 1}..${p99.end[1]}: ${f1(p99.endMs)} ms; ratio ${p99.ratio.toFixed(2)}x`,
  );
  for (const k of verdict.p99ByKind)
    console.log(
      `  ${k.kind.padEnd(18)} p99 ${f1(k.startMs).padStart(7)} -> ${f1(k.endMs).padStart(7)} ms  ${k.ratio.toFixed(2)}x  (${k.requests} requests)`,
    );
  console.log(
    `errors: ${Object.entries(outcome.errors)
      .map(([k, n]) => `${k} ${n}`)
      .join(", ")}`,
  );
  for (const e of outcome.firstErrors) console.log(`  ${e}`);
  console.log(
    `webhooks: ${outcome.webhook.deliveries} deliveries, ${outcome.webhook.distinct} distinct messages; periodic audits seen ${outcome.periodicAudits.seen}, unclean ${outcome.periodicAudits.unclean}; final audit ${outcome.auditClean ? "clean" : "NOT clean"}`,
  );
  for (const { minute, report } of outcome.periodicAudits.uncleanReports) {
    // A section that failed its checks is held (its cursor does not move): that section's findings.
    const r = report as { scope?: Record<string, { held?: boolean }> } & Record<string, unknown>;
    const held = Object.entries(r.scope ?? {}).filter(([, scope]) => scope.held);
    for (const [section] of held)
      console.log(`  unclean periodic audit at minute ${minute.toFixed(1)}: ${section} ${JSON.stringify(r[section])}`);
  }
  console.log("\ngoals:");
  for (const g of verdict.goals) console.log(`  ${g.met ? "met    " : "NOT met"}  ${g.goal}: ${g.detail}`);
}

export async function writeResults(outcome: SoakOutcome, verdict: SoakVerdict): Promise<string> {
  const dir = path.join(process.cwd(), ".tmp", "soak-results");
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, `${new Date().toISOString().replace(/[:.]/g, "-")}.json`);
  // Every latency of the run would dwarf the figures; the per-sample p99s are kept.
  await writeFile(file, JSON.stringify({ ...outcome, windowLatenciesByKind: undefined, verdict }, null, 2));
  return file;
}
