import { test } from "node:test";
import assert from "node:assert/strict";
import { FeedConsumer } from "../../src/feed/feed-consumer.ts";
import { RELATION_SOURCE } from "../../src/feed/feed-sources.ts";
import { Hooks } from "../../src/hooks.ts";
import { planFromEventState } from "./negative-controls.ts";
import { drainFeed, expectedRows, feedClean, feedFixture, inboxRows } from "./fixture.ts";

const PEOPLE = ["ann", "bob", "cat", "dan"];

test("a late follow event applied after the unfollow brings nothing back; every event redelivered, doubled and out of order changes nothing", async (t) => {
  const fx = await feedFixture(2, PEOPLE);
  t.after(() => fx.close());
  const { ledger } = fx;
  const relations = ledger.feed.consumer("relations");
  const posts = ledger.feed.consumer("posts");
  await ledger.posts.createPost("bob", "PUBLIC", "one");
  await ledger.posts.createPost("bob", "FOLLOWERS", "two");
  await posts.drain();
  await ledger.relations.follow("ann", "bob");
  await ledger.relations.unfollow("ann", "bob");
  const part = ledger.relations.partitionOf("bob");
  const [follow, unfollow] = await relations.fetchRange(part, 1, 1_000);
  assert.ok(follow && unfollow);
  // Reordered: the unfollow first, then the follow, late.
  await relations.applyBatch([unfollow]);
  const late = await relations.applyBatch([follow]);
  assert.equal(late.applied, 1);
  assert.ok(!(await inboxRows(fx.db.pool)).some((r) => r.startsWith("ann ")), "the late follow merged nothing");

  // Negative control: the same late follow, planned from what the event says, merges bob's posts back for good.
  await fx.db.pool.query("DELETE FROM feed_relation_seen; UPDATE feed_relation_watermark SET applied_upto = 0");
  const naive = new FeedConsumer(fx.db.pool, RELATION_SOURCE, { plan: planFromEventState });
  await naive.applyBatch([unfollow]);
  await naive.applyBatch([follow]);
  assert.equal((await inboxRows(fx.db.pool)).filter((r) => r.startsWith("ann ")).length, 2, "negative control leaks");
  assert.ok(!(await feedClean(ledger)), "the audit sees the leak");
  await fx.db.pool.query("DELETE FROM feed_inbox WHERE reader = 'ann'");

  // A mix of changes, then every event of both outboxes again, newest first, each twice.
  for (const who of ["ann", "cat", "dan"]) await ledger.relations.follow(who, "bob");
  await ledger.relations.follow("bob", "cat");
  const gone = await ledger.posts.createPost("cat", "PUBLIC", "three");
  await ledger.posts.createPost("dan", "SELF", "four");
  await ledger.relations.block("cat", "dan");
  await ledger.posts.deletePost("cat", gone.postId);
  await ledger.relations.unfollow("cat", "bob");
  await drainFeed(ledger);
  const settled = await inboxRows(fx.db.pool);
  assert.deepEqual(settled, await expectedRows(fx.db.pool, 800));
  for (const consumer of [posts, relations]) {
    for (let p = 1; p >= 0; p--) {
      const events = (await consumer.fetchRange(p, 1, 1_000)).reverse();
      for (const e of events) {
        const r = await consumer.applyBatch([e, e]);
        assert.equal(r.dup, 2);
      }
    }
  }
  assert.deepEqual(await inboxRows(fx.db.pool), settled);
  assert.ok(await feedClean(ledger));
});

test("a batch that dies before it commits leaves nothing; the next one applies it once", async (t) => {
  const hooks = new Hooks();
  const fx = await feedFixture(1, PEOPLE, { hooks });
  t.after(() => fx.close());
  const { ledger } = fx;
  await ledger.relations.follow("ann", "bob");
  await ledger.posts.createPost("bob", "PUBLIC", "one");
  const off = hooks.on("feed.consumer.beforeCommit", () => {
    throw new Error("crash before commit");
  });
  await assert.rejects(ledger.feed.consumer("relations").pollOnce([0]), /crash before commit/);
  await assert.rejects(ledger.feed.consumer("posts").pollOnce([0]), /crash before commit/);
  assert.deepEqual(await inboxRows(fx.db.pool), []);
  off();
  await drainFeed(ledger);
  assert.deepEqual(await inboxRows(fx.db.pool), await expectedRows(fx.db.pool, 800));
  assert.ok(await feedClean(ledger));
});

test("a delivered event that is not the outbox's is refused before it touches an inbox", async (t) => {
  const fx = await feedFixture(1, PEOPLE);
  t.after(() => fx.close());
  const { ledger } = fx;
  await ledger.posts.createPost("bob", "PUBLIC", "one");
  const [e] = await ledger.feed.consumer("posts").fetchRange(0, 1, 1);
  await assert.rejects(
    ledger.feed.consumer("posts").applyBatch([{ ...e!, fingerprint: "forged" }]),
    /does not match the outbox/,
  );
  await assert.rejects(ledger.feed.consumer("posts").applyBatch([{ ...e!, seq: 99 }]), /is not in the outbox/);
  assert.deepEqual(await inboxRows(fx.db.pool), []);
});
