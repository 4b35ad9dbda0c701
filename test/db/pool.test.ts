import { test } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import { performance } from "node:perf_hooks";
import { backendPid, createPool, withClientCheck } from "../../src/db/pool.ts";
import { ConnectionLostError, DatabaseError, QueryDeadlineError, UniqueViolationError } from "../../src/db/errors.ts";
import { withTransaction } from "../../src/db/transaction.ts";
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

/** A pool of one connection whose statements have a deadline, and a second session holding an advisory lock it will wait for. */
async function stuckStatement(t: import("node:test").TestContext, options: { pgQueryTimeout?: number } = {}) {
  const db = await createTestDatabase();
  const holder = await db.pool.connect();
  await holder.query("SELECT pg_advisory_lock(4242)");
  const bounded =
    options.pgQueryTimeout === undefined
      ? createPool({ connectionString: db.url, max: 1, queryTimeoutMs: 300 })
      : new pg.Pool({ connectionString: db.url, max: 1, query_timeout: options.pgQueryTimeout });
  t.after(async () => {
    await holder.query("SELECT pg_advisory_unlock_all()").catch(() => undefined);
    holder.release();
    await bounded.end();
    await db.close();
  });
  return { db, bounded };
}

test("db pool: a statement past LEDGER_PG_QUERY_TIMEOUT_MS fails as ConnectionLostError (cause QueryDeadlineError) and its connection is destroyed, not reused", async (t) => {
  const { bounded } = await stuckStatement(t);
  const first = await bounded.connect();
  const stuckPid = backendPid(first);
  first.release();
  const started = performance.now();
  await assert.rejects(
    bounded.query("SELECT pg_advisory_lock(4242)"),
    (err: unknown) => err instanceof ConnectionLostError && err.cause instanceof QueryDeadlineError,
  );
  const waited = performance.now() - started;
  assert.ok(waited >= 300 && waited < 5_000, `failed after ${waited.toFixed(0)} ms`);
  await assert.rejects(
    withTransaction(bounded, (client) => client.query("SELECT pg_advisory_lock(4242)")),
    ConnectionLostError,
  );
  const next = await bounded.connect();
  try {
    assert.notEqual(backendPid(next), stuckPid, "a fresh connection, not the one whose statement was abandoned");
    assert.equal((await next.query<{ n: number }>("SELECT 1 AS n")).rows[0]!.n, 1);
  } finally {
    next.release();
  }
});

test("negative control: pg's own query_timeout rejects the statement but hands the same connection out again", async (t) => {
  const { bounded } = await stuckStatement(t, { pgQueryTimeout: 300 });
  const first = await bounded.connect();
  const pid = backendPid(first);
  await assert.rejects(first.query("SELECT pg_advisory_lock(4242)"), /Query read timeout/);
  first.release();
  const again = await bounded.connect();
  try {
    assert.equal(backendPid(again), pid, "the connection whose statement was abandoned is reused");
  } finally {
    again.release(true);
  }
});

/**
 * A statement abandoned at its deadline (its socket destroyed), and the backend that ran it: how
 * long the backend goes on running it, watched from another session. `serverClientCheckMs` is the
 * pool's option under test; 0 is the pool without it.
 */
async function abandonedStatement(t: import("node:test").TestContext, serverClientCheckMs?: number) {
  const db = await createTestDatabase();
  const bounded = createPool({ connectionString: db.url, max: 1, queryTimeoutMs: 300, serverClientCheckMs });
  t.after(async () => {
    await bounded.end();
    await db.close();
  });
  const first = await bounded.connect();
  const pid = backendPid(first);
  first.release();
  await assert.rejects(
    bounded.query("SELECT pg_sleep(60)"),
    (err: unknown) => err instanceof ConnectionLostError && err.cause instanceof QueryDeadlineError,
  );
  const running = async () =>
    (
      await db.pool.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND query LIKE 'SELECT pg_sleep%'",
        [pid],
      )
    ).rows[0]!.n === 1;
  return { running };
}

test("db pool: a statement abandoned at its deadline stops running on the server too (client_connection_check_interval)", async (t) => {
  const { running } = await abandonedStatement(t);
  const started = performance.now();
  while ((await running()) && performance.now() - started < 15_000) await new Promise((r) => setTimeout(r, 50));
  const ms = performance.now() - started;
  assert.equal(await running(), false, "the server cancelled the statement whose client went away");
  assert.ok(
    ms < 15_000,
    `the backend stopped ${ms.toFixed(0)} ms after the deadline (pg_sleep(60) would run a minute)`,
  );
});

test("negative control: without the server's check, the abandoned statement goes on running after its client is gone", async (t) => {
  const { running } = await abandonedStatement(t, 0);
  // Three times the check's period: with the check on, the backend is gone well within it.
  const until = performance.now() + 3_000;
  while (performance.now() < until) {
    assert.equal(await running(), true, "pg_sleep(60) still runs on the server");
    await new Promise((r) => setTimeout(r, 250));
  }
});

test("db pool: the server's check rides in the connection string's options, after options it already has", () => {
  assert.equal(
    new URL(withClientCheck("postgres://u:p%40ss@h:5432/db?options=-c%20search_path%3Dx", 1_000)).searchParams.get(
      "options",
    ),
    "-c search_path=x -c client_connection_check_interval=1000",
  );
  assert.equal(withClientCheck("postgres://u@h/db", 0), "postgres://u@h/db");
  assert.match(withClientCheck("postgres://u:p%40ss@h/db", 500), /^postgres:\/\/u:p%40ss@h\/db\?options=/);
});
