import { existsSync, readFileSync } from "node:fs";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import type { Config } from "../config.ts";
import { EmbeddedCluster, freePort } from "../db/embedded-cluster.ts";
import { initLedger } from "../db/ledger-config.ts";
import { migrate } from "../db/migrate.ts";
import { createPool, type Pool } from "../db/pool.ts";

export interface Database {
  pool: Pool;
  url: string;
  /** The embedded cluster this process started, if any. */
  cluster: EmbeddedCluster | undefined;
  close(): Promise<void>;
}

/** The embedded cluster keeps one port for its data directory, so every command of ours finds it. */
async function embeddedPort(dataDir: string): Promise<number> {
  const file = path.join(dataDir, "pg-port");
  if (existsSync(file)) return Number((await readFile(file, "utf8")).trim());
  const port = await freePort();
  await mkdir(dataDir, { recursive: true });
  await writeFile(file, `${port}\n`);
  return port;
}

function isRunning(pgData: string): boolean {
  const pidFile = path.join(pgData, "postmaster.pid");
  if (!existsSync(pidFile)) return false;
  try {
    process.kill(Number(readFileSync(pidFile, "utf8").split("\n")[0]), 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * DATABASE_URL when set; otherwise the embedded PostgreSQL of the data directory, started by
 * this process unless another of our processes (the server) already runs it. Migrates and
 * fixes the partition count (LEDGER_PARTITIONS, first start only).
 */
export async function openDatabase(config: Config, options: { poolSize?: number; applicationName?: string } = {}): Promise<Database> {
  let url = config.databaseUrl;
  let cluster: EmbeddedCluster | undefined;
  if (!url) {
    const pgData = path.join(config.dataDir, "pg");
    const port = await embeddedPort(config.dataDir);
    if (!isRunning(pgData)) cluster = await EmbeddedCluster.start({ dataDir: pgData, port });
    url = `postgres://postgres:postgres@127.0.0.1:${port}/postgres`;
  }
  const pool = createPool({ connectionString: url, max: options.poolSize ?? 20, applicationName: options.applicationName ?? "social-ledger" });
  try {
    await migrate(pool);
    await initLedger(pool, config.partitions === undefined ? {} : { partitions: config.partitions });
  } catch (err) {
    await pool.end();
    await cluster?.stop();
    throw err;
  }
  return {
    pool,
    url,
    cluster,
    async close() {
      await pool.end();
      await cluster?.stop();
    },
  };
}
