/**
 * The Redis count layer as a transport that caps retention (docs/retention.md): a prune stops at
 * the feeder's cursor and the last reconciled boundary, so events committed but not yet fed stay
 * in relation_event, and the feeder's follower delta of an event whose previous event of the pair
 * was pruned reads the pruned prefix's state. Negative control: the same prune without the cap
 * deletes the unfed events, and neither the feeder nor the reconciliation ever sees them.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { CountFeeder } from "../../src/cache/count-feeder.ts";
import { CountReader } from "../../src/cache/count-reader.ts";
import { CountStore } from "../../src/cache/count-store.ts";
import { FOLLOWER_COUNTS } from "../../src/cache/counter-kinds.ts";
import { Reconciler } from "../../src/cache/reconciler.ts";
import { connectRedis } from "../../src/cache/redis-connection.ts";
import { countLayerRetentionCap } from "../../src/cache/retention-cap.ts";
import { pruneRetained } from "../../src/retention/retention.ts";
import { NotificationFeed } from "../../src/notifications/notification-consumer.ts";
import { RelationProjector } from "../../src/relations/projector.ts";
import { FeedConsumers } from "../../src/feed/feed-consumer.ts";
import { RelationService } from "../../src/relations/relation-service.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { TestRedis } from "../../support/redis-server.ts";

async function scenario(t: { after: (fn: () => Promise<void>) => void }, withCap: boolean) {
  const db = await createTestDatabase({ partitions: 2 });
  const server = await TestRedis.start();
  const redis = await connectRedis(server.url);
  t.after(async () => {
    await redis.close().catch(() => {});
    await server.kill();
    await db.close();
  });
  const relations = await RelationService.open(db.pool);
  const projector = new RelationProjector(db.pool);
  for (const a of ["alice", "bob", "carol", "dave"]) await relations.upsertAccount(a);
  const store = new CountStore(redis, 4);
  const feeder = new CountFeeder(db.pool, store, FOLLOWER_COUNTS);
  const reader = new CountReader(db.pool, store, { localTtlMs: 0 });
  const reconciler = new Reconciler(db.pool, store);
  await feeder.pollOnce(); // the cursor starts at the present

  await relations.follow("bob", "alice");
  await feeder.pollOnce();
  assert.equal((await reader.read(FOLLOWER_COUNTS, "alice", { allowedLag: 0 })).count, 1);
  await reconciler.reconcile(FOLLOWER_COUNTS);
  // Committed and projected, not yet through the feeder.
  await relations.unfollow("bob", "alice");
  await relations.follow("carol", "alice");
  await relations.follow("dave", "alice");
  await projector.drain();
  // The prune waits for every view of the outbox, the notifications and the home timeline too.
  await new NotificationFeed(db.pool).drain();
  await new FeedConsumers(db.pool).drain();

  const report = await pruneRetained(db.pool, {
    keepLast: 0,
    keepSeconds: 0,
    caps: withCap ? [countLayerRetentionCap(redis)] : [],
  });
  const pruned = report.kinds.find((k) => k.kind === "relations")!.outboxRows;
  const kept = (await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM relation_event")).rows[0]!.n;
  await feeder.pollOnce();
  const fed = (await reader.read(FOLLOWER_COUNTS, "alice", { allowedLag: 0 })).count;
  const drift = (await reconciler.reconcile(FOLLOWER_COUNTS)).drifted.length;
  const shown = (await reader.read(FOLLOWER_COUNTS, "alice", { allowedLag: 0 })).count;
  return { pruned, kept, fed, drift, shown };
}

test("the count layer caps the prune at its feeder cursor: unfed events stay and are fed exactly (the unfollow's previous state comes from the pruned prefix)", async (t) => {
  const r = await scenario(t, true);
  t.diagnostic(`note with the cap: ${JSON.stringify(r)}`);
  assert.deepEqual(r, { pruned: 1, kept: 3, fed: 2, drift: 0, shown: 2 });
});

test("negative control: without the cap the prune deletes the unfed events; the Redis count stays wrong through a reconciliation", async (t) => {
  const r = await scenario(t, false);
  t.diagnostic(`note without the cap: ${JSON.stringify(r)}`);
  assert.deepEqual(r, { pruned: 4, kept: 0, fed: 1, drift: 0, shown: 1 });
});
