import { test } from "node:test";
import assert from "node:assert/strict";
import { auditFeed } from "../../src/feed/feed-audit.ts";
import { readHomeTimeline } from "../../src/feed/feed-reads.ts";
import type { Ledger } from "../../src/ledger.ts";
import { drainFeed, expectedRows, feedClean, feedFixture, inboxRows } from "./fixture.ts";

const PEOPLE = ["ann", "bob", "cat", "dan", "eve"];

async function timelineIds(ledger: Ledger, reader: string): Promise<string[]> {
  return (await readHomeTimeline(ledger.pool, reader, { limit: 200 })).entries.map((e) => e.post.postId);
}

for (const partitions of [1, 4]) {
  test(`P=${partitions} posts fan out to active followers and the author; deletion, unfollow, rejection and a block either way take them out; a follow merges the followee's posts`, async (t) => {
    const fx = await feedFixture(partitions, PEOPLE, { private: ["eve"] });
    t.after(() => fx.close());
    const { ledger } = fx;
    await ledger.relations.follow("ann", "bob");
    await ledger.relations.follow("cat", "bob");
    const p1 = await ledger.posts.createPost("bob", "PUBLIC", "one");
    const p2 = await ledger.posts.createPost("bob", "FOLLOWERS", "two");
    const self = await ledger.posts.createPost("bob", "SELF", "mine");
    await drainFeed(ledger);
    assert.deepEqual(await timelineIds(ledger, "ann"), [p2.postId, p1.postId]);
    assert.deepEqual(await timelineIds(ledger, "bob"), [self.postId, p2.postId, p1.postId]);
    assert.deepEqual(await timelineIds(ledger, "dan"), []);

    // A new follow merges; a deletion leaves every inbox.
    await ledger.relations.follow("dan", "bob");
    await ledger.posts.deletePost("bob", p1.postId);
    await drainFeed(ledger);
    assert.deepEqual(await timelineIds(ledger, "dan"), [p2.postId]);
    assert.deepEqual(await timelineIds(ledger, "ann"), [p2.postId]);
    assert.equal((await fx.db.pool.query("SELECT 1 FROM feed_inbox WHERE post_id = $1", [p1.postId])).rowCount, 0);

    // Unfollow, and a block each way.
    await ledger.relations.unfollow("ann", "bob");
    await ledger.relations.block("bob", "cat");
    await ledger.relations.block("dan", "bob");
    await drainFeed(ledger);
    for (const reader of ["ann", "cat", "dan"]) assert.deepEqual(await timelineIds(ledger, reader), [], reader);

    // A request merges only once approved; a rejected one never shows anything.
    const e1 = await ledger.posts.createPost("eve", "FOLLOWERS", "eve one");
    await ledger.relations.follow("ann", "eve");
    await ledger.relations.follow("bob", "eve");
    await drainFeed(ledger);
    assert.deepEqual(await timelineIds(ledger, "ann"), []);
    await ledger.relations.decide("eve", "ann", true);
    await ledger.relations.decide("eve", "bob", false);
    await drainFeed(ledger);
    assert.deepEqual(await timelineIds(ledger, "ann"), [e1.postId]);
    assert.deepEqual(await timelineIds(ledger, "bob"), [self.postId, p2.postId]);

    assert.deepEqual(await inboxRows(fx.db.pool), await expectedRows(fx.db.pool, 800));
    const audit = await auditFeed(fx.db.pool, ledger.feed.maxItems);
    assert.equal(audit.lag, 0);
    assert.ok(await feedClean(ledger), JSON.stringify(audit));
  });
}

test("the inbox keeps the newest LEDGER_FEED_MAX_ITEMS posts; below the horizon nothing comes back, not even by a merge", async (t) => {
  const fx = await feedFixture(2, PEOPLE, { maxItems: 3 });
  t.after(() => fx.close());
  const { ledger } = fx;
  await ledger.relations.follow("ann", "bob");
  const old = await ledger.posts.createPost("cat", "PUBLIC", "old cat");
  const posts = [];
  for (let i = 0; i < 5; i++) posts.push(await ledger.posts.createPost("bob", "PUBLIC", `bob ${i}`));
  await drainFeed(ledger);
  const newest = posts
    .slice(-3)
    .reverse()
    .map((p) => p.postId);
  assert.deepEqual(await timelineIds(ledger, "ann"), newest);
  // cat's post is older than ann's horizon: following cat does not bring it back.
  await ledger.relations.follow("ann", "cat");
  await drainFeed(ledger);
  assert.deepEqual(await timelineIds(ledger, "ann"), newest);
  assert.equal((await fx.db.pool.query("SELECT 1 FROM feed_inbox WHERE post_id = $1", [old.postId])).rowCount, 1);
  // A deletion leaves a hole, never a post from below the horizon.
  await ledger.posts.deletePost("bob", posts[4]!.postId);
  await drainFeed(ledger);
  assert.deepEqual(await timelineIds(ledger, "ann"), newest.slice(1));
  const audit = await auditFeed(fx.db.pool, 3);
  assert.ok(await feedClean(ledger), JSON.stringify(audit));
});

test("an account erasure takes its posts out of every inbox and empties its own", async (t) => {
  const fx = await feedFixture(2, PEOPLE);
  t.after(() => fx.close());
  const { ledger } = fx;
  await ledger.relations.follow("ann", "eve");
  await ledger.relations.follow("eve", "bob");
  await ledger.posts.createPost("eve", "PUBLIC", "bye");
  await ledger.posts.createPost("bob", "PUBLIC", "hi");
  await drainFeed(ledger);
  assert.equal((await timelineIds(ledger, "ann")).length, 1);
  assert.equal((await timelineIds(ledger, "eve")).length, 2);
  await ledger.erasure.start("eve", "admin");
  await ledger.erasure.run("eve");
  await drainFeed(ledger);
  assert.deepEqual(await timelineIds(ledger, "ann"), []);
  assert.equal((await fx.db.pool.query("SELECT 1 FROM feed_inbox WHERE reader = 'eve' OR author = 'eve'")).rowCount, 0);
  assert.ok(await feedClean(ledger));
});

test("the audit sees a lie in an inbox (an extra row, a missing one) that no pending event explains; the rebuild repairs one reader or all and reports the drift", async (t) => {
  const fx = await feedFixture(2, PEOPLE, { maxItems: 3 });
  t.after(() => fx.close());
  const { ledger } = fx;
  await ledger.relations.follow("ann", "bob");
  const posts = [];
  for (let i = 0; i < 4; i++) posts.push(await ledger.posts.createPost("bob", "PUBLIC", `bob ${i}`));
  const cats = await ledger.posts.createPost("cat", "PUBLIC", "not followed");
  await drainFeed(ledger);
  assert.ok(await feedClean(ledger));
  await fx.db.pool.query(
    "INSERT INTO feed_inbox (reader, post_id, author, at) SELECT 'ann', post_id, author, created_at FROM post WHERE post_id = $1",
    [cats.postId],
  );
  await fx.db.pool.query("DELETE FROM feed_inbox WHERE reader = 'bob' AND post_id = $1", [posts[3]!.postId]);
  const audit = await auditFeed(fx.db.pool, 3);
  assert.deepEqual([audit.extra, audit.missing, audit.explainedByPending], [1, 1, 0]);

  const one = await ledger.feedRebuild.rebuild({ readers: ["ann"] });
  assert.deepEqual([one.readersChecked, one.rowsAdded, one.rowsRemoved], [1, 0, 1]);
  const all = await ledger.feedRebuild.rebuild();
  assert.deepEqual([all.readersDrifted, all.rowsAdded, all.rowsRemoved], [1, 1, 0]);
  assert.ok(await feedClean(ledger));
  assert.equal((await ledger.feedRebuild.rebuild()).readersDrifted, 0, "a second rebuild finds nothing");
  await assert.rejects(ledger.feedRebuild.rebuild({ readers: [""] }), /readers/);
});
