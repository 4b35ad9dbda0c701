import { existsSync, readFileSync } from "node:fs";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
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

function readPid(file: string): number | undefined {
  if (!existsSync(file)) return undefined;
  const pid = Number(readFileSync(file, "utf8").split("\n")[0]);
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

function alive(pid: number | undefined): boolean {
  if (pid === undefined) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Whoever starts the embedded cluster records its pid in `owner.pid` and stops the cluster when
 * it stops. A process killed with -9 cannot, and its PostgreSQL keeps running without an owner:
 * the next of our processes finds the owner dead, shuts that orphan down (fast shutdown: every
 * committed transaction is already durable) and starts the cluster as its own.
 */
async function acquireEmbedded(dataDir: string, pgData: string, port: number): Promise<EmbeddedCluster | undefined> {
  const ownerFile = path.join(dataDir, "owner.pid");
  const postmaster = readPid(path.join(pgData, "postmaster.pid"));
  if (alive(postmaster)) {
    if (alive(readPid(ownerFile))) return undefined; // a live server (or command) owns it: use it
    process.kill(postmaster!, "SIGINT");
    const deadline = Date.now() + 60_000;
    while (alive(postmaster)) {
      if (Date.now() > deadline) throw new Error(`the orphaned PostgreSQL (pid ${postmaster}) did not stop within 60 s`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  const cluster = await EmbeddedCluster.start({ dataDir: pgData, port });
  await writeFile(ownerFile, `${process.pid}\n`);
  return cluster;
}

async function releaseEmbedded(dataDir: string, cluster: EmbeddedCluster | undefined): Promise<void> {
  if (!cluster) return;
  await cluster.stop();
  if (readPid(path.join(dataDir, "owner.pid")) === process.pid) await rm(path.join(dataDir, "owner.pid"), { force: true });
}

/**
 * DATABASE_URL when set; otherwise the embedded PostgreSQL of the data directory, started by
 * this process unless another live process of ours (the server) already runs it. Migrates and
 * fixes the partition count (LEDGER_PARTITIONS, first start only).
 */
export async function openDatabase(config: Config, options: { poolSize?: number; applicationName?: string } = {}): Promise<Database> {
  let url = config.databaseUrl;
  let cluster: EmbeddedCluster | undefined;
  if (!url) {
    const pgData = path.join(config.dataDir, "pg");
    const port = await embeddedPort(config.dataDir);
    cluster = await acquireEmbedded(config.dataDir, pgData, port);
    url = `postgres://postgres:postgres@127.0.0.1:${port}/postgres`;
  }
  const pool = createPool({ connectionString: url, max: options.poolSize ?? 20, applicationName: options.applicationName ?? "social-ledger" });
  try {
    await migrate(pool);
    await initLedger(pool, config.partitions === undefined ? {} : { partitions: config.partitions });
  } catch (err) {
    await pool.end();
    await releaseEmbedded(config.dataDir, cluster);
    throw err;
  }
  return {
    pool,
    url,
    cluster,
    async close() {
      await pool.end();
      await releaseEmbedded(config.dataDir, cluster);
    },
  };
}
