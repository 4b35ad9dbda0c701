/**
 * The like write path as one server-side call (like_set, migration 003): one statement per
 * write, the same outcomes as the hooked path that wraps the same call in an explicit
 * transaction so a test can pause before COMMIT, and the two paths interleave under the same
 * locks. Concurrency of the one-statement path is also what 32-C and 32-J exercise, since they
 * register no hook.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import { Gate } from "../../src/hooks.ts";
import { writeSide, writeSideClean } from "../../src/likes/like-audit.ts";
import { formatResult, type LikeResult } from "../../src/likes/types.ts";
import { seededRandom } from "../support/concurrency.ts";
import { waitForAnyLockWait } from "../support/pg-locks.ts";
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

test("a like, an unlike, a NOOP and a rejection are one statement each; with a hook registered the same call takes BEGIN and COMMIT around it", async (t) => {
  const f = await likesFixture(4);
  t.after(() => f.close());
  const perCall: string[] = [];
  const measure = async (label: string, call: () => Promise<LikeResult>) => {
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
  // Control: the counter sees the hooked path's extra statements.
  const remove = f.hooks.on("like.beforeCommit", () => undefined);
  assert.equal(await measure("hooked like", () => f.likes.like(user(2), "item-lab-01")), 3);
  remove();
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
  const facts = await f.db.pool.query("SELECT user_id, item_id, liked, version FROM like_fact ORDER BY user_id, item_id");
  const events = await f.db.pool.query("SELECT part, seq, user_id, item_id, delta, version FROM like_outbox ORDER BY part, seq");
  const seqs = await f.db.pool.query("SELECT part, last FROM like_seq ORDER BY part");
  return JSON.stringify([facts.rows, events.rows, seqs.rows]);
}

test("P=4 the one-statement path and the hooked path give the same outcome for every write and the same tables", async (t) => {
  const direct = await likesFixture(4);
  const hooked = await likesFixture(4);
  t.after(async () => {
    await direct.close();
    await hooked.close();
  });
  let hookRuns = 0;
  hooked.hooks.on("like.beforeCommit", () => void hookRuns++);
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
  t.diagnostic(`note 400 writes: CHANGED=${changed} NOOP=${a.filter((o) => o.startsWith("NOOP")).length} REJECTED=${a.filter((o) => o.startsWith("REJECTED")).length}; hook ran ${hookRuns} times`);
  assert.deepEqual(b, a);
  assert.equal(hookRuns, changed, "the hook runs once per CHANGED write, as before");
  assert.equal(await ledgerTables(hooked), await ledgerTables(direct));
  assert.ok(writeSideClean(await writeSide(direct.db.pool)));
});

test("P=1 a writer paused before COMMIT holds the sequence row: a one-statement writer of another pair waits for it, then takes the next number", async (t) => {
  const f = await likesFixture(1);
  const gate = new Gate("like.beforeCommit");
  t.after(async () => {
    gate.release();
    await f.close();
  });
  const remove = f.hooks.on("like.beforeCommit", gate.handler);
  const paused = f.likes.like(user(1), "item-lab-01");
  const context = await gate.waitArrived();
  remove(); // from here on, writes take the one-statement path
  const direct = f.likes.like(user(2), "item-lab-02");
  const wait = await waitForAnyLockWait(f.db.pool);
  t.diagnostic(`note paused seq=${String(context.seq)}; the one-statement writer waits: locktype=${wait.locktype} mode=${wait.mode}`);
  assert.equal(wait.locktype, "transactionid", "it waits for the paused transaction (its like_seq row lock)");
  assert.equal(await count(f.db, "SELECT count(*) AS n FROM like_outbox"), 0, "nothing is visible before COMMIT");
  gate.release();
  const [first, second] = await Promise.all([paused, direct]);
  assert.deepEqual([first.seq, second.seq], [1, 2]);
  assert.ok(writeSideClean(await writeSide(f.db.pool)));
});
