/**
 * A rebuild racing the post batch that heats an author the reader follows (docs/feed.md, "Hot
 * authors", "Why a rebuild racing a heating leaves no row"): both interleavings end with the inbox
 * equal to the truth; without the hot set's lock (the negative control) each leaves the hot
 * author's rows in the reader's inbox, and feed_audit reports them `extra`.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { FeedRebuild } from "../../src/feed/feed-rebuild.ts";
import type { HotSetShare } from "../../src/feed/feed-sources.ts";
import { Gate, Hooks } from "../../src/hooks.ts";
import { waitForAnyLockWait } from "../support/pg-locks.ts";
import { drainFeed, feedFixture, type FeedFixture } from "./fixture.ts";
import { parkHeating, raceOutcome } from "./heat-race.ts";
import { hotSetUnlocked } from "./negative-controls.ts";

const HOT = 3;

/**
 * warm has two followers (ann, bob) and a post fanned out to both; cat's follow makes it three,
 * the threshold, so warm's next post event heats it. ann's inbox has lost warm's row (the drift
 * a rebuild of ann repairs).
 */
async function warmAboutToHeat(hooks: Hooks): Promise<{ fx: FeedFixture; cold: string }> {
  const fx = await feedFixture(1, ["warm", "ann", "bob", "cat"], { hotFollowers: HOT, hooks });
  const { ledger } = fx;
  await ledger.relations.follow("ann", "warm");
  await ledger.relations.follow("bob", "warm");
  const cold = await ledger.posts.createPost("warm", "PUBLIC", "fanned out while cold");
  await drainFeed(ledger);
  await ledger.relations.follow("cat", "warm");
  await drainFeed(ledger);
  await fx.db.pool.query("DELETE FROM feed_inbox WHERE reader = 'ann' AND post_id = $1", [cold.postId]);
  return { fx, cold: cold.postId };
}

function rebuildOf(fx: FeedFixture, hooks: Hooks, hotSet?: HotSetShare): FeedRebuild {
  return new FeedRebuild(fx.db.pool, { hooks, maxItems: fx.ledger.feed.maxItems, ...(hotSet ? { hotSet } : {}) });
}

/**
 * The rebuild of ann has read its truth (warm cold) and installed warm's row, uncommitted, when
 * the post batch heats warm. Fixed: the heating waits for the rebuild (pg_locks: the hot set's
 * lock) and its plan then removes the row. Unlocked: the heating reads ann's inbox without the
 * row, commits, and the rebuild's row stays.
 */
async function rebuildFirst(hotSet: HotSetShare | undefined) {
  const hooks = new Hooks();
  const { fx, cold } = await warmAboutToHeat(hooks);
  const gate = new Gate("feed.rebuild.beforeCommit");
  try {
    hooks.on("feed.rebuild.beforeCommit", gate.handler);
    const rebuilding = rebuildOf(fx, hooks, hotSet).rebuild({ readers: ["ann"] });
    await gate.waitArrived();
    await fx.ledger.posts.createPost("warm", "PUBLIC", "the post that heats");
    const heating = fx.ledger.feed.consumer("posts").pollOnce([0]);
    let wait: { locktype: string; mode: string } | null = null;
    if (hotSet === undefined) {
      wait = await waitForAnyLockWait(fx.db.pool);
    } else {
      await heating;
    }
    gate.release();
    const report = await rebuilding;
    await heating;
    hooks.on("feed.rebuild.beforeCommit", () => undefined);
    assert.deepEqual(report.changed, [{ reader: "ann", added: 1, removed: 0 }], "the rebuild installed warm's row");
    return { ...(await raceOutcome(fx, wait)), cold };
  } finally {
    gate.release();
    await fx.close();
  }
}

/**
 * The post batch has heated warm and removed its followers' rows, uncommitted, when a rebuild of
 * every reader starts. Fixed: ann's install waits for the heating (pg_locks) and reads warm hot.
 * Unlocked: it reads warm cold in a snapshot without the heating and installs warm's rows.
 */
async function heatingFirst(hotSet: HotSetShare | undefined) {
  const hooks = new Hooks();
  const { fx } = await warmAboutToHeat(hooks);
  const gate = new Gate("feed.consumer.beforeCommit");
  try {
    const { heating } = await parkHeating(fx, hooks, gate);
    const rebuilding = rebuildOf(fx, hooks, hotSet).rebuild();
    // Fixed, ann's install (the first reader) waits for the hot set's lock; unlocked, ann's is
    // committed and bob's (the next) waits for his feed_reader row, which the heating holds.
    const wait = await waitForAnyLockWait(fx.db.pool);
    gate.release();
    await heating;
    await rebuilding;
    hooks.on("feed.consumer.beforeCommit", () => undefined);
    return await raceOutcome(fx, wait);
  } finally {
    gate.release();
    await fx.close();
  }
}

test("a rebuild that installed a row of an author before its heating commits: the heating waits for it and removes the row; without the hot set's lock the row stays and the audit reports it", async () => {
  const fixed = await rebuildFirst(undefined);
  assert.equal(fixed.wait?.locktype, "advisory", "the heating waits for the rebuild's hot-set lock");
  assert.equal(fixed.wait?.mode, "ExclusiveLock");
  assert.equal(fixed.warmRows, 0);
  assert.deepEqual([fixed.audit.extra, fixed.audit.missing], [0, 0], JSON.stringify(fixed.audit));

  const control = await rebuildFirst(hotSetUnlocked);
  assert.equal(control.warmRows, 1, "negative control: the rebuild's row of the now hot author stays");
  assert.deepEqual(
    [control.audit.extra, control.audit.missing, control.audit.explainedByPending],
    [1, 0, 0],
    JSON.stringify(control.audit),
  );
});

test("a rebuild of every reader while the heating batch is uncommitted: the reader's install waits and reads the author hot; without the hot set's lock it installs the author's rows and the audit reports them", async () => {
  const fixed = await heatingFirst(undefined);
  assert.deepEqual(
    [fixed.wait.locktype, fixed.wait.mode],
    ["advisory", "ShareLock"],
    "the install waits for the heating's hot-set lock",
  );
  assert.equal(fixed.warmRows, 0);
  assert.deepEqual([fixed.audit.extra, fixed.audit.missing], [0, 0], JSON.stringify(fixed.audit));

  const control = await heatingFirst(hotSetUnlocked);
  assert.notEqual(control.wait.locktype, "advisory");
  // Both of warm's posts: the one fanned out while cold and the one that heats, read in the
  // rebuild's snapshot of warm still cold.
  assert.equal(control.warmRows, 2, "negative control: warm's rows were installed in ann's inbox");
  assert.deepEqual(
    [control.audit.extra, control.audit.missing, control.audit.explainedByPending],
    [2, 0, 0],
    JSON.stringify(control.audit),
  );
});
