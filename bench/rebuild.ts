/**
 * `npm run bench:rebuild`: the snapshot rebuild of like_count (src/counters/counter-rebuild.ts) on
 * an embedded PostgreSQL of its own, over one hot item of about 200k likes and a few thousand
 * ordinary ones, while live writers like and unlike (the hot item too, so the install's base_seq
 * meets concurrent events), live readers read counts and the consumers run; per pacing variant
 * (unpaced: pages of 500 keys and installs back to back, the old behaviour; paced:
 * LEDGER_BACKGROUND_BATCH_MS / LEDGER_BACKGROUND_DUTY's defaults or --budget-ms / --duty) it
 * prints the rebuild's duration and keys/s, and the live writes' and reads' p99 idle (measured
 * just before and just after, pooled: the machine's load drifts) vs during, with the ratio and
 * issue 22's 1.3x goal (docs/counters.md "Pacing the rebuild"). At the end every count equals its
 * facts and the audit is clean. Variant one-statement: unpaced with chunks of up to 10M facts, so
 * the hot item is counted in one statement, as before the chunked count (docs/counters.md
 * "Counting a hot key in chunks"). Options: --hot-likes N
 * --items N --likes-per-item N --writers N --readers N --partitions N --idle-seconds N
 * --variants unpaced,paced,one-statement (repeat them to alternate) --budget-ms N --duty F.
 */
import { rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { fullAudit } from "../src/api/routes/admin.ts";
import { EmbeddedCluster, clusterTempDir } from "../src/db/embedded-cluster.ts";
import { initLedger } from "../src/db/ledger-config.ts";
import { migrate } from "../src/db/migrate.ts";
import { createPool, type Pool } from "../src/db/pool.ts";
import { createWorkers, openLedger } from "../src/ledger.ts";
import { LikeRebuild } from "../src/likes/like-rebuild.ts";
import { DEFAULT_PACING, UNPACED, type PacingOptions } from "../src/workers/pacer.ts";
import { formatShares, sampleBackgroundWaits, type BackgroundWaits } from "./background-waits.ts";
import { after, describe, liveTraffic, pooled, ratioLine, type Latencies } from "./live-traffic.ts";

const { values } = parseArgs({
  options: {
    "hot-likes": { type: "string", default: "200000" },
    items: { type: "string", default: "2000" },
    "likes-per-item": { type: "string", default: "10" },
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
const HOT = n("hot-likes"),
  ITEMS = n("items"),
  PER_ITEM = n("likes-per-item"),
  WRITERS = n("writers"),
  READERS = n("readers");
const PARTITIONS = n("partitions"),
  IDLE_S = n("idle-seconds");
const VARIANTS: Record<string, { pacing: PacingOptions; chunkRows?: number }> = {
  unpaced: { pacing: UNPACED },
  paced: { pacing: { budgetMs: n("budget-ms"), duty: Number(values.duty) } },
  "one-statement": { pacing: UNPACED, chunkRows: 10_000_000 },
};
const variants = String(values.variants)
  .split(",")
  .map((v) => v.trim());
for (const v of variants)
  if (!(v in VARIANTS)) throw new Error(`--variants: unknown variant ${v} (unpaced, paced, one-statement)`);

/**
 * `pairs` liked facts, the g-th of item `item(g)` by user `<users><g / perUser>`, with their outbox
 * events numbered on in each user's partition as like_set numbers them, in one statement (200k
 * like_set calls would take minutes).
 */
async function seedLikes(
  pool: Pool,
  item: (g: string) => string,
  users: string,
  pairs: number,
  perUser: number,
): Promise<void> {
  await pool.query(
    `WITH f AS (
       INSERT INTO like_fact (user_id, item_id, liked, version)
       SELECT $2 || (g / $4), ${item("g")}, true, 1 FROM generate_series(0, $1::int - 1) g
       RETURNING user_id, item_id, ledger_partition(user_id, $3) AS part),
     numbered AS (SELECT f.*, row_number() OVER (PARTITION BY f.part ORDER BY f.user_id, f.item_id) AS k FROM f),
     moved AS (UPDATE like_seq q SET last = q.last + c.n FROM (SELECT part, count(*) AS n FROM f GROUP BY part) c WHERE q.part = c.part RETURNING q.part, q.last, c.n)
     INSERT INTO like_outbox (part, seq, user_id, item_id, delta, version)
     SELECT nb.part, m.last - m.n + nb.k, nb.user_id, nb.item_id, 1, 1 FROM numbered nb JOIN moved m USING (part)`,
    [pairs, users, PARTITIONS, perUser],
  );
}

interface VariantResult {
  variant: string;
  pacing: PacingOptions;
  seconds: number;
  keys: number;
  idle: Latencies;
  during: Latencies;
  waits: BackgroundWaits;
}

const root = await clusterTempDir("social-ledger-bench-rebuild-");
const cluster = await EmbeddedCluster.start({ dataDir: path.join(root, "pgdata") });
try {
  const admin = createPool({ connectionString: cluster.connectionString("postgres"), max: 1 });
  await admin.query("CREATE DATABASE bench_rebuild");
  await admin.end();
  const pool = createPool({ connectionString: cluster.connectionString("bench_rebuild"), max: WRITERS + READERS + 10 });
  const samplerPool = createPool({ connectionString: cluster.connectionString("bench_rebuild"), max: 1 });
  try {
    await migrate(pool);
    await initLedger(pool, { partitions: PARTITIONS });
    const ledger = await openLedger(pool);
    const t0 = performance.now();
    for (let w = 0; w < WRITERS; w++) for (let i = 0; i < 50; i++) await ledger.likes.createItem(`live-${w}-${i}`);
    await pool.query("INSERT INTO item (item_id, kind) VALUES ('hot', 'plain')");
    await pool.query(
      "INSERT INTO item (item_id, kind) SELECT 'item-' || i, 'plain' FROM generate_series(0, $1::int - 1) i",
      [ITEMS],
    );
    await seedLikes(pool, () => "'hot'", "fan-", HOT, 1);
    await seedLikes(pool, (g) => `'item-' || (${g} % ${ITEMS})`, "reader-", ITEMS * PER_ITEM, ITEMS);
    await pool.query("VACUUM ANALYZE");
    await ledger.likeConsumer.drain(2000);
    process.stdout.write(
      `seeded 'hot' with ${HOT} likes and ${ITEMS} items with ${PER_ITEM} likes each in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`,
    );
    const workers = createWorkers(ledger, { loops: 1, idleMs: 50 });
    for (const w of workers) w.start();
    const traffic = (stop: Promise<void>) =>
      liveTraffic(ledger, stop, { writers: WRITERS, readers: READERS, alsoLike: ["hot"] });
    const results: VariantResult[] = [];
    for (const v of variants) {
      const { pacing, chunkRows } = VARIANTS[v]!;
      const rebuild = new LikeRebuild(pool, { pacing, chunkRows });
      const idle = await traffic(after(IDLE_S * 1000));
      let finished!: () => void;
      const done = new Promise<void>((resolve) => (finished = resolve));
      const sampler = sampleBackgroundWaits(samplerPool, "bench_rebuild", "%like_count%");
      const during = traffic(done);
      const r0 = performance.now();
      const report = await rebuild.rebuild();
      const seconds = (performance.now() - r0) / 1000;
      finished();
      const busy = await during;
      const waits = await sampler.stop();
      const idleAfter = await traffic(after(IDLE_S * 1000));
      results.push({
        variant: v,
        pacing,
        seconds,
        keys: report.itemsChecked,
        idle: pooled(idle, idleAfter),
        during: busy,
        waits,
      });
    }
    for (const w of workers) await w.stop();
    await ledger.likeConsumer.drain(2000);
    const { rows } = await pool.query<{ facts: number; counted: number }>(
      "SELECT (SELECT count(*) FROM like_fact WHERE item_id = 'hot' AND liked)::int AS facts, (SELECT sum(n) FROM like_count WHERE item_id = 'hot')::int AS counted",
    );
    const audit = await fullAudit(ledger);
    const lines: string[] = [];
    for (const r of results) {
      lines.push(
        `\n== ${r.variant} (page budget ${r.pacing.budgetMs === 0 ? "none: 500 keys" : `${r.pacing.budgetMs} ms`}, duty ${r.pacing.duty})`,
        `rebuild: ${r.keys} items in ${r.seconds.toFixed(2)} s, ${Math.round(r.keys / r.seconds)} items/s`,
        `live writes: ${ratioLine(r.idle.writes, r.during.writes)}`,
        `live reads:  ${ratioLine(r.idle.reads, r.during.reads)}`,
        `  ${describe("writes idle:  ", r.idle.writes)}`,
        `  ${describe("writes during:", r.during.writes)}`,
        `  ${describe("reads idle:   ", r.idle.reads)}`,
        `  ${describe("reads during: ", r.during.reads)}`,
        `  live backends waited on (${r.waits.samples} samples): ${formatShares(r.waits.live, 5)}`,
      );
    }
    lines.push(
      `\n'hot' after draining: ${rows[0]!.counted} counted, ${rows[0]!.facts} liked facts${rows[0]!.counted === rows[0]!.facts ? "" : " (DIFFERENT)"}`,
      `audit after draining: ${audit.clean ? "clean" : "NOT CLEAN " + JSON.stringify(audit)}`,
      `load average at the end: ${os
        .loadavg()
        .map((l) => l.toFixed(2))
        .join(" ")} (${os.cpus().length} cores)`,
    );
    process.stdout.write(lines.join("\n") + "\n");
    if (!audit.clean || rows[0]!.counted !== rows[0]!.facts) process.exitCode = 1;
  } finally {
    await samplerPool.end();
    await pool.end();
  }
} finally {
  await cluster.stop();
  await rm(root, { recursive: true, force: true });
}
