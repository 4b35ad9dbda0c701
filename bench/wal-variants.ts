/**
 * `npm run bench:wal`: WAL per like/unlike with and without the indexes issue 8 names as the
 * candidates for a leaner write (docs/write-path.md, "What 0.5× would take"), side by side on
 * one embedded cluster in one run. Each variant is a database of its own, migrated as usual and
 * then changed by one DDL statement; every round runs each variant once (the order alternating),
 * one at a time, so pg_stat_wal's cluster-wide counters belong to the variant that just ran.
 *
 *   node --import tsx bench/wal-variants.ts [--ops n] [--rounds n] [--partitions P]
 */
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
 * Each variant: the migrations it runs (all, or those up to `upTo`: the write functions as they
 * were before a later migration), then fixed DDL (no values).
 */
const VARIANTS: { name: string; upTo?: number; ddl: string[] }[] = [
  { name: "before 024 (lock, then update)", upTo: 23, ddl: [] },
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

async function walStats(admin: Pool): Promise<Wal> {
  const { rows } = await admin.query<{ records: string; fpi: string; bytes: string }>("SELECT wal_records AS records, wal_fpi AS fpi, wal_bytes AS bytes FROM pg_stat_wal");
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
async function walByRelation(admin: Pool, pool: Pool, from: string, to: string): Promise<Map<string, number>> {
  const { rows } = await admin.query<{ db: number; filenode: number; bytes: string }>(
    `SELECT reldatabase::bigint AS db, relfilenode::bigint AS filenode, sum(record_length)::bigint AS bytes
       FROM pg_get_wal_block_info($1::pg_lsn, $2::pg_lsn, false) WHERE block_id = 0 GROUP BY 1, 2`,
    [from, to],
  );
  const own = Number((await pool.query<{ oid: string }>("SELECT oid::bigint AS oid FROM pg_database WHERE datname = current_database()")).rows[0]!.oid);
  const out = new Map<string, number>();
  for (const row of rows) {
    if (Number(row.db) !== own) continue;
    const name = (await pool.query<{ name: string | null }>("SELECT pg_filenode_relation(0, $1::oid)::text AS name", [row.filenode])).rows[0]!.name ?? `filenode ${row.filenode}`;
    out.set(name, (out.get(name) ?? 0) + Number(row.bytes));
  }
  const commits = await admin.query<{ bytes: string }>(
    "SELECT coalesce(sum(record_length), 0)::bigint AS bytes FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn) WHERE resource_manager = 'Transaction'",
    [from, to],
  );
  out.set("(commit records)", Number(commits.rows[0]!.bytes));
  return out;
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
  const targets: { name: string; pool: Pool; ledger: Ledger; offset: number; results: { perOp: Wal; opsPerSec: number }[]; byRelation?: Map<string, number>; errors: number; hot?: string }[] = [];
  const all = await loadMigrations();
  for (const i of CHOSEN) {
    const variant = VARIANTS[i]!;
    await admin.query(`CREATE DATABASE wal_v${i}`);
    const pool = createPool({ connectionString: cluster.connectionString(`wal_v${i}`), max: 20 });
    pools.push(pool);
    await migrate(pool, variant.upTo === undefined ? all : all.filter((m) => m.id <= variant.upTo!));
    await initLedger(pool, { partitions: P });
    for (const ddl of variant.ddl) await pool.query(ddl);
    const ledger = await openLedger(pool, BATCH_MAX === undefined ? {} : { writeBatchMax: BATCH_MAX });
    for (let n = 0; n < ITEMS; n++) await ledger.likes.createItem(`item-${n}`);
    targets.push({ name: variant.name, pool, ledger, offset: 0, results: [], errors: 0 });
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
  for (let round = 0; round < ROUNDS; round++) {
    for (const t of round % 2 === 0 ? targets : [...targets].reverse()) {
      const events0 = await eventsWritten(t.pool);
      const wal0 = await walStats(admin);
      const lsn0 = await lsn(admin);
      const figures = await run(t);
      const wal1 = await walStats(admin);
      const lsn1 = await lsn(admin);
      const changed = (await eventsWritten(t.pool)) - events0;
      if (round === ROUNDS - 1) {
        t.byRelation = new Map([...(await walByRelation(admin, t.pool, lsn0, lsn1))].map(([name, bytes]) => [name, bytes / changed]));
      }
      t.offset += OPS;
      t.errors += figures.errors;
      t.results.push({
        perOp: { records: (wal1.records - wal0.records) / changed, fpi: (wal1.fpi - wal0.fpi) / changed, bytes: (wal1.bytes - wal0.bytes) / changed },
        opsPerSec: changed / figures.seconds,
      });
    }
  }
  for (const t of targets) {
    // Updates of like_fact over the whole run (warm-up included) and how many were HOT.
    const { rows } = await t.pool.query<{ upd: string; hot: string }>(
      "SELECT n_tup_upd::text AS upd, n_tup_hot_upd::text AS hot FROM pg_stat_user_tables WHERE relname = 'like_fact'",
    );
    t.hot = rows[0] === undefined ? "?" : `${rows[0].hot}/${rows[0].upd}`;
  }
  const fmt = (xs: number[], d = 0) => xs.map((x) => x.toFixed(d)).join(" / ");
  process.stdout.write(
    `WAL per CHANGED like/unlike, P=${P}, 16 workers, batch max ${BATCH_MAX ?? "default"}, ${OPS} ops per variant and round, ${ROUNDS} rounds (one figure per round; pg_stat_wal, whole cluster):\n`,
  );
  for (const t of targets) {
    process.stdout.write(
      `  ${t.name.padEnd(44)} bytes ${fmt(t.results.map((r) => r.perOp.bytes))}  records ${fmt(t.results.map((r) => r.perOp.records), 1)}` +
        `  FPI ${fmt(t.results.map((r) => r.perOp.fpi), 2)}  CHANGED/s ${fmt(t.results.map((r) => r.opsPerSec))}` +
        `  like_fact HOT/updates ${t.hot}${t.errors > 0 ? `  ERRORS ${t.errors}` : ""}\n`,
    );
  }
  process.stdout.write("WAL bytes per CHANGED like/unlike by relation (last round; pg_walinspect, a record counted for its first block's relation):\n");
  for (const t of targets) {
    const parts = [...(t.byRelation ?? [])].sort((a, b) => b[1] - a[1]).map(([name, bytes]) => `${name} ${bytes.toFixed(0)}`);
    const own = [...(t.byRelation ?? [])].reduce((sum, [, bytes]) => sum + bytes, 0);
    process.stdout.write(`  ${t.name} (total ${own.toFixed(0)}): ${parts.join(", ")}\n`);
  }
} finally {
  for (const pool of pools) await pool.end();
  await cluster.stop();
  await rm(root, { recursive: true, force: true });
}
