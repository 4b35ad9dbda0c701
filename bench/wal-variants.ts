/**
 * `npm run bench:wal`: WAL per like/unlike of the write functions before migration 024 and as
 * migrated, and of schema variants (fillfactor, the lists in a narrow table, the floor without
 * list indexes; docs/decisions/0008-like-lock-by-update.md and 0009-hot-fact-updates.md), side by side on one embedded cluster in
 * one run. Each variant is a database of its own, migrated and then changed by fixed DDL; every
 * round runs each variant once, one at a time (the order rotating), so the WAL between two
 * positions belongs to the variant that just ran; pg_walinspect splits it by relation and record kind.
 *
 *   node --import tsx bench/wal-variants.ts [--ops n] [--rounds n] [--partitions P] [--variants 0,1] [--batch-max n]
 */
import { loadavg } from "node:os";
import path from "node:path";
import { rm } from "node:fs/promises";
import { parseArgs } from "node:util";
import { EmbeddedCluster, clusterTempDir } from "../src/db/embedded-cluster.ts";
import { initLedger } from "../src/db/ledger-config.ts";
import { loadMigrations, migrate } from "../src/db/migrate.ts";
import { createPool, type Pool } from "../src/db/pool.ts";
import { openLedger, type Ledger } from "../src/ledger.ts";
import { runFixedCount } from "./load.ts";

/**
 * The likes and likers lists (migrations 001, 005) moved to a narrow table of their own, kept in
 * the fact's transaction by a trigger (the WAL a same-transaction table would cost; a consumer
 * would write the same rows and index entries, in its own transactions), so that like_fact has
 * no index on `liked` or `changed_at` and its updates can be HOT.
 */
const LIST_TABLE_DDL = [
  "DROP INDEX like_fact_likers",
  "DROP INDEX like_fact_liked_list",
  "ALTER TABLE like_fact SET (fillfactor = 90)",
  "CREATE TABLE like_list (user_id text NOT NULL, item_id text NOT NULL, changed_at timestamptz NOT NULL)",
  "CREATE INDEX like_list_likers ON like_list (item_id, changed_at DESC, user_id)",
  "CREATE INDEX like_list_liked ON like_list (user_id, changed_at DESC, item_id DESC)",
  `CREATE FUNCTION like_list_sync() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     IF TG_OP = 'UPDATE' AND OLD.liked THEN
       DELETE FROM like_list l WHERE l.item_id = OLD.item_id AND l.changed_at = OLD.changed_at AND l.user_id = OLD.user_id;
     END IF;
     IF NEW.liked THEN
       INSERT INTO like_list (user_id, item_id, changed_at) VALUES (NEW.user_id, NEW.item_id, NEW.changed_at);
     END IF;
     RETURN NULL;
   END $$`,
  "CREATE TRIGGER like_list_sync AFTER INSERT OR UPDATE ON like_fact FOR EACH ROW EXECUTE FUNCTION like_list_sync()",
];

/**
 * Each variant: the migrations it runs (all, or all but the one whose file name ends with
 * `without`: the write functions as they were before it), then fixed DDL (no values).
 */
const VARIANTS: { name: string; without?: string; ddl: string[] }[] = [
  { name: "before 024 (lock, then update)", without: "_like_lock_by_update.sql", ddl: [] },
  { name: "as migrated", ddl: [] },
  { name: "fillfactor 90 (list indexes kept)", ddl: ["ALTER TABLE like_fact SET (fillfactor = 90)"] },
  { name: "fillfactor 80 (list indexes kept)", ddl: ["ALTER TABLE like_fact SET (fillfactor = 80)"] },
  { name: "lists in a narrow table (same txn), ff 90", ddl: LIST_TABLE_DDL },
  {
    // The floor for fact + outbox + their keys: no list index at all (no list reads), HOT updates.
    name: "floor: no list indexes, ff 90",
    ddl: ["DROP INDEX like_fact_likers", "DROP INDEX like_fact_liked_list", "ALTER TABLE like_fact SET (fillfactor = 90)"],
  },
  {
    name: "floor, and no outbox UNIQUE",
    ddl: [
      "DROP INDEX like_fact_likers",
      "DROP INDEX like_fact_liked_list",
      "ALTER TABLE like_fact SET (fillfactor = 90)",
      "ALTER TABLE like_outbox DROP CONSTRAINT like_outbox_user_id_item_id_version_key",
    ],
  },
  {
    // The outbox's foreign key to like_seq locks the partition's row (KEY SHARE, a heap lock record) once per batch.
    name: "floor, no outbox UNIQUE, no outbox FK",
    ddl: [
      "DROP INDEX like_fact_likers",
      "DROP INDEX like_fact_liked_list",
      "ALTER TABLE like_fact SET (fillfactor = 90)",
      "ALTER TABLE like_outbox DROP CONSTRAINT like_outbox_user_id_item_id_version_key",
      "ALTER TABLE like_outbox DROP CONSTRAINT like_outbox_part_fkey",
    ],
  },
];

const { values } = parseArgs({
  options: { ops: { type: "string" }, rounds: { type: "string" }, partitions: { type: "string" }, variants: { type: "string" }, "batch-max": { type: "string" } },
});
const OPS = Number(values.ops ?? 4000);
/** --variants 0,1,5: run only these (indexes into VARIANTS); default all. */
const CHOSEN = values.variants === undefined ? VARIANTS.map((_, i) => i) : values.variants.split(",").map(Number);
/** --batch-max n: LEDGER_WRITE_BATCH_MAX of every variant's service (default: the service's, 64). */
const BATCH_MAX = values["batch-max"] === undefined ? undefined : Number(values["batch-max"]);
const ROUNDS = Number(values.rounds ?? 3);
const P = Number(values.partitions ?? 4);
const USERS = 1000;
const ITEMS = 101;

interface Wal {
  records: number;
  fpi: number;
  bytes: number;
}

/**
 * The whole cluster's WAL between two positions: bytes from the positions themselves, records and
 * full-page images from pg_walinspect (pg_stat_wal's counters lag: a backend reports them at most
 * once a second, so a run of a few seconds would miss some).
 */
async function walStats(admin: Pool, from: string, to: string): Promise<Wal> {
  const { rows } = await admin.query<{ records: string; fpi: string; bytes: string }>(
    `SELECT count(*)::text AS records, count(*) FILTER (WHERE fpi_length > 0)::text AS fpi, pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::text AS bytes
       FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)`,
    [from, to],
  );
  return { records: Number(rows[0]!.records), fpi: Number(rows[0]!.fpi), bytes: Number(rows[0]!.bytes) };
}

async function lsn(admin: Pool): Promise<string> {
  return (await admin.query<{ lsn: string }>("SELECT pg_current_wal_lsn()::text AS lsn")).rows[0]!.lsn;
}

/**
 * WAL bytes per relation of one database between two positions (pg_walinspect): each record
 * counted once, for the relation of its first block (a heap insert for the table, an index
 * insert for the index); records without a block (commits) under "(no relation)" for the whole cluster.
 */
async function walByRelation(admin: Pool, pool: Pool, from: string, to: string): Promise<{ bytes: Map<string, number>; heapRecords: Map<string, { n: number; bytes: number }> }> {
  const { rows } = await admin.query<{ db: number; filenode: number; type: string; n: string; bytes: string }>(
    `SELECT reldatabase::bigint AS db, relfilenode::bigint AS filenode, resource_manager || '/' || record_type AS type,
            count(*)::bigint AS n, sum(record_length)::bigint AS bytes
       FROM pg_get_wal_block_info($1::pg_lsn, $2::pg_lsn, false) WHERE block_id = 0 GROUP BY 1, 2, 3`,
    [from, to],
  );
  const own = Number((await pool.query<{ oid: string }>("SELECT oid::bigint AS oid FROM pg_database WHERE datname = current_database()")).rows[0]!.oid);
  const out = new Map<string, number>();
  // The records of the write path's tables by kind (HEAP/UPDATE, HEAP/HOT_UPDATE, HEAP/LOCK, ...).
  const heapRecords = new Map<string, { n: number; bytes: number }>();
  for (const row of rows) {
    if (Number(row.db) !== own) continue;
    const name = (await pool.query<{ name: string | null }>("SELECT pg_filenode_relation(0, $1::oid)::text AS name", [row.filenode])).rows[0]!.name ?? `filenode ${row.filenode}`;
    out.set(name, (out.get(name) ?? 0) + Number(row.bytes));
    if (["like_fact", "like_seq", "like_list"].includes(name)) heapRecords.set(`${name} ${row.type}`, { n: Number(row.n), bytes: Number(row.bytes) });
  }
  const commits = await admin.query<{ bytes: string }>(
    "SELECT coalesce(sum(record_length), 0)::bigint AS bytes FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn) WHERE resource_manager = 'Transaction'",
    [from, to],
  );
  out.set("(commit records)", Number(commits.rows[0]!.bytes));
  return { bytes: out, heapRecords };
}

async function eventsWritten(pool: Pool): Promise<number> {
  const { rows } = await pool.query<{ n: number }>("SELECT coalesce(sum(last), 0)::bigint AS n FROM like_seq");
  return rows[0]!.n;
}

const root = await clusterTempDir("social-ledger-wal-");
const cluster = await EmbeddedCluster.start({ dataDir: path.join(root, "pgdata"), settings: { max_connections: "150" } });
const pools: Pool[] = [];
try {
  const admin = createPool({ connectionString: cluster.connectionString("postgres"), max: 1 });
  pools.push(admin);
  await admin.query("CREATE EXTENSION pg_walinspect");
  const targets: { name: string; pool: Pool; ledger: Ledger; offset: number; results: { perOp: Wal; opsPerSec: number }[];
    byRelation: Map<string, number>;
    heapRecords: Map<string, { n: number; bytes: number }>;
    changed: number;
    errors: number;
    hot?: string;
  }[] = [];
  const all = await loadMigrations();
  for (const i of CHOSEN) {
    const variant = VARIANTS[i]!;
    await admin.query(`CREATE DATABASE wal_v${i}`);
    const pool = createPool({ connectionString: cluster.connectionString(`wal_v${i}`), max: 20 });
    pools.push(pool);
    await migrate(pool, variant.without === undefined ? all : all.filter((m) => !m.name.endsWith(variant.without!)));
    await initLedger(pool, { partitions: P });
    for (const ddl of variant.ddl) await pool.query(ddl);
    const ledger = await openLedger(pool, BATCH_MAX === undefined ? {} : { writeBatchMax: BATCH_MAX });
    for (let n = 0; n < ITEMS; n++) await ledger.likes.createItem(`item-${n}`);
    targets.push({ name: variant.name, pool, ledger, offset: 0, results: [], byRelation: new Map(), heapRecords: new Map(), changed: 0, errors: 0 });
  }
  // Operation k toggles pair k mod USERS (like on even passes, unlike on odd), as the main bench does.
  const run = (t: (typeof targets)[number]) =>
    runFixedCount(OPS, 16, (k) => {
      const g = t.offset + k;
      const j = g % USERS;
      const like = Math.floor(g / USERS) % 2 === 0;
      return like ? t.ledger.likes.like(`u${j}`, `item-${j % ITEMS}`) : t.ledger.likes.unlike(`u${j}`, `item-${j % ITEMS}`);
    });
  for (const t of targets) {
    await run(t); // warm-up: the first pass inserts the pairs' fact rows
    t.offset += OPS;
  }
  await admin.query("CHECKPOINT");
  const load0 = loadavg()[0]!;
  for (let round = 0; round < ROUNDS; round++) {
    // Rotate the order each round, so no variant always runs right after the same neighbour.
    const order = targets.map((_, i) => targets[(i + round) % targets.length]!);
    for (const t of round % 2 === 0 ? order : order.reverse()) {
      const events0 = await eventsWritten(t.pool);
      const lsn0 = await lsn(admin);
      const figures = await run(t);
      const lsn1 = await lsn(admin);
      const changed = (await eventsWritten(t.pool)) - events0;
      const wal = await walStats(admin, lsn0, lsn1);
      const rel = await walByRelation(admin, t.pool, lsn0, lsn1);
      for (const [name, bytes] of rel.bytes) t.byRelation.set(name, (t.byRelation.get(name) ?? 0) + bytes);
      for (const [name, r] of rel.heapRecords) {
        const sum = t.heapRecords.get(name) ?? { n: 0, bytes: 0 };
        t.heapRecords.set(name, { n: sum.n + r.n, bytes: sum.bytes + r.bytes });
      }
      t.changed += changed;
      t.offset += OPS;
      t.errors += figures.errors;
      t.results.push({
        perOp: { records: wal.records / changed, fpi: wal.fpi / changed, bytes: wal.bytes / changed },
        opsPerSec: changed / figures.seconds,
      });
    }
  }
  const load1 = loadavg()[0]!;
  for (const t of targets) {
    // Updates of like_fact over the whole run (warm-up included) and how many were HOT.
    const { rows } = await t.pool.query<{ upd: string; hot: string }>(
      "SELECT n_tup_upd::text AS upd, n_tup_hot_upd::text AS hot FROM pg_stat_user_tables WHERE relname = 'like_fact'",
    );
    t.hot = rows[0] === undefined ? "?" : `${rows[0].hot}/${rows[0].upd}`;
  }
  const fmt = (xs: number[], d = 0) => xs.map((x) => x.toFixed(d)).join(" / ");
  process.stdout.write(
    `WAL per CHANGED like/unlike, P=${P}, 16 workers, batch max ${BATCH_MAX ?? "default"}, ${OPS} ops per variant and round, ${ROUNDS} rounds` +
      ` (one figure per round; whole cluster, LSN difference; 1-min load average ${load0.toFixed(1)} at the start, ${load1.toFixed(1)} at the end):\n`,
  );
  for (const t of targets) {
    process.stdout.write(
      `  ${t.name.padEnd(44)} bytes ${fmt(t.results.map((r) => r.perOp.bytes))}  records ${fmt(t.results.map((r) => r.perOp.records), 1)}` +
        `  FPI ${fmt(t.results.map((r) => r.perOp.fpi), 2)}  CHANGED/s ${fmt(t.results.map((r) => r.opsPerSec))}` +
        `  like_fact HOT/updates ${t.hot}${t.errors > 0 ? `  ERRORS ${t.errors}` : ""}\n`,
    );
  }
  // CHANGED/s of each variant ÷ the first one's, per round (the same round's minutes of the machine) and over the run.
  const base = targets[0]!;
  const total = (t: (typeof targets)[number]) => t.results.reduce((s, r) => s + r.opsPerSec, 0);
  process.stdout.write(`CHANGED/s ÷ "${base.name}", per round, and the rounds' sums:\n`);
  for (const t of targets.slice(1)) {
    const ratios = t.results.map((r, i) => r.opsPerSec / base.results[i]!.opsPerSec);
    process.stdout.write(`  ${t.name.padEnd(44)} ${fmt(ratios, 2)}  sum ${(total(t) / total(base)).toFixed(2)}\n`);
  }
  process.stdout.write("WAL bytes per CHANGED like/unlike by relation (all rounds; this database's records, each counted for its first block's relation; commits of the whole cluster):\n");
  for (const t of targets) {
    const perChange = [...t.byRelation].map(([name, bytes]) => [name, bytes / t.changed] as const);
    const parts = perChange.sort((a, b) => b[1] - a[1]).map(([name, bytes]) => `${name} ${bytes.toFixed(0)}`);
    const own = perChange.reduce((sum, [, bytes]) => sum + bytes, 0);
    process.stdout.write(`  ${t.name} (total ${own.toFixed(0)}): ${parts.join(", ")}\n`);
    const kinds = [...t.heapRecords].sort((a, b) => b[1].bytes - a[1].bytes).map(([name, r]) => `${name} ${(r.n / t.changed).toFixed(2)} x ${(r.bytes / r.n).toFixed(0)} B`);
    process.stdout.write(`    records per change: ${kinds.join(", ")}\n`);
  }
} finally {
  for (const pool of pools) await pool.end();
  await cluster.stop();
  await rm(root, { recursive: true, force: true });
}
