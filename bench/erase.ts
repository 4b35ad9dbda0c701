/**
 * `npm run bench:erase`: erases accounts of about 100k facts each (likes they gave, follows both
 * ways, posts with likes from others) on an embedded PostgreSQL of its own, one per pacing
 * variant, while live writers like and unlike other items, live readers read their counts and the
 * consumers run; per variant it prints the erasure's facts/s and the live writes' and reads' p99
 * idle (measured just before and just after, pooled: the machine's load drifts) vs during, with
 * the ratio and issue 22's 1.3x goal, and what the live backends waited on during the erasure
 * (pg_stat_activity and pg_locks sampled; docs/erasure.md "Pacing"). Variants: unpaced (fixed batches of --batch-size back to back: the old behaviour) and
 * paced (LEDGER_BACKGROUND_BATCH_MS / LEDGER_BACKGROUND_DUTY defaults, or --budget-ms / --duty).
 * Options: --likes N --follows N --posts N --likes-per-post N --batch-size N --writers N
 * --readers N --partitions N --idle-seconds N --variants unpaced,paced --budget-ms N --duty F.
 */
import os from "node:os";
import { parseArgs } from "node:util";
import { fullAudit } from "../src/api/routes/admin.ts";
import { ErasureService } from "../src/erasure/erasure-service.ts";
import { createWorkers, openLedger, type Ledger } from "../src/ledger.ts";
import { DEFAULT_PACING, UNPACED, rest, type PacingOptions } from "../src/workers/pacer.ts";
import { BenchCluster } from "./bench-cluster.ts";
import { formatShares, sampleBackgroundWaits, type BackgroundWaits } from "./background-waits.ts";
import { after, describe, liveTraffic, pooled, ratioLine, type Latencies } from "./live-traffic.ts";

const { values } = parseArgs({
  options: {
    likes: { type: "string", default: "40000" },
    follows: { type: "string", default: "10000" },
    posts: { type: "string", default: "1000" },
    "likes-per-post": { type: "string", default: "40" },
    "batch-size": { type: "string", default: "500" },
    writers: { type: "string", default: "4" },
    readers: { type: "string", default: "2" },
    partitions: { type: "string", default: "16" },
    "idle-seconds": { type: "string", default: "6" },
    variants: { type: "string", default: "unpaced,paced" },
    "budget-ms": { type: "string", default: String(DEFAULT_PACING.budgetMs) },
    duty: { type: "string", default: String(DEFAULT_PACING.duty) },
  },
});
const n = (name: keyof typeof values) => {
  const v = Number(values[name]);
  if (!Number.isSafeInteger(v) || v < 0)
    throw new Error(`--${name} must be a non-negative integer, got ${values[name]}`);
  return v;
};
const LIKES = n("likes"),
  FOLLOWS = n("follows"),
  POSTS = n("posts"),
  LIKES_PER_POST = n("likes-per-post");
const BATCH = n("batch-size"),
  WRITERS = n("writers"),
  READERS = n("readers"),
  PARTITIONS = n("partitions"),
  IDLE_S = n("idle-seconds");
const OTHERS = Math.max(FOLLOWS, LIKES_PER_POST, 100);
const PACED: PacingOptions = { budgetMs: n("budget-ms"), duty: Number(values.duty) };
const VARIANTS: Record<string, PacingOptions> = { unpaced: UNPACED, paced: PACED };
const variants = String(values.variants)
  .split(",")
  .map((v) => v.trim());
for (const v of variants) if (!(v in VARIANTS)) throw new Error(`--variants: unknown variant ${v} (unpaced, paced)`);

/** The account of variant `v`: its likes, follows both ways, posts and their likes, through the write functions. */
async function seed(ledger: Ledger, account: string): Promise<number> {
  const { pool } = ledger;
  await pool.query("INSERT INTO account (account_id) VALUES ($1)", [account]);
  await pool.query(
    "INSERT INTO item (item_id, kind) SELECT $2 || '-p' || i, 'plain' FROM generate_series(1, $1::int) i",
    [LIKES, account],
  );
  // In server-side loops: a few statements instead of 100k round trips.
  await pool.query(
    "SELECT count(*) FROM generate_series(1, $1::int) i, LATERAL like_set($3, $3 || '-p' || i, true, ledger_partition($3, $2))",
    [LIKES, PARTITIONS, account],
  );
  await pool.query("SELECT count(*) FROM generate_series(1, $1::int) i, LATERAL relation_follow($3, 'o' || i, $2)", [
    FOLLOWS,
    PARTITIONS,
    account,
  ]);
  await pool.query("SELECT count(*) FROM generate_series(1, $1::int) i, LATERAL relation_follow('o' || i, $3, $2)", [
    FOLLOWS,
    PARTITIONS,
    account,
  ]);
  await pool.query(
    `WITH ids AS (SELECT $3 || '-post-' || i AS id FROM generate_series(1, $1::int) i),
          items AS (INSERT INTO item (item_id, kind) SELECT id, 'post' FROM ids RETURNING item_id)
     INSERT INTO post (post_id, author, visibility, body, part, acl_token) SELECT item_id, $3, 'PUBLIC', 'hello', ledger_partition($3, $2), 0 FROM items`,
    [POSTS, PARTITIONS, account],
  );
  await pool.query(
    `SELECT count(*) FROM generate_series(1, $1::int) p, generate_series(1, $2::int) u,
            LATERAL like_set('o' || u, $4 || '-post-' || p, true, ledger_partition('o' || u, $3))`,
    [POSTS, LIKES_PER_POST, PARTITIONS, account],
  );
  return LIKES + 2 * FOLLOWS + POSTS + POSTS * LIKES_PER_POST;
}

interface PhaseFigures {
  batches: number;
  facts: number;
  ms: number;
  sizes: number;
}
interface VariantResult {
  variant: string;
  pacing: PacingOptions;
  facts: number;
  batches: number;
  seconds: number;
  idle: Latencies;
  during: Latencies;
  waits: BackgroundWaits;
  phases: Map<string, PhaseFigures>;
}

const bench = await BenchCluster.start("social-ledger-bench-erase-");
try {
  const pool = await bench.ledgerDatabase("bench_erase", { partitions: PARTITIONS, max: WRITERS + READERS + 10 });
  const samplerPool = bench.pool("bench_erase", 1);
  const ledger = await openLedger(pool);
  const t0 = performance.now();
  await pool.query("INSERT INTO account (account_id) SELECT 'o' || i FROM generate_series(1, $1::int) i", [OTHERS]);
  for (let w = 0; w < WRITERS; w++) for (let i = 0; i < 50; i++) await ledger.likes.createItem(`live-${w}-${i}`);
  let facts = 0;
  for (const v of variants) facts = await seed(ledger, `eve-${v}`);
  await ledger.likeConsumer.drain(2000);
  await ledger.projector.drain(2000);
  process.stdout.write(
    `seeded ${variants.length} account(s) of ${facts} facts each (${LIKES} likes, ${FOLLOWS} follows each way, ${POSTS} posts with ${LIKES_PER_POST} likes each) in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`,
  );
  // The consumers run throughout, as in serve: they consume the erasure's events too.
  const workers = createWorkers(ledger, { loops: 1, idleMs: 50 });
  for (const w of workers) w.start();
  const traffic = (stop: Promise<void>) => liveTraffic(ledger, stop, { writers: WRITERS, readers: READERS });
  const results: VariantResult[] = [];
  for (const v of variants) {
    const account = `eve-${v}`;
    const pacing = VARIANTS[v]!;
    const erasure = await ErasureService.open(pool, { batchSize: BATCH, pacing });
    const idle = await traffic(after(IDLE_S * 1000));
    let finished!: () => void;
    const erasureDone = new Promise<void>((resolve) => (finished = resolve));
    const sampler = sampleBackgroundWaits(samplerPool, "bench_erase", "%erasure_step%");
    const during = traffic(erasureDone);
    const e0 = performance.now();
    await erasure.start(account, "cli");
    // What run() does, timed per phase.
    const phases = new Map<string, PhaseFigures>();
    for (;;) {
      const batch = await erasure.step(account);
      const entry = phases.get(batch.phase) ?? { batches: 0, facts: 0, ms: 0, sizes: 0 };
      phases.set(batch.phase, {
        batches: entry.batches + 1,
        facts: entry.facts + batch.facts,
        ms: entry.ms + batch.ms,
        sizes: entry.sizes + batch.size,
      });
      if (batch.nextPhase === "done") break;
      await rest(erasure.restAfter(batch));
    }
    const seconds = (performance.now() - e0) / 1000;
    finished();
    const status = (await erasure.status(account))!;
    const busy = await during;
    const waits = await sampler.stop();
    const idleAfter = await traffic(after(IDLE_S * 1000));
    results.push({
      variant: v,
      pacing,
      facts: status.done,
      batches: status.batches,
      seconds,
      idle: pooled(idle, idleAfter),
      during: busy,
      waits,
      phases,
    });
    if (status.phase !== "done") process.exitCode = 1;
  }
  for (const w of workers) await w.stop();
  await ledger.likeConsumer.drain(2000);
  await ledger.projector.drain(2000);
  await ledger.commentConsumer.drain(2000);
  const audit = await fullAudit(ledger);
  const lines: string[] = [];
  for (const r of results) {
    lines.push(
      `\n== ${r.variant} (batch budget ${r.pacing.budgetMs === 0 ? `none: ${BATCH} facts` : `${r.pacing.budgetMs} ms, at most ${BATCH} facts`}, duty ${r.pacing.duty})`,
      `erasure: ${r.facts} facts in ${r.batches} batches: ${r.seconds.toFixed(2)} s, ${Math.round(r.facts / r.seconds)} facts/s`,
      `live writes: ${ratioLine(r.idle.writes, r.during.writes)}`,
      `live reads:  ${ratioLine(r.idle.reads, r.during.reads)}`,
      `  ${describe("writes idle:  ", r.idle.writes)}`,
      `  ${describe("writes during:", r.during.writes)}`,
      `  ${describe("reads idle:   ", r.idle.reads)}`,
      `  ${describe("reads during: ", r.during.reads)}`,
      `  live backends waited on (${r.waits.samples} samples): ${formatShares(r.waits.live, 5)}`,
      `  the erasure's backend: ${formatShares(r.waits.background, 3)}`,
      ...[...r.phases].map(
        ([phase, p]) =>
          `  ${phase.padEnd(14)} ${String(p.facts).padStart(7)} facts in ${String(p.batches).padStart(5)} batches of ${Math.round(p.sizes / p.batches)} on average: ${(p.ms / 1000).toFixed(2)} s busy, ${(p.ms / p.batches).toFixed(1)} ms per batch`,
      ),
    );
  }
  lines.push(
    `\naudit after draining: ${audit.clean ? "clean" : "NOT CLEAN " + JSON.stringify(audit)}`,
    `load average at the end: ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(" ")} (${os.cpus().length} cores)`,
  );
  process.stdout.write(lines.join("\n") + "\n");
  if (!audit.clean) process.exitCode = 1;
} finally {
  await bench.stop();
}
