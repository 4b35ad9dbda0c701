import { test } from "node:test";
import assert from "node:assert/strict";
import { loadMigrations, migrationChecksum } from "../../src/db/migrate.ts";
import { createEmptyDatabase } from "../support/test-db.ts";
import { childEnv, runCli } from "./cli-child.ts";

/**
 * `social-ledger migrate` and `migrate --status` as child processes against an external
 * database (DATABASE_URL): the status applies nothing, migrate applies and records checksums,
 * and both refuse a database whose applied history differs from the shipped files, exit 1,
 * with the migration named on stderr and nothing written.
 */

interface Report {
  latest: number;
  applied: number;
  pending: number;
  appliedNow: string[];
  migrations: { id: number; name: string; checksum: string | null }[];
  pendingMigrations: string[];
  partitions: number | null;
}

test("migrate --status applies nothing; migrate applies and records each checksum; both refuse a history that differs from the files", async (t) => {
  const db = await createEmptyDatabase();
  t.after(() => db.close());
  const env = childEnv({ DATABASE_URL: db.url });
  const shipped = await loadMigrations();
  const exists = async () =>
    (await db.pool.query<{ present: boolean }>("SELECT to_regclass('ledger_migration') IS NOT NULL AS present"))
      .rows[0]!.present;

  const before = await runCli(["migrate", "--status"], env);
  assert.equal(before.code, 1, `pending migrations: exit 1\n${before.stderr}`);
  const pending = JSON.parse(before.stdout) as Report;
  assert.deepEqual([pending.applied, pending.pending, pending.partitions], [0, shipped.length, null]);
  assert.deepEqual(
    pending.pendingMigrations,
    shipped.map((m) => m.name),
  );
  assert.equal(await exists(), false, "--status created nothing");

  const run = await runCli(["migrate"], env);
  assert.equal(run.code, 0, run.stderr);
  const migrated = JSON.parse(run.stdout) as Report;
  assert.deepEqual(
    migrated.appliedNow,
    shipped.map((m) => m.name),
  );
  assert.deepEqual(
    migrated.migrations.map((m) => [m.name, m.checksum]),
    shipped.map((m) => [m.name, migrationChecksum(m.sql)]),
  );

  const after = await runCli(["migrate", "--status"], env);
  assert.equal(after.code, 0, after.stderr);
  assert.deepEqual(
    [(JSON.parse(after.stdout) as Report).pending, (JSON.parse(after.stdout) as Report).pendingMigrations],
    [0, []],
  );

  const history = async () => (await db.pool.query("SELECT * FROM ledger_migration ORDER BY id")).rows;
  async function refused(expected: RegExp): Promise<void> {
    const rows = await history();
    for (const args of [["migrate", "--status"], ["migrate"]]) {
      const result = await runCli(args, env);
      assert.equal(result.code, 1, `${args.join(" ")}: exit 1\n${result.stdout}${result.stderr}`);
      assert.equal(result.stdout, "", "no report");
      assert.match(result.stderr, expected);
    }
    assert.deepEqual(await history(), rows, "nothing written");
  }

  // The database ran another text of 003 than the file has now (what an edit of the file looks like to the runner).
  const third = shipped[2]!;
  await db.pool.query("UPDATE ledger_migration SET checksum = $1 WHERE id = 3", [
    migrationChecksum(`${third.sql}-- an earlier text\n`),
  ]);
  await refused(
    new RegExp(
      `^social-ledger migrate: migration ${third.name.replaceAll(".", "\\.")} was edited after it was applied \\(applied text sha256 [0-9a-f]{12}, file now sha256 ${migrationChecksum(third.sql).slice(0, 12)}\\)`,
      "m",
    ),
  );
  await db.pool.query("UPDATE ledger_migration SET checksum = $1 WHERE id = 3", [migrationChecksum(third.sql)]);

  // Migrated by newer code: a migration this code does not have.
  const next = shipped.length + 1;
  const newer = `${String(next).padStart(3, "0")}_from_newer_code.sql`;
  await db.pool.query("INSERT INTO ledger_migration (id, name, checksum) VALUES ($1, $2, $3)", [
    next,
    newer,
    migrationChecksum("SELECT 1;"),
  ]);
  await refused(
    new RegExp(
      `^social-ledger migrate: migration ${newer.replaceAll(".", "\\.")} \\(number ${next}\\) is applied but is not among this code's ${shipped.length} migrations`,
      "m",
    ),
  );
  await db.pool.query("DELETE FROM ledger_migration WHERE id = $1", [next]);

  // Negative control: the repaired history passes again.
  const repaired = await runCli(["migrate", "--status"], env);
  assert.equal(repaired.code, 0, repaired.stderr);
});
