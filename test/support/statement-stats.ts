/**
 * A migrated cluster of the test's own with pg_stat_statements and track_planning on, and a
 * reader role of its own, so that the plans and calls of the statements a test sends as that
 * role are counted by the database itself and nothing else (setup, the counting query) mixes in.
 */
import { randomBytes } from "node:crypto";
import { rm } from "node:fs/promises";
import path from "node:path";
import { EmbeddedCluster, clusterTempDir } from "../../src/db/embedded-cluster.ts";
import { initLedger } from "../../src/db/ledger-config.ts";
import { migrate } from "../../src/db/migrate.ts";
import { createPool, type Pool } from "../../src/db/pool.ts";

export interface StatementStatsCluster {
  /** The superuser's pool: setup and the counting queries. */
  admin: Pool;
  /** Opens a pool of one connection as the counted reader role. */
  readerPool(): Pool;
  /** Forgets every statement counted so far. */
  reset(): Promise<void>;
  /** The reader's statements since the last reset: query text (normalised), calls and plans. */
  readerStatements(): Promise<{ query: string; calls: number; plans: number }[]>;
  close(): Promise<void>;
}

export async function startStatementStatsCluster(partitions: number): Promise<StatementStatsCluster> {
  const root = await clusterTempDir("ledger-plan-counts-");
  const cluster = await EmbeddedCluster.start({
    dataDir: path.join(root, "pgdata"),
    settings: { shared_preload_libraries: "pg_stat_statements", "pg_stat_statements.track_planning": "on" },
  });
  const url = cluster.connectionString("postgres");
  const admin = createPool({ connectionString: url, max: 2 });
  const pools: Pool[] = [admin];
  try {
    await migrate(admin);
    await initLedger(admin, { partitions });
    await admin.query("CREATE EXTENSION pg_stat_statements");
    const password = randomBytes(12).toString("hex");
    await admin.query(`CREATE ROLE plan_counted_reader LOGIN PASSWORD '${password}' IN ROLE pg_read_all_data`);
    const readerUrl = new URL(url);
    readerUrl.username = "plan_counted_reader";
    readerUrl.password = password;
    return {
      admin,
      readerPool() {
        const pool = createPool({ connectionString: readerUrl.toString(), max: 1 });
        pools.push(pool);
        return pool;
      },
      async reset() {
        await admin.query("SELECT pg_stat_statements_reset()");
      },
      async readerStatements() {
        const { rows } = await admin.query<{ query: string; calls: number; plans: number }>(
          `SELECT s.query, s.calls::int AS calls, s.plans::int AS plans FROM pg_stat_statements s
             JOIN pg_roles r ON r.oid = s.userid WHERE r.rolname = 'plan_counted_reader' ORDER BY s.calls DESC`,
        );
        return rows;
      },
      async close() {
        for (const pool of pools) await pool.end();
        await cluster.stop();
        await rm(root, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await admin.end();
    await cluster.stop();
    await rm(root, { recursive: true, force: true });
    throw err;
  }
}

/** The counted statement whose normalised text contains `fragment` (exactly one must). */
export function statementWith(
  rows: readonly { query: string; calls: number; plans: number }[],
  fragment: string,
): { query: string; calls: number; plans: number } {
  const found = rows.filter((r) => r.query.includes(fragment));
  if (found.length !== 1)
    throw new Error(
      `expected one counted statement containing ${JSON.stringify(fragment)}, found ${found.length}: ${rows.map((r) => r.query.slice(0, 60)).join(" | ")}`,
    );
  return found[0]!;
}
