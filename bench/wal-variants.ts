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
import { migrate } from "../src/db/migrate.ts";
import { createPool, type Pool } from "../src/db/pool.ts";
import { openLedger, type Ledger } from "../src/ledger.ts";
import { runFixedCount } from "./load.ts";

/** Fixed DDL per variant (no values), applied after the migrations. */
const VARIANTS: { name: string; ddl: string[] }[] = [
  { name: "as migrated", ddl: [] },
  { name: "no outbox UNIQUE (user, item, version)", ddl: ["ALTER TABLE like_outbox DROP CONSTRAINT like_outbox_user_id_item_id_version_key"] },
  {
    // What HOT-eligible fact updates would save: no index on a column an update changes, and room on the page.
    name: "no likers index on like_fact, fillfactor 80",
    ddl: ["DROP INDEX like_fact_likers", "ALTER TABLE like_fact SET (fillfactor = 80)"],
  },
  { name: "neither", ddl: ["ALTER TABLE like_outbox DROP CONSTRAINT like_outbox_user_id_item_id_version_key", "DROP INDEX like_fact_likers", "ALTER TABLE like_fact SET (fillfactor = 80)"] },
];

const { values } = parseArgs({ options: { ops: { type: "string" }, rounds: { type: "string" }, partitions: { type: "string" } } });
const OPS = Number(values.ops ?? 4000);
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
  const targets: { name: string; pool: Pool; ledger: Ledger; offset: number; results: { perOp: Wal; opsPerSec: number }[]; byRelation?: Map<string, number> }[] = [];
  for (const [i, variant] of VARIANTS.entries()) {
    await admin.query(`CREATE DATABASE wal_v${i}`);
    const pool = createPool({ connectionString: cluster.connectionString(`wal_v${i}`), max: 20 });
    pools.push(pool);
    await migrate(pool);
    await initLedger(pool, { partitions: P });
    for (const ddl of variant.ddl) await pool.query(ddl);
    const ledger = await openLedger(pool);
    for (let n = 0; n < ITEMS; n++) await ledger.likes.createItem(`item-${n}`);
    targets.push({ name: variant.name, pool, ledger, offset: 0, results: [] });
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
      t.results.push({
        perOp: { records: (wal1.records - wal0.records) / changed, fpi: (wal1.fpi - wal0.fpi) / changed, bytes: (wal1.bytes - wal0.bytes) / changed },
        opsPerSec: changed / figures.seconds,
      });
    }
  }
  const fmt = (xs: number[], d = 0) => xs.map((x) => x.toFixed(d)).join(" / ");
  process.stdout.write(`WAL per CHANGED like/unlike, P=${P}, 16 workers, ${OPS} ops per variant and round, ${ROUNDS} rounds (one figure per round):\n`);
  for (const t of targets) {
    process.stdout.write(
      `  ${t.name.padEnd(44)} bytes ${fmt(t.results.map((r) => r.perOp.bytes))}  records ${fmt(t.results.map((r) => r.perOp.records), 1)}` +
        `  FPI ${fmt(t.results.map((r) => r.perOp.fpi), 2)}  CHANGED/s ${fmt(t.results.map((r) => r.opsPerSec))}\n`,
    );
  }
  process.stdout.write("WAL bytes per CHANGED like/unlike by relation (last round; pg_walinspect, a record counted for its first block's relation):\n");
  for (const t of targets) {
    const parts = [...(t.byRelation ?? [])].sort((a, b) => b[1] - a[1]).map(([name, bytes]) => `${name} ${bytes.toFixed(0)}`);
    process.stdout.write(`  ${t.name}: ${parts.join(", ")}\n`);
  }
} finally {
  for (const pool of pools) await pool.end();
  await cluster.stop();
  await rm(root, { recursive: true, force: true });
}
