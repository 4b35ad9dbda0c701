import { test } from "node:test";
import assert from "node:assert/strict";
import { pruneRetained } from "../../src/retention/retention.ts";
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
