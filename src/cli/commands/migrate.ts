import { loadConfig } from "../../config.ts";
import { readPartitions } from "../../db/ledger-config.ts";
import { migrationStatus } from "../../db/migrate.ts";
import { openDatabase } from "../../runtime/database.ts";
import { describeDatabase } from "../banner.ts";

/**
 * `social-ledger migrate`: openDatabase applies pending migrations (and fixes the partition
 * count on first use); this prints the outcome. openDatabase does not return the list it
 * applied, so "appliedNow" is read back from ledger_migration: rows stamped (applied_at is the
 * migrating transaction's start) after this command's only connection was opened.
 */
export async function migrateCommand(): Promise<number> {
  const config = loadConfig();
  const database = await openDatabase(config, { poolSize: 1, applicationName: "social-ledger-migrate" });
  try {
    const { rows } = await database.pool.query<{ id: number; name: string; applied_at: Date; now: boolean }>(
      `SELECT id, name, applied_at,
              applied_at >= (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()) AS now
         FROM ledger_migration ORDER BY id`,
    );
    const status = await migrationStatus(database.pool);
    const report = {
      database: describeDatabase(config, database),
      latest: status.latest,
      applied: status.applied,
      pending: status.latest - status.applied,
      appliedNow: rows.filter((r) => r.now).map((r) => r.name),
      migrations: rows.map((r) => ({ id: r.id, name: r.name, appliedAt: r.applied_at.toISOString() })),
      partitions: await readPartitions(database.pool),
    };
    process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    return status.applied === status.latest ? 0 : 1;
  } finally {
    await database.close();
  }
}
