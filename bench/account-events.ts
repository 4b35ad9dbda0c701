/**
 * The cost of the account events on a statement that writes many accounts (the import's):
 * `node --import tsx bench/account-events.ts [N]` inserts N accounts in one statement, alternately
 * with the account outbox's insert trigger disabled and enabled, three rounds, on a fresh embedded
 * cluster (docs/decisions/0031-account-events-per-statement.md).
 */
import path from "node:path";
import { rm } from "node:fs/promises";
import { EmbeddedCluster, clusterTempDir } from "../src/db/embedded-cluster.ts";
import { migrate } from "../src/db/migrate.ts";
import { createPool } from "../src/db/pool.ts";
import { initLedger } from "../src/db/ledger-config.ts";

const N = Number(process.argv[2] ?? 100000);
const root = await clusterTempDir("pw-bench-");
const cluster = await EmbeddedCluster.start({ dataDir: path.join(root, "pgdata") });
try {
  const admin = createPool({ connectionString: cluster.connectionString("postgres"), max: 1 });
  await admin.query("CREATE DATABASE b");
  await admin.end();
  const pool = createPool({ connectionString: cluster.connectionString("b"), max: 2 });
  await migrate(pool);
  await initLedger(pool, { partitions: 16 });
  const insert = (prefix: string) =>
    `INSERT INTO account (account_id, private) SELECT '${prefix}' || g, false FROM generate_series(1, ${N}) g ORDER BY 1`;
  for (const round of [1, 2, 3]) {
    await pool.query("ALTER TABLE account DISABLE TRIGGER account_outbox_inserted");
    let t0 = performance.now();
    await pool.query(insert(`off${round}-`));
    const off = performance.now() - t0;
    await pool.query("ALTER TABLE account ENABLE TRIGGER account_outbox_inserted");
    t0 = performance.now();
    await pool.query(insert(`on${round}-`));
    const on = performance.now() - t0;
    console.log(
      `round ${round}: ${N} accounts in one statement: without the trigger ${off.toFixed(0)} ms, with it ${on.toFixed(0)} ms (${(on / off).toFixed(2)}x)`,
    );
  }
  const { rows } = await pool.query("SELECT count(*)::int AS n FROM account_outbox");
  console.log(`account_outbox rows: ${rows[0].n}`);
  await pool.end();
} finally {
  await cluster.stop();
  await rm(root, { recursive: true, force: true });
}
