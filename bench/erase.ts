/**
 * `npm run bench:erase`: erases an account of about 100k facts (likes it gave, follows both ways,
 * posts with likes from others) on an embedded PostgreSQL of its own, while live writers like and
 * unlike other items, and prints the erasure's facts/s and duration and the live writes' p50/p99
 * idle vs during the erasure (docs/erasure.md). Options: --likes N --follows N --posts N
 * --likes-per-post N --batch-size N --writers N --partitions N (defaults below).
 */
import { rm } from "node:fs/promises";
import path from "node:path";
import { parseArgs } from "node:util";
import { fullAudit } from "../src/api/routes/admin.ts";
import { EmbeddedCluster, clusterTempDir } from "../src/db/embedded-cluster.ts";
import { initLedger } from "../src/db/ledger-config.ts";
import { migrate } from "../src/db/migrate.ts";
import { createPool } from "../src/db/pool.ts";
import { openLedger, type Ledger } from "../src/ledger.ts";
import { formatShares, sampleBackgroundWaits } from "./background-waits.ts";

const { values } = parseArgs({
  options: {
    likes: { type: "string", default: "40000" }, follows: { type: "string", default: "10000" },
    posts: { type: "string", default: "1000" }, "likes-per-post": { type: "string", default: "40" },
    "batch-size": { type: "string", default: "500" }, writers: { type: "string", default: "4" },
    partitions: { type: "string", default: "16" }, "idle-seconds": { type: "string", default: "3" },
  },
});
const n = (name: keyof typeof values) => {
  const v = Number(values[name]);
  if (!Number.isSafeInteger(v) || v < 0) throw new Error(`--${name} must be a non-negative integer, got ${values[name]}`);
  return v;
};
const LIKES = n("likes"), FOLLOWS = n("follows"), POSTS = n("posts"), LIKES_PER_POST = n("likes-per-post");
const BATCH = n("batch-size"), WRITERS = n("writers"), PARTITIONS = n("partitions"), IDLE_S = n("idle-seconds");
const OTHERS = Math.max(FOLLOWS, LIKES_PER_POST, 100);

function percentile(sorted: number[], p: number): number {
  return sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}
const fmt = (ms: number) => `${ms.toFixed(2)} ms`;

/** Live writers: like/unlike of items of their own, one at a time each, until `stop`; their latencies. */
async function liveWrites(ledger: Ledger, stop: Promise<void>): Promise<number[]> {
  let stopped = false;
  void stop.then(() => (stopped = true));
  const latencies: number[] = [];
  await Promise.all(Array.from({ length: WRITERS }, async (_, w) => {
    for (let i = 0; !stopped; i++) {
      const t0 = performance.now();
      const item = `live-${w}-${i % 50}`;
      await (i % 100 < 50 ? ledger.likes.like(`live-user-${w}`, item) : ledger.likes.unlike(`live-user-${w}`, item));
      latencies.push(performance.now() - t0);
    }
  }));
  return latencies.sort((a, b) => a - b);
}

async function seed(ledger: Ledger): Promise<number> {
  const { pool } = ledger;
  await pool.query("INSERT INTO account (account_id) SELECT 'o' || i FROM generate_series(1, $1::int) i", [OTHERS]);
  await pool.query("INSERT INTO account (account_id) VALUES ('eve')");
  await pool.query("INSERT INTO item (item_id, kind) SELECT 'p' || i, 'plain' FROM generate_series(1, $1::int) i", [LIKES]);
  for (let w = 0; w < WRITERS; w++) for (let i = 0; i < 50; i++) await ledger.likes.createItem(`live-${w}-${i}`);
  // Through the write functions, in server-side loops (a few statements instead of 100k round trips).
  await pool.query("SELECT count(*) FROM generate_series(1, $1::int) i, LATERAL like_set('eve', 'p' || i, true, ledger_partition('eve', $2))", [LIKES, PARTITIONS]);
  await pool.query("SELECT count(*) FROM generate_series(1, $1::int) i, LATERAL relation_follow('eve', 'o' || i, $2)", [FOLLOWS, PARTITIONS]);
  await pool.query("SELECT count(*) FROM generate_series(1, $1::int) i, LATERAL relation_follow('o' || i, 'eve', $2)", [FOLLOWS, PARTITIONS]);
  await pool.query(
    `WITH ids AS (SELECT 'eve-post-' || i AS id FROM generate_series(1, $1::int) i),
          items AS (INSERT INTO item (item_id, kind) SELECT id, 'post' FROM ids RETURNING item_id)
     INSERT INTO post (post_id, author, visibility, body, part, acl_token) SELECT item_id, 'eve', 'PUBLIC', 'hello', ledger_partition('eve', $2), 0 FROM items`,
    [POSTS, PARTITIONS]);
  await pool.query(
    `SELECT count(*) FROM generate_series(1, $1::int) p, generate_series(1, $2::int) u,
            LATERAL like_set('o' || u, 'eve-post-' || p, true, ledger_partition('o' || u, $3))`, [POSTS, LIKES_PER_POST, PARTITIONS]);
  await ledger.likeConsumer.drain(2000);
  await ledger.projector.drain(2000);
  return LIKES + 2 * FOLLOWS + POSTS + POSTS * LIKES_PER_POST;
}

const root = await clusterTempDir("social-ledger-bench-erase-");
const cluster = await EmbeddedCluster.start({ dataDir: path.join(root, "pgdata") });
try {
  const admin = createPool({ connectionString: cluster.connectionString("postgres"), max: 1 });
  await admin.query("CREATE DATABASE bench_erase");
  await admin.end();
  const pool = createPool({ connectionString: cluster.connectionString("bench_erase"), max: WRITERS + 4 });
  try {
    await migrate(pool);
    await initLedger(pool, { partitions: PARTITIONS });
    const ledger = await openLedger(pool, { erasureBatchSize: BATCH });
    const t0 = performance.now();
    const facts = await seed(ledger);
    process.stdout.write(`seeded an account of ${facts} facts (${LIKES} likes, ${FOLLOWS} follows each way, ${POSTS} posts with ${LIKES_PER_POST} likes each) in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`);

    const samplerPool = createPool({ connectionString: cluster.connectionString("bench_erase"), max: 1 });
    const idleSampler = sampleBackgroundWaits(samplerPool, "bench_erase", "%erasure_step%");
    const idle = await liveWrites(ledger, new Promise((resolve) => setTimeout(resolve, IDLE_S * 1000)));
    const idleWaits = await idleSampler.stop();
    const duringSampler = sampleBackgroundWaits(samplerPool, "bench_erase", "%erasure_step%");
    let finished!: () => void;
    const erasureDone = new Promise<void>((resolve) => (finished = resolve));
    const during = liveWrites(ledger, erasureDone);
    const e0 = performance.now();
    const started = await ledger.erasure.start("eve", "cli");
    // One batch at a time (what run() does), timed per phase.
    const perPhase = new Map<string, { batches: number; facts: number; ms: number }>();
    for (;;) {
      const b0 = performance.now();
      const batch = await ledger.erasure.step("eve");
      const entry = perPhase.get(batch.phase) ?? { batches: 0, facts: 0, ms: 0 };
      perPhase.set(batch.phase, { batches: entry.batches + 1, facts: entry.facts + batch.facts, ms: entry.ms + performance.now() - b0 });
      if (batch.nextPhase === "done") break;
    }
    const status = (await ledger.erasure.status("eve"))!;
    const seconds = (performance.now() - e0) / 1000;
    finished();
    const busy = await during;
    const duringWaits = await duringSampler.stop();
    await samplerPool.end();
    process.stdout.write(`waits idle (live): ${formatShares(idleWaits.live, 6)}\nwaits during (live): ${formatShares(duringWaits.live, 8)}\nwaits during (erasure backend): ${formatShares(duringWaits.background, 5)}\n`);
    await ledger.likeConsumer.drain(2000);
    await ledger.projector.drain(2000);
    await ledger.commentConsumer.drain(2000);
    const audit = await fullAudit(ledger);
    process.stdout.write([
      `erasure: ${status.done} facts (counted at start ${started.status.total}) in ${status.batches} batches of <= ${BATCH}: ${seconds.toFixed(2)} s, ${Math.round(status.done / seconds)} facts/s`,
      `live writes idle:   n=${idle.length} p50=${fmt(percentile(idle, 50))} p99=${fmt(percentile(idle, 99))} max=${fmt(idle.at(-1) ?? NaN)}`,
      `live writes during: n=${busy.length} p50=${fmt(percentile(busy, 50))} p99=${fmt(percentile(busy, 99))} max=${fmt(busy.at(-1) ?? NaN)}`,
      ...[...perPhase].map(([phase, p]) => `  ${phase.padEnd(14)} ${String(p.facts).padStart(7)} facts in ${String(p.batches).padStart(4)} batches: ${(p.ms / 1000).toFixed(2)} s, ${(p.ms / p.batches).toFixed(1)} ms per batch`),
      `audit after draining: ${audit.clean ? "clean" : "NOT CLEAN " + JSON.stringify(audit)}`,
    ].join("\n") + "\n");
    if (!audit.clean || status.phase !== "done") process.exitCode = 1;
  } finally {
    await pool.end();
  }
} finally {
  await cluster.stop();
  await rm(root, { recursive: true, force: true });
}
