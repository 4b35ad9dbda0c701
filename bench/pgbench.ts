/**
 * The raw baselines measured by pgbench (PostgreSQL's C client) on the bench's own cluster and
 * benchmark database: single-row INSERTs into a two-column table with 1 and 16 clients, and a
 * primary-key SELECT with 16 clients. A node-postgres loop measures node as much as PostgreSQL;
 * pgbench is the floor that a write (or a read) through any client library is compared with.
 * Each variant runs a fixed time (-T), prepared statements (-M prepared), no vacuum (-n); the
 * latencies come from its per-transaction log (-l), the WAL from pg_current_wal_lsn around it.
 */
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import type { EmbeddedCluster } from "../src/db/embedded-cluster.ts";
import { abort, started } from "./lifecycle.ts";
import { percentile, type Figures } from "./load.ts";
import { BENCH_APPLICATION, ITEMS } from "./options.ts";
import { OP } from "./ratios.ts";
import type { Row } from "./report.ts";
import type { Target } from "./target.ts";
import { formatWaits, sampleWaits } from "./wait-events.ts";
import { walPosition, type WriteKind } from "./write-phases.ts";

const run = promisify(execFile);
const PGBENCH_APPLICATION = "social-ledger-bench-pgbench";
const CANDIDATES = [
  "/usr/bin/pgbench",
  "/usr/local/bin/pgbench",
  "/usr/lib/postgresql/16/bin/pgbench",
  "/usr/lib/postgresql/15/bin/pgbench",
];

/** Where pgbench is, or undefined (the rows and their ratios are then skipped, and the run says so). */
export function findPgbench(): string | undefined {
  return CANDIDATES.find((p) => existsSync(p));
}

export const PGBENCH_MISSING =
  `pgbench not found (looked in ${CANDIDATES.join(", ")}): the pgbench baseline rows and the ratios against them are skipped ` +
  "(Debian/Ubuntu: apt-get install postgresql-client)";

interface Variant {
  op: string;
  clients: number;
  script: string;
  writes: boolean;
}

const VARIANTS: readonly Variant[] = [
  {
    op: OP.pgbenchInsert1,
    clients: 1,
    script: "INSERT INTO bench_pgbench_insert (client) VALUES (:client_id);\n",
    writes: true,
  },
  {
    op: OP.pgbenchInsert16,
    clients: 16,
    script: "INSERT INTO bench_pgbench_insert (client) VALUES (:client_id);\n",
    writes: true,
  },
  // The row the library's primary-key baseline reads (read-phases.ts): one item by its key.
  {
    op: OP.pgbenchSelect16,
    clients: 16,
    script: `\\set k random(0, ${ITEMS - 1})\nSELECT item_id, created_at FROM item WHERE item_id = 'item-' || :k;\n`,
    writes: false,
  },
];

/** pgbench's per-transaction log lines: "client_id transaction_no time script_no time_epoch time_us", time in µs. */
async function latenciesMs(dir: string): Promise<Float64Array> {
  const out: number[] = [];
  for (const file of await readdir(dir)) {
    if (!file.startsWith("log")) continue;
    for (const line of (await readFile(path.join(dir, file), "utf8")).split("\n")) {
      const micros = Number(line.split(" ")[2]);
      if (line !== "" && Number.isFinite(micros)) out.push(micros / 1000);
    }
  }
  return Float64Array.from(out).sort();
}

/**
 * pgbench's threads: 2 (the client's share of 2 cores) up to 16 clients; above, one per 8 clients,
 * since each thread opens its connections one after the other inside -T (128 over 2 threads took
 * longer than a 7 s run on a loaded machine).
 */
const threads = (v: Variant) => Math.min(v.clients, Math.max(2, Math.ceil(v.clients / 8)));
const command = (v: Variant, seconds: number) => `pgbench -c ${v.clients} -j ${threads(v)} -T ${seconds} -M prepared`;

/**
 * One pgbench run of a variant: its figures (latencies kept, so that chunks merge), and the WAL it
 * wrote. `applicationName` decides which wait-event sampler counts its backends.
 */
async function runPgbench(
  pgbench: string,
  cluster: EmbeddedCluster,
  t: Target,
  v: Variant,
  seconds: number,
  applicationName: string,
  transactionsPerClient?: number,
): Promise<{ figures: Figures; wal: number }> {
  const dir = await mkdtemp(path.join(os.tmpdir(), "social-ledger-pgbench-"));
  try {
    const script = path.join(dir, "script.sql");
    await writeFile(script, v.script);
    const url = new URL(cluster.connectionString(t.database));
    const args = [
      "-n",
      "-M",
      "prepared",
      "-c",
      String(v.clients),
      "-j",
      String(threads(v)),
      ...(transactionsPerClient === undefined ? ["-T", String(seconds)] : ["-t", String(transactionsPerClient)]),
      "-f",
      script,
      "-l",
      "--log-prefix",
      path.join(dir, "log"),
      "-h",
      url.hostname,
      "-p",
      url.port,
      "-U",
      decodeURIComponent(url.username),
      t.database,
    ];
    const wal0 = await walPosition();
    const { stdout } = await run(pgbench, args, {
      env: { ...process.env, PGPASSWORD: decodeURIComponent(url.password), PGAPPNAME: applicationName },
      signal: abort.signal,
      maxBuffer: 1 << 20,
    });
    const wal = (await walPosition()) - wal0;
    const processed = Number(/number of transactions actually processed: (\d+)/.exec(stdout)?.[1]);
    const failed = Number(/number of failed transactions: (\d+)/.exec(stdout)?.[1] ?? 0);
    const tps = Number(/tps = ([\d.]+) \(without initial connection time\)/.exec(stdout)?.[1]);
    if (!Number.isFinite(processed) || !Number.isFinite(tps) || processed === 0)
      throw new Error(`pgbench printed no figures:\n${stdout}`);
    const latencyMs = await latenciesMs(dir);
    return {
      figures: {
        ops: processed,
        seconds: processed / tps,
        opsPerSec: tps,
        p50Ms: percentile(latencyMs, 50),
        p99Ms: percentile(latencyMs, 99),
        errors: failed,
        latencyMs,
      },
      wal,
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

async function variantRow(
  pgbench: string,
  cluster: EmbeddedCluster,
  t: Target,
  v: Variant,
  seconds: number,
): Promise<Row> {
  const waits = sampleWaits(started.sampler!, t.database, PGBENCH_APPLICATION);
  const { figures, wal } = await runPgbench(pgbench, cluster, t, v, seconds, PGBENCH_APPLICATION);
  const waited = await waits.stop();
  const walPerOp = wal / figures.ops;
  const note = [
    command(v, seconds),
    ...(v.writes ? [`WAL ${Math.round(walPerOp)} B/op`] : []),
    formatWaits(waited),
  ].filter((x) => x !== "");
  return {
    op: v.op,
    path: "pgbench",
    partitions: t.partitions,
    figures,
    note: note.join(", "),
    extra: {
      clients: v.clients,
      seconds,
      ...(v.writes ? { walBytesPerOp: walPerOp } : {}),
      waitSamples: Object.fromEntries(waited),
    },
  };
}

/**
 * pgbench INSERTs at 16 clients as a kind of the alternating write phase (write-phases.ts), so the
 * ratio of a like's CHANGED/s to it compares the same minutes: each chunk is a pgbench run of
 * `seconds / chunks`, but at least 3 s (the kind's operation counts do not apply to a timed run):
 * runs of 1 s on a loaded machine spent a large part of their second opening the 16 connections
 * and measured half the rate of a 3 s run. Its backends carry the bench's application name, so
 * the phase's wait sampler counts them.
 */
export function pgbenchInsertKind(
  pgbench: string,
  cluster: EmbeddedCluster,
  t: Target,
  seconds: number,
  chunks: number,
  clients = 16,
  op: string = OP.pgbenchInsert16,
): WriteKind {
  const v = { ...VARIANTS.find((x) => x.op === OP.pgbenchInsert16)!, clients, op };
  // pgbench's -T includes opening its connections (a SCRAM exchange and a backend each): on a
  // loaded machine 16 took 2 s and 128 more than 11 s, so that a run of -T measured nothing. Up
  // to 64 clients a run is timed; above, it is a count per client (-t), and its rate is pgbench's
  // own, without the initial connection time.
  const perChunk = Math.max(3 + Math.ceil(clients / 16), Math.ceil(seconds / chunks));
  const counted = clients > 64 ? Math.max(10, Math.ceil((perChunk * 1000) / clients)) : undefined;
  let tableReady: Promise<unknown> | undefined;
  return {
    op: v.op,
    path: "pgbench",
    rawInsert: true,
    describe: `${counted === undefined ? command(v, perChunk) : command(v, perChunk).replace(/-T \d+/, `-t ${counted}`)} per chunk`,
    run: async () => {
      tableReady ??= createTable(t);
      await tableReady;
      return (await runPgbench(pgbench, cluster, t, v, perChunk, BENCH_APPLICATION, counted)).figures;
    },
  };
}

function createTable(t: Target): Promise<unknown> {
  return t.pool.query(
    "CREATE TABLE IF NOT EXISTS bench_pgbench_insert (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, client integer NOT NULL)",
  );
}

/** The pgbench rows not run in chunks (INSERT at 1 client, primary-key SELECT at 16), one variant after the other. */
export async function pgbenchRows(
  pgbench: string,
  cluster: EmbeddedCluster,
  t: Target,
  seconds: number,
): Promise<Row[]> {
  await createTable(t);
  const rows: Row[] = [];
  for (const v of VARIANTS.filter((x) => x.op !== OP.pgbenchInsert16))
    rows.push(await variantRow(pgbench, cluster, t, v, seconds));
  return rows;
}
