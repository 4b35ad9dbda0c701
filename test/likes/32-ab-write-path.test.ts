import { test } from "node:test";
import assert from "node:assert/strict";
import { formatResult } from "../../src/likes/types.ts";
import { withTransaction } from "../../src/db/transaction.ts";
import type { Pool } from "../../src/db/pool.ts";
import { SqlHook } from "../support/sql-hooks.ts";
import { pollUntil } from "../../support/poll.ts";
import { count, likesFixture, user } from "./fixture.ts";

/**
 * Runs `write` with like_set parked at like.beforeCommit (after the outbox insert, every lock
 * held) and cancels it there: the write fails inside its transaction, which aborts whole.
 */
async function abortedAfterOutboxInsert(pool: Pool, write: () => Promise<unknown>): Promise<void> {
  const hook = await SqlHook.arm(pool, "like.beforeCommit");
  try {
    const writing = write();
    // The write's rejection may arrive before the cancel's own answer: it is awaited from the
    // start, so it is never an unhandled rejection (which the test runner counts as a failure).
    const cancelled = assert.rejects(writing, /canceling statement due to user request/);
    const { pid } = await hook.parked();
    await pool.query("SELECT pg_cancel_backend($1)", [pid]);
    await cancelled;
    // node-pg rejects on the error message, before the backend has aborted its transaction; until
    // it has, its claim on the hook point stands and the next armed write would pass the point.
    await pollUntil(
      `backend ${pid} ended its cancelled transaction`,
      async () =>
        (await pool.query("SELECT count(*)::int AS n FROM pg_locks WHERE pid = $1 AND locktype = 'advisory'", [pid]))
          .rows[0]!.n as number,
      (n) => n === 0,
    );
  } finally {
    await hook.release();
  }
}

test("32-A normal path: like, unlike, like again; one event per change, versions 1..3", async (t) => {
  const f = await likesFixture(1);
  t.after(() => f.close());
  const r1 = await f.likes.like(user(1), "item-lab-01");
  const r2 = await f.likes.unlike(user(1), "item-lab-01");
  const r3 = await f.likes.like(user(1), "item-lab-01");
  t.diagnostic(`note ${formatResult(r1)} ${formatResult(r2)} ${formatResult(r3)}`);
  assert.deepEqual([r1.outcome, r2.outcome, r3.outcome], ["CHANGED", "CHANGED", "CHANGED"]);
  assert.deepEqual([r1.version, r2.version, r3.version], [1, 2, 3]);
  assert.deepEqual([r1.seq, r2.seq, r3.seq], [1, 2, 3]);
  const { rows } = await f.db.pool.query("SELECT seq, delta, version FROM like_outbox ORDER BY seq");
  assert.deepEqual(rows, [
    { seq: 1, delta: 1, version: 1 },
    { seq: 2, delta: -1, version: 2 },
    { seq: 3, delta: 1, version: 3 },
  ]);
  assert.deepEqual(await f.likes.hasLiked(user(1), "item-lab-01"), { liked: true, version: 3 });
  assert.deepEqual(await f.likes.hasLiked(user(2), "item-lab-01"), { liked: false, version: 0 });
});

test("32-B NOOP, FK rejection, aborted transaction, no gap in seq", async (t) => {
  const f = await likesFixture(1);
  t.after(() => f.close());

  const first = await f.likes.like(user(1), "item-lab-01");
  const again = await f.likes.like(user(1), "item-lab-01");
  t.diagnostic(
    `note repeat like: ${formatResult(again)} outbox=${await count(f.db, "SELECT count(*) AS n FROM like_outbox")}`,
  );
  assert.equal(first.outcome, "CHANGED");
  assert.equal(formatResult(again), "NOOP(liked,v1,already liked)");
  assert.equal(await count(f.db, "SELECT count(*) AS n FROM like_outbox"), 1);

  const never = await f.likes.unlike(user(2), "item-lab-02");
  t.diagnostic(`note unlike never liked: ${formatResult(never)}`);
  assert.equal(formatResult(never), "NOOP(unliked,v0,not liked)");

  const rejected = await f.likes.like(user(3), "no-such-item");
  t.diagnostic(`note missing item: ${rejected.outcome} ${rejected.code} (${rejected.reason})`);
  assert.equal(rejected.outcome, "REJECTED");
  assert.equal(rejected.code, "ITEM_NOT_FOUND");
  assert.equal(await count(f.db, "SELECT count(*) AS n FROM like_fact WHERE item_id = 'no-such-item'"), 0);
  assert.equal(await count(f.db, "SELECT count(*) AS n FROM like_outbox WHERE item_id = 'no-such-item'"), 0);
  assert.equal((await f.likes.unlike(user(3), "no-such-item")).outcome, "REJECTED");

  // A transaction that fails after taking a sequence number leaves no trace: the hook
  // point is after the outbox insert, and cancelling the write there aborts the whole transaction.
  await abortedAfterOutboxInsert(f.db.pool, () => f.likes.like(user(4), "item-lab-01"));
  assert.deepEqual(await f.likes.hasLiked(user(4), "item-lab-01"), { liked: false, version: 0 });
  assert.equal(await count(f.db, "SELECT last AS n FROM like_seq WHERE part = 0"), 1);

  const next = await f.likes.like(user(4), "item-lab-01");
  assert.equal(next.seq, 2, "the aborted transaction's seq 2 is reused: no gap");
  assert.equal(await count(f.db, "SELECT count(*) AS n FROM like_outbox"), 2);
  assert.equal(await count(f.db, "SELECT max(seq) AS n FROM like_outbox"), 2);
});

test("32-B the outbox refuses a second event for the same (user, item, version)", async (t) => {
  const f = await likesFixture(1);
  t.after(() => f.close());
  await f.likes.like(user(1), "item-lab-01");
  await assert.rejects(
    withTransaction(f.db.pool, (c) =>
      c.query(
        "INSERT INTO like_outbox (part, seq, user_id, item_id, delta, version) VALUES (0, 2, $1, 'item-lab-01', 1, 1)",
        [user(1)],
      ),
    ),
    (err: Error & { code?: string }) => err.code === "UNIQUE_VIOLATION",
  );
});

test("32-B P=4 NOOP, FK rejection and an aborted transaction leave no trace; every partition's seq stays gapless", async (t) => {
  const f = await likesFixture(4);
  t.after(() => f.close());
  // Users spread over all four partitions.
  const users = Array.from({ length: 40 }, (_, i) => user(i + 1));
  for (const u of users) assert.equal((await f.likes.like(u, "item-lab-01")).outcome, "CHANGED");
  for (const u of users)
    assert.equal(formatResult(await f.likes.like(u, "item-lab-01")), "NOOP(liked,v1,already liked)");
  assert.equal((await f.likes.like(users[0]!, "no-such-item")).outcome, "REJECTED");
  for (const u of users.slice(0, 8)) await abortedAfterOutboxInsert(f.db.pool, () => f.likes.unlike(u, "item-lab-01"));
  for (const u of users.slice(0, 8)) assert.equal((await f.likes.unlike(u, "item-lab-01")).outcome, "CHANGED");
  const { rows } = await f.db.pool.query<{ part: number; last: number; rows: number; max: number }>(
    `SELECT s.part, s.last, count(o.seq)::int AS rows, coalesce(max(o.seq), 0)::int AS max
       FROM like_seq s LEFT JOIN like_outbox o USING (part) GROUP BY s.part, s.last ORDER BY s.part`,
  );
  t.diagnostic(
    `note P=4 per partition last/rows/max: ${rows.map((r) => `${r.part}:${r.last}/${r.rows}/${r.max}`).join(" ")}`,
  );
  assert.equal(rows.length, 4);
  assert.ok(
    rows.every((r) => r.last > 0),
    "the users cover every partition",
  );
  for (const r of rows) assert.deepEqual([r.rows, r.max], [r.last, r.last], `partition ${r.part} is gapless`);
  assert.equal(
    rows.reduce((sum, r) => sum + r.last, 0),
    48,
  );
});
