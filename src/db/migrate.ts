import { createHash } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { Pool } from "./pool.ts";
import { LedgerError } from "../errors.ts";
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

/**
 * The identity of a migration's text: sha256 of the file as read (UTF-8), in hex. Recorded in
 * ledger_migration when the migration is applied, so an edit after the fact is seen.
 */
export function migrationChecksum(sql: string): string {
  return createHash("sha256").update(sql, "utf8").digest("hex");
}

/** How the applied history of a database differs from this code's migration files. */
export type MigrationDifference =
  /** Applied under this name and number, but the file's text changed since. */
  | "edited"
  /** Applied under this number with the same text, but the file now has another name. */
  | "renamed"
  /** Applied under this name, which the files now have under another number. */
  | "renumbered"
  /** Applied, but no file has its name any more and its number is another migration (a revert, a removal). */
  | "removed"
  /** Applied under a number beyond this code's migrations (newer code, or a reverted last migration). */
  | "unknown"
  /** Not applied although a later migration is. */
  | "skipped";

/**
 * The database's applied migrations are not this code's migration files. Raised before anything
 * is written: a history that differs means the schema is not what the files say, and applying
 * more on top of it would hide that.
 */
export class MigrationHistoryError extends LedgerError {
  constructor(
    readonly migration: string,
    readonly difference: MigrationDifference,
    message: string,
  ) {
    super("MIGRATION_HISTORY", message);
  }
}

/** One row of ledger_migration. `checksum` is null only where the column could not be backfilled yet. */
export interface AppliedMigration {
  id: number;
  name: string;
  checksum: string | null;
}

const NEVER =
  "a migration already applied is never renamed, renumbered, edited or reverted; a change is a new migration";

function short(checksum: string): string {
  return `sha256 ${checksum.slice(0, 12)}`;
}

/** A migration's name without its number: "003_like_write_function.sql" -> "like_write_function.sql". */
function unnumbered(name: string): string {
  return name.replace(/^\d+_/, "");
}

/** The difference of one applied row from the files, or undefined when it matches. */
function differenceOf(row: AppliedMigration, files: readonly Migration[]): MigrationHistoryError | undefined {
  const file = files.find((m) => m.id === row.id);
  if (file && file.name === row.name) {
    const checksum = migrationChecksum(file.sql);
    if (row.checksum === null || row.checksum === checksum) return undefined;
    return new MigrationHistoryError(
      row.name,
      "edited",
      `migration ${row.name} was edited after it was applied (applied text ${short(row.checksum)}, file now ${short(checksum)}); ${NEVER}`,
    );
  }
  const moved = files.find((m) => m.id !== row.id && unnumbered(m.name) === unnumbered(row.name));
  if (moved) {
    return new MigrationHistoryError(
      row.name,
      "renumbered",
      `migration ${row.name} was applied as number ${row.id} but the files now have it as ${moved.name}` +
        (file ? ` and give number ${row.id} to ${file.name}` : "") +
        `; ${NEVER}`,
    );
  }
  if (!file) {
    return new MigrationHistoryError(
      row.name,
      "unknown",
      `migration ${row.name} (number ${row.id}) is applied but is not among this code's ${files.length} migrations: ` +
        `the database was migrated by newer code, or the migration was reverted or removed; ${NEVER}`,
    );
  }
  if (row.checksum !== null && row.checksum === migrationChecksum(file.sql)) {
    return new MigrationHistoryError(
      row.name,
      "renamed",
      `migration ${row.name} was applied under that name and is now named ${file.name} (same text); ${NEVER}`,
    );
  }
  return new MigrationHistoryError(
    row.name,
    "removed",
    `migration ${row.name} is applied but no file has that name any more (reverted, removed or renamed): ` +
      `number ${row.id} is now ${file.name}, which was never applied; ${NEVER}`,
  );
}

/**
 * The first way (in migration order) the applied rows differ from the files, or undefined.
 * A row without a checksum (applied before checksums were recorded) is compared by name only.
 */
export function historyDifference(
  applied: readonly AppliedMigration[],
  files: readonly Migration[],
): MigrationHistoryError | undefined {
  const rows = [...applied].sort((a, b) => a.id - b.id);
  for (const row of rows) {
    const difference = differenceOf(row, files);
    if (difference) return difference;
  }
  const appliedIds = new Set(rows.map((r) => r.id));
  const last = rows.at(-1);
  const skipped = last ? files.find((m) => m.id < last.id && !appliedIds.has(m.id)) : undefined;
  if (skipped && last) {
    return new MigrationHistoryError(
      skipped.name,
      "skipped",
      `migration ${skipped.name} is not applied but the later ${last.name} is: the history was changed by hand; ${NEVER}`,
    );
  }
  return undefined;
}

/** What a losing CREATE TABLE IF NOT EXISTS can raise while the winner commits the same table. */
const CATALOG_RACE_SQLSTATES: ReadonlySet<string> = new Set(["23505", "42P07", "42710"]);

async function ensureMigrationTable(pool: Pool): Promise<void> {
  try {
    await pool.query(
      `CREATE TABLE IF NOT EXISTS ledger_migration (
         id integer PRIMARY KEY,
         name text NOT NULL,
         applied_at timestamptz NOT NULL DEFAULT now(),
         checksum text
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
 * The rows of ledger_migration (none when the table does not exist), and whether the table
 * has its checksum column yet: a table made by the runner before checksums has not.
 */
async function readHistory(pool: Pool): Promise<{ rows: AppliedMigration[]; exists: boolean; hasChecksum: boolean }> {
  const { rows: columns } = await pool.query<{ column_name: string }>(
    `SELECT a.attname AS column_name
       FROM pg_attribute a
      WHERE a.attrelid = to_regclass('ledger_migration') AND a.attnum > 0 AND NOT a.attisdropped`,
  );
  if (columns.length === 0) return { rows: [], exists: false, hasChecksum: false };
  const hasChecksum = columns.some((c) => c.column_name === "checksum");
  const { rows } = await pool.query<AppliedMigration>(
    `SELECT id, name, ${hasChecksum ? "checksum" : "NULL::text AS checksum"} FROM ledger_migration ORDER BY id`,
  );
  return { rows, exists: true, hasChecksum };
}

/**
 * Brings a ledger_migration made before checksums up to date: adds the column (only when it is
 * missing: ALTER TABLE takes an exclusive lock even when IF NOT EXISTS makes it a no-op) and
 * fills in, for each row without one, the checksum of the file of the same number and name as
 * it is now. Those rows were applied before checksums were recorded, so the text they ran
 * cannot be known; their names were checked, their text is trusted from here on.
 */
async function recordMissingChecksums(
  pool: Pool,
  history: { rows: AppliedMigration[]; hasChecksum: boolean },
  files: readonly Migration[],
): Promise<void> {
  if (!history.hasChecksum) {
    try {
      await pool.query("ALTER TABLE ledger_migration ADD COLUMN IF NOT EXISTS checksum text");
    } catch (err) {
      // A concurrent migrator added it between our check and our ALTER (42701: duplicate column).
      const mapped = mapPgError(err);
      if (!(mapped instanceof DatabaseError && mapped.sqlState === "42701")) throw mapped;
    }
  }
  for (const row of history.rows) {
    if (row.checksum !== null) continue;
    const file = files.find((m) => m.id === row.id && m.name === row.name)!;
    await pool.query("UPDATE ledger_migration SET checksum = $1 WHERE id = $2 AND name = $3 AND checksum IS NULL", [
      migrationChecksum(file.sql),
      row.id,
      row.name,
    ]);
  }
}

/**
 * The applied history of the database, refused with a MigrationHistoryError when it differs
 * from the files. Reads only.
 */
export async function checkMigrationHistory(pool: Pool, migrations?: Migration[]): Promise<AppliedMigration[]> {
  const all = migrations ?? (await loadMigrations());
  const history = await readHistory(pool);
  const difference = historyDifference(history.rows, all);
  if (difference) throw difference;
  return history.rows;
}

/**
 * Applies pending migrations, each in its own transaction that first inserts its own
 * ledger_migration row (number, name, checksum). A concurrent migrator blocks on that row's
 * unique key until the first commits, then gets a unique violation and skips the migration:
 * two processes may migrate at once and each migration runs exactly once.
 *
 * First the applied history is compared with the files (names, numbers, checksums) and a
 * difference is refused with a MigrationHistoryError before anything is written; a row another
 * migrator commits meanwhile is compared the same way when its insert collides.
 */
export async function migrate(pool: Pool, migrations?: Migration[]): Promise<{ applied: string[] }> {
  const all = migrations ?? (await loadMigrations());
  await ensureMigrationTable(pool);
  const history = await readHistory(pool);
  const difference = historyDifference(history.rows, all);
  if (difference) throw difference;
  await recordMissingChecksums(pool, history, all);
  const known = new Set(history.rows.map((r) => r.id));
  const applied: string[] = [];
  for (const migration of all) {
    if (known.has(migration.id)) continue;
    const ran = await withTransaction(pool, async (client) => {
      const inserted = await client.query(
        "INSERT INTO ledger_migration (id, name, checksum) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING",
        [migration.id, migration.name, migrationChecksum(migration.sql)],
      );
      if (inserted.rowCount === 0) {
        const { rows } = await client.query<AppliedMigration>(
          "SELECT id, name, checksum FROM ledger_migration WHERE id = $1",
          [migration.id],
        );
        const theirs = rows[0] && differenceOf(rows[0], all);
        if (theirs) throw theirs;
        return false;
      }
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
