/** The scale bench's printed figures: one block per size, then issue 22's goals against them. */
import os from "node:os";
import type { Figures } from "./load.ts";
import type { JobFigures } from "./scale-jobs.ts";
import { ratio, type UnderJob } from "./scale-live.ts";
import type { Population } from "../support/scale-population.ts";
import type { ReadFigures } from "./scale-reads.ts";
import type { SizeFigures } from "./scale-size.ts";
import type { StartupFigure } from "./scale-startup.ts";

export interface SizeRun {
  pop: Population;
  generateSeconds: number;
  reads: ReadFigures;
  jobs: JobFigures;
  size: SizeFigures;
  startup?: StartupFigure;
}

const ms = (v: number) => `${v.toFixed(2)} ms`;
const s = (v: number) => `${v.toFixed(2)} s`;
const x = (v: number) => `${v.toFixed(2)}x`;
const fig = (f: Figures) =>
  `${f.ops} in ${s(f.seconds)}: ${Math.round(f.opsPerSec)}/s, p50 ${ms(f.p50Ms)}, p99 ${ms(f.p99Ms)}${f.errors ? `, ${f.errors} errors (${f.firstError})` : ""}`;
const live = (u: UnderJob<unknown>) => {
  const r = ratio(u);
  return (
    `live write p99 ${ms(u.idle.writes.p99Ms)} idle -> ${ms(u.during.writes.p99Ms)} during (${x(r.writeP99)}, n=${u.during.writes.n}); ` +
    `count read p99 ${ms(u.idle.reads.p99Ms)} -> ${ms(u.during.reads.p99Ms)} (${x(r.readP99)})`
  );
};

export function formatSize(run: SizeRun): string {
  const { pop, reads, jobs, size } = run;
  const perCounter = (r: JobFigures["reconcile"][number]) =>
    (1e6 * r.run.jobSeconds) / Math.max(1, r.run.result.visited);
  const pruned = jobs.prune.result.kinds.reduce((a, k) => a + k.outboxRows, 0);
  return [
    `== ${pop.likes} likes, ${pop.items} items, ${pop.accounts} accounts, ~${pop.follows} follows, ${pop.blocks} blocks (generated in ${s(run.generateSeconds)}, ${Math.round(pop.likes / run.generateSeconds)} likes/s)`,
    `like writes (library, fresh pairs):  ${fig(reads.writes)}`,
    `count reads (PostgreSQL):            ${fig(reads.countReads)}`,
    `likers, first page (hot item):       ${fig(reads.likersFirst)}`,
    `likers, page at depth ${reads.likersDepth}:`.padEnd(37) + fig(reads.likersDeep),
    `followers, first page (hub):         ${fig(reads.followersFirst)}`,
    `followers, page at depth ${reads.followersDepth}:`.padEnd(37) + fig(reads.followersDeep),
    `rebuild of the hot item (${pop.accounts} likes): ${s(jobs.rebuild.jobSeconds)}; ${live(jobs.rebuild)}`,
    ...jobs.reconcile.map(
      (r) =>
        `reconcile ${r.changed} changed counters: ${s(r.run.jobSeconds)} (${perCounter(r).toFixed(1)} µs/counter, visited ${r.run.result.visited}, drifted ${r.run.result.drifted.length}); ${live(r.run)}`,
    ),
    jobs.audit
      ? `full audit: ${s(jobs.audit.jobSeconds)} (${jobs.audit.result.clean ? "clean" : "NOT CLEAN"}); ${live(jobs.audit)}`
      : "full audit: skipped (--skip-full-audit)",
    `periodic (incremental) audit: ${s(jobs.periodicAudit.jobSeconds)} (${jobs.periodicAudit.result.clean ? "clean" : "NOT CLEAN"}, likes ${jobs.periodicAudit.result.scope.likes.mode}); ${live(jobs.periodicAudit)}`,
    `prune (keep 0 events, 0 s): ${s(jobs.prune.jobSeconds)}, ${pruned} outbox rows; ${live(jobs.prune)}`,
    run.startup
      ? `service start to /readyz 200: ${s(run.startup.readySeconds)} (SIGTERM to exit ${s(run.startup.stopSeconds)})`
      : "service start: skipped",
    `bytes per like: ${size.bytesPerLike.toFixed(1)} (${size.tables.map((t) => `${t.table} ${(t.bytes / 2 ** 20).toFixed(1)} MiB`).join(", ")}) vs bare (user_id, item_id) table ${size.bareBytesPerLike.toFixed(1)}: ${x(size.bytesPerLike / size.bareBytesPerLike)}`,
  ].join("\n");
}

/** Issue 22's goals, each with the figures that judge it, across the sizes (smallest first). */
export function formatGoals(runs: readonly SizeRun[]): string {
  const jobsOf = (r: SizeRun): [string, UnderJob<unknown>][] => [
    ["rebuild", r.jobs.rebuild],
    ...(r.jobs.audit ? [["full audit", r.jobs.audit] as [string, UnderJob<unknown>]] : []),
    ["periodic audit", r.jobs.periodicAudit],
    ["prune", r.jobs.prune],
    ...r.jobs.reconcile.map((c): [string, UnderJob<unknown>] => [`reconcile ${c.changed}`, c.run]),
  ];
  const worst = (r: SizeRun) => Math.max(...jobsOf(r).flatMap(([, u]) => [ratio(u).writeP99, ratio(u).readP99]));
  const lines = [
    "== goals of issue 22 (load average " +
      os
        .loadavg()
        .map((l) => l.toFixed(2))
        .join(" ") +
      ")",
  ];
  const first = runs[0]!;
  const last = runs[runs.length - 1]!;
  const growth = last.pop.likes / first.pop.likes;
  const common = first.jobs.reconcile[0]!.changed;
  const reconcileAt = (r: SizeRun) => r.jobs.reconcile.find((c) => c.changed === common)!.run.jobSeconds;
  if (runs.length === 1) lines.push("nothing periodic O(history): one size only (--sizes a,b compares two)");
  else
    lines.push(
      `nothing periodic O(history): ${growth}x the likes gives the periodic audit ${x(last.jobs.periodicAudit.jobSeconds / first.jobs.periodicAudit.jobSeconds)} the time ` +
        `(${runs.map((r) => `${r.pop.likes}: ${s(r.jobs.periodicAudit.jobSeconds)}`).join(", ")}; the full audit, on demand: ${last.jobs.audit && first.jobs.audit ? x(last.jobs.audit.jobSeconds / first.jobs.audit.jobSeconds) : "skipped"}), reconciling ${common} changed counters ${x(reconcileAt(last) / reconcileAt(first))} ` +
        `(${runs.map((r) => `${r.pop.likes}: ${s(reconcileAt(r))}`).join(", ")}), the prune ${x(last.jobs.prune.jobSeconds / first.jobs.prune.jobSeconds)}; goal: about 1x`,
    );
  for (const r of runs) {
    lines.push(
      `jobs within 1.3x of idle p99 at ${r.pop.likes}: worst ${x(worst(r))} (${jobsOf(r)
        .map(([n, u]) => `${n} w ${x(ratio(u).writeP99)} r ${x(ratio(u).readP99)}`)
        .join("; ")}) ${worst(r) <= 1.3 ? "MET" : "NOT MET"}`,
    );
  }
  for (const r of runs) {
    const bpl = r.size.bytesPerLike / r.size.bareBytesPerLike;
    lines.push(
      `bytes per like <= 3x bare at ${r.pop.likes}: ${r.size.bytesPerLike.toFixed(1)} / ${r.size.bareBytesPerLike.toFixed(1)} = ${x(bpl)} ${bpl <= 3 ? "MET" : "NOT MET"}`,
    );
  }
  return lines.join("\n");
}
