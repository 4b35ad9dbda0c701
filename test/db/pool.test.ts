import { test } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import { backendPid } from "../../src/db/pool.ts";
import { DatabaseError, UniqueViolationError } from "../../src/db/errors.ts";
import { createTestDatabase } from "../support/test-db.ts";

test("db pool: one-shot queries outside a transaction reject with typed errors too", async (t) => {
  const db = await createTestDatabase();
  t.after(() => db.close());
  await assert.rejects(
    db.pool.query("SELECT 1 / 0"),
    (err: unknown) => err instanceof DatabaseError && err.sqlState === "22012",
  );
  await db.pool.query("INSERT INTO item (item_id, kind) VALUES ('x', 'plain')");
  await assert.rejects(db.pool.query("INSERT INTO item (item_id, kind) VALUES ('x', 'plain')"), UniqueViolationError);
  const { rows } = await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM item");
  assert.equal(rows[0]!.n, 1, "successful queries still return their result");
});

test("db pool: a checked-out client whose backend is terminated does not take the process down; its next statement fails, the pool serves a fresh connection", async (t) => {
  const db = await createTestDatabase();
  t.after(() => db.close());
  const client = await db.pool.connect();
  // Not events.once: it listens for 'error' itself, which would hide what this test checks.
  const ended = new Promise((resolve) => client.once("end", resolve));
  await db.pool.query("SELECT pg_terminate_backend($1)", [backendPid(client)]);
  // The FATAL arrives on an idle, checked-out client: pg emits 'error', which with no listener
  // is an uncaught exception that ends this file's process (and the service's).
  await ended;
  await assert.rejects(client.query("SELECT 1"));
  client.release(true);
  const { rows } = await db.pool.query<{ n: number }>("SELECT 1 AS n");
  assert.equal(rows[0]!.n, 1);
});

test("negative control: a plain pg.Pool's checked-out client has no 'error' listener (the crash above), ours keeps one", async (t) => {
  const db = await createTestDatabase();
  const plain = new pg.Pool({ connectionString: db.url, max: 1 });
  t.after(async () => {
    await plain.end();
    await db.close();
  });
  const bare = await plain.connect();
  const ours = await db.pool.connect();
  try {
    assert.equal(bare.listenerCount("error"), 0, "pg-pool drops its listener while a client is checked out");
    assert.ok(ours.listenerCount("error") >= 1);
  } finally {
    bare.release();
    ours.release();
  }
});
