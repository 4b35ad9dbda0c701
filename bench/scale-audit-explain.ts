/**
 * `node --import tsx bench/scale-audit-explain.ts [--sizes 100000,1000000]` (issue 22 diagnosis):
 * per size, generates the scale population (support/scale-population.ts), seeds the periodic audit's
 * cursors at the generated positions (as bench/scale.ts --skip-full-audit does), writes the same
 * fixed change at every size, then runs the periodic audit once with every SELECT of its snapshot
 * run first as EXPLAIN (ANALYZE, BUFFERS), printing each statement's time and its plan nodes that
 * read the most rows (plans in --out/<size>-<n>.txt), so the statements that grow with the history
 * and the node responsible can be compared between sizes. --as-bench: as bench/scale.ts times it, a
 * first (unexplained) run before the change moves the sample past the hot item and the hub, and the
 * change avoids them (items from i00000002, followees from a00000002). --variants: also explains the
 * candidate rewrites of VARIANTS (same parameters, same snapshot) and checks they answer the same row.
 * --hot (issue 22, hot keys): a first change touching the hot item and a periodic run (which
 * recounts it and stores its baseline), then the change (which touches it again, as without
 * --as-bench), and the run is made four times from the same stored state (cursors, sample, key
 * baselines restored in between): timed and explained, with baselines (recountAbove
 * --recount-above, default 10,000 as the service) and without (Infinity), printing per mode the run's time and the rows its statements
 * read from like_fact and like_outbox.
 */
import { mkdir, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { parseArgs } from "node:util";
import type pg from "pg";
import { incrementalAudit } from "../src/audit/incremental-audit.ts";
import { EmbeddedCluster, clusterTempDir } from "../src/db/embedded-cluster.ts";
import { initLedger } from "../src/db/ledger-config.ts";
import { migrate } from "../src/db/migrate.ts";
import { createPool, type Pool } from "../src/db/pool.ts";
import { openLedger, type Ledger } from "../src/ledger.ts";
import { generatePopulation, type Population } from "../support/scale-population.ts";
import { seedAuditCursors } from "./scale-jobs.ts";

const { values: v } = parseArgs({ options: { sizes: { type: "string", default: "100000,1000000" }, out: { type: "string", default: "/tmp/scale-audit-explain" }, likes: { type: "string", default: "2000" }, follows: { type: "string", default: "200" }, "as-bench": { type: "boolean", default: false }, variants: { type: "boolean", default: false }, hot: { type: "boolean", default: false }, "recount-above": { type: "string", default: "10000" } } });
const id = (p: string, n: number) => `${p}${String(n).padStart(8, "0")}`;

/** The same change at every size: likes/unlikes of existing items by existing users, follows, a few comments. */
async function change(ledger: Ledger, pop: Population, likes: number, follows: number, base: number): Promise<void> {
  const jobs: (() => Promise<unknown>)[] = [];
  for (let i = 0; i < likes; i++) {
    const u = id("a", 1 + ((i * 7919) % (pop.accounts - 1))), it = id("i", base + ((i * 104729) % (pop.items - base)));
    jobs.push(() => (i % 3 === 0 ? ledger.likes.unlike(u, it) : ledger.likes.like(u, it)));
  }
  for (let i = 0; i < follows; i++) jobs.push(() => ledger.relations.follow(id("a", 1 + ((i * 31) % (pop.accounts - 1))), id("a", base + ((i * 997 + 5) % (pop.accounts - base)))));
  for (let i = 0; i < jobs.length; i += 50) await Promise.all(jobs.slice(i, i + 50).map((j) => j().catch(() => undefined)));
  const post = await ledger.posts.createPost(id("a", 1), "PUBLIC" as never, "p", { ensureAuthor: true }).catch(() => null);
  if (post) for (let i = 0; i < 20; i++) await ledger.comments.create(id("a", 2 + i), post.postId, "c", { ensureAuthor: true }).catch(() => undefined);
  await ledger.likeConsumer.drain(2000);
  await ledger.projector.drain(2000);
  await ledger.notifications.drain(2000);
}

interface PlanNode { "Node Type": string; "Relation Name"?: string; "Index Name"?: string; "Actual Rows": number; "Actual Loops": number; "Rows Removed by Filter"?: number; "Rows Removed by Index Recheck"?: number; "Shared Hit Blocks"?: number; "Shared Read Blocks"?: number; "Actual Total Time": number; Plans?: PlanNode[] }

function scans(node: PlanNode, out: { what: string; read: number; ms: number; blocks: number }[] = []) {
  const loops = node["Actual Loops"] || 0;
  if (node["Relation Name"] || node["Index Name"]) {
    const read = (node["Actual Rows"] + (node["Rows Removed by Filter"] ?? 0) + (node["Rows Removed by Index Recheck"] ?? 0)) * loops;
    out.push({ what: `${node["Node Type"]} ${node["Relation Name"] ?? ""}${node["Index Name"] ? ` using ${node["Index Name"]}` : ""} (loops ${loops})`, read, ms: node["Actual Total Time"] * loops, blocks: (node["Shared Hit Blocks"] ?? 0) + (node["Shared Read Blocks"] ?? 0) });
  }
  for (const c of node.Plans ?? []) scans(c, out);
  return out;
}

/** Candidate rewrites of the statements found to grow with the history (a proposal, not src). */
const VARIANTS: { name: string; from: string; to: string }[] = [
  { name: "notifications: truth lookup kept per pair (OFFSET 0)", from: "AND t.active) t)", to: "AND t.active OFFSET 0) t)" },
  { name: "likes read side: like_count restricted to the keys", from: "LEFT JOIN like_count c ON c.item_id = k.key", to: "LEFT JOIN (SELECT * FROM like_count WHERE item_id = ANY (ARRAY(SELECT key FROM keys))) c ON c.item_id = k.key" },
];

/** A pool whose checked-out clients run each SELECT as EXPLAIN (ANALYZE, BUFFERS) first and record it. */
function explaining(pool: Pool, log: { text: string; ms: number; plan: PlanNode; textPlan: string }[]): Pool {
  const connect = async () => {
    const client = await pool.connect();
    const query = client.query.bind(client) as (...a: unknown[]) => Promise<pg.QueryResult>;
    (client as unknown as { query: unknown }).query = async (text: unknown, params?: unknown[]) => {
      if (typeof text === "string" && /^\s*(WITH|SELECT)\b/i.test(text)) {
        const j = await query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${text}`, params);
        const root = (j.rows[0]["QUERY PLAN"] as { Plan: PlanNode; "Execution Time": number }[])[0]!;
        const t = await query(`EXPLAIN (ANALYZE, BUFFERS) ${text}`, params);
        log.push({ text, ms: root["Execution Time"], plan: root.Plan, textPlan: t.rows.map((r) => r["QUERY PLAN"]).join("\n") });
        for (const x of v.variants ? VARIANTS.filter((x) => text.includes(x.from)) : []) {
          const alt = text.replace(x.from, x.to);
          const ja = await query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${alt}`, params);
          const ra = (ja.rows[0]["QUERY PLAN"] as { Plan: PlanNode; "Execution Time": number }[])[0]!;
          const ta = await query(`EXPLAIN (ANALYZE, BUFFERS) ${alt}`, params);
          const same = JSON.stringify((await query(text, params)).rows) === JSON.stringify((await query(alt, params)).rows);
          log.push({ text: `VARIANT ${x.name} (same answer: ${same}): ${alt}`, ms: ra["Execution Time"], plan: ra.Plan, textPlan: ta.rows.map((r) => r["QUERY PLAN"]).join("\n") });
        }
      }
      return query(text, params);
    };
    return client;
  };
  return new Proxy(pool, { get: (target, prop, recv) => (prop === "connect" ? connect : Reflect.get(target, prop, recv)) });
}

/** The periodic audit's state a run moves on; saved once, restored before each run of the comparison. */
const STATE = ["audit_cursor", "audit_sample", "audit_key_baseline"] as const;

/** --hot: the same run with and without key baselines, timed (median of three) and explained, from the same stored state. */
async function hotComparison(pool: Pool, likes: number, url: string): Promise<void> {
  for (const t of STATE) await pool.query(`CREATE TABLE saved_${t} AS TABLE ${t}`);
  const restore = async () => {
    for (const t of STATE) await pool.query(`DELETE FROM ${t}; INSERT INTO ${t} TABLE saved_${t}`);
  };
  for (const [mode, recountAbove] of [["with baselines", Number(v["recount-above"])], ["without baselines", Infinity]] as const) {
    const ms: number[] = [];
    let inducted = 0;
    for (let i = 0; i < 3; i++) {
      await restore();
      const t0 = performance.now();
      const report = await incrementalAudit(pool, { recountAbove });
      ms.push(performance.now() - t0);
      inducted = report.scope.likes.inducted;
      if (!report.clean) process.stdout.write(`   (${mode}: NOT clean)\n`);
    }
    await restore();
    const log: { text: string; ms: number; plan: PlanNode; textPlan: string }[] = [];
    // A pool of its own: explaining() rewraps the query of the clients it hands out, and they go back to their pool so.
    const explained = createPool({ connectionString: url, max: 4 });
    try {
      await incrementalAudit(explaining(explained, log), { recountAbove });
    } finally {
      await explained.end();
    }
    const read = (table: string) => log.reduce((sum, e) => sum + scans(e.plan).filter((x) => x.what.includes(` ${table} `)).reduce((a, x) => a + x.read, 0), 0);
    const likeStatements = log.filter((e) => e.text.includes("like_outbox") && !e.text.includes("notification"));
    process.stdout.write(`== ${likes} likes, periodic audit ${mode}: ${ms.map((m) => (m / 1000).toFixed(2)).join(", ")} s (median ${(ms.sort((a, b) => a - b)[1]! / 1000).toFixed(2)} s), hot items audited by induction ${inducted}; ` +
      `explained: the like statements ${likeStatements.map((e) => `${e.ms.toFixed(1)} ms`).join(" + ")}, rows read from like_fact ${read("like_fact")}, from like_outbox ${read("like_outbox")} (all statements)\n`);
    for (const e of likeStatements) {
      process.stdout.write(`   ${e.ms.toFixed(1)} ms  ${e.text.replace(/\s+/g, " ").trim().slice(0, 90)}\n`);
      for (const x of scans(e.plan).sort((a, b) => b.read - a.read).slice(0, 3)) process.stdout.write(`     read ${x.read} rows, ${x.blocks} blocks, ${x.ms.toFixed(1)} ms: ${x.what}\n`);
    }
  }
  for (const t of STATE) await pool.query(`DROP TABLE saved_${t}`);
}

const root = await clusterTempDir("social-ledger-audit-explain-");
const cluster = await EmbeddedCluster.start({ dataDir: path.join(root, "pgdata") });
await mkdir(v.out!, { recursive: true });
try {
  for (const likes of v.sizes!.split(",").map(Number)) {
    const database = `audit_explain_${likes}`;
    const admin = createPool({ connectionString: cluster.connectionString("postgres"), max: 1 });
    await admin.query(`DROP DATABASE IF EXISTS ${database}`);
    await admin.query(`CREATE DATABASE ${database}`);
    const pool = createPool({ connectionString: cluster.connectionString(database), max: 20 });
    try {
      await migrate(pool);
      await initLedger(pool, { partitions: 16 });
      const ledger = await openLedger(pool);
      const pop = await generatePopulation(ledger, { likes });
      await seedAuditCursors(ledger);
      if (v["as-bench"]) await incrementalAudit(pool);
      // Ten unlikes of the hot item by users no other change touches (the change's own touch of it is the same unlike each time, a NOOP the second time).
      const touchHot = (phase: number) => Promise.all(Array.from({ length: 10 }, (_, j) => ledger.likes.unlike(id("a", 100 + phase * 10 + j), pop.hotItem)));
      if (v.hot) {
        await touchHot(0);
        await change(ledger, pop, Number(v.likes), Number(v.follows), 1);
        const first = await incrementalAudit(pool, { recountAbove: Number(v["recount-above"]) });
        const stored = (await pool.query<{ n: number; truth: number }>("SELECT count(*)::int AS n, coalesce(sum(truth), 0)::int AS truth FROM audit_key_baseline WHERE key = $1", [pop.hotItem])).rows[0]!;
        process.stdout.write(`== ${likes} likes: first run ${first.clean ? "clean" : "NOT clean"}, ${pop.hotItem}'s baseline: ${stored.n} partition rows, ${stored.truth} likes\n`);
      }
      if (v.hot) await touchHot(1);
      await change(ledger, pop, Number(v.likes), Number(v.follows), v["as-bench"] ? 2 : 1);
      await pool.query("VACUUM ANALYZE");
      if (v.hot) {
        await hotComparison(pool, likes, cluster.connectionString(database));
        continue;
      }
      const log: { text: string; ms: number; plan: PlanNode; textPlan: string }[] = [];
      const t0 = performance.now();
      const report = await incrementalAudit(explaining(pool, log));
      process.stdout.write(`== ${likes} likes: periodic audit ${((performance.now() - t0) / 1000).toFixed(2)} s (with EXPLAIN), clean ${report.clean}, scope ${JSON.stringify(Object.fromEntries(Object.entries(report.scope).map(([k, s]) => [k, s.mode])))}\n`);
      let n = 0;
      for (const e of log) {
        n++;
        const head = e.text.replace(/\s+/g, " ").trim().slice(0, e.text.startsWith("VARIANT") ? 90 : 110);
        await writeFile(path.join(v.out!, `${likes}-${String(n).padStart(2, "0")}.txt`), `${e.text}\n\n${e.textPlan}\n`);
        if (e.ms < 1) continue;
        process.stdout.write(`#${n} ${e.ms.toFixed(1)} ms  ${head}\n`);
        for (const s of scans(e.plan).sort((a, b) => b.read - a.read).slice(0, 3)) process.stdout.write(`     read ${s.read} rows, ${s.blocks} blocks, ${s.ms.toFixed(1)} ms: ${s.what}\n`);
      }
    } finally {
      await pool.end();
      await admin.query(`DROP DATABASE IF EXISTS ${database}`);
      await admin.end();
    }
  }
} finally {
  await cluster.stop();
  await rm(root, { recursive: true, force: true });
}
