/**
 * The versioned rule of the notification view: a late or duplicated event never overwrites a
 * newer notification state. Events are delivered by hand, out of order, to the real consumer
 * (NotificationConsumer.applyBatch), above the watermark and not yet seen, so each one reaches
 * the version compare rather than the dedup in front of it: the newest event first, then an
 * older one (and a duplicate of the newest); and, in one batch, the newest and an older one of
 * the same pair. After each delivery the pair's row keeps the newest version and state, and the
 * view equals the facts. The negative control delivers the same events through the apply without
 * its guards (test/notifications/negative-controls.ts): the late event overwrites, and the same
 * checks see it.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import type { Pool } from "../../src/db/pool.ts";
import { applyWithoutGuards } from "./negative-controls.ts";
import { NotificationFeed, type NotificationEvent } from "../../src/notifications/notification-consumer.ts";
import type { Ledger } from "../../src/ledger.ts";
import { factRows, notificationFixture, viewRows } from "./fixture.ts";

async function pairRow(pool: Pool, source: string, actor: string): Promise<string> {
  const { rows } = await pool.query<{ r: string }>(
    "SELECT type || ' active=' || active || ' v' || version AS r FROM notification WHERE source = $1 AND actor = $2",
    [source, actor],
  );
  return rows.map((x) => x.r).join(" | ") || "none";
}

/** Every event of `source` in partition 0 by `actor`'s pair, oldest first. */
async function eventsOf(
  feed: NotificationFeed,
  source: "likes" | "relations",
  pool: Pool,
  actor: string,
): Promise<NotificationEvent[]> {
  const table =
    source === "likes"
      ? "SELECT seq FROM like_outbox WHERE user_id = $1 ORDER BY seq"
      : "SELECT seq FROM relation_event WHERE follower = $1 ORDER BY seq";
  const seqs = new Set((await pool.query<{ seq: string }>(table, [actor])).rows.map((r) => Number(r.seq)));
  const all = await feed.consumer(source).fetchRange(0, 1, Number.MAX_SAFE_INTEGER);
  return all.filter((e) => seqs.has(Number(e.seq)));
}

interface Seen {
  steps: string[];
  viewEqualsFacts: boolean;
}

/**
 * ann likes, unlikes and likes bob's post again (v1..v3); cat likes and unlikes it (v1, v2); dan
 * follows and unfollows bob (v1, v2). Nothing is delivered until the test delivers by hand through
 * `feed`: ann's v3, then her v1 and v2 late (v3 again in the batch, a duplicate); cat's v2 and v1 in
 * one batch, newest first; dan's v2, then his v1. Returns the pair's row after each delivery.
 */
async function deliverLate(t: TestContext, guarded: boolean): Promise<Seen> {
  const fx = await notificationFixture(1, ["ann", "bob", "cat", "dan"]);
  t.after(() => fx.close());
  const { ledger, db } = fx;
  const post = (await ledger.posts.createPost("bob", "PUBLIC", "p")).postId;
  await ledger.likes.like("ann", post);
  await ledger.likes.unlike("ann", post);
  await ledger.likes.like("ann", post);
  await ledger.likes.like("cat", post);
  await ledger.likes.unlike("cat", post);
  await ledger.relations.follow("dan", "bob");
  await ledger.relations.unfollow("dan", "bob");
  const feed = guarded ? ledger.notifications : new NotificationFeed(db.pool, { apply: applyWithoutGuards });
  const likes = feed.consumer("likes");
  const relations = feed.consumer("relations");
  const [a1, a2, a3] = await eventsOf(feed, "likes", db.pool, "ann");
  const [c1, c2] = await eventsOf(feed, "likes", db.pool, "cat");
  const [d1, d2] = await eventsOf(feed, "relations", db.pool, "dan");
  const steps: string[] = [];
  const step = async (what: string, source: string, actor: string, delivery: Promise<unknown>) => {
    await delivery;
    steps.push(`${what}: ${await pairRow(db.pool, source, actor)}`);
  };
  await step("ann v3", "like", "ann", likes.applyBatch([a3!]));
  await step("ann v1, v2 late", "like", "ann", likes.applyBatch([a1!, a2!]));
  await step("ann v3 again", "like", "ann", likes.applyBatch([a3!]));
  await step("cat v2, v1 in one batch", "like", "cat", likes.applyBatch([c2!, c1!]));
  await step("dan v2", "relation", "dan", relations.applyBatch([d2!]));
  await step("dan v1 late", "relation", "dan", relations.applyBatch([d1!]));
  await drainRest(ledger);
  return {
    steps,
    viewEqualsFacts: JSON.stringify(await viewRows(db.pool)) === JSON.stringify(await factRows(db.pool)),
  };
}

/** Whatever else is pending (the comments source: nothing), so the view is complete. */
async function drainRest(ledger: Ledger): Promise<void> {
  await ledger.notifications.consumer("comments").drain();
}

const WANT = [
  "ann v3: like active=true v3",
  "ann v1, v2 late: like active=true v3",
  "ann v3 again: like active=true v3",
  "cat v2, v1 in one batch: like active=false v2",
  "dan v2: follow active=false v2",
  "dan v1 late: follow active=false v2",
];

test("an older event delivered after a newer one (late, duplicated, or in the same batch) never overwrites the newer notification state; the view equals the facts", async (t) => {
  const seen = await deliverLate(t, true);
  assert.deepEqual(seen.steps, WANT);
  assert.equal(seen.viewEqualsFacts, true);
});

test("negative control: the apply without its version guard lets the late events overwrite, which the same checks see", async (t) => {
  const seen = await deliverLate(t, false);
  t.diagnostic(`note without the guards: ${seen.steps.join(" | ")}`);
  assert.notDeepEqual(seen.steps, WANT);
  assert.equal(seen.steps[1], "ann v1, v2 late: like active=false v2", "ann's unlike of v2 overwrote her v3 like");
  assert.equal(seen.viewEqualsFacts, false);
});
