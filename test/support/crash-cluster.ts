import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import path from "node:path";
import type { TestContext } from "node:test";
import { EmbeddedCluster, clusterTempDir } from "../../src/db/embedded-cluster.ts";
import { initLedger } from "../../src/db/ledger-config.ts";
import { migrate } from "../../src/db/migrate.ts";
import { createPool, type Pool } from "../../src/db/pool.ts";
import { enableSqlHooks, watchSqlHooks } from "./sql-hooks.ts";

/**
 * A cluster of a crash test's own, migrated and initialised with P partitions, its SQL hook
 * points on (sql-hooks.ts), that the test
 * may stop with `cluster.crashImmediate()`. Stopped and removed when the test ends.
 */
export interface CrashLab {
  cluster: EmbeddedCluster;
  pool: Pool;
  /** After a crash: drops the dead pool, restarts the cluster (crash recovery runs) and returns a new pool. */
  restartAfterCrash(): Promise<Pool>;
  /**
   * Registers a release the teardown runs before it closes the pool: a test that fails while it
   * holds transactions parked at hook points then ends with its own message, instead of a pool
   * whose close waits for them until the runner's timeout.
   */
  onTeardown(release: () => unknown): void;
}

export async function crashLab(
  t: TestContext,
  prefix: string,
  options: { partitions: number; poolSize: number },
): Promise<CrashLab> {
  const root = await clusterTempDir(prefix);
  const cluster = await EmbeddedCluster.start({ dataDir: path.join(root, "pgdata") });
  const url = cluster.connectionString("postgres");
  const admin = createPool({ connectionString: url, max: 1 });
  try {
    await enableSqlHooks(admin, "postgres");
  } finally {
    await admin.end();
  }
  const releases: (() => unknown)[] = [];
  // No extra client listeners here: a client checked out by withTransaction while the server
  // dies emits 'error', and withTransaction itself must keep that from crashing the process.
  const lab: CrashLab = {
    cluster,
    pool: createPool({ connectionString: url, max: options.poolSize }),
    async restartAfterCrash() {
      await lab.pool.end().catch(() => undefined); // its clients are all dead
      await cluster.restart();
      lab.pool = createPool({ connectionString: url, max: 4 });
      watchSqlHooks(lab.pool);
      return lab.pool;
    },
    onTeardown(release) {
      releases.push(release);
    },
  };
  watchSqlHooks(lab.pool);
  t.after(async () => {
    for (const release of releases) await Promise.resolve(release()).catch(() => undefined);
    await lab.pool.end().catch(() => undefined);
    await cluster.stop();
    await rm(root, { recursive: true, force: true });
  });
  await migrate(lab.pool);
  assert.equal(await initLedger(lab.pool, { partitions: options.partitions }), options.partitions);
  return lab;
}
