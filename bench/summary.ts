/** The end of a run: the audits that say whether its figures mean anything, and the printed table, ratios and notes. */
import os from "node:os";
import { readSide, readSideClean, writeSide, writeSideClean } from "../src/likes/like-audit.ts";
import { formatDiff, projectionDiff } from "../src/relations/relation-audit.ts";
import type { Opts } from "./options.ts";
import { formatRatios, ratios } from "./ratios.ts";
import { formatTable, type Row } from "./report.ts";
import type { RetentionFigures } from "./retention.ts";
import type { Target } from "./target.ts";

/** The figures of a run that broke an invariant mean nothing: check both sides of every database. */
export async function auditTargets(
  targets: readonly Target[],
  retention: RetentionFigures | undefined,
): Promise<{ audits: Record<string, unknown>; auditLines: string[] }> {
  const audits: Record<string, unknown> = { ...retention?.audits };
  const auditLines: string[] = [];
  for (const t of targets) {
    const w = await writeSide(t.pool);
    const r = await readSide(t.pool);
    const projection = await projectionDiff(t.pool);
    const clean =
      writeSideClean(w) && readSideClean(r) && r.countMismatchItems === 0 && formatDiff(projection) === "0,0,0";
    // The main databases are named by their P; others (the concurrency sweep's) by their database.
    const name = t.database === `bench_p${t.partitions}` ? `P${t.partitions}` : t.database;
    audits[name] = { clean, writeSide: w, readSide: r, projection };
    auditLines.push(
      `audit ${name}: ${clean ? "clean" : "VIOLATIONS"} (${w.lastSeq} like events, ${r.countMismatchItems} count mismatches after drain; ` +
        `follower projection diff ${formatDiff(projection)})`,
    );
  }
  for (const [name, audit] of Object.entries(retention?.audits ?? {}))
    auditLines.push(`audit ${name}: ${audit.clean ? "clean" : "VIOLATIONS"}`);
  return { audits, auditLines };
}

/** Prints the table, the ratios (returned for the results file), the retention summary and the notes. */
export function printSummary(
  rows: Row[],
  retention: RetentionFigures | undefined,
  auditLines: readonly string[],
  o: Opts,
  loadAtStart: readonly number[],
): ReturnType<typeof ratios> {
  const figures = ratios(rows);
  process.stdout.write(
    `\n${formatTable(rows)}\n\nratios (the goals of issues 8 and 22), each from rows of this run:\n${formatRatios(figures)}\n\n`,
  );
  if (retention) process.stdout.write(`${retention.summary}\n\n`);
  process.stdout.write(
    [
      ...auditLines,
      `${o.workers} library workers / ${o.connections} HTTP connections; writes toggle like/unlike so nearly every operation writes an event.`,
      "Library percentiles are from per-call latencies; HTTP percentiles from every response's own latency; pgbench percentiles from its per-transaction log.",
      "pgbench rows: PostgreSQL's C client (-M prepared, -n, -j 2, a fixed -T) on the same database, the 16-client INSERT in the write rows' alternating chunks, the others right after them.",
      "What shares the CPUs: library rows run node's main thread (the callers and the pg driver) and the PostgreSQL backends;",
      "HTTP rows run the server on node's main thread, the HTTP client (bench/http-client.ts, 16 keep-alive connections, no",
      "pipelining) on a worker thread of the same process, and the backends. The client's CPU is taken from the same cores",
      "(its share is printed as 'client thread'); 'main' is the CPU per operation of the caller (library) or the server (HTTP).",
      `Note: absolute numbers on a shared ${os.cpus().length}-core machine are noisy (1-min load average ${loadAtStart[0]!.toFixed(1)} at the start,` +
        ` ${os.loadavg()[0]!.toFixed(1)} at the end); only side-by-side comparisons within one run mean something.`,
    ].join("\n") + "\n",
  );
  return figures;
}
