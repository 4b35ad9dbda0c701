/**
 * `node --import tsx bench/relation-wal.ts`: WAL per CHANGED follow/unfollow before migration 026
 * (the relation erasure guard BEFORE UPDATE, fired for the batch's rows) and as migrated (AFTER
 * UPDATE, skipped for relation_set_batch's own rows), each unbatched (LEDGER_WRITE_BATCH_MAX = 1:
 * relation_follow / relation_unfollow) and batched (relation_set_batch), side by side on one
 * embedded cluster: one database per variant, every round runs each variant once, one at a time
 * (order rotating), so the WAL between two positions is that variant's; pg_walinspect splits it
 * by relation and record kind (docs/decisions/0010-relation-group-commit.md).
 *
 *   node --import tsx bench/relation-wal.ts [--ops n] [--rounds n] [--partitions P]
 */
import { loadavg } from "node:os";
import path from "node:path";
import { rm } from "node:fs/promises";
import { parseArgs } from "node:util";
import { EmbeddedCluster, clusterTempDir } from "../src/db/embedded-cluster.ts";
import { initLedger } from "../src/db/ledger-config.ts";
import { loadMigrations, migrate } from "../src/db/migrate.ts";
import { createPool, type Pool } from "../src/db/pool.ts";
import { RelationService } from "../src/relations/relation-service.ts";
import { runFixedCount } from "./load.ts";

const { values } = parseArgs({ options: { ops: { type: "string" }, rounds: { type: "string" }, partitions: { type: "string" } } });
const OPS = Number(values.ops ?? 4000);
const ROUNDS = Number(values.rounds ?? 3);
const P = Number(values.partitions ?? 4);
const USERS = 1000;
/** The migration left out by the "before" variants (by the end of its name: survives renumbering). */
const WITHOUT = "_relation_guard_after_update.sql";

const VARIANTS = [
  { name: "before 026, unbatched", before: true, batchMax: 1 },
  { name: "as migrated, unbatched", before: false, batchMax: 1 },
  { name: "before 026, batched", before: true, batchMax: undefined },
  { name: "as migrated, batched", before: false, batchMax: undefined },
];

interface Target {
  name: string;
  pool: Pool;
  rel: RelationService;
  offset: number;
  changed: number;
  bytes: number;
  errors: number;
  /** Per round: WAL bytes per change, changes per second. */
  perRound: { bytes: number; rate: number }[];
  kinds: Map<string, { n: number; bytes: number }>;
}

async function lsn(admin: Pool): Promise<string> {
  return (await admin.query<{ lsn: string }>("SELECT pg_current_wal_lsn()::text AS lsn")).rows[0]!.lsn;
}

/** This database's WAL records between two positions by (relation of the first block, record kind); commits of the whole cluster. */
async function walByKind(admin: Pool, pool: Pool, from: string, to: string): Promise<Map<string, { n: number; bytes: number }>> {
  const { rows } = await admin.query<{ db: string; filenode: string; type: string; n: string; bytes: string }>(
    `SELECT reldatabase::bigint AS db, relfilenode::bigint AS filenode, resource_manager || '/' || record_type AS type,
            count(*)::bigint AS n, sum(record_length)::bigint AS bytes
       FROM pg_get_wal_block_info($1::pg_lsn, $2::pg_lsn, false) WHERE block_id = 0 GROUP BY 1, 2, 3`,
    [from, to],
  );
  const own = Number((await pool.query<{ oid: string }>("SELECT oid::bigint AS oid FROM pg_database WHERE datname = current_database()")).rows[0]!.oid);
  const out = new Map<string, { n: number; bytes: number }>();
  const add = (key: string, n: number, bytes: number) => {
    const s = out.get(key) ?? { n: 0, bytes: 0 };
    out.set(key, { n: s.n + n, bytes: s.bytes + bytes });
  };
  for (const row of rows) {
    if (Number(row.db) !== own) continue;
    const name = (await pool.query<{ name: string | null }>("SELECT pg_filenode_relation(0, $1::oid)::text AS name", [row.filenode])).rows[0]!.name ?? `filenode ${row.filenode}`;
    add(`${name} ${row.type}`, Number(row.n), Number(row.bytes));
  }
  const commits = await admin.query<{ n: string; bytes: string }>(
    "SELECT count(*)::bigint AS n, coalesce(sum(record_length), 0)::bigint AS bytes FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn) WHERE resource_manager = 'Transaction'",
    [from, to],
  );
  add("(Transaction records)", Number(commits.rows[0]!.n), Number(commits.rows[0]!.bytes));
  return out;
}

async function eventsWritten(pool: Pool): Promise<number> {
  return Number((await pool.query<{ n: string }>("SELECT coalesce(sum(last), 0)::bigint AS n FROM event_seq")).rows[0]!.n);
}

const root = await clusterTempDir("social-ledger-relwal-");
const cluster = await EmbeddedCluster.start({ dataDir: path.join(root, "pgdata"), settings: { max_connections: "150" } });
const pools: Pool[] = [];
try {
  const admin = createPool({ connectionString: cluster.connectionString("postgres"), max: 1 });
  pools.push(admin);
  await admin.query("CREATE EXTENSION pg_walinspect");
  const all = await loadMigrations();
  const targets: Target[] = [];
  for (const [i, v] of VARIANTS.entries()) {
    await admin.query(`CREATE DATABASE relwal_v${i}`);
    const pool = createPool({ connectionString: cluster.connectionString(`relwal_v${i}`), max: 20 });
    pools.push(pool);
    await migrate(pool, v.before ? all.filter((m) => !m.name.endsWith(WITHOUT)) : all);
    await initLedger(pool, { partitions: P });
    await pool.query("INSERT INTO account (account_id) SELECT 'a' || n FROM generate_series(0, $1::int - 1) AS n", [USERS]);
    const rel = await RelationService.open(pool, v.batchMax === undefined ? {} : { batchMax: v.batchMax });
    targets.push({ name: v.name, pool, rel, offset: 0, changed: 0, bytes: 0, errors: 0, perRound: [], kinds: new Map() });
  }
  // Operation k toggles pair k mod USERS (a_j follows a_(7j+1), unfollows on odd passes).
  const run = (t: Target) =>
    runFixedCount(OPS, 16, (k) => {
      const g = t.offset + k;
      const j = g % USERS;
      const follower = `a${j}`;
      const followee = `a${(7 * j + 1) % USERS}`;
      return Math.floor(g / USERS) % 2 === 0 ? t.rel.follow(follower, followee) : t.rel.unfollow(follower, followee);
    });
  for (const t of targets) {
    await run(t); // warm-up: the first pass inserts the pairs' relation rows
    t.offset += OPS;
  }
  await admin.query("CHECKPOINT");
  const load0 = loadavg()[0]!;
  for (let round = 0; round < ROUNDS; round++) {
    const order = targets.map((_, i) => targets[(i + round) % targets.length]!);
    for (const t of round % 2 === 0 ? order : order.reverse()) {
      const events0 = await eventsWritten(t.pool);
      const lsn0 = await lsn(admin);
      const figures = await run(t);
      const lsn1 = await lsn(admin);
      const changed = (await eventsWritten(t.pool)) - events0;
      const bytes = Number((await admin.query<{ b: string }>("SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::text AS b", [lsn0, lsn1])).rows[0]!.b);
      for (const [k, r] of await walByKind(admin, t.pool, lsn0, lsn1)) {
        const s = t.kinds.get(k) ?? { n: 0, bytes: 0 };
        t.kinds.set(k, { n: s.n + r.n, bytes: s.bytes + r.bytes });
      }
      t.changed += changed;
      t.bytes += bytes;
      t.errors += figures.errors;
      t.offset += OPS;
      t.perRound.push({ bytes: bytes / changed, rate: changed / figures.seconds });
    }
  }
  const load1 = loadavg()[0]!;
  process.stdout.write(
    `WAL per CHANGED follow/unfollow, P=${P}, 16 workers, ${OPS} ops per variant and round, ${ROUNDS} rounds` +
      ` (whole cluster, LSN difference; 1-min load average ${load0.toFixed(1)} at the start, ${load1.toFixed(1)} at the end):\n`,
  );
  // Each "as migrated" variant's CHANGED/s ÷ its "before 026" neighbour's, per round (the same minutes of the machine).
  for (const [i, t] of targets.entries()) {
    if (i % 2 === 0) continue;
    const base = targets[i - 1]!;
    process.stdout.write(`  CHANGED/s ${t.name} ÷ ${base.name}: ${t.perRound.map((r, k) => (r.rate / base.perRound[k]!.rate).toFixed(2)).join(" / ")}\n`);
  }
  for (const t of targets) {
    const batches = t.rel.batchStats();
    process.stdout.write(
      `  ${t.name.padEnd(24)} bytes/change ${t.perRound.map((x) => x.bytes.toFixed(0)).join(" / ")}  (all rounds ${(t.bytes / t.changed).toFixed(0)})` +
        `${batches ? `  ${(batches.writes / Math.max(1, batches.batches)).toFixed(1)} writes per batch` : ""}${t.errors > 0 ? `  ERRORS ${t.errors}` : ""}\n`,
    );
    // Kinds of at least 0.05 records per change by name; the rest (splits, prunes of indexes, ...) summed.
    const sorted = [...t.kinds].sort((a, b) => b[1].bytes - a[1].bytes);
    const shown = sorted.filter(([, r]) => r.n / t.changed >= 0.05).map(([k, r]) => `${k} ${(r.n / t.changed).toFixed(2)} x ${(r.bytes / r.n).toFixed(0)} B`);
    const rest = sorted.filter(([, r]) => r.n / t.changed < 0.05).reduce((sum, [, r]) => sum + r.bytes, 0);
    process.stdout.write(`    records per change: ${shown.join(", ")}; the rest ${(rest / t.changed).toFixed(0)} B\n`);
  }
} finally {
  for (const pool of pools) await pool.end();
  await cluster.stop();
  await rm(root, { recursive: true, force: true });
}
