/**
 * What one target of the periodic audit's rotating sample costs (issue 22): on a generated
 * population (support/scale-population.ts), the two incremental like statements of the periodic audit
 * (src/audit/incremental-invariants.ts) over an empty event range, with a sample of one item:
 * the hot item (N/10 likes) and an ordinary one (10 likes), and with a sample of 10,000 ordinary
 * items (a run over many changed items: it must stay linear in them), alternating, each timed.
 *
 *   node --import tsx bench/scale-audit-sample.ts [--likes 1000000] [--rounds 3] [--partitions 16]
 */
import { rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { LIKE_READ_SIDE_INCREMENTAL_SQL, LIKE_WRITE_SIDE_INCREMENTAL_SQL } from "../src/audit/incremental-invariants.ts";
import { EmbeddedCluster, clusterTempDir } from "../src/db/embedded-cluster.ts";
import { initLedger } from "../src/db/ledger-config.ts";
import { migrate } from "../src/db/migrate.ts";
import { createPool } from "../src/db/pool.ts";
import { openLedger } from "../src/ledger.ts";
import { generatePopulation, itemId } from "../support/scale-population.ts";

const { values: v } = parseArgs({ options: { likes: { type: "string" }, rounds: { type: "string" }, partitions: { type: "string" } } });
const likes = Number(v.likes ?? 1_000_000);
const rounds = Number(v.rounds ?? 3);
const partitions = Number(v.partitions ?? 16);

const root = await clusterTempDir("social-ledger-bench-audit-sample-");
const cluster = await EmbeddedCluster.start({ dataDir: path.join(root, "pgdata") });
const pool = createPool({ connectionString: cluster.connectionString("postgres"), max: 4 });
try {
  await migrate(pool);
  await initLedger(pool, { partitions });
  const pop = await generatePopulation(await openLedger(pool), { likes });
  const { rows } = await pool.query<{ part: number; last: number }>("SELECT part, last FROM like_seq ORDER BY part");
  // An empty range (lo = hi = last): only the sampled item is audited.
  const range = [rows.map((r) => r.part), rows.map((r) => Number(r.last)), rows.map((r) => Number(r.last))];
  const statements = { "write side": LIKE_WRITE_SIDE_INCREMENTAL_SQL, "read side": LIKE_READ_SIDE_INCREMENTAL_SQL };
  const many = Math.min(10_000, pop.items - 1);
  const samples: Record<string, string[]> = {
    [`hot item ${pop.hotItem} (${pop.accounts} likes)`]: [pop.hotItem],
    [`ordinary item ${itemId(2)} (10 likes)`]: [itemId(2)],
    [`${many} ordinary items`]: Array.from({ length: many }, (_, i) => itemId(2 + i)),
  };
  const times = new Map<string, number[]>();
  for (let round = 0; round < rounds; round++) {
    for (const [name, sql] of Object.entries(statements)) {
      for (const [label, items] of Object.entries(samples)) {
        const t0 = performance.now();
        await pool.query(sql, [...range, items, null]); // $5 null: recount (no key baseline)
        const key = `${name}, sample = ${label}`;
        times.set(key, [...(times.get(key) ?? []), performance.now() - t0]);
      }
    }
  }
  process.stdout.write(`== periodic audit, sampled items, ${likes} likes, P = ${partitions}, ${rounds} rounds alternating\n`);
  for (const [key, ms] of times) process.stdout.write(`${key}: ${ms.map((m) => m.toFixed(0)).join(", ")} ms\n`);
  process.stdout.write(`load average ${os.loadavg().map((l) => l.toFixed(2)).join(" ")}\n`);
} finally {
  await pool.end();
  await cluster.stop();
  await rm(root, { recursive: true, force: true });
}
