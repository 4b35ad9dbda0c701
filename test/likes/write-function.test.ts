/**
 * The like write path as one server-side call (like_set, src/db/schema.sql): one
 * statement per write; the same outcomes and tables with the SQL hook points on (as in every
 * test database) and off (as in production); and a writer parked at like.beforeCommit, inside
 * that one statement, holds the locks a concurrent writer queues behind. Concurrency of the
 * one-statement path is also what 32-C and 32-J exercise.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import { withTransaction } from "../../src/db/transaction.ts";
import { writeSide, writeSideClean } from "../../src/likes/like-audit.ts";
import { formatResult, type LikeResult } from "../../src/likes/types.ts";
import { seededRandom } from "../support/concurrency.ts";
import { waitForAnyLockWait } from "../support/pg-locks.ts";
import { SqlHook } from "../support/sql-hooks.ts";
import { count, likesFixture, user, type LikesFixture } from "./fixture.ts";

/**
 * Counts the statements every pg client of this process sends (BEGIN and COMMIT included) while
 * it is on; the test sends nothing else in that time.
 */
function countStatements(): { readonly n: number; stop(): void } {
  const prototype = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = prototype.query;
  const counter = { n: 0, stop: () => void (prototype.query = original) };
  prototype.query = function (this: unknown, ...args: unknown[]) {
    counter.n++;
    return original.apply(this, args);
  };
  return counter;
}

test("a like, an unlike, a NOOP and a rejection are one statement each; the same call in an explicit transaction is three (the counter's control)", async (t) => {
  const f = await likesFixture(4);
  t.after(() => f.close());
  const perCall: string[] = [];
  const measure = async (label: string, call: () => Promise<Pick<LikeResult, "outcome">>) => {
    const counter = countStatements();
    try {
      const r = await call();
      perCall.push(`${label} ${r.outcome}:${counter.n}`);
      return counter.n;
    } finally {
      counter.stop();
    }
  };
  assert.equal(await measure("like", () => f.likes.like(user(1), "item-lab-01")), 1);
  assert.equal(await measure("like again", () => f.likes.like(user(1), "item-lab-01")), 1);
  assert.equal(await measure("unlike", () => f.likes.unlike(user(1), "item-lab-01")), 1);
  assert.equal(await measure("missing item", () => f.likes.like(user(1), "no-such-item")), 1);
  // Control: the counter sees BEGIN and COMMIT around the same call.
  const inTransaction = () =>
    withTransaction(
      f.db.pool,
      async (c) =>
        (
          await c.query<{ outcome: "CHANGED" }>("SELECT outcome FROM like_set($1, 'item-lab-01', true, $2)", [
            user(2),
            f.likes.partitionOf(user(2)),
          ])
        ).rows[0]!,
    );
  assert.equal(await measure("like in BEGIN/COMMIT", inTransaction), 3);
  t.diagnostic(`note statements per call: ${perCall.join(", ")}`);
  assert.ok(writeSideClean(await writeSide(f.db.pool)));
});

/** A fixed script of writes: users spread over partitions, repeats (NOOP) and a missing item (REJECTED). */
function script(): { userId: string; itemId: string; like: boolean }[] {
  const random = seededRandom(8_003);
  const items = ["item-lab-01", "item-lab-02", "item-lab-03", "no-such-item"];
  return Array.from({ length: 400 }, () => ({
    userId: user(1 + Math.floor(random() * 30)),
    itemId: items[Math.floor(random() * (random() < 0.05 ? 4 : 3))]!,
    like: random() < 0.55,
  }));
}

async function ledgerTables(f: LikesFixture): Promise<string> {
  const facts = await f.db.pool.query(
    "SELECT user_id, item_id, liked, version FROM like_fact ORDER BY user_id, item_id",
  );
  const events = await f.db.pool.query(
    "SELECT part, seq, user_id, item_id, delta, version FROM like_outbox ORDER BY part, seq",
  );
  const seqs = await f.db.pool.query("SELECT part, last FROM like_seq ORDER BY part");
  return JSON.stringify([facts.rows, events.rows, seqs.rows]);
}

test("P=4 with the SQL hook points on (tests) and off (production) every write has the same outcome and the tables are the same", async (t) => {
  const direct = await likesFixture(4, undefined, { sqlHooks: false });
  const hooked = await likesFixture(4);
  t.after(async () => {
    await direct.close();
    await hooked.close();
  });
  const setting = async (f: LikesFixture) =>
    (await f.db.pool.query<{ s: string | null }>("SELECT current_setting('ledger.test_hooks', true) AS s")).rows[0]!.s;
  assert.deepEqual([await setting(direct), await setting(hooked)], [null, "on"]);
  const outcomes = async (f: LikesFixture) => {
    const out: string[] = [];
    for (const w of script()) {
      const r = await (w.like ? f.likes.like(w.userId, w.itemId) : f.likes.unlike(w.userId, w.itemId));
      out.push(`${formatResult(r)} seq=${r.seq} part=${r.part}${r.code ? ` ${r.code}` : ""}`);
    }
    return out;
  };
  const a = await outcomes(direct);
  const b = await outcomes(hooked);
  const changed = a.filter((o) => o.startsWith("CHANGED")).length;
  t.diagnostic(
    `note 400 writes: CHANGED=${changed} NOOP=${a.filter((o) => o.startsWith("NOOP")).length} REJECTED=${a.filter((o) => o.startsWith("REJECTED")).length}`,
  );
  assert.deepEqual(b, a);
  assert.equal(await ledgerTables(hooked), await ledgerTables(direct));
  assert.ok(writeSideClean(await writeSide(direct.db.pool)));
});

test("P=1 a writer parked inside like_set before COMMIT holds the sequence row: a writer of another pair waits for it, then takes the next number", async (t) => {
  const f = await likesFixture(1);
  const gate = await SqlHook.arm(f.db.pool, "like.beforeCommit");
  t.after(async () => {
    await gate.release();
    await f.close();
  });
  const paused = f.likes.like(user(1), "item-lab-01");
  const { context } = await gate.parked();
  const direct = f.likes.like(user(2), "item-lab-02");
  const wait = await waitForAnyLockWait(f.db.pool);
  t.diagnostic(
    `note paused seq=${String(context.seq)}; the one-statement writer waits: locktype=${wait.locktype} mode=${wait.mode}`,
  );
  assert.equal(wait.locktype, "transactionid", "it waits for the paused transaction (its like_seq row lock)");
  assert.equal(await count(f.db, "SELECT count(*) AS n FROM like_outbox"), 0, "nothing is visible before COMMIT");
  await gate.release();
  const [first, second] = await Promise.all([paused, direct]);
  assert.deepEqual([first.seq, second.seq], [1, 2]);
  assert.ok(writeSideClean(await writeSide(f.db.pool)));
});
