/**
 * `npm run bench:batch-cost`: backend time per write of one like_set_batch call of N writes
 * (default 64 distinct pairs, every pair existing, so each call toggles N fact rows), measured
 * inside the server (clock_timestamp() around the call in a PL/pgSQL wrapper, so neither the
 * round trip nor the commit's flush is in it), for the function before migration 024 and as
 * migrated, and for a set-based prototype of the common case (distinct pairs, one UPDATE for all
 * of them) that is NOT the production function: it cannot promise the lock order
 * (docs/decisions/0014-set-based-like-batch-reverted.md), and is measured to know what the
 * per-pair loop costs. One database each, in one cluster; the variants take turns call by call, for `--seconds` in total.
 *
 *   node --import tsx bench/like-batch-cost.ts [--writes n] [--seconds s]
 */
import { loadavg } from "node:os";
import path from "node:path";
import { rm } from "node:fs/promises";
import { parseArgs } from "node:util";
import { EmbeddedCluster, clusterTempDir } from "../src/db/embedded-cluster.ts";
import { initLedger } from "../src/db/ledger-config.ts";
import { loadMigrations, migrate } from "../src/db/migrate.ts";
import { createPool, type Pool } from "../src/db/pool.ts";

/** Runs the batch and returns the µs it took inside the backend (the caller commits afterwards). */
const TIMED = `
CREATE FUNCTION bench_timed_batch(p_users text[], p_items text[], p_wants boolean[], p_parts integer[], p_checked boolean[], p_set_based text)
  RETURNS double precision LANGUAGE plpgsql AS $$
DECLARE
  t0 timestamptz := clock_timestamp();
BEGIN
  IF p_set_based IS NOT NULL THEN
    PERFORM bench_set_based(p_users, p_items, p_wants, p_parts, p_set_based = 'lock first');
  ELSE
    PERFORM like_set_batch(p_users, p_items, p_wants, p_parts, p_checked);
  END IF;
  RETURN extract(epoch FROM clock_timestamp() - t0) * 1e6;
END $$`;

/**
 * The common case as one statement per table: distinct pairs that exist, each changed iff it
 * differs (no rejections, no erasure check, no hook): a lower bound for the loop, not a candidate.
 */
const SET_BASED = `
CREATE FUNCTION bench_set_based(p_users text[], p_items text[], p_wants boolean[], p_parts integer[], p_lock_first boolean) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_last bigint;
  v_n integer;
BEGIN
  PERFORM set_config('ledger.like_guarded', 'on', true);
  IF p_lock_first THEN
    -- Row locks in the global order (LockRows runs above the Sort), then the UPDATE waits for nobody.
    PERFORM 1 FROM like_fact f JOIN unnest(p_users, p_items) AS w(user_id, item_id) ON f.user_id = w.user_id AND f.item_id = w.item_id
      ORDER BY f.item_id COLLATE "C", f.user_id COLLATE "C" FOR UPDATE OF f;
  END IF;
  SET LOCAL client_min_messages = warning;
  CREATE TEMP TABLE IF NOT EXISTS bench_changed (part integer, user_id text, item_id text, liked boolean, version bigint) ON COMMIT DELETE ROWS;
  WITH w AS (SELECT * FROM unnest(p_users, p_items, p_wants, p_parts) AS w(user_id, item_id, want, part)),
       u AS (UPDATE like_fact f SET liked = w.want, version = f.version + 1, changed_at = now()
               FROM w WHERE f.user_id = w.user_id AND f.item_id = w.item_id AND f.liked <> w.want
             RETURNING w.part, f.user_id, f.item_id, f.liked, f.version)
  INSERT INTO bench_changed SELECT * FROM u;
  GET DIAGNOSTICS v_n = ROW_COUNT;
  PERFORM set_config('ledger.like_guarded', '', true);
  IF v_n = 0 THEN RETURN; END IF;
  UPDATE like_seq s SET last = s.last + v_n WHERE s.part = p_parts[1] RETURNING s.last - v_n INTO v_last;
  INSERT INTO like_outbox (part, seq, user_id, item_id, delta, version)
  SELECT c.part, v_last + row_number() OVER (), c.user_id, c.item_id, CASE WHEN c.liked THEN 1 ELSE -1 END, c.version FROM bench_changed c;
END $$`;

const { values } = parseArgs({ options: { writes: { type: "string" }, seconds: { type: "string" } } });
const WRITES = Number(values.writes ?? 64);
const SECONDS = Number(values.seconds ?? 20);

const VARIANTS: { name: string; without?: string; setBased?: string }[] = [
  { name: "before 024 (FOR UPDATE, then UPDATE)", without: "_like_lock_by_update.sql" },
  { name: "as migrated (one conditional UPDATE)" },
  { name: "set-based prototype (not production)", setBased: "plain" },
  { name: "set-based, locked in order first", setBased: "lock first" },
];

const root = await clusterTempDir("social-ledger-batch-cost-");
const cluster = await EmbeddedCluster.start({ dataDir: path.join(root, "pgdata") });
const pools: Pool[] = [];
try {
  const admin = createPool({ connectionString: cluster.connectionString("postgres"), max: 1 });
  pools.push(admin);
  const all = await loadMigrations();
  const targets: { name: string; pool: Pool; setBased: string | null; us: number[]; round: number }[] = [];
  for (const [i, variant] of VARIANTS.entries()) {
    await admin.query(`CREATE DATABASE cost_v${i}`);
    const pool = createPool({ connectionString: cluster.connectionString(`cost_v${i}`), max: 1 });
    pools.push(pool);
    await migrate(pool, variant.without === undefined ? all : all.filter((m) => !m.name.endsWith(variant.without!)));
    await initLedger(pool, { partitions: 1 });
    await pool.query(SET_BASED);
    await pool.query(TIMED);
    await pool.query("INSERT INTO item (item_id, kind) SELECT 'item-' || n, 'plain' FROM generate_series(0, 99) n");
    targets.push({ name: variant.name, pool, setBased: variant.setBased ?? null, us: [], round: 0 });
  }
  const users = Array.from({ length: WRITES }, (_, i) => `u${i}`);
  const items = users.map((_, i) => `item-${i % 100}`);
  // Every pair exists (unliked, v0) in every database, so every call toggles WRITES existing rows.
  for (const t of targets) {
    await t.pool.query("INSERT INTO like_fact (user_id, item_id, liked, version) SELECT u, i, false, 0 FROM unnest($1::text[], $2::text[]) AS p(u, i)", [users, items]);
  }
  const call = async (t: (typeof targets)[number]): Promise<number> => {
    const want = t.round++ % 2 === 0; // like all, then unlike all: every write CHANGED
    const { rows } = await t.pool.query<{ us: number }>(
      "SELECT bench_timed_batch($1::text[], $2::text[], $3::boolean[], $4::integer[], $5::boolean[], $6::text) AS us",
      [users, items, users.map(() => want), users.map(() => 0), users.map(() => false), t.setBased],
    );
    return rows[0]!.us;
  };
  // Warm-up: the pairs' first writes, and each session's plans.
  for (const t of targets) for (let k = 0; k < 10; k++) await call(t);
  const load0 = loadavg()[0]!;
  const end = Date.now() + SECONDS * 1000;
  while (Date.now() < end) {
    for (const t of targets) t.us.push(await call(t));
  }
  const load1 = loadavg()[0]!;
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  process.stdout.write(
    `like_set_batch of ${WRITES} distinct existing pairs, every write CHANGED, backend µs per write (inside the call, no commit), ` +
      `variants alternating call by call for ${SECONDS} s; 1-min load average ${load0.toFixed(1)} at the start, ${load1.toFixed(1)} at the end:\n`,
  );
  const base = median(targets[0]!.us);
  for (const t of targets) {
    const m = median(t.us);
    const mean = t.us.reduce((s, x) => s + x, 0) / t.us.length;
    process.stdout.write(
      `  ${t.name.padEnd(40)} calls ${t.us.length}  median ${(m / WRITES).toFixed(1)} µs/write  mean ${(mean / WRITES).toFixed(1)} µs/write  median ÷ first ${(m / base).toFixed(2)}\n`,
    );
  }
} finally {
  for (const pool of pools) await pool.end();
  await cluster.stop();
  await rm(root, { recursive: true, force: true });
}
