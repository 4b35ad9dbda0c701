/** The printed table and the JSON results file. */
import { execFileSync } from "node:child_process";
import { mkdir, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import type { Figures } from "./load.ts";

export interface Row {
  op: string;
  /** Who sent the statements: the ledger's library, its HTTP API, or pgbench (the C client's raw baseline). */
  path: "library" | "HTTP" | "pgbench";
  partitions: number;
  figures: Figures;
  /** Short remark printed at the end of the row (outcomes, errors, events). */
  note: string;
  /** Anything else worth keeping in the JSON. */
  extra?: Record<string, unknown>;
}

function fmt(value: number, digits: number): string {
  if (!Number.isFinite(value)) return "-";
  return value.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** Rows in the given order, columns padded; numbers right-aligned. */
export function formatTable(rows: readonly Row[]): string {
  const header = ["op", "path", "P", "ops", "ops/s", "p50 ms", "p99 ms", "note"];
  const right = [false, false, true, true, true, true, true, false];
  const cells = rows.map((r) => [
    r.op,
    r.path,
    String(r.partitions),
    fmt(r.figures.ops, 0),
    fmt(r.figures.opsPerSec, 0),
    fmt(r.figures.p50Ms, 2),
    fmt(r.figures.p99Ms, 2),
    r.note,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i]!.length)));
  const line = (c: readonly string[]) =>
    c
      .map((v, i) => (right[i] ? v.padStart(widths[i]!) : v.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd();
  return [line(header), widths.map((w) => "-".repeat(w)).join("  "), ...cells.map(line)].join("\n");
}

function gitCommit(): string | undefined {
  try {
    return execFileSync("git", ["rev-parse", "--short", "HEAD"], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
    }).trim();
  } catch {
    return undefined;
  }
}

export function machineInfo(): Record<string, unknown> {
  const cpus = os.cpus();
  return {
    cpus: cpus.length,
    cpuModel: cpus[0]?.model,
    totalMemMiB: Math.round(os.totalmem() / 2 ** 20),
    loadAvgAtEnd: os.loadavg(),
    platform: `${os.platform()} ${os.release()}`,
    node: process.version,
    commit: gitCommit(),
  };
}

/** Writes DIR/<ISO timestamp>.json (colons replaced, for file systems that refuse them). */
export async function writeResults(dir: string, startedAt: Date, body: Record<string, unknown>): Promise<string> {
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, `${startedAt.toISOString().replace(/:/g, "-")}.json`);
  await writeFile(file, JSON.stringify(body, null, 2) + "\n");
  return file;
}

export function progress(row: Row): void {
  const f = row.figures;
  process.stderr.write(
    `  ${row.op} · ${row.path} · P=${row.partitions}: ${f.ops} ops in ${f.seconds.toFixed(1)} s, ` +
      `${Math.round(f.opsPerSec)} ops/s${row.note ? ` (${row.note})` : ""}\n`,
  );
}

export function problems(f: Figures): string[] {
  const out: string[] = [];
  if (f.errors > 0) out.push(`${f.errors} errors${f.firstError ? ` [${f.firstError}]` : ""}`);
  if (f.abandoned) out.push(`${f.abandoned} abandoned unanswered at the cut-off`);
  for (const [code, n] of Object.entries(f.statusCodes ?? {})) out.push(`${n}x ${code}`);
  return out;
}

/** The node threads' CPU per operation: the library caller or HTTP server thread, and the HTTP client's thread. */
export function cpuNote(f: Figures): string[] {
  if (f.mainCpuUsPerOp === undefined) return [];
  const client = f.clientCpuUsPerOp === undefined ? "" : `, client thread ${Math.round(f.clientCpuUsPerOp)}`;
  return [`node CPU/op: main ${Math.round(f.mainCpuUsPerOp)} µs${client}`];
}
