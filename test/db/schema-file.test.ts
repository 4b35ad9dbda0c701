import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { loadMigrations, migrate } from "../../src/db/migrate.ts";
import { SCHEMA_COMMAND, dumpSchema, schemaDrift } from "../../src/db/schema-dump.ts";
import { createEmptyDatabase } from "../support/test-db.ts";

/**
 * src/db/schema.sql is the schema every migration makes of an empty database, as
 * dumpSchema writes it (`npm run db:schema`). A migration added or changed without
 * regenerating the file, or a file edited by hand, fails here with the command to run.
 */

const SCHEMA_FILE = new URL("../../src/db/schema.sql", import.meta.url);

async function migratedSchema(
  t: { after(fn: () => Promise<void>): void },
  edit?: (sql: string) => string,
): Promise<{ text: string; functions: number }> {
  const db = await createEmptyDatabase();
  t.after(() => db.close());
  const migrations = await loadMigrations();
  const last = migrations.at(-1)!;
  await migrate(db.pool, edit ? [...migrations.slice(0, -1), { ...last, sql: edit(last.sql) }] : migrations);
  const { rows } = await db.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_proc WHERE pronamespace = 'public'::regnamespace",
  );
  return { text: await dumpSchema(db.pool), functions: rows[0]!.n };
}

test("src/db/schema.sql is what the migrations make of an empty database", async (t) => {
  const committed = await readFile(SCHEMA_FILE, "utf8");
  const { text, functions } = await migratedSchema(t);
  const drift = schemaDrift(committed, text);
  assert.equal(drift, undefined, drift);
  assert.equal(
    text.match(/^CREATE OR REPLACE FUNCTION /gm)?.length,
    functions,
    "every function of the schema, once, by its current definition",
  );
  for (const part of [
    "CREATE TABLE like_fact (",
    "CREATE INDEX ",
    "CREATE TRIGGER ",
    "CREATE VIEW notification_truth AS",
    "CREATE TABLE ledger_migration (",
  ]) {
    assert.ok(text.includes(part), `the schema shows ${part}`);
  }
  assert.doesNotMatch(text, /\boid\b|\d{4}-\d\d-\d\d/i, "no OIDs, no dates");
});

test("negative control: a changed migration makes the check fail, naming the command", async (t) => {
  const committed = await readFile(SCHEMA_FILE, "utf8");
  const { text } = await migratedSchema(
    t,
    (sql) => `${sql}\nCREATE INDEX schema_drift_probe ON like_fact (changed_at);\n`,
  );
  const drift = schemaDrift(committed, text);
  assert.ok(drift, "the dump of the changed migrations differs from the file");
  assert.match(
    drift,
    /first difference at line \d+, the file has .*, the migrations make "CREATE INDEX schema_drift_probe ON public\.like_fact/,
  );
  assert.ok(drift.includes(`Run \`${SCHEMA_COMMAND}\``), drift);
  assert.equal(SCHEMA_COMMAND, "npm run db:schema");
});

test("negative control: a hand edit of the file makes the check fail at the edited line", async () => {
  const committed = await readFile(SCHEMA_FILE, "utf8");
  const lines = committed.split("\n");
  const at = lines.findIndex((l) => l.startsWith("CREATE OR REPLACE FUNCTION public.like_set("));
  assert.ok(at > 0, "the file has like_set");
  const edited = [...lines.slice(0, at + 1), "-- edited by hand", ...lines.slice(at + 1)].join("\n");
  assert.match(
    schemaDrift(edited, committed) ?? "",
    new RegExp(
      `^src/db/schema\\.sql is not the schema the migrations make: first difference at line ${at + 2}, the file has "-- edited by hand"`,
    ),
  );
  assert.match(
    schemaDrift(committed.trimEnd(), committed) ?? "",
    /the file has \(end of text\)/,
    "a truncated file too",
  );
});
