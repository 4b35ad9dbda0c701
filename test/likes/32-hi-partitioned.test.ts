/**
 * 32-H and 32-I with P = 4: the same interleavings, with the likes of one item spread over
 * several partitions. "Event k" is the k-th like in commit order, wherever it landed; the
 * install must lock all of the item's count rows, sum per partition what was applied above
 * that partition's snapshot seq, and leave the same totals as the chapter's single row.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { Gate } from "../../src/hooks.ts";
import type { LikeEvent } from "../../src/likes/types.ts";
import { waitForLockWait } from "../support/pg-locks.ts";
import { factCount, likesFixture, user, type LikesFixture } from "./fixture.ts";

const ITEM = "item-lab-01";
const P = 4;

async function n(f: LikesFixture): Promise<number> {
  const { rows } = await f.db.pool.query<{ n: number }>(
    "SELECT coalesce(sum(n), 0)::int AS n FROM like_count WHERE item_id = $1",
    [ITEM],
  );
  return rows[0]!.n;
}

/** Likes by users from..to; returns the events in commit order. */
async function like(f: LikesFixture, from: number, to: number): Promise<LikeEvent[]> {
  const events: LikeEvent[] = [];
  for (let u = from; u <= to; u++) {
    const r = await f.likes.like(user(u), ITEM);
    events.push({ part: r.part, seq: r.seq, userId: user(u), itemId: ITEM, delta: 1, version: r.version });
  }
  return events;
}

/** Applies the given events, one batch per partition. */
async function apply(f: LikesFixture, events: LikeEvent[]) {
  const total = { applied: 0, covered: 0, dup: 0 };
  for (const part of new Set(events.map((e) => e.part))) {
    const r = await f.consumer.applyBatch(events.filter((e) => e.part === part));
    total.applied += r.applied;
    total.covered += r.covered;
    total.dup += r.dup;
  }
  return total;
}

test(`32-H P=${P} rebuild and online increments interleaved over partitions: the same totals as table 32-3`, async (t) => {
  const f = await likesFixture(P);
  const snapshotTaken = new Gate("rebuild.afterSnapshot");
  t.after(async () => {
    snapshotTaken.release();
    await f.close();
  });
  const e = await like(f, 1, 6);
  assert.ok(new Set(e.map((x) => x.part)).size > 1, "the item's likes span several partitions");
  await apply(f, e.slice(0, 3));
  assert.equal(await n(f), 3);

  const off = f.hooks.on("rebuild.afterSnapshot", snapshotTaken.handler);
  const rebuilding = f.rebuild.rebuild({ items: [ITEM] });
  await snapshotTaken.waitArrived();
  off();
  const late = await like(f, 7, 8);
  await apply(f, [late[0]!]);
  assert.equal(await n(f), 4);
  snapshotTaken.release();
  const report = await rebuilding;
  assert.equal(await n(f), 7, "install: C(S) = 6 plus event 7 applied above its partition's snapshot seq");
  assert.equal(report.drifted.length, 0);

  const step5 = await apply(f, [...e.slice(3), late[1]!]);
  t.diagnostic(
    `note P=4 baseline: parts=${e.map((x) => x.part).join(",")}+${late.map((x) => x.part).join(",")} applied{4,5,6,8} applied=${step5.applied} covered=${step5.covered} n=${await n(f)} truth=${await factCount(f.db, ITEM)}`,
  );
  assert.deepEqual(
    { applied: step5.applied, covered: step5.covered, dup: step5.dup },
    { applied: 1, covered: 3, dup: 0 },
  );
  assert.equal(await n(f), 8);
  const again = await apply(f, [...e, ...late]);
  assert.equal(again.dup, 8);
  assert.equal(await n(f), 8);
});

test(`32-I P=${P} the install waits on the consumer's lock of one partition's count row, then sums what it committed`, async (t) => {
  const f = await likesFixture(P);
  const snapshotTaken = new Gate("rebuild.afterSnapshot");
  const consumerHolds = new Gate("consumer.beforeCommit");
  t.after(async () => {
    snapshotTaken.release();
    consumerHolds.release();
    await f.close();
  });
  await f.rebuild.rebuild({ items: [ITEM] }); // creates the item's count rows of every partition
  const first = await like(f, 1, 4);
  let installPid: number | undefined;
  const offSnapshot = f.hooks.on("rebuild.afterSnapshot", snapshotTaken.handler);
  const offInstall = f.hooks.on("rebuild.beforeInstall", (ctx) => {
    installPid = ctx.pid as number;
  });
  const rebuilding = f.rebuild.rebuild({ items: [ITEM] });
  await snapshotTaken.waitArrived();
  offSnapshot();

  const [fifth] = await like(f, 5, 5);
  const offConsumer = f.hooks.on("consumer.beforeCommit", consumerHolds.handler);
  const consuming = f.consumer.applyBatch([fifth!]);
  await consumerHolds.waitArrived();
  offConsumer();
  snapshotTaken.release();
  const wait = await waitForLockWait(f.db.pool, () => installPid);
  t.diagnostic(
    `note P=4 install waits on partition ${fifth!.part}'s row: locktype=${wait.locktype} granted=${wait.granted}`,
  );
  assert.equal(wait.granted, false);
  consumerHolds.release();
  await consuming;
  await rebuilding;
  offInstall();
  assert.equal(await n(f), 5);
  const rest = await apply(f, first);
  assert.deepEqual({ applied: rest.applied, covered: rest.covered, dup: rest.dup }, { applied: 0, covered: 4, dup: 0 });
  assert.equal(await n(f), 5);
});
