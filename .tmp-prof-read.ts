import { readFile } from "node:fs/promises";
import { EmbeddedCluster } from "./src/db/embedded-cluster.ts";
import { createPool } from "./src/db/pool.ts";
import { readLivePost } from "./src/content/posts.ts";
import { readHomeTimeline, HOME_TIMELINE_SQL } from "./src/feed/feed-reads.ts";
import { runFixedCount, runInterleaved } from "./bench/load.ts";

const mode = process.argv[2] ?? "time";
const { pop, typical } = JSON.parse(await readFile("/work/prof/pop.json", "utf8"));
const cluster = await EmbeddedCluster.start({
  dataDir: "/work/prof/pgdata",
  port: 55432,
  settings: { shared_preload_libraries: "pg_stat_statements", ...(process.env.PGSET ? JSON.parse(process.env.PGSET) : {}) },
});
const pool = createPool({ connectionString: cluster.connectionString("postgres"), max: 6, connectionTimeoutMs: 120000 });
const somePost = (k: number) => `a${String(1 + ((k * 7919) % pop.accounts)).padStart(8, "0")}-p${1 + ((k * 31) % 10)}`;
try {
  if (mode === "sql") {
    const { rows } = await pool.query(await readFile(process.argv[3]!, "utf8"));
    console.log(rows);
  } else if (mode === "explain") {
    const reader = process.argv[3] ?? typical[0];
    const c = await pool.connect();
    try {
      await c.query(`PREPARE h(text, timestamptz, text, int) AS ${HOME_TIMELINE_SQL}`);
      for (let i = 0; i < 7; i++) await c.query(`EXECUTE h('${typical[i]}', NULL, NULL, 21)`);
      const { rows } = await c.query(`EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE h('${reader}', NULL, NULL, 21)`);
      console.log(rows.map((r) => r["QUERY PLAN"]).join("\n"));
    } finally {
      c.release();
    }
  } else {
    const reads = Number(process.argv[3] ?? 2000);
    await pool.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
    await pool.query("SELECT pg_stat_statements_reset()");
    for (let round = 0; round < 2; round++) {
      const pk = await runFixedCount(reads, Number(process.env.W ?? 4), (k) => readLivePost(pool, somePost(k + round * reads)));
      const home = await runFixedCount(reads, Number(process.env.W ?? 4), (k) => readHomeTimeline(pool, typical[k % typical.length], { limit: 20 }));
      const hot = await runFixedCount(reads, Number(process.env.W ?? 4), (k) => readHomeTimeline(pool, pop.hotReaders[k % pop.hotReaders.length], { limit: 20 }));
      const f = (x: { p50Ms: number; p99Ms: number }) => `p50 ${x.p50Ms.toFixed(2)} p99 ${x.p99Ms.toFixed(2)}`;
      const { rows: st } = await pool.query("SELECT calls, round(mean_exec_time::numeric, 3) AS ms, round(mean_plan_time::numeric,3) AS plan, left(regexp_replace(query, '\\s+', ' ', 'g'), 60) AS q FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 4");
      if (process.env.STATS) console.table(st);
      await pool.query("SELECT pg_stat_statements_reset()");
      const [ipk, ihome, ihot] = await runInterleaved(reads * 3, Number(process.env.W ?? 4), [
        (k) => readLivePost(pool, somePost(k + 7 + round * reads)),
        (k) => readHomeTimeline(pool, typical[k % typical.length], { limit: 20 }),
        (k) => readHomeTimeline(pool, pop.hotReaders[k % pop.hotReaders.length], { limit: 20 }),
      ]);
      console.log(`interleaved pk ${f(ipk!)} | home ${f(ihome!)} (${(ihome!.p99Ms / ipk!.p99Ms).toFixed(2)}) | hot ${f(ihot!)} (${(ihot!.p99Ms / ipk!.p99Ms).toFixed(2)})`);
      console.log(`pk ${f(pk)} | home ${f(home)} (${(home.p99Ms / pk.p99Ms).toFixed(2)}) | hot ${f(hot)} (${(hot.p99Ms / pk.p99Ms).toFixed(2)})`);
    }
  }
} finally {
  await pool.end();
  await cluster.stop();
}
