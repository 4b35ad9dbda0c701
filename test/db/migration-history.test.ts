import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdir, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { createPool, type Pool } from "../../src/db/pool.ts";
import {
  MigrationHistoryError,
  checkMigrationHistory,
  loadMigrations,
  migrate,
  migrationChecksum,
  type MigrationDifference,
  type Migration,
} from "../../src/db/migrate.ts";
import { waitForLockWait } from "../support/pg-locks.ts";
import { createEmptyDatabase, type TestDatabase } from "../support/test-db.ts";

/**
 * The identity of an applied migration is its number, its name and the sha256 of its text
 * (ledger_migration.checksum). A database whose applied history differs from the files is
 * refused by migrate and by the status check, with a MigrationHistoryError saying which
 * migration and how, before anything is written. Each case applies three small migrations
 * from files, changes the files the way a branch might, and adds a pending 004 that must not
 * be applied.
 */

const ORIGINAL: Record<string, string> = {
  "001_a.sql": "CREATE TABLE mig_a (x integer);\n",
  "002_b.sql": "CREATE TABLE mig_b (x integer);\n",
  "003_c.sql": "CREATE TABLE mig_c (x integer);\n",
};
const PENDING = { "004_d.sql": "CREATE TABLE mig_d (x integer);\n" };

/** ORIGINAL without one file. */
function without(name: string): Record<string, string> {
  return Object.fromEntries(Object.entries(ORIGINAL).filter(([n]) => n !== name));
}

const root = path.join(os.tmpdir(), `migration-history-${randomBytes(6).toString("hex")}`);
let dirs = 0;

/** loadMigrations of a directory holding exactly these files (the runner's own loader). */
async function files(contents: Record<string, string>): Promise<Migration[]> {
  const dir = path.join(root, String(dirs++));
  await mkdir(dir, { recursive: true });
  for (const [name, sql] of Object.entries(contents)) await writeFile(path.join(dir, name), sql);
  return loadMigrations(dir);
}

/** Everything the runner could write: the history rows, its columns, and the tables. */
async function snapshot(pool: Pool): Promise<unknown> {
  const history = await pool.query("SELECT * FROM ledger_migration ORDER BY id");
  const tables = await pool.query(
    "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'r' ORDER BY relname",
  );
  return {
    history: history.rows,
    columns: history.fields.map((f) => f.name),
    tables: tables.rows.map((r: { relname: string }) => r.relname),
  };
}

async function migrated(t: { after(fn: () => Promise<void>): void }): Promise<TestDatabase> {
  const db = await createEmptyDatabase();
  t.after(() => db.close());
  assert.deepEqual((await migrate(db.pool, await files(ORIGINAL))).applied, Object.keys(ORIGINAL));
  return db;
}

/** Both entry points refuse with the same typed error, and nothing is written. */
async function assertRefused(
  pool: Pool,
  changed: Migration[],
  expected: { difference: MigrationDifference; migration: string; message: RegExp },
): Promise<void> {
  const before = await snapshot(pool);
  for (const run of [() => migrate(pool, changed), () => checkMigrationHistory(pool, changed)]) {
    await assert.rejects(run, (err: unknown) => {
      assert.ok(err instanceof MigrationHistoryError, `a MigrationHistoryError, got ${String(err)}`);
      assert.equal(err.code, "MIGRATION_HISTORY");
      assert.equal(err.difference, expected.difference);
      assert.equal(err.migration, expected.migration);
      assert.match(err.message, expected.message);
      return true;
    });
  }
  assert.deepEqual(await snapshot(pool), before, "nothing written: no history row, no column, no table of 004");
}

test.after(() => rm(root, { recursive: true, force: true }));

test("each applied migration is recorded with its name and the sha256 of its text", async (t) => {
  const db = await migrated(t);
  const { rows } = await db.pool.query<{ id: number; name: string; checksum: string }>(
    "SELECT id, name, checksum FROM ledger_migration ORDER BY id",
  );
  assert.deepEqual(
    rows,
    Object.entries(ORIGINAL).map(([name, sql], i) => ({ id: i + 1, name, checksum: migrationChecksum(sql) })),
  );
  assert.match(rows[0]!.checksum, /^[0-9a-f]{64}$/);
});

test("an edited migration is refused, naming it and both checksums", async (t) => {
  const db = await migrated(t);
  const changed = await files({ ...ORIGINAL, "002_b.sql": "CREATE TABLE mig_b (x integer, y integer);\n", ...PENDING });
  await assertRefused(db.pool, changed, {
    difference: "edited",
    migration: "002_b.sql",
    message: new RegExp(
      `^migration 002_b\\.sql was edited after it was applied \\(applied text sha256 ${migrationChecksum(ORIGINAL["002_b.sql"]!).slice(0, 12)}, file now sha256 [0-9a-f]{12}\\)`,
    ),
  });
});

test("a renamed migration (same number, same text) is refused, naming both names", async (t) => {
  const db = await migrated(t);
  const { "002_b.sql": b, ...rest } = ORIGINAL;
  const changed = await files({ ...rest, "002_bee.sql": b!, ...PENDING });
  await assertRefused(db.pool, changed, {
    difference: "renamed",
    migration: "002_b.sql",
    message: /^migration 002_b\.sql was applied under that name and is now named 002_bee\.sql \(same text\)/,
  });
});

test("a renumbered migration (a migration inserted before it) is refused, naming its new number", async (t) => {
  const db = await migrated(t);
  const { "003_c.sql": c, ...rest } = ORIGINAL;
  const changed = await files({
    ...rest,
    "003_inserted.sql": "CREATE TABLE mig_inserted (x integer);\n",
    "004_c.sql": c!,
  });
  await assertRefused(db.pool, changed, {
    difference: "renumbered",
    migration: "003_c.sql",
    message:
      /^migration 003_c\.sql was applied as number 3 but the files now have it as 004_c\.sql and give number 3 to 003_inserted\.sql/,
  });
});

test("a reverted migration whose number now belongs to another is refused, naming both", async (t) => {
  const db = await migrated(t);
  const changed = await files({
    ...without("003_c.sql"),
    "003_other.sql": "CREATE TABLE mig_other (x integer);\n",
    ...PENDING,
  });
  await assertRefused(db.pool, changed, {
    difference: "removed",
    migration: "003_c.sql",
    message:
      /^migration 003_c\.sql is applied but no file has that name any more \(reverted, removed or renamed\): number 3 is now 003_other\.sql, which was never applied/,
  });
});

test("an applied migration the code does not know (newer code, or the last one reverted) is refused", async (t) => {
  const db = await migrated(t);
  await assertRefused(db.pool, await files(without("003_c.sql")), {
    difference: "unknown",
    migration: "003_c.sql",
    message:
      /^migration 003_c\.sql \(number 3\) is applied but is not among this code's 2 migrations: the database was migrated by newer code, or the migration was reverted or removed/,
  });
});

test("a migration missing from the history while a later one is applied is refused, not applied out of order", async (t) => {
  const db = await migrated(t);
  await db.pool.query("DELETE FROM ledger_migration WHERE id = 2");
  await assertRefused(db.pool, await files({ ...ORIGINAL, ...PENDING }), {
    difference: "skipped",
    migration: "002_b.sql",
    message: /^migration 002_b\.sql is not applied but the later 003_c\.sql is/,
  });
});

test("negative control: the unchanged files plus a new migration are accepted and the new one applied", async (t) => {
  const db = await migrated(t);
  const before = await snapshot(db.pool);
  assert.deepEqual((await migrate(db.pool, await files({ ...ORIGINAL, ...PENDING }))).applied, ["004_d.sql"]);
  assert.notDeepEqual(await snapshot(db.pool), before, "the snapshot of the refusal tests sees a write");
  assert.equal((await checkMigrationHistory(db.pool, await files({ ...ORIGINAL, ...PENDING }))).length, 4);
});

test("negative control: the number-only runner this replaced skips a reverted migration's replacement silently", async (t) => {
  const db = await migrated(t);
  const changed = await files({ ...without("003_c.sql"), "003_other.sql": "CREATE TABLE mig_other (x integer);\n" });
  // What migrate did before: a migration is applied when no row has its number.
  const applied: string[] = [];
  for (const m of changed) {
    const inserted = await db.pool.query(
      "INSERT INTO ledger_migration (id, name) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
      [m.id, m.name],
    );
    if (inserted.rowCount === 1) applied.push(m.name);
  }
  assert.deepEqual(applied, [], "003_other.sql is never applied, and nothing says so");
  const { rows } = await db.pool.query("SELECT to_regclass('mig_other') IS NULL AS missing");
  assert.equal((rows[0] as { missing: boolean }).missing, true);
});

/** A ledger_migration as the runner made it before checksums, with 001 and 002 applied. */
async function legacy(t: { after(fn: () => Promise<void>): void }): Promise<TestDatabase> {
  const db = await createEmptyDatabase();
  t.after(() => db.close());
  await db.pool.query(
    "CREATE TABLE ledger_migration (id integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
  );
  await db.pool.query(ORIGINAL["001_a.sql"]! + ORIGINAL["002_b.sql"]!);
  await db.pool.query("INSERT INTO ledger_migration (id, name) VALUES (1, '001_a.sql'), (2, '002_b.sql')");
  return db;
}

test("a history from before checksums: the column is added and its rows backfilled from the current files", async (t) => {
  const db = await legacy(t);
  assert.deepEqual((await migrate(db.pool, await files(ORIGINAL))).applied, ["003_c.sql"]);
  const { rows } = await db.pool.query<{ id: number; checksum: string }>(
    "SELECT id, checksum FROM ledger_migration ORDER BY id",
  );
  assert.deepEqual(
    rows,
    Object.values(ORIGINAL).map((sql, i) => ({ id: i + 1, checksum: migrationChecksum(sql) })),
  );
  // From now on an edit of a backfilled migration is seen.
  await assertRefused(db.pool, await files({ ...ORIGINAL, "001_a.sql": "CREATE TABLE mig_a (x bigint);\n" }), {
    difference: "edited",
    migration: "001_a.sql",
    message: /^migration 001_a\.sql was edited after it was applied/,
  });
});

test("a history from before checksums that differs by name is refused before the column is added", async (t) => {
  const db = await legacy(t);
  const { "002_b.sql": b, ...rest } = ORIGINAL;
  await assertRefused(db.pool, await files({ ...rest, "002_bee.sql": b! }), {
    // Without the applied checksum a rename cannot be told from a replacement.
    difference: "removed",
    migration: "002_b.sql",
    message: /^migration 002_b\.sql is applied but no file has that name any more \(reverted, removed or renamed\)/,
  });
  const { rows } = await db.pool.query(
    "SELECT column_name FROM information_schema.columns WHERE table_name = 'ledger_migration' ORDER BY ordinal_position",
  );
  assert.deepEqual(
    rows.map((r: { column_name: string }) => r.column_name),
    ["id", "name", "applied_at"],
  );
});

test("the shipped migrations: a database migrated by this code passes the check", async (t) => {
  const db = await createEmptyDatabase();
  t.after(() => db.close());
  const shipped = await loadMigrations();
  await migrate(db.pool);
  const history = await checkMigrationHistory(db.pool);
  assert.deepEqual(
    history.map((r) => [r.name, r.checksum]),
    shipped.map((m) => [m.name, migrationChecksum(m.sql)]),
  );
});

test("two migrators with different texts of 002 collide: the one that waited compares the row the other committed and refuses", async (t) => {
  const db = await createEmptyDatabase();
  t.after(() => db.close());
  const key = 4243;
  const blocking = `SELECT pg_advisory_xact_lock(${key});\nCREATE TABLE mig_b (x integer);\n`;
  const filesA = await files({ "001_a.sql": ORIGINAL["001_a.sql"]!, "002_b.sql": blocking });
  const filesB = await files({
    "001_a.sql": ORIGINAL["001_a.sql"]!,
    "002_b.sql": `${blocking}CREATE TABLE mig_b2 (x integer);\n`,
  });
  const pools = ["holder", "migrator-a", "migrator-b"].map((applicationName) =>
    createPool({ connectionString: db.url, max: 1, applicationName }),
  );
  t.after(() => Promise.all(pools.map((p) => p.end())));
  const [holder, poolA, poolB] = pools as [Pool, Pool, Pool];
  const pidOf = async (pool: Pool) =>
    (await pool.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;
  const [aPid, bPid] = [await pidOf(poolA), await pidOf(poolB)];
  await holder.query("SELECT pg_advisory_lock($1)", [key]);
  const a = migrate(poolA, filesA);
  a.catch(() => undefined);
  assert.equal(
    (await waitForLockWait(db.pool, () => aPid)).locktype,
    "advisory",
    "A is inside the body of 002, its row inserted, not committed",
  );
  const b = migrate(poolB, filesB);
  b.catch(() => undefined);
  assert.equal(
    (await waitForLockWait(db.pool, () => bPid)).locktype,
    "transactionid",
    "B waits on A's ledger_migration row for 002",
  );
  await holder.query("SELECT pg_advisory_unlock($1)", [key]);
  assert.deepEqual((await a).applied, ["001_a.sql", "002_b.sql"]);
  await assert.rejects(
    b,
    (err: unknown) =>
      err instanceof MigrationHistoryError && err.difference === "edited" && err.migration === "002_b.sql",
  );
  const { rows } = await db.pool.query("SELECT to_regclass('mig_b2') IS NULL AS missing");
  assert.equal((rows[0] as { missing: boolean }).missing, true, "B's text of 002 never ran");
});
