import { test } from "node:test";
import assert from "node:assert/strict";
import { Gate } from "../../src/hooks.ts";
import { waitForLockWait } from "../support/pg-locks.ts";
import { likesFixture, user } from "./fixture.ts";

const ITEM = "item-lab-01";

test("32-I P=1 the install waits on the consumer's row lock (pg_locks granted=false), then sums what it committed", async (t) => {
  const f = await likesFixture(1);
  const snapshotTaken = new Gate("rebuild.afterSnapshot");
  const consumerHolds = new Gate("consumer.beforeCommit");
  t.after(async () => {
    // On a failed assertion, let the parked transactions finish so the pool can close.
    snapshotTaken.release();
    consumerHolds.release();
    await f.close();
  });
  // A first rebuild creates the item's count row (n=0, base_seq=0) without taking a seq. The
  // consumer below has already updated that row when it parks, so the install's INSERT ... ON
  // CONFLICT DO NOTHING waits for it (it sees the update in progress); the next test parks the
  // consumer before its update, where only the install's SELECT ... FOR UPDATE waits.
  await f.rebuild.rebuild({ items: [ITEM] });
  for (let u = 1; u <= 4; u++) await f.likes.like(user(u), ITEM);

  const offSnapshot = f.hooks.on("rebuild.afterSnapshot", snapshotTaken.handler);
  let installPid: number | undefined;
  const offBeforeLock = f.hooks.on("rebuild.beforeInstall", (ctx) => {
    installPid = ctx.pid as number;
  });
  const rebuilding = f.rebuild.rebuild({ items: [ITEM] });
  assert.deepEqual((await snapshotTaken.waitArrived()).snapshotSeqs, [4]);

  // Event 5 is written after the snapshot; the consumer applies it and stops before commit,
  // holding the item's count row lock.
  await f.likes.like(user(5), ITEM);
  const offConsumer = f.hooks.on("consumer.beforeCommit", consumerHolds.handler);
  const consuming = f.consumer.applyBatch(await f.consumer.fetchRange(0, 5, 5));
  await consumerHolds.waitArrived();
  offConsumer();

  snapshotTaken.release();
  const wait = await waitForLockWait(f.db.pool, () => installPid);
  const {
    rows: [waiting],
  } = await f.db.pool.query<{ query: string }>("SELECT query FROM pg_stat_activity WHERE pid = $1", [installPid]);
  t.diagnostic(
    `note install pid=${installPid} waits: pg_locks locktype=${wait.locktype} mode=${wait.mode} granted=${wait.granted}, in: ${waiting!.query.replace(/\s+/g, " ").trim()}`,
  );
  assert.equal(wait.granted, false);
  assert.match(
    waiting!.query,
    /^INSERT INTO like_count /,
    "the insert waits already: this test alone would pass without the FOR UPDATE",
  );

  consumerHolds.release();
  const applied = await consuming;
  await rebuilding;
  offSnapshot();
  offBeforeLock();
  const { rows } = await f.db.pool.query<{ n: number; base_seq: number }>(
    "SELECT n, base_seq FROM like_count WHERE item_id = $1",
    [ITEM],
  );
  t.diagnostic(
    `note consumer applied event 5 (applied=${applied.applied}); install after the wait: n=${rows[0]!.n} (4+1) base_seq=${rows[0]!.base_seq}`,
  );
  assert.deepEqual(rows[0], { n: 5, base_seq: 4 });

  const rest = await f.consumer.applyBatch(await f.consumer.fetchRange(0, 1, 4));
  t.diagnostic(`note events 1..4: applied=${rest.applied} covered=${rest.covered} dup=${rest.dup}`);
  assert.deepEqual({ applied: rest.applied, covered: rest.covered, dup: rest.dup }, { applied: 0, covered: 4, dup: 0 });
  const after = await f.db.pool.query<{ n: number }>("SELECT n FROM like_count WHERE item_id = $1", [ITEM]);
  assert.equal(after.rows[0]!.n, 5);
});

test("32-I P=1 a consumer parked between locking the count row and updating it: the install's FOR UPDATE waits for it and the event is not lost", async (t) => {
  // Unlike the test above, the consumer has only locked the row (no new row version yet), so
  // the install's INSERT ... ON CONFLICT DO NOTHING does not wait: only its SELECT ... FOR UPDATE
  // does. Without that lock the install reads the count before the consumer's event, then its
  // UPDATE waits on the row lock and overwrites the consumer's increment: n = 4 instead of 5.
  const f = await likesFixture(1);
  const snapshotTaken = new Gate("rebuild.afterSnapshot");
  const consumerLocked = new Gate("consumer.afterLock");
  t.after(async () => {
    snapshotTaken.release();
    consumerLocked.release();
    await f.close();
  });
  await f.rebuild.rebuild({ items: [ITEM] });
  for (let u = 1; u <= 4; u++) await f.likes.like(user(u), ITEM);

  const offSnapshot = f.hooks.on("rebuild.afterSnapshot", snapshotTaken.handler);
  let installPid: number | undefined;
  const offBeforeLock = f.hooks.on("rebuild.beforeInstall", (ctx) => {
    installPid = ctx.pid as number;
  });
  const rebuilding = f.rebuild.rebuild({ items: [ITEM] });
  assert.deepEqual((await snapshotTaken.waitArrived()).snapshotSeqs, [4]);

  await f.likes.like(user(5), ITEM);
  const offConsumer = f.hooks.on("consumer.afterLock", consumerLocked.handler);
  const consuming = f.consumer.applyBatch(await f.consumer.fetchRange(0, 5, 5));
  await consumerLocked.waitArrived();
  offConsumer();

  snapshotTaken.release();
  const wait = await waitForLockWait(f.db.pool, () => installPid);
  const {
    rows: [waiting],
  } = await f.db.pool.query<{ query: string }>("SELECT query FROM pg_stat_activity WHERE pid = $1", [installPid]);
  t.diagnostic(
    `note install pid=${installPid} waits for the consumer that holds the row lock: locktype=${wait.locktype} mode=${wait.mode}, in: ${waiting!.query.replace(/\s+/g, " ").trim()}`,
  );
  // Its INSERT ... ON CONFLICT passed (the row is only locked, not yet updated): the statement that
  // waits is the SELECT ... FOR UPDATE.
  assert.match(waiting!.query, /^SELECT part FROM like_count .* FOR UPDATE$/s);
  consumerLocked.release();
  const applied = await consuming;
  await rebuilding;
  offSnapshot();
  offBeforeLock();
  const { rows } = await f.db.pool.query<{ n: number; base_seq: number }>(
    "SELECT n, base_seq FROM like_count WHERE item_id = $1",
    [ITEM],
  );
  t.diagnostic(
    `note consumer applied event 5 (applied=${applied.applied}); after the install n=${rows[0]!.n} base_seq=${rows[0]!.base_seq}`,
  );
  assert.equal(applied.applied, 1);
  assert.deepEqual(rows[0], { n: 5, base_seq: 4 }, "the install summed the event the consumer applied while it waited");
  await f.consumer.drain();
  const after = await f.db.pool.query<{ n: number }>("SELECT n FROM like_count WHERE item_id = $1", [ITEM]);
  assert.equal(after.rows[0]!.n, 5, "count = facts");
});
