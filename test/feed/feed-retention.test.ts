import { test } from "node:test";
import assert from "node:assert/strict";
import { withTransaction } from "../../src/db/transaction.ts";
import { auditFeed } from "../../src/feed/feed-audit.ts";
import { deleteOutboxPrefix, pruneRetained } from "../../src/retention/retention.ts";
import { feedClean, feedFixture } from "./fixture.ts";

test("retention never prunes a relation event the home timeline has not applied; after it has, the events and the feed's seen keys go", async (t) => {
  const fx = await feedFixture(1, ["ann", "bob", "cat"]);
  t.after(() => fx.close());
  const { ledger, db } = fx;
  await ledger.posts.createPost("bob", "PUBLIC", "one");
  await ledger.relations.follow("ann", "bob");
  await ledger.relations.follow("cat", "bob");
  await ledger.projector.drain();
  await ledger.notifications.drain();
  await ledger.feed.consumer("posts").drain();
  const count = async () => Number((await db.pool.query("SELECT count(*) AS n FROM relation_event")).rows[0].n);
  await pruneRetained(db.pool, { keepLast: 0, keepSeconds: 0 });
  assert.equal(await count(), 2, "the feed has not applied them: kept");
  await ledger.feed.drain();
  assert.ok(await feedClean(ledger));
  await pruneRetained(db.pool, { keepLast: 0, keepSeconds: 0 });
  assert.equal(await count(), 0);
  assert.equal(Number((await db.pool.query("SELECT count(*) AS n FROM feed_relation_seen")).rows[0].n), 0);
  // A pruned event delivered again is a duplicate, and the inboxes hold.
  const again = await ledger.feed.consumer("relations").applyBatch([{ part: 0, seq: 1, fingerprint: "gone" }]);
  assert.deepEqual([again.dup, again.expired], [1, 1]);
  assert.ok(await feedClean(ledger));
});

test("post_outbox is pruned below the feed's post watermark and the margin, never a pending post event; pruning one breaks the inboxes (negative control)", async (t) => {
  const fx = await feedFixture(1, ["ann", "bob", "cat"]);
  t.after(() => fx.close());
  const { ledger, db } = fx;
  const posts = async () =>
    (await db.pool.query<{ seq: string }>("SELECT seq FROM post_outbox ORDER BY seq")).rows.map((r) => Number(r.seq));
  await ledger.relations.follow("ann", "bob");
  await ledger.projector.drain();
  await ledger.posts.createPost("bob", "PUBLIC", "one");
  await ledger.posts.createPost("bob", "PUBLIC", "two");
  await ledger.feed.drain();
  // The post outbox's other view (mentions) waits for its watermark too: drained, so the feed's decides.
  await ledger.notifications.drain();
  const pending = await ledger.posts.createPost("bob", "PUBLIC", "three, not applied yet");
  assert.deepEqual(await posts(), [1, 2, 3]);

  // The margin keeps what it names: a young event, then the newest keepLast events.
  await pruneRetained(db.pool, { keepLast: 0, keepSeconds: 3_600 });
  assert.deepEqual(await posts(), [1, 2, 3], "younger than keepSeconds: kept");
  await pruneRetained(db.pool, { keepLast: 2, keepSeconds: 0 });
  assert.deepEqual(await posts(), [2, 3], "the newest keepLast=2 stay");
  // No margin: down to the feed's watermark, the pending event stays.
  const report = await pruneRetained(db.pool, { keepLast: 0, keepSeconds: 0 });
  assert.deepEqual(await posts(), [3], "the pending post event is never pruned");
  const kind = report.kinds.find((k) => k.kind === "posts")!;
  assert.deepEqual(
    kind.partitions.map((p) => [p.watermark, p.boundary]),
    [[2, 2]],
  );
  assert.equal(Number((await db.pool.query("SELECT count(*) AS n FROM feed_post_seen")).rows[0].n), 0);
  // A pruned event delivered again is a duplicate; the pending one then reaches ann.
  const again = await ledger.feed.consumer("posts").applyBatch([{ part: 0, seq: 1, fingerprint: "gone" }]);
  assert.deepEqual([again.dup, again.expired], [1, 1]);
  await ledger.feed.drain();
  assert.ok(await feedClean(ledger));
  const inbox = await db.pool.query("SELECT 1 FROM feed_inbox WHERE reader = 'ann' AND post_id = $1", [pending.postId]);
  assert.equal(inbox.rowCount, 1);

  // Negative control: the same prune without the watermark bound takes a pending event with it, and
  // the post never reaches its follower: the audit sees it as missing, not as lag.
  const lost = await ledger.posts.createPost("bob", "PUBLIC", "four, pruned before it was applied");
  await withTransaction(db.pool, (client) => deleteOutboxPrefix(client, "posts", 0, 4));
  await ledger.feed.consumer("posts").pollOnce([0]);
  const audit = await auditFeed(db.pool, ledger.feed.maxItems);
  assert.ok(audit.missing >= 1, `the audit sees the lost post (${JSON.stringify(audit)})`);
  const missing = await db.pool.query("SELECT 1 FROM feed_inbox WHERE reader = 'ann' AND post_id = $1", [lost.postId]);
  assert.equal(missing.rowCount, 0);
});
