import { test } from "node:test";
import assert from "node:assert/strict";
import type { Pool, PoolClient } from "../../src/db/pool.ts";
import { withTransaction, transactionStats } from "../../src/db/transaction.ts";
import {
  CheckViolationError,
  ConnectionLostError,
  DatabaseError,
  ForeignKeyViolationError,
  TransactionConflictError,
  UniqueViolationError,
  mapPgError,
} from "../../src/db/errors.ts";
import { InvalidInputError } from "../../src/errors.ts";
import { Gate } from "../../src/hooks.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";

/**
 * withTransaction against real PostgreSQL failures: a real 40001 and a real 40P01 are
 * retried (and counted), everything else is not; a failed ROLLBACK never hides the
 * original error. Interleavings are driven by Gates and by polling pg_locks with a
 * deadline, never by sleeping.
 */

let db: TestDatabase;

test.before(async () => {
  db = await createTestDatabase({ poolSize: 10 });
  await db.pool.query(`
    CREATE TABLE tx_row (id integer PRIMARY KEY, n integer NOT NULL CHECK (n >= 0));
    CREATE TABLE tx_child (id integer PRIMARY KEY, row_id integer NOT NULL REFERENCES tx_row (id));
    INSERT INTO tx_row (id, n) VALUES (1, 0), (2, 0);`);
});

test.after(async () => {
  await db?.close();
});

async function resetRows(): Promise<void> {
  await db.pool.query("DELETE FROM tx_child; DELETE FROM tx_row; INSERT INTO tx_row (id, n) VALUES (1, 0), (2, 0)");
}

async function rowN(id: number): Promise<number | undefined> {
  const { rows } = await db.pool.query<{ n: number }>("SELECT n FROM tx_row WHERE id = $1", [id]);
  return rows[0]?.n;
}

function pidOf(client: PoolClient): number {
  const pid = (client as unknown as { processID?: number }).processID;
  assert.ok(typeof pid === "number", "a connected pg client knows its backend pid");
  return pid;
}

/** Bounded polling: resolves once `pid` waits for an ungranted lock, fails after the deadline. */
async function waitUntilBlocked(
  pool: Pool,
  pid: number,
  timeoutMs = 10_000,
): Promise<{ locktype: string; blockers: number[] }> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { rows } = await pool.query<{ locktype: string; blockers: number[] }>(
      "SELECT locktype, pg_blocking_pids($1) AS blockers FROM pg_locks WHERE pid = $1 AND NOT granted",
      [pid],
    );
    if (rows.length > 0) return rows[0]!;
    if (Date.now() > deadline)
      throw new Error(`backend ${pid} did not start waiting for a lock within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 5)); // poll interval, not synchronisation
  }
}

/** Captures the raw SQLSTATE of a failing statement, then rethrows it unchanged. */
async function recordCode<T>(codes: string[], run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (err) {
    codes.push(String((err as { code?: unknown }).code));
    throw err;
  }
}

/**
 * Attempt 1 reads row 1 in REPEATABLE READ (taking its snapshot), parks at a gate while
 * another REPEATABLE READ transaction updates row 1 and commits, then updates row 1
 * itself: PostgreSQL raises a real 40001 ("could not serialize access due to concurrent update").
 */
async function serializationScenario(
  maxAttempts: number,
): Promise<{ outcome: Promise<number>; calls: () => number; codes: string[] }> {
  const gate = new Gate("first attempt");
  const codes: string[] = [];
  let calls = 0;
  const outcome = withTransaction(
    db.pool,
    async (client) => {
      const attempt = ++calls;
      await client.query("SELECT n FROM tx_row WHERE id = 1");
      if (attempt === 1) await gate.handler({ attempt });
      await recordCode(codes, () => client.query("UPDATE tx_row SET n = n + 1 WHERE id = 1"));
      return attempt;
    },
    { isolation: "REPEATABLE READ", maxAttempts },
  );
  outcome.catch(() => undefined); // observed by the caller; avoid an unhandled rejection meanwhile
  await gate.waitArrived();
  const other = await db.pool.connect();
  try {
    await other.query("BEGIN ISOLATION LEVEL REPEATABLE READ");
    await other.query("UPDATE tx_row SET n = n + 10 WHERE id = 1");
    await other.query("COMMIT");
  } finally {
    other.release();
  }
  gate.release();
  return { outcome, calls: () => calls, codes };
}

test("a real serialization failure (40001) is retried and counted", async () => {
  await resetRows();
  const retriesBefore = transactionStats.retries;
  const { outcome, calls, codes } = await serializationScenario(5);
  assert.equal(await outcome, 2, "the second attempt committed");
  assert.equal(calls(), 2, "the work function ran once per attempt");
  assert.deepEqual(codes, ["40001"], "attempt 1 failed with a genuine serialization failure");
  assert.equal(transactionStats.retries, retriesBefore + 1);
  assert.equal(await rowN(1), 11, "both the concurrent +10 and the retried +1 are in");
});

test("negative control: with maxAttempts 1 the same interleaving surfaces the 40001", async () => {
  await resetRows();
  const retriesBefore = transactionStats.retries;
  const givenUpBefore = transactionStats.conflictsGivenUp;
  const { outcome, calls, codes } = await serializationScenario(1);
  await assert.rejects(outcome, (err: unknown) => {
    assert.ok(err instanceof TransactionConflictError);
    assert.equal(err.sqlState, "40001");
    assert.equal(err.code, "TRANSACTION_CONFLICT");
    return true;
  });
  assert.equal(calls(), 1);
  assert.deepEqual(codes, ["40001"]);
  assert.equal(transactionStats.retries, retriesBefore, "no retry when no attempt is left");
  assert.equal(transactionStats.conflictsGivenUp, givenUpBefore + 1);
  assert.equal(await rowN(1), 10, "the failed attempt left nothing behind");
});

test("a real deadlock (40P01) is retried and counted", async () => {
  await resetRows();
  const retriesBefore = transactionStats.retries;
  const lockedRow1 = new Gate("first attempt holds row 1");
  let otherCommitted!: () => void;
  const otherDone = new Promise<void>((resolve) => (otherCommitted = resolve));
  const codes: string[] = [];
  let calls = 0;
  const outcome = withTransaction(db.pool, async (client) => {
    const attempt = ++calls;
    // This transaction is the one that runs the deadlock check (20 ms vs the other's 60 s),
    // so it is the victim: the 40P01 lands inside withTransaction, deterministically.
    await client.query("SET LOCAL deadlock_timeout = '20ms'");
    if (attempt === 2) await otherDone;
    await client.query("SELECT n FROM tx_row WHERE id = 1 FOR UPDATE");
    if (attempt === 1) await lockedRow1.handler({ pid: pidOf(client) });
    await recordCode(codes, () => client.query("SELECT n FROM tx_row WHERE id = 2 FOR UPDATE"));
    await client.query("UPDATE tx_row SET n = n + 1 WHERE id IN (1, 2)");
    return attempt;
  });
  outcome.catch(() => undefined);
  const { pid: victimPid } = await lockedRow1.waitArrived();

  const other = await db.pool.connect();
  try {
    await other.query("BEGIN");
    await other.query("SET LOCAL deadlock_timeout = '60s'");
    await other.query("SELECT n FROM tx_row WHERE id = 2 FOR UPDATE");
    const otherWantsRow1 = other.query("SELECT n FROM tx_row WHERE id = 1 FOR UPDATE");
    const wait = await waitUntilBlocked(db.pool, pidOf(other));
    assert.equal(wait.locktype, "transactionid");
    assert.deepEqual(wait.blockers, [victimPid], "the other transaction waits for the one under test");
    lockedRow1.release(); // now the transaction under test asks for row 2: a cycle
    await otherWantsRow1; // granted once the victim has rolled back
    await other.query("UPDATE tx_row SET n = n + 100 WHERE id IN (1, 2)");
    await other.query("COMMIT");
  } finally {
    other.release();
  }
  otherCommitted();

  assert.equal(await outcome, 2);
  assert.equal(calls, 2);
  assert.deepEqual(codes, ["40P01"], "attempt 1 was the deadlock victim");
  assert.equal(transactionStats.retries, retriesBefore + 1);
  assert.deepEqual([await rowN(1), await rowN(2)], [101, 101]);
});

test("errors other than 40001/40P01 are not retried: the work function runs exactly once", async () => {
  await resetRows();
  const retriesBefore = transactionStats.retries;
  const cases: {
    name: string;
    sql: string;
    type: new (...args: never[]) => DatabaseError;
    sqlState: string;
    constraint?: string;
  }[] = [
    {
      name: "23505",
      sql: "INSERT INTO tx_row (id, n) VALUES (1, 0)",
      type: UniqueViolationError,
      sqlState: "23505",
      constraint: "tx_row_pkey",
    },
    {
      name: "23503",
      sql: "INSERT INTO tx_child (id, row_id) VALUES (1, 999)",
      type: ForeignKeyViolationError,
      sqlState: "23503",
      constraint: "tx_child_row_id_fkey",
    },
    {
      name: "23514",
      sql: "UPDATE tx_row SET n = -1 WHERE id = 1",
      type: CheckViolationError,
      sqlState: "23514",
      constraint: "tx_row_n_check",
    },
    { name: "42601", sql: "SELEC 1", type: DatabaseError, sqlState: "42601" },
  ];
  for (const c of cases) {
    let calls = 0;
    await assert.rejects(
      withTransaction(db.pool, async (client) => {
        calls++;
        await client.query("UPDATE tx_row SET n = n + 1 WHERE id = 2"); // must be rolled back
        await client.query(c.sql);
      }),
      (err: unknown) => {
        assert.ok(err instanceof c.type, `${c.name} maps to ${c.type.name}`);
        assert.equal(err.sqlState, c.sqlState);
        if (c.constraint) assert.equal(err.constraint, c.constraint);
        assert.ok(!(err instanceof TransactionConflictError));
        return true;
      },
    );
    assert.equal(calls, 1, `${c.name}: exactly one attempt`);
  }
  let calls = 0;
  const plain = new Error("not a database error");
  await assert.rejects(
    withTransaction(db.pool, async () => {
      calls++;
      throw plain;
    }),
    (err: unknown) => err === plain,
  );
  assert.equal(calls, 1);
  const typed = new InvalidInputError("x", "bad");
  await assert.rejects(
    withTransaction(db.pool, async () => {
      throw typed;
    }),
    (err: unknown) => err === typed,
  );
  assert.equal(transactionStats.retries, retriesBefore, "nothing was retried");
  assert.equal(await rowN(2), 0, "every failed attempt was rolled back");
});

/**
 * The work function has its own backend terminated from another connection and then
 * fails with its own error; the ROLLBACK that follows cannot be sent.
 */
async function terminateThenThrow(
  run: (work: (client: PoolClient) => Promise<void>) => Promise<void>,
  original: Error,
): Promise<{ err: unknown; calls: number; pid: number }> {
  let calls = 0;
  let pid = 0;
  const err = await run(async (client) => {
    calls++;
    await client.query("INSERT INTO tx_row (id, n) VALUES (50, 0)");
    pid = pidOf(client);
    const { rows } = await db.pool.query<{ gone: boolean }>("SELECT pg_terminate_backend($1, 10000) AS gone", [pid]);
    assert.equal(rows[0]!.gone, true, "the backend has exited");
    throw original;
  }).then(
    () => assert.fail("the transaction must fail"),
    (e: unknown) => e,
  );
  return { err, calls, pid };
}

test("a failing ROLLBACK never replaces the original error; it is attached in .suppressed", async () => {
  await resetRows();
  const retriesBefore = transactionStats.retries;
  const original = new Error("the work function failed on purpose");
  const { err, calls, pid } = await terminateThenThrow((work) => withTransaction(db.pool, work), original);
  assert.equal(err, original, "the thrown error is the original one");
  const suppressed = (err as Error & { suppressed?: unknown[] }).suppressed;
  assert.ok(Array.isArray(suppressed) && suppressed.length === 1, "exactly one suppressed error");
  assert.ok(
    suppressed[0] instanceof ConnectionLostError,
    `the ROLLBACK failure is a ConnectionLostError, got ${String(suppressed[0])}`,
  );
  assert.equal(calls, 1);
  assert.equal(transactionStats.retries, retriesBefore);
  assert.equal(await rowN(50), undefined, "the terminated transaction wrote nothing");
  // The broken connection was discarded: the pool hands out working connections afterwards.
  const pids = await Promise.all(
    Array.from({ length: 3 }, () =>
      withTransaction(db.pool, async (c) => (await c.query<{ p: number }>("SELECT pg_backend_pid() AS p")).rows[0]!.p),
    ),
  );
  assert.ok(!pids.includes(pid), "the terminated backend is not reused");

  // Same when the original error is already typed: it keeps its class, the rollback error goes to .suppressed.
  const typed = new InvalidInputError("x", "typed original");
  const second = await terminateThenThrow((work) => withTransaction(db.pool, work), typed);
  assert.equal(second.err, typed);
  assert.equal((typed as Error & { suppressed?: unknown[] }).suppressed?.length, 1);
});

test("negative control: a naive catch { ROLLBACK; throw } loses the original error in the same scenario", async () => {
  await resetRows();
  const original = new Error("the work function failed on purpose");
  const naive = async (work: (client: PoolClient) => Promise<void>): Promise<void> => {
    const client = await db.pool.connect();
    client.on("error", () => undefined); // keep the process alive; the naive runner's flaw is elsewhere
    let broken: Error | undefined;
    try {
      await client.query("BEGIN");
      await work(client);
      await client.query("COMMIT");
    } catch (e) {
      try {
        await client.query("ROLLBACK");
      } catch (rollbackError) {
        broken = rollbackError as Error;
        throw rollbackError;
      }
      throw e;
    } finally {
      client.release(broken);
    }
  };
  const { err } = await terminateThenThrow(naive, original);
  assert.notEqual(err, original, "the naive runner reports the ROLLBACK failure instead");
  assert.match(String((err as Error).message), /not queryable|terminat/i);
});

test("mapPgError maps SQLSTATEs to the typed classes", () => {
  const fake = (code: string, extra: Record<string, unknown> = {}) =>
    Object.assign(new Error(`fake ${code}`), { code, ...extra });
  const expectations: [string, new (...args: never[]) => DatabaseError, string][] = [
    ["23503", ForeignKeyViolationError, "FOREIGN_KEY_VIOLATION"],
    ["23505", UniqueViolationError, "UNIQUE_VIOLATION"],
    ["23514", CheckViolationError, "CHECK_VIOLATION"],
    ["40001", TransactionConflictError, "TRANSACTION_CONFLICT"],
    ["40P01", TransactionConflictError, "TRANSACTION_CONFLICT"],
    ["08006", ConnectionLostError, "CONNECTION_LOST"],
    ["08003", ConnectionLostError, "CONNECTION_LOST"],
    ["57P01", ConnectionLostError, "CONNECTION_LOST"],
    ["42P01", DatabaseError, "DATABASE_ERROR"],
  ];
  for (const [sqlState, type, code] of expectations) {
    const raw = fake(sqlState, { constraint: "some_constraint" });
    const mapped = mapPgError(raw);
    assert.ok(mapped instanceof type, `${sqlState} -> ${type.name}`);
    assert.equal(mapped.constructor, type, `${sqlState} maps to exactly ${type.name}`);
    assert.equal(mapped.code, code);
    assert.equal(mapped.sqlState, sqlState);
    assert.equal(mapped.cause, raw, "the driver error is kept as the cause");
    assert.equal(mapped.message, `fake ${sqlState}`);
    assert.deepEqual(mapped.suppressed, []);
  }
  assert.equal((mapPgError(fake("23505", { constraint: "item_pkey" })) as DatabaseError).constraint, "item_pkey");
  assert.equal((mapPgError(fake("23505")) as DatabaseError).constraint, undefined);
  // Only 40001 and 40P01 are retryable conflicts.
  for (const sqlState of ["40002", "40003", "25P02", "55P03"]) {
    assert.ok(!(mapPgError(fake(sqlState)) instanceof TransactionConflictError), `${sqlState} is not a conflict`);
  }
  // Dropped sockets without a SQLSTATE are connection losses, reported as 08006.
  for (const raw of [
    new Error("Connection terminated unexpectedly"),
    new Error("Client has encountered a connection error and is not queryable"),
    fake("ECONNRESET"),
    fake("ECONNREFUSED"),
    fake("EPIPE"),
  ]) {
    const mapped = mapPgError(raw);
    assert.ok(
      mapped instanceof ConnectionLostError,
      `${raw.message} (${String((raw as { code?: string }).code)}) -> ConnectionLostError`,
    );
    assert.equal(mapped.sqlState, "08006");
  }
  // Already typed errors and foreign errors pass through unchanged.
  const typed = new InvalidInputError("f", "m");
  assert.equal(mapPgError(typed), typed);
  const plain = new Error("plain");
  assert.equal(mapPgError(plain), plain);
  assert.equal(mapPgError(fake("not-a-sqlstate")) instanceof DatabaseError, false);
});

test("real driver errors from PostgreSQL map to the same classes", async () => {
  await resetRows();
  const attempts: [string, new (...args: never[]) => DatabaseError, string][] = [
    ["INSERT INTO tx_row (id, n) VALUES (1, 0)", UniqueViolationError, "tx_row_pkey"],
    ["INSERT INTO tx_child (id, row_id) VALUES (1, 999)", ForeignKeyViolationError, "tx_child_row_id_fkey"],
    ["UPDATE tx_row SET n = -5 WHERE id = 1", CheckViolationError, "tx_row_n_check"],
  ];
  for (const [sql, type, constraint] of attempts) {
    const raw = await db.pool.query(sql).then(
      () => assert.fail(`${sql} must fail`),
      (e: unknown) => e,
    );
    const mapped = mapPgError(raw);
    assert.ok(mapped instanceof type, `${sql} -> ${type.name}`);
    assert.equal(mapped.constraint, constraint);
  }
});
