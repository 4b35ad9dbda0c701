/**
 * `npm start`: the service on its defaults. With DATABASE_URL it uses that PostgreSQL;
 * otherwise it runs an embedded PostgreSQL 16 whose data lives in LEDGER_DATA_DIR (./data)
 * and survives restarts. It migrates, fixes the partition count on first start, and runs the
 * like-count consumer until SIGINT/SIGTERM, when it lets the current batch commit and stops
 * the database cleanly.
 */
import path from "node:path";
import { EmbeddedCluster } from "./db/embedded-cluster.ts";
import { createPool } from "./db/pool.ts";
import { migrate } from "./db/migrate.ts";
import { initLedger } from "./db/ledger-config.ts";
import { LikeWorker } from "./likes/like-worker.ts";
import { loadConfig } from "./config.ts";

async function main(): Promise<void> {
  const config = loadConfig();
  let cluster: EmbeddedCluster | undefined;
  let url = config.databaseUrl;
  if (!url) {
    cluster = await EmbeddedCluster.start({ dataDir: path.join(config.dataDir, "pg") });
    url = cluster.connectionString("postgres");
  }
  const pool = createPool({ connectionString: url, applicationName: "social-ledger-server" });
  const { applied } = await migrate(pool);
  const partitions = await initLedger(pool);
  const worker = new LikeWorker(pool);
  await worker.start();
  log({ msg: "started", database: cluster ? `embedded, data in ${cluster.dataDir}, port ${cluster.port}` : "DATABASE_URL", migrationsApplied: applied, partitions });

  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log({ msg: "stopping", signal });
    await worker.stop();
    await pool.end();
    await cluster?.stop();
    log({ msg: "stopped", consumed: worker.totals });
    process.exit(0);
  };
  process.on("SIGINT", () => void shutdown("SIGINT"));
  process.on("SIGTERM", () => void shutdown("SIGTERM"));
}

function log(fields: Record<string, unknown>): void {
  process.stdout.write(JSON.stringify({ time: new Date().toISOString(), ...fields }) + "\n");
}

main().catch((err) => {
  process.stderr.write(`social-ledger failed to start: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
