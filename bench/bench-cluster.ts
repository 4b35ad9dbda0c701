/** A bench script's own embedded PostgreSQL in a temporary directory, and migrated ledger databases in it. */
import { rm } from "node:fs/promises";
import path from "node:path";
import { EmbeddedCluster, clusterTempDir } from "../src/db/embedded-cluster.ts";
import { migrate } from "../src/db/migrate.ts";
import { createPool, type Pool } from "../src/db/pool.ts";
import { initLedger } from "../src/db/ledger-config.ts";

export class BenchCluster {
  private readonly pools: Pool[] = [];

  private constructor(
    readonly cluster: EmbeddedCluster,
    private readonly root: string,
  ) {}

  /** Starts a cluster in a new temporary directory named after `prefix`. */
  static async start(prefix: string, settings?: Record<string, string>): Promise<BenchCluster> {
    const root = await clusterTempDir(prefix);
    const cluster = await EmbeddedCluster.start({
      dataDir: path.join(root, "pgdata"),
      ...(settings ? { settings } : {}),
    });
    return new BenchCluster(cluster, root);
  }

  /**
   * CREATE DATABASE `name`, migrated and initialised at `partitions`, and a pool of `max`
   * connections to it (ended by stop()).
   */
  async ledgerDatabase(name: string, options: { partitions: number; max: number }): Promise<Pool> {
    const admin = createPool({ connectionString: this.cluster.connectionString("postgres"), max: 1 });
    try {
      await admin.query(`CREATE DATABASE ${name}`);
    } finally {
      await admin.end();
    }
    const pool = this.pool(name, options.max);
    await migrate(pool);
    await initLedger(pool, { partitions: options.partitions });
    return pool;
  }

  /** Another pool to database `name`, ended by stop(). */
  pool(name: string, max: number, applicationName?: string): Pool {
    const pool = createPool({
      connectionString: this.cluster.connectionString(name),
      max,
      ...(applicationName ? { applicationName } : {}),
    });
    this.pools.push(pool);
    return pool;
  }

  /** Ends every pool handed out, stops the cluster and removes its directory. */
  async stop(): Promise<void> {
    for (const pool of this.pools.splice(0)) await pool.end().catch(() => undefined);
    await this.cluster.stop();
    await rm(this.root, { recursive: true, force: true });
  }
}
