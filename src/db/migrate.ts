import { readdir, readFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { Pool } from "./pool.ts";
import { DatabaseError, mapPgError } from "./errors.ts";
import { withTransaction } from "./transaction.ts";

const MIGRATIONS_DIR = fileURLToPath(new URL("./migrations/", import.meta.url));

export interface Migration {
  id: number;
  name: string;
  sql: string;
}

export async function loadMigrations(dir: string = MIGRATIONS_DIR): Promise<Migration[]> {
  const files = (await readdir(dir)).filter((f) => /^\d{3}_[a-z0-9_]+\.sql$/.test(f)).sort();
  const migrations: Migration[] = [];
  for (const file of files) {
    migrations.push({ id: Number(file.slice(0, 3)), name: file, sql: await readFile(path.join(dir, file), "utf8") });
  }
  migrations.forEach((m, index) => {
    if (m.id !== index + 1) throw new Error(`migration numbering has a gap or duplicate at ${m.name}`);
  });
  return migrations;
}

/** What a losing CREATE TABLE IF NOT EXISTS can raise while the winner commits the same table. */
const CATALOG_RACE_SQLSTATES: ReadonlySet<string> = new Set(["23505", "42P07", "42710"]);

async function ensureMigrationTable(pool: Pool): Promise<void> {
  try {
    await pool.query(
      `CREATE TABLE IF NOT EXISTS ledger_migration (
         id integer PRIMARY KEY,
         name text NOT NULL,
         applied_at timestamptz NOT NULL DEFAULT now()
       )`,
    );
  } catch (err) {
    // Two first-time migrators can race on the catalog entries of the table; the loser
    // sees 23505 (pg_type/pg_class unique index), 42P07 (relation exists) or 42710 (its
    // row type exists, committed between the two catalog checks) although the table now
    // exists, which is all we need.
    const mapped = mapPgError(err);
    const sqlState = mapped instanceof DatabaseError ? mapped.sqlState : undefined;
    if (!(sqlState !== undefined && CATALOG_RACE_SQLSTATES.has(sqlState))) throw mapped;
  }
}

/**
 * Applies pending migrations, each in its own transaction that first inserts its own
 * ledger_migration row. A concurrent migrator blocks on that row's unique key until the
 * first commits, then gets a unique violation and skips the migration: two processes may
 * migrate at once and each migration runs exactly once.
 */
export async function migrate(pool: Pool, migrations?: Migration[]): Promise<{ applied: string[] }> {
  const all = migrations ?? (await loadMigrations());
  await ensureMigrationTable(pool);
  const applied: string[] = [];
  for (const migration of all) {
    const ran = await withTransaction(pool, async (client) => {
      const inserted = await client.query(
        "INSERT INTO ledger_migration (id, name) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
        [migration.id, migration.name],
      );
      if (inserted.rowCount === 0) return false;
      await client.query(migration.sql);
      return true;
    });
    if (ran) applied.push(migration.name);
  }
  return { applied };
}

/** The highest migration id shipped with this code and the highest applied in the database. */
export async function migrationStatus(pool: Pool): Promise<{ latest: number; applied: number }> {
  const all = await loadMigrations();
  const exists = await pool.query<{ present: boolean }>(
    "SELECT to_regclass('ledger_migration') IS NOT NULL AS present",
  );
  if (!exists.rows[0]?.present) return { latest: all.length, applied: 0 };
  const rows = await pool.query<{ max: number | null }>("SELECT max(id)::int AS max FROM ledger_migration");
  return { latest: all.length, applied: rows.rows[0]?.max ?? 0 };
}
