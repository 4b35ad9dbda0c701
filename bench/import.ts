/**
 * `npm run bench:import`: the import's throughput next to PostgreSQL's own COPY of the same rows,
 * in one run on one embedded cluster (docs/import.md, "Figures"). It writes an NDJSON file of
 * `--likes` likes (over `--items` items, declared first), imports it into a fresh ledger database
 * (both passes: line checks, COPY into staging, cross-line checks, the set-based apply with
 * counts), then COPYs the same (user, item) rows into a plain two-column table of another
 * database, and prints facts/s of each and their ratio (goal: at least 0.3). A second baseline
 * COPYs the same rows into a table like like_fact with its three indexes (no foreign key): what the
 * indexes alone cost. --profile loads pg_stat_statements and prints the import's statements by
 * total time, and auto_explain's plans of the slow ones to stderr.
 *
 * --resumable forces the batched path that a non-empty ledger takes (a fresh ledger otherwise takes the
 * empty-ledger path). Each step's time is printed (validation, staging, the empty-ledger load's
 * steps, each apply phase).
 *
 * --shape realistic imports a product's history instead (bench/import-realistic.ts: 20,000 accounts,
 * 100,000 items, 200,000 likes with a few hot items, 40,000 follows with heavy-tailed followees, 1,000
 * blocks; --scale multiplies every count), prints facts/s over all its lines (goal: at least 20,000),
 * each phase's time and rate, and checks the counts and the follower projection against the facts;
 * the COPY baselines are of the uniform likes file only.
 *
 *   node --import tsx bench/import.ts [--likes 1000000] [--items 10007] [--partitions 16] [--batch-size 20000] [--batch-ms 1000] [--profile] [--resumable]
 *   node --import tsx bench/import.ts --shape realistic [--scale 1] [--partitions 16] [--profile] [--resumable]
 *   (default, or --quick: --likes 100000)
 */
import { createReadStream, createWriteStream } from "node:fs";
import { rm } from "node:fs/promises";
import path from "node:path";
import { parseArgs } from "node:util";
import { fullAudit } from "../src/api/routes/admin.ts";
import { EmbeddedCluster, clusterTempDir } from "../src/db/embedded-cluster.ts";
import { initLedger } from "../src/db/ledger-config.ts";
import { migrate } from "../src/db/migrate.ts";
import { createPool, type Pool } from "../src/db/pool.ts";
import { openLedger } from "../src/ledger.ts";
import { copyIn } from "../src/portability/copy-in.ts";
import { importFacts } from "../src/portability/import.ts";
import { formatPhase, type ImportReport } from "../src/portability/import.ts";
import {
  HOT_SHARE_TEXT,
  REALISTIC,
  writeRealisticFile,
  type RealisticShape,
  type ShapeCounts,
} from "./import-realistic.ts";
import { importTruth } from "./import-truth.ts";

const { values } = parseArgs({
  options: {
    likes: { type: "string" },
    items: { type: "string" },
    partitions: { type: "string" },
    "batch-size": { type: "string" },
    "batch-ms": { type: "string" },
    quick: { type: "boolean" },
    profile: { type: "boolean" },
    resumable: { type: "boolean" },
    shape: { type: "string" },
    scale: { type: "string" },
  },
});
const SHAPE = values.shape ?? "uniform";
if (SHAPE !== "uniform" && SHAPE !== "realistic") throw new Error("--shape must be uniform or realistic");
const SCALE = Number(values.scale ?? 1);
if (!(SCALE > 0)) throw new Error("--scale must be a positive number");
const LIKES = Number(values.likes ?? 100_000);
const ITEMS = Number(values.items ?? 10_007);
const P = Number(values.partitions ?? 16);
const BATCH = Number(values["batch-size"] ?? 20_000);
const BATCH_MS = Number(values["batch-ms"] ?? 1_000);
const USERS = Math.max(1, Math.ceil(LIKES / 10));
for (const [name, n] of [
  ["--likes", LIKES],
  ["--items", ITEMS],
  ["--partitions", P],
  ["--batch-size", BATCH],
  ["--batch-ms", BATCH_MS],
] as const) {
  if (!Number.isSafeInteger(n) || n < 1) throw new Error(`${name} must be a positive integer`);
}

/** Like k: a distinct (user, item) pair for every k below USERS × ITEMS. */
function pair(k: number): [string, string] {
  return [`user-${k % USERS}`, `item-${(Math.floor(k / USERS) + k) % ITEMS}`];
}

async function writeFile(file: string): Promise<void> {
  const out = createWriteStream(file);
  const write = (text: string): Promise<void> =>
    out.write(text) ? Promise.resolve() : new Promise<void>((resolve) => out.once("drain", () => resolve()));
  for (let i = 0; i < ITEMS; i++) await write(`{"kind":"item","id":"item-${i}"}\n`);
  let chunk = "";
  for (let k = 0; k < LIKES; k++) {
    const [user, item] = pair(k);
    chunk += `{"kind":"like","user":"${user}","item":"${item}"}\n`;
    if (chunk.length > 1 << 20) {
      await write(chunk);
      chunk = "";
    }
  }
  await write(chunk);
  await new Promise((resolve) => out.end(resolve));
}

async function* copyRows(): AsyncGenerator<string> {
  let chunk = "";
  for (let k = 0; k < LIKES; k++) {
    const [user, item] = pair(k);
    chunk += `${user}\t${item}\n`;
    if (chunk.length > 256 * 1024) {
      yield chunk;
      chunk = "";
    }
  }
  yield chunk;
}

/** The realistic shape times `scale` (at least one of each). */
function scaled(scale: number): RealisticShape {
  const n = (x: number) => Math.max(1, Math.round(x * scale));
  return {
    accounts: n(REALISTIC.accounts),
    items: n(REALISTIC.items),
    likes: n(REALISTIC.likes),
    follows: n(REALISTIC.follows),
    blocks: n(REALISTIC.blocks),
  };
}

/**
 * The realistic run's figures: facts/s over every line, each step's time and, for the apply phases,
 * its rate over the lines of its kind; then the ledger against the file (facts per kind), the
 * counts and projection against the facts, and the audit.
 */
async function reportRealistic(pool: Pool, shape: ShapeCounts, report: ImportReport, seconds: number): Promise<void> {
  const truth = await importTruth(pool);
  const audit = await fullAudit(await openLedger(pool));
  const facts = shape.lines;
  const expected = {
    accounts: shape.accounts,
    liked: shape.likes,
    following: shape.follows,
    blocks: shape.blocks,
  };
  const ok =
    audit.clean &&
    truth.accounts === expected.accounts &&
    truth.liked === expected.liked &&
    truth.following === expected.following &&
    truth.blocks === expected.blocks &&
    truth.countMismatches === 0 &&
    truth.projectionMismatches === 0;
  process.stdout.write(
    `import bench, realistic shape: ${shape.accounts} accounts (${shape.tombstones} erased), ${shape.items} items, ${shape.likes} likes (${HOT_SHARE_TEXT}), ${shape.follows} follows (Zipf followees), ${shape.blocks} blocks; P=${P}, one embedded cluster\n` +
      `  import: ${facts} lines in ${seconds.toFixed(2)} s = ${(facts / seconds).toFixed(0)} facts/s (goal >= 20,000); path: ${report.path}\n` +
      `  where the time went:\n` +
      report.phases.map((ph) => `    ${formatPhase(ph)}\n`).join("") +
      `  afterwards: accounts ${truth.accounts}/${expected.accounts}, liked ${truth.liked}/${expected.liked}, following ${truth.following}/${expected.following}, blocks ${truth.blocks}/${expected.blocks}; ` +
      `like_count rows off the facts ${truth.countMismatches}, follower projection/count rows off the facts ${truth.projectionMismatches}; audit ${audit.clean ? "clean" : "NOT CLEAN"}\n`,
  );
  if (!ok) process.exitCode = 1;
}

interface ProfileRow {
  ms: number;
  calls: number;
  rows: number;
  query: string;
}

function printProfile(profile: readonly ProfileRow[]): void {
  if (profile.length === 0) return;
  process.stdout.write("  pg_stat_statements, the import's top-level statements by total time (ms, calls, rows):\n");
  for (const r of profile)
    process.stdout.write(
      `    ${String(r.ms).padStart(8)} ${String(r.calls).padStart(6)} ${String(r.rows).padStart(8)}  ${r.query}\n`,
    );
}

/** pg_stat_statements for the totals, auto_explain for the plan of every statement over half a second. */
const PROFILE_SETTINGS = {
  shared_preload_libraries: "pg_stat_statements,auto_explain",
  "pg_stat_statements.track": "all",
  "auto_explain.log_min_duration": "500ms",
  "auto_explain.log_analyze": "on",
  "auto_explain.log_buffers": "on",
  "auto_explain.log_nested_statements": "on",
  "auto_explain.log_triggers": "on",
};

const root = await clusterTempDir("social-ledger-import-bench-");
const cluster = await EmbeddedCluster.start({
  dataDir: path.join(root, "pgdata"),
  settings: { max_connections: "50", ...(values.profile ? PROFILE_SETTINGS : {}) },
  // With --profile, the server's log (auto_explain's plans) goes to stderr.
  ...(values.profile ? { onLog: (line: string) => process.stderr.write(line) } : {}),
});
const pools: Pool[] = [];
try {
  const file = path.join(root, "facts.ndjson");
  const shape = SHAPE === "realistic" ? await writeRealisticFile(file, scaled(SCALE)) : undefined;
  if (!shape) await writeFile(file);
  const admin = createPool({ connectionString: cluster.connectionString("postgres"), max: 1 });
  pools.push(admin);
  await admin.query("CREATE DATABASE bench_import");
  await admin.query("CREATE DATABASE bench_copy");
  const pool = createPool({ connectionString: cluster.connectionString("bench_import"), max: 6 });
  const plain = createPool({ connectionString: cluster.connectionString("bench_copy"), max: 1 });
  pools.push(pool, plain);
  await migrate(pool);
  await initLedger(pool, { partitions: P });
  if (values.profile) {
    await pool.query("CREATE EXTENSION pg_stat_statements");
    await pool.query("SELECT pg_stat_statements_reset()");
  }

  const steps: [string, number][] = [];
  const started = performance.now();
  const report = await importFacts(pool, createReadStream(file), {
    batchSize: BATCH,
    batchMillis: BATCH_MS,
    emptyLedger: values.resumable ? "never" : "auto",
    onTiming: (step, ms) => steps.push([step, ms]),
  });
  const importSeconds = (performance.now() - started) / 1000;
  const { rows: profile } = values.profile
    ? await pool.query<ProfileRow>(
        `SELECT round(total_exec_time)::int AS ms, calls::int, rows::int, regexp_replace(left(query, 110), '\\s+', ' ', 'g') AS query
       FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND toplevel
      ORDER BY total_exec_time DESC LIMIT 14`,
      )
    : { rows: [] };
  if (shape) {
    await reportRealistic(pool, shape, report, importSeconds);
    printProfile(profile);
  } else {
    const written = report.applied.likes ?? 0;

    await plain.query("CREATE TABLE plain_like (user_id text NOT NULL, item_id text NOT NULL)");
    const client = await plain.connect();
    const copyStarted = performance.now();
    let copied: number;
    try {
      copied = await copyIn(client, "COPY plain_like (user_id, item_id) FROM STDIN", copyRows());
    } finally {
      client.release();
    }
    const copySeconds = (performance.now() - copyStarted) / 1000;

    // The same rows into a copy of like_fact's shape with its primary key and both list indexes.
    await plain.query(`CREATE TABLE indexed_like (user_id text NOT NULL, item_id text NOT NULL, liked boolean NOT NULL DEFAULT true,
    version bigint NOT NULL DEFAULT 1, changed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (user_id, item_id))`);
    await plain.query("CREATE INDEX ON indexed_like (item_id, changed_at DESC, user_id) WHERE liked");
    await plain.query("CREATE INDEX ON indexed_like (user_id, changed_at DESC, item_id DESC) WHERE liked");
    const indexedClient = await plain.connect();
    const indexedStarted = performance.now();
    let indexedCopied: number;
    try {
      indexedCopied = await copyIn(indexedClient, "COPY indexed_like (user_id, item_id) FROM STDIN", copyRows());
    } finally {
      indexedClient.release();
    }
    const indexedSeconds = (performance.now() - indexedStarted) / 1000;

    const audit = await fullAudit(await openLedger(pool));
    const { rows } = await pool.query<{ liked: number; counted: number }>(
      "SELECT (SELECT count(*) FROM like_fact WHERE liked)::int AS liked, (SELECT coalesce(sum(n), 0) FROM like_count)::int AS counted",
    );
    const importRate = written / importSeconds;
    const copyRate = copied / copySeconds;
    const indexedRate = indexedCopied / indexedSeconds;
    process.stdout.write(
      `import bench: ${LIKES} likes over ${ITEMS} items and ${USERS} users, P=${P}, batches of at most ${BATCH} lines and about ${BATCH_MS} ms, one embedded cluster\n` +
        `  import (file -> checks -> COPY staging -> apply with counts): ${written} likes in ${importSeconds.toFixed(2)} s = ${importRate.toFixed(0)} facts/s\n` +
        `  plain COPY of the same rows into a two-column table:        ${copied} rows in ${copySeconds.toFixed(2)} s = ${copyRate.toFixed(0)} rows/s\n` +
        `  COPY of the same rows into like_fact's shape with its 3 indexes: ${indexedCopied} rows in ${indexedSeconds.toFixed(2)} s = ${indexedRate.toFixed(0)} rows/s\n` +
        `  ratio import / COPY: ${(importRate / copyRate).toFixed(2)} (goal >= 0.3); import / indexed COPY: ${(importRate / indexedRate).toFixed(2)}\n` +
        `  path: ${report.path}; where the import's ${importSeconds.toFixed(2)} s went (steps over 10 ms):\n` +
        steps
          .filter(([, ms]) => ms >= 10)
          .map(([step, ms]) => `    ${(ms / 1000).toFixed(2).padStart(7)} s  ${step}\n`)
          .join("") +
        `  afterwards: like_fact liked ${rows[0]!.liked}, sum(like_count) ${rows[0]!.counted}, audit ${audit.clean ? "clean" : "NOT CLEAN"}\n`,
    );
    printProfile(profile);
    if (!audit.clean || rows[0]!.liked !== written || rows[0]!.counted !== written) process.exitCode = 1;
  }
} finally {
  for (const p of pools) await p.end();
  await cluster.stop();
  await rm(root, { recursive: true, force: true });
}
