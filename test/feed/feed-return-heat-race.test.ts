/**
 * A returning reader's install racing the post batch that heats an author the reader follows
 * (docs/feed.md, "Absent readers" and "Why a rebuild racing a heating leaves no row": the read's
 * install is ordered with the hot set by the same lock as the rebuild). Both interleavings end with
 * the inbox equal to the truth; without the hot set's lock (the negative control) each leaves the
 * hot author's rows in the returning reader's inbox, and feed_audit reports them `extra`.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { FeedAbsence } from "../../src/feed/feed-absence.ts";
import type { HotSetShare } from "../../src/feed/feed-sources.ts";
import { Gate, Hooks } from "../../src/hooks.ts";
import { waitForAnyLockWait } from "../support/pg-locks.ts";
import { drainFeed, feedFixture, type FeedFixture } from "./fixture.ts";
import { judgeHeatRace, parkHeating, raceOutcome, rowsOfAuthor } from "./heat-race.ts";
import { hotSetUnlocked } from "./negative-controls.ts";

const HOT = 3;

/**
 * ann reads dan's posts, then goes absent and follows warm; bob follows warm, and warm's first post
 * reaches bob but skips ann. cat's follow makes warm's ACTIVE followers three, the threshold, so
 * warm's next post event heats it. ann's inbox holds no row of warm: the heating's plan has nothing
 * of ann's to remove, so only the hot set's lock orders it with ann's install.
 */
async function absentAnnFollowingWarm(hooks: Hooks): Promise<FeedFixture> {
  const fx = await feedFixture(1, ["warm", "ann", "bob", "cat", "dan"], { hotFollowers: HOT, hooks });
  const { ledger } = fx;
  await ledger.relations.follow("ann", "dan");
  await ledger.posts.createPost("dan", "PUBLIC", "read before the absence");
  await drainFeed(ledger);
  await fx.db.pool.query("UPDATE feed_reader SET last_read_at = now() - interval '8 days' WHERE reader = 'ann'");
  await ledger.relations.follow("ann", "warm");
  await ledger.relations.follow("bob", "warm");
  await ledger.posts.createPost("warm", "PUBLIC", "fanned out while cold, ann skipped");
  await drainFeed(ledger);
  await ledger.relations.follow("cat", "warm");
  await drainFeed(ledger);
  assert.equal(await rowsOfAuthor(fx.db.pool, "ann", "warm"), 0);
  const { rows } = await fx.db.pool.query<{ skipped: boolean }>(
    "SELECT skipped_since IS NOT NULL AS skipped FROM feed_reader WHERE reader = 'ann'",
  );
  assert.equal(rows[0]!.skipped, true, "ann's inbox was skipped by fan-out");
  return fx;
}

function absenceOf(fx: FeedFixture, hooks: Hooks, hotSet?: HotSetShare): FeedAbsence {
  return new FeedAbsence(fx.db.pool, { hooks, maxItems: fx.ledger.feed.maxItems, ...(hotSet ? { hotSet } : {}) });
}

/**
 * ann's read has installed her inbox from a truth with warm cold (warm's first post), uncommitted,
 * when the post batch heats warm. Fixed: the heating waits for the install (pg_locks: the hot
 * set's lock) and its plan then removes the row. Unlocked: the heating's plan reads ann's inbox
 * without the row, commits, and the install's row stays.
 */
async function returnFirst(hotSet: HotSetShare | undefined) {
  const hooks = new Hooks();
  const fx = await absentAnnFollowingWarm(hooks);
  const gate = new Gate("feed.return.beforeCommit");
  try {
    hooks.on("feed.return.beforeCommit", gate.handler);
    const returning = absenceOf(fx, hooks, hotSet).returnReader("ann");
    await gate.waitArrived();
    assert.equal(await rowsOfAuthor(fx.db.pool, "ann", "warm"), 0, "the install is not committed yet");
    await fx.ledger.posts.createPost("warm", "PUBLIC", "the post that heats");
    const heating = fx.ledger.feed.consumer("posts").pollOnce([0]);
    let wait: { locktype: string; mode: string } | null = null;
    if (hotSet === undefined) wait = await waitForAnyLockWait(fx.db.pool);
    else await heating;
    gate.release();
    assert.deepEqual(await returning, { complete: true, rebuilt: true });
    await heating;
    hooks.on("feed.return.beforeCommit", () => undefined);
    return await raceOutcome(fx, wait);
  } finally {
    gate.release();
    await fx.close();
  }
}

/**
 * The post batch has heated warm, uncommitted, when ann reads. Fixed: her install waits for the
 * heating (pg_locks: the hot set's lock, shared) and reads warm hot. Unlocked: it reads warm cold
 * in a snapshot without the heating and installs warm's rows, which the heating's plan never saw.
 */
async function heatingFirst(hotSet: HotSetShare | undefined) {
  const hooks = new Hooks();
  const fx = await absentAnnFollowingWarm(hooks);
  const gate = new Gate("feed.consumer.beforeCommit");
  try {
    const { heating } = await parkHeating(fx, hooks, gate);
    const returning = absenceOf(fx, hooks, hotSet).returnReader("ann");
    let wait: { locktype: string; mode: string } | null = null;
    if (hotSet === undefined) wait = await waitForAnyLockWait(fx.db.pool);
    else assert.deepEqual(await returning, { complete: true, rebuilt: true });
    gate.release();
    await heating;
    assert.deepEqual(await returning, { complete: true, rebuilt: true });
    hooks.on("feed.consumer.beforeCommit", () => undefined);
    return await raceOutcome(fx, wait);
  } finally {
    gate.release();
    await fx.close();
  }
}

test("a returning reader's install committed after a heating started: the heating waits for it and removes the hot author's row; without the hot set's lock the row stays and the audit reports it", async () => {
  judgeHeatRace(await returnFirst(undefined), await returnFirst(hotSetUnlocked), {
    waitMode: "ExclusiveLock",
    waitMessage: "the heating waits for the install's hot-set lock",
    controlRows: 1,
    controlMessage: "negative control: the install's row of the now hot author stays",
  });
});

test("a returning reader reads while the heating batch is uncommitted: the install waits and reads the author hot; without the hot set's lock it installs the author's rows and the audit reports them", async () => {
  // The control installs both of warm's posts, read in the install's snapshot of warm still cold.
  judgeHeatRace(await heatingFirst(undefined), await heatingFirst(hotSetUnlocked), {
    waitMode: "ShareLock",
    waitMessage: "the install waits for the heating's hot-set lock",
    controlRows: 2,
    controlMessage: "negative control: warm's rows were installed in ann's inbox",
  });
});
