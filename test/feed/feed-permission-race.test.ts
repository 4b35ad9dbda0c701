import { test } from "node:test";
import assert from "node:assert/strict";
import { readHomeTimeline } from "../../src/feed/feed-reads.ts";
import { Gate, Hooks } from "../../src/hooks.ts";
import type { Ledger } from "../../src/ledger.ts";
import { waitForAnyLockWait } from "../support/pg-locks.ts";
import { drainFeed, feedClean, feedFixture, inboxRows } from "./fixture.ts";
import { inboxPageWithoutReadTimeRule } from "./negative-controls.ts";

async function timelineIds(ledger: Ledger, reader: string): Promise<string[]> {
  return (await readHomeTimeline(ledger.pool, reader, { limit: 200 })).entries.map((e) => e.post.postId);
}

test("a block commits while a post is created and while it is fanned out: the blocked reader never sees the post; without the read-time rule the inbox leaks it", async (t) => {
  const hooks = new Hooks();
  const fx = await feedFixture(1, ["ann", "bob"], { hooks });
  t.after(() => fx.close());
  const { ledger } = fx;
  await ledger.relations.follow("ann", "bob");
  await drainFeed(ledger);

  // 1. The post holds its token (event_seq FOR SHARE): the block waits for it, as pg_locks shows.
  const tokenGate = new Gate("post.afterToken");
  hooks.on("post.afterToken", tokenGate.handler);
  const creating = ledger.posts.createPost("bob", "FOLLOWERS", "before the block");
  await tokenGate.waitArrived();
  const blocking = ledger.relations.block("bob", "ann");
  const wait = await waitForAnyLockWait(fx.db.pool);
  assert.equal(wait.locktype, "transactionid");
  tokenGate.release();
  const first = await creating;
  await blocking;
  hooks.on("post.afterToken", () => undefined);
  await ledger.relations.unblock("bob", "ann");
  await ledger.relations.follow("ann", "bob");
  await drainFeed(ledger);
  assert.deepEqual(
    await timelineIds(ledger, "ann"),
    [first.postId],
    "followed again after the unblock: the old post shows",
  );

  // 2. The fan-out of a new post has read the follow and written the inbox row; the block commits
  // before the fan-out does (it waits for nothing the feed holds).
  const post = await ledger.posts.createPost("bob", "FOLLOWERS", "fanned out while blocking");
  const fanOutGate = new Gate("feed.consumer.beforeCommit");
  hooks.on("feed.consumer.beforeCommit", fanOutGate.handler);
  const fanOut = ledger.feed.consumer("posts").pollOnce([0]);
  const parked = await fanOutGate.waitArrived();
  assert.equal(parked.source, "posts");
  await ledger.relations.block("bob", "ann");
  fanOutGate.release();
  await fanOut;
  hooks.on("feed.consumer.beforeCommit", () => undefined);
  assert.ok((await inboxRows(fx.db.pool)).includes(`ann ${post.postId}`), "the fan-out committed the row");

  assert.deepEqual(await timelineIds(ledger, "ann"), [], "the read-time rule hides every post of the blocker");
  assert.ok(
    (await inboxPageWithoutReadTimeRule(fx.db.pool, "ann")).includes(post.postId),
    "negative control: the inbox read without the read-time rule shows the post to the blocked reader",
  );

  await drainFeed(ledger);
  assert.ok(!(await inboxRows(fx.db.pool)).some((r) => r.startsWith("ann ")), "the block's event took bob's posts out");
  assert.ok(await feedClean(ledger));
});

test("an unfollow commits while the follow's merge is applied: the merged posts never show; without the read-time rule they do until the unfollow is applied", async (t) => {
  const hooks = new Hooks();
  const fx = await feedFixture(1, ["ann", "bob"], { hooks });
  t.after(() => fx.close());
  const { ledger } = fx;
  const posts = [
    await ledger.posts.createPost("bob", "PUBLIC", "public"),
    await ledger.posts.createPost("bob", "FOLLOWERS", "followers"),
  ];
  await drainFeed(ledger);
  await ledger.relations.follow("ann", "bob");

  const mergeGate = new Gate("feed.consumer.beforeCommit");
  hooks.on("feed.consumer.beforeCommit", mergeGate.handler);
  const merging = ledger.feed.consumer("relations").pollOnce([0]);
  await mergeGate.waitArrived();
  await ledger.relations.unfollow("ann", "bob");

  // The unfollow's event waits for the merge's batch (the watermark row, then bob's author lock).
  let removerPid: number | undefined;
  const removeGate = new Gate("feed.consumer.afterLock");
  hooks.on("feed.consumer.afterLock", (ctx) => {
    removerPid ??= ctx.pid as number;
    return removeGate.handler(ctx);
  });
  const removing = ledger.feed.consumer("relations").pollOnce([0]);
  await waitForAnyLockWait(fx.db.pool);
  mergeGate.release();
  await merging;
  await removeGate.waitArrived();
  assert.ok(removerPid !== undefined);

  assert.equal((await inboxRows(fx.db.pool)).filter((r) => r.startsWith("ann ")).length, 2, "the merge committed");
  assert.deepEqual(await timelineIds(ledger, "ann"), [], "the read-time rule: ann no longer follows bob");
  assert.deepEqual(
    new Set(await inboxPageWithoutReadTimeRule(fx.db.pool, "ann")),
    new Set(posts.map((p) => p.postId)),
    "negative control: without the read-time rule the merged posts show after the unfollow",
  );

  removeGate.release();
  await removing;
  hooks.on("feed.consumer.afterLock", () => undefined);
  hooks.on("feed.consumer.beforeCommit", () => undefined);
  await drainFeed(ledger);
  assert.ok(!(await inboxRows(fx.db.pool)).some((r) => r.startsWith("ann ")));
  assert.ok(await feedClean(ledger));
});
