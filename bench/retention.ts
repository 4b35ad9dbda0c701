/**
 * Issue 8's retention figure: after H like events of history, the same write and read phases on
 * two databases of one cluster that differ only in retention: one keeps every outbox row and
 * dedup key ("kept"), the other has run pruneRetained to the watermarks with the default margin of
 * 10,000 events ("pruned"). Printed: the
 * write rate, the count read p50/p99 next to a primary-key read, each table's rows and size, and
 * how long generating, consuming and pruning the history took.
 *
 * The history is written set-based (OUTBOX_CHUNK_SQL says how and why not through like_set),
 * so a million events take a minute, not hours; the consumer then applies them as it always
 * does (drain), so processed_event, like_count and the watermarks are what production would hold.
 */
import { performance } from "node:perf_hooks";
import { initLedger } from "../src/db/ledger-config.ts";
import { migrate } from "../src/db/migrate.ts";
import { createPool, type Pool } from "../src/db/pool.ts";
import { DEFAULT_MARGIN, pruneRetained } from "../src/retention/retention.ts";
import type { EmbeddedCluster } from "../src/db/embedded-cluster.ts";
import { openLedger, type Ledger } from "../src/ledger.ts";
import { readCount, readSide, readSideClean, writeSide, writeSideClean } from "../src/likes/like-audit.ts";
import { runFixedCount, runInterleaved, type Figures } from "./load.ts";
import type { Row } from "./report.ts";

export interface RetentionBenchOptions {
  history: number;
  partitions: number;
  workers: number;
  ops: number;
  reads: number;
}

/** Users of the history; pairs toggle (like, unlike, like, ...) so every event is CHANGED. */
const HISTORY_USERS = 10_000;
const CHUNK = 200_000;
const TABLES = ["like_outbox", "processed_event", "like_fact", "like_count", "like_outbox_pruned"] as const;

interface Variant {
  name: "kept" | "pruned";
  pool: Pool;
  ledger: Ledger;
  generateSeconds: number;
  drainSeconds: number;
  pruneSeconds?: number;
  prunedRows?: number;
}

export interface TableSize {
  table: string;
  rows: number;
  bytes: number;
}

export interface RetentionFigures {
  rows: Row[];
  sizes: Record<string, TableSize[]>;
  audits: Record<string, { clean: boolean }>;
  summary: string;
}

function historyShape(history: number): { pairs: number; items: number } {
  const pairs = Math.max(HISTORY_USERS, Math.min(200_000, Math.ceil(history / 2)));
  return { pairs, items: Math.ceil(pairs / HISTORY_USERS) };
}

/**
 * Event k toggles pair j = k mod pairs (user j mod USERS, item j div USERS): pass k div pairs
 * likes when even, unlikes when odd, so the event's version is pass + 1 and every event is
 * CHANGED. Per chunk, one INSERT numbers each partition's events after its like_seq.last in k
 * order and one UPDATE moves like_seq; the facts are written once at the end. This is the
 * state like_set would leave after the same calls (the write-side audit checks it before
 * anything is measured), at bulk-insert speed: called once per event from one statement,
 * like_set updates one like_seq row thousands of times in one transaction, and each update
 * walks the row's growing version chain (about 1,000 events/s here).
 */
const OUTBOX_CHUNK_SQL = `
  WITH g AS (
    SELECT k, 'h' || (k % $3 % ${HISTORY_USERS}) AS user_id, 'hist-' || (k % $3 / ${HISTORY_USERS}) AS item_id,
           CASE WHEN (k / $3) % 2 = 0 THEN 1 ELSE -1 END AS delta, k / $3 + 1 AS version
      FROM generate_series($1::bigint, $2::bigint - 1) AS k),
  placed AS (SELECT g.*, ledger_partition(g.user_id, $4) AS part FROM g),
  inserted AS (
    INSERT INTO like_outbox (part, seq, user_id, item_id, delta, version)
    SELECT p.part, s.last + row_number() OVER (PARTITION BY p.part ORDER BY p.k), p.user_id, p.item_id, p.delta, p.version
      FROM placed p JOIN like_seq s USING (part)
    RETURNING part)
  UPDATE like_seq s SET last = s.last + c.n FROM (SELECT part, count(*) AS n FROM inserted GROUP BY part) c WHERE s.part = c.part`;

const FACTS_SQL = `
  INSERT INTO like_fact (user_id, item_id, liked, version)
  SELECT 'h' || (j % ${HISTORY_USERS}), 'hist-' || (j / ${HISTORY_USERS}), e.events % 2 = 1, e.events
    FROM generate_series(0, least($2::bigint, $1::bigint) - 1) AS j
    CROSS JOIN LATERAL (SELECT ($1::bigint - 1 - j) / $2::bigint + 1 AS events) e`;

async function openVariant(
  cluster: EmbeddedCluster,
  admin: Pool,
  name: Variant["name"],
  o: RetentionBenchOptions,
  register: (pool: Pool) => void,
): Promise<Variant> {
  const database = `bench_history_${name}`;
  await admin.query(`CREATE DATABASE ${database}`);
  const pool = createPool({
    connectionString: cluster.connectionString(database),
    max: o.workers + 4,
    applicationName: "social-ledger-bench",
  });
  register(pool);
  await migrate(pool);
  await initLedger(pool, { partitions: o.partitions });
  const ledger = await openLedger(pool);
  const { pairs, items } = historyShape(o.history);
  await pool.query(
    "INSERT INTO item (item_id, kind) SELECT 'hist-' || n, 'plain' FROM generate_series(0, $1::int - 1) AS n",
    [items],
  );
  const t0 = performance.now();
  for (let lo = 0; lo < o.history; lo += CHUNK) {
    await pool.query(OUTBOX_CHUNK_SQL, [lo, Math.min(o.history, lo + CHUNK), pairs, o.partitions]);
  }
  await pool.query(FACTS_SQL, [o.history, pairs]);
  await pool.query("ANALYZE");
  const audit = await writeSide(pool);
  if (!writeSideClean(audit)) throw new Error(`the generated history breaks the write side: ${JSON.stringify(audit)}`);
  const generateSeconds = (performance.now() - t0) / 1000;
  const t1 = performance.now();
  await ledger.likeConsumer.drain(5_000);
  return { name, pool, ledger, generateSeconds, drainSeconds: (performance.now() - t1) / 1000 };
}

async function tableSizes(pool: Pool): Promise<TableSize[]> {
  const out: TableSize[] = [];
  for (const table of TABLES) {
    const { rows } = await pool.query<{ rows: number; bytes: number }>(
      `SELECT (SELECT count(*) FROM ${table})::bigint AS rows, pg_total_relation_size('${table}')::bigint AS bytes`,
    );
    out.push({ table, rows: rows[0]!.rows, bytes: rows[0]!.bytes });
  }
  return out;
}

/** Like/unlike toggles by users of their own (per round) on the history's items: every call CHANGED. */
function writes(v: Variant, o: RetentionBenchOptions, items: number, round: number): Promise<Figures> {
  const ops = Math.ceil(o.ops / 2);
  const users = Math.max(64, Math.ceil(ops / 2));
  return runFixedCount(ops, o.workers, (k) => {
    const j = k % users;
    const user = `w${round}-${j}`;
    const item = `hist-${j % items}`;
    return Math.floor(k / users) % 2 === 0 ? v.ledger.likes.like(user, item) : v.ledger.likes.unlike(user, item);
  });
}

const PK_READ = "SELECT item_id, created_at FROM item WHERE item_id = $1";

const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MB`;

export async function retentionFigures(
  cluster: EmbeddedCluster,
  admin: Pool,
  o: RetentionBenchOptions,
  register: (pool: Pool) => void,
  progress: (line: string) => void,
): Promise<RetentionFigures> {
  const variants: Variant[] = [];
  for (const name of ["kept", "pruned"] as const) {
    const v = await openVariant(cluster, admin, name, o, register);
    progress(
      `history ${name}: ${o.history} events generated in ${v.generateSeconds.toFixed(1)} s, consumed in ${v.drainSeconds.toFixed(1)} s`,
    );
    variants.push(v);
  }
  const [kept, pruned] = variants as [Variant, Variant];
  const t0 = performance.now();
  // The default margin's newest events stay (as in service): a prune to 0 rows followed by ANALYZE
  // leaves statistics of empty tables, and the prepared count read then plans sequential scans of
  // like_outbox and processed_event, which grow with the next backlog until autovacuum re-analyzes
  // (seen in this bench: count read p50 1.26x the kept history's).
  const report = await pruneRetained(pruned.pool, { keepLast: DEFAULT_MARGIN.keepLast, keepSeconds: 0, chunk: CHUNK });
  pruned.pruneSeconds = (performance.now() - t0) / 1000;
  pruned.prunedRows = report.kinds.reduce((n, k) => n + k.outboxRows + k.keyRows, 0);
  progress(`history pruned: ${pruned.prunedRows} outbox rows and dedup keys in ${pruned.pruneSeconds.toFixed(1)} s`);
  // The same maintenance on both: deleted rows become free space, statistics are fresh.
  for (const v of variants) await v.pool.query("VACUUM ANALYZE");

  const sizes: Record<string, TableSize[]> = {};
  for (const v of variants) sizes[v.name] = await tableSizes(v.pool);
  const { items } = historyShape(o.history);
  const rows: Row[] = [];
  const row = (v: Variant, op: string, figures: Figures, note: string, extra: Record<string, unknown> = {}): Row => ({
    op: `${op}, ${o.history} events ${v.name}`,
    path: "library",
    partitions: o.partitions,
    figures,
    note,
    extra: { variant: v.name, history: o.history, ...extra },
  });
  // Writes in four rounds, ABBA (kept, pruned, pruned, kept), each variant's rate from its two
  // rounds; reads of both variants interleaved on one worker, so both meet the same load.
  const written: Record<string, Row> = {};
  const rounds: Record<string, Figures[]> = { kept: [], pruned: [] };
  const changedBy: Record<string, number> = { kept: 0, pruned: 0 };
  for (const [round, v] of [kept, pruned, pruned, kept].entries()) {
    const before = (await writeSide(v.pool)).lastSeq;
    rounds[v.name]!.push(await writes(v, o, items, round));
    changedBy[v.name]! += (await writeSide(v.pool)).lastSeq - before;
  }
  for (const v of variants) {
    const [a, b] = rounds[v.name] as [Figures, Figures];
    const ops = a.ops + b.ops;
    const seconds = a.seconds + b.seconds;
    const figures: Figures = {
      ops,
      seconds,
      opsPerSec: ops / seconds,
      p50Ms: (a.p50Ms + b.p50Ms) / 2,
      p99Ms: Math.max(a.p99Ms, b.p99Ms),
      errors: a.errors + b.errors,
    };
    const changed = changedBy[v.name]!;
    written[v.name] = row(
      v,
      "like/unlike",
      figures,
      `CHANGED ${((100 * changed) / Math.max(1, ops)).toFixed(0)}%, two ABBA rounds (p50 their mean, p99 their max)`,
      { changed },
    );
    progress(`${written[v.name]!.op}: ${Math.round(figures.opsPerSec)} ops/s`);
  }
  for (const v of variants) await v.ledger.likeConsumer.drain();
  const [keptCount, prunedCount, keptPk, prunedPk] = await runInterleaved(4 * o.reads, 1, [
    (k) => readCount(kept.pool, `hist-${k % items}`, 16),
    (k) => readCount(pruned.pool, `hist-${k % items}`, 16),
    (k) => kept.pool.query(PK_READ, [`hist-${k % items}`]),
    (k) => pruned.pool.query(PK_READ, [`hist-${k % items}`]),
  ]);
  const read: Record<string, Row[]> = {};
  for (const [v, count, pk] of [
    [kept, keptCount!, keptPk!],
    [pruned, prunedCount!, prunedPk!],
  ] as const) {
    read[v.name] = [
      row(
        v,
        "count read, 1 worker interleaved",
        count,
        `÷ PK p99 ${(count.p99Ms / pk.p99Ms).toFixed(2)}, p50 ${(count.p50Ms / pk.p50Ms).toFixed(2)}`,
      ),
      row(v, "primary-key SELECT, 1 worker interleaved", pk, ""),
    ];
    progress(`${read[v.name]![0]!.op}: p99 ${count.p99Ms.toFixed(2)} ms`);
  }
  for (const v of variants) rows.push(written[v.name]!, ...read[v.name]!);

  const audits: Record<string, { clean: boolean }> = {};
  for (const v of variants) {
    const w = await writeSide(v.pool);
    const r = await readSide(v.pool);
    audits[`history ${v.name}`] = { clean: writeSideClean(w) && readSideClean(r) && r.countMismatchItems === 0 };
  }

  const lines = [
    `retention (issue 8): after ${o.history} like events of history, P=${o.partitions}, the same phases with the history kept and pruned (newest ${DEFAULT_MARGIN.keepLast} kept)`,
  ];
  const sizeCols = TABLES.map((t) => t);
  lines.push(["variant", "write CHANGED/s", "count p50 ms", "count p99 ms", "PK p99 ms", ...sizeCols].join(" | "));
  for (const v of variants) {
    const w = written[v.name]!;
    const [c, pk] = read[v.name]!;
    const changedPerSec = Number(w.extra!.changed) / w.figures.seconds;
    lines.push(
      [
        v.name,
        Math.round(changedPerSec).toString(),
        c!.figures.p50Ms.toFixed(3),
        c!.figures.p99Ms.toFixed(3),
        pk!.figures.p99Ms.toFixed(3),
        ...sizes[v.name]!.map((s) => `${s.rows} rows ${mb(s.bytes)}`),
      ].join(" | "),
    );
  }
  const ratio = (a: number, b: number) => (a / b).toFixed(2);
  const wk = Number(written.kept!.extra!.changed) / written.kept!.figures.seconds;
  const wp = Number(written.pruned!.extra!.changed) / written.pruned!.figures.seconds;
  lines.push(
    `pruned ÷ kept: write ${ratio(wp, wk)}, count read p99 ${ratio(read.pruned![0]!.figures.p99Ms, read.kept![0]!.figures.p99Ms)}; ` +
      `history generated at ${Math.round(o.history / kept.generateSeconds)} events/s, consumed at ${Math.round(o.history / kept.drainSeconds)} events/s, ` +
      `pruned at ${Math.round((pruned.prunedRows ?? 0) / (pruned.pruneSeconds ?? 1))} rows/s (${(pruned.pruneSeconds ?? 0).toFixed(1)} s)`,
    "Sizes after VACUUM on both: a prune frees space for new rows (the table stops growing); it returns disk to the OS only after VACUUM FULL or pg_repack.",
  );
  return { rows, sizes, audits, summary: lines.join("\n") };
}
