import { writeFile } from "node:fs/promises";
import { EmbeddedCluster } from "./src/db/embedded-cluster.ts";
import { initLedger } from "./src/db/ledger-config.ts";
import { migrate } from "./src/db/migrate.ts";
import { createPool } from "./src/db/pool.ts";
import { generateFeedPopulation } from "./support/feed-population.ts";
import { installHomeReaders, type SizeContext } from "./bench/feed.ts";

const accounts = Number(process.argv[2] ?? 100000);
const cluster = await EmbeddedCluster.start({
  dataDir: "/work/prof/pgdata",
  port: 55432,
  settings: { shared_preload_libraries: "pg_stat_statements" },
});
const pool = createPool({ connectionString: cluster.connectionString("postgres"), max: 4, connectionTimeoutMs: 120000 });
await migrate(pool);
await initLedger(pool, { partitions: 16 });
const pop = await generateFeedPopulation(pool, accounts, (l) => console.log(l));
const c = { pool, pop, values: {}, figures: {} } as unknown as SizeContext;
const typical = await installHomeReaders(c);
await writeFile("/work/prof/pop.json", JSON.stringify({ pop, typical, values: c.values }, null, 1));
console.log(c.values);
await pool.end();
await cluster.stop();
