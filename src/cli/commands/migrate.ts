import { loadConfig } from "../../config.ts";
import { readPartitions } from "../../db/ledger-config.ts";
import { checkMigrationHistory, loadMigrations } from "../../db/migrate.ts";
import type { Pool } from "../../db/pool.ts";
import { openDatabase } from "../../runtime/database.ts";
import { describeDatabase } from "../banner.ts";

/**
 * `social-ledger migrate`: openDatabase applies pending migrations (and fixes the partition
 * count on first use); this prints the outcome. openDatabase does not return the list it
 * applied, so "appliedNow" is read back from ledger_migration: rows stamped (applied_at is the
 * migrating transaction's start) after this command's only connection was opened.
 *
 * `--status` opens the database without migrating and prints the same report. Both refuse a
 * database whose applied history differs from the migration files (MigrationHistoryError,
 * exit 1, nothing written); exit 1 too when migrations are pending.
 */
export async function migrateCommand(opts: { status?: boolean } = {}): Promise<number> {
  const config = loadConfig();
  const statusOnly = opts.status ?? false;
  const database = await openDatabase(config, {
    poolSize: 1,
    applicationName: "social-ledger-migrate",
    migrate: !statusOnly,
  });
  try {
    const files = await loadMigrations();
    const history = await checkMigrationHistory(database.pool, files);
    const { rows } =
      history.length === 0
        ? { rows: [] }
        : await database.pool.query<{
            id: number;
            name: string;
            checksum: string | null;
            applied_at: Date;
            now: boolean;
          }>(
            `SELECT id, name, checksum, applied_at,
              applied_at >= (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()) AS now
         FROM ledger_migration ORDER BY id`,
          );
    const applied = rows.length;
    const report = {
      database: describeDatabase(config, database),
      latest: files.length,
      applied,
      pending: files.length - applied,
      appliedNow: rows.filter((r) => r.now).map((r) => r.name),
      migrations: rows.map((r) => ({
        id: r.id,
        name: r.name,
        checksum: r.checksum,
        appliedAt: r.applied_at.toISOString(),
      })),
      pendingMigrations: files.slice(applied).map((m) => m.name),
      partitions: statusOnly ? await initialisedPartitions(database.pool) : await readPartitions(database.pool),
    };
    process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    return report.pending === 0 ? 0 : 1;
  } finally {
    await database.close();
  }
}

/** The partition count, or null for a database not migrated or not initialised yet. */
async function initialisedPartitions(pool: Pool): Promise<number | null> {
  const { rows } = await pool.query<{ present: boolean }>("SELECT to_regclass('ledger_config') IS NOT NULL AS present");
  if (!rows[0]?.present) return null;
  const config = await pool.query<{ partitions: number }>("SELECT partitions FROM ledger_config");
  return config.rows[0]?.partitions ?? null;
}
