import { test } from "node:test";
import assert from "node:assert/strict";
import { DatabaseError, UniqueViolationError } from "../../src/db/errors.ts";
import { createTestDatabase } from "../support/test-db.ts";

test("db pool: one-shot queries outside a transaction reject with typed errors too", async (t) => {
  const db = await createTestDatabase();
  t.after(() => db.close());
  await assert.rejects(db.pool.query("SELECT 1 / 0"), (err: unknown) => err instanceof DatabaseError && err.sqlState === "22012");
  await db.pool.query("INSERT INTO item (item_id, kind) VALUES ('x', 'plain')");
  await assert.rejects(db.pool.query("INSERT INTO item (item_id, kind) VALUES ('x', 'plain')"), UniqueViolationError);
  const { rows } = await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM item");
  assert.equal(rows[0]!.n, 1, "successful queries still return their result");
});
