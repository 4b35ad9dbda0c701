/**
 * Operating webhook endpoints: a receiver that keeps failing is `failing` (in get, list and the
 * metrics) with its backlog kept; pause and resume; replay from a position (same ids) and its
 * refusal below the retention floor; the outbox prune stops at the slowest endpoint's cursor, and
 * the negative control shows what a prune that ignored it would do (the worker refuses to skip).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import client from "prom-client";
import { releaseRetention } from "../../src/db/retention-boundary.ts";
import { pruneRetained } from "../../src/retention/retention.ts";
import { holderOf } from "../../src/webhooks/endpoint-registry.ts";
import { ReplayBelowRetentionError, ReplayBeyondEndError } from "../../src/webhooks/webhook-errors.ts";
import { WebhookMetrics } from "../../src/webhooks/webhook-metrics.ts";
import { WebhookDelivery } from "../../src/webhooks/delivery-worker.ts";
import { auditWebhooks } from "../../src/webhooks/webhook-audit.ts";
import { refresherOf } from "../../src/metrics-refresh.ts";
import { pollUntil } from "../../support/poll.ts";
import { FAST_RETRIES, webhookLab, type WebhookLab } from "./fixture.ts";

const NO_MARGIN = { keepLast: 0, keepSeconds: 0 };

async function drainConsumers(lab: WebhookLab): Promise<void> {
  await lab.ledger.likeConsumer.drain();
  await lab.ledger.projector.drain();
  await lab.ledger.commentConsumer.drain();
  await lab.ledger.notifications.drain();
  await lab.ledger.feed.drain();
}

async function likeFloor(lab: WebhookLab, part = 0): Promise<number> {
  const { rows } = await lab.db.pool.query<{ f: number }>(
    "SELECT pruned_upto AS f FROM retention_floor WHERE kind = 'likes' AND part = $1",
    [part],
  );
  return rows[0]?.f ?? 0;
}

test("a receiver that keeps failing is marked failing in get, list and the metrics; its backlog stays and is delivered when it answers again", async (t) => {
  const registry = new client.Registry();
  const lab = await webhookLab(t, { partitions: 1 });
  const metrics = new WebhookMetrics(registry, lab.db.pool, 3);
  const delivery = new WebhookDelivery(lab.db.pool, { ...FAST_RETRIES, onAttempt: metrics.onAttempt });
  await lab.seed();
  const { id } = await lab.register(["like.created"]);
  for (const u of ["u1", "u2"]) await lab.ledger.likes.like(u, "item-1");
  lab.receiver.answer = () => 503;
  await pollUntil(
    "failing",
    async () => {
      await delivery.pass();
      return (await lab.registry.get(id)).status;
    },
    (s) => s === "failing",
    30_000,
    5,
  );
  const listed = (await lab.registry.list()).find((e) => e.id === id)!;
  assert.equal(listed.status, "failing");
  assert.equal(listed.backlog, 2, "both events kept");
  assert.ok(listed.oldestPendingSeconds !== undefined);
  await refresherOf(registry).refresh();
  const text = await registry.metrics();
  assert.match(text, new RegExp(`^ledger_webhook_endpoint_failing\\{endpoint="${id}"\\} 1$`, "m"));
  assert.match(text, new RegExp(`^ledger_webhook_backlog_events\\{endpoint="${id}"\\} 2$`, "m"));
  assert.match(
    text,
    new RegExp(`^ledger_webhook_deliveries_total\\{endpoint="${id}",result="failed"\\} [1-9]\\d*`, "m"),
  );
  assert.match(text, /^ledger_webhook_endpoints\{status="failing"\} 1$/m);
  assert.ok(
    lab.receiver.deliveries.every((d) => d.id === "evt_likes_0_1"),
    "only the first event was tried: the second waits behind it",
  );
  lab.receiver.answer = () => 200;
  await pollUntil(
    "delivered",
    async () => {
      await delivery.pass();
      return lab.receiver.accepted().map((d) => d.id);
    },
    (ids) => ids.length === 2,
    30_000,
    5,
  );
  assert.deepEqual(
    lab.receiver.accepted().map((d) => d.id),
    ["evt_likes_0_1", "evt_likes_0_2"],
  );
  await refresherOf(registry).refresh();
  const after = await registry.metrics();
  assert.match(after, new RegExp(`^ledger_webhook_endpoint_failing\\{endpoint="${id}"\\} 0$`, "m"));
  assert.match(after, new RegExp(`^ledger_webhook_backlog_events\\{endpoint="${id}"\\} 0$`, "m"));
  assert.match(after, new RegExp(`^ledger_webhook_deliveries_total\\{endpoint="${id}",result="delivered"\\} 2$`, "m"));
});

test("pause: nothing is sent and the backlog grows; resume: the backlog is delivered in order", async (t) => {
  const lab = await webhookLab(t, { partitions: 1 });
  await lab.seed();
  const { id } = await lab.register(["like.created"]);
  assert.equal((await lab.registry.setPaused(id, true)).status, "paused");
  for (const u of ["u1", "u2", "u3"]) await lab.ledger.likes.like(u, "item-1");
  assert.equal(await lab.delivery.pass(), 0, "a paused endpoint has nothing due");
  assert.equal(lab.receiver.deliveries.length, 0);
  assert.equal((await lab.registry.get(id)).backlog, 3);
  assert.equal((await lab.registry.setPaused(id, false)).status, "active");
  await lab.deliverAll();
  assert.deepEqual(
    lab.receiver.deliveries.map((d) => d.id),
    ["evt_likes_0_1", "evt_likes_0_2", "evt_likes_0_3"],
  );
});

test("resuming a paused endpoint delivers at once, not after the back-off its failed event was waiting out", async (t) => {
  // A back-off of 5..10 minutes: nothing in this test can reach its end.
  const lab = await webhookLab(t, {
    partitions: 1,
    delivery: { ...FAST_RETRIES, retryBaseMs: 600_000, maxBackoffMs: 600_000 },
  });
  await lab.seed();
  const { id } = await lab.register(["like.created"]);
  await lab.ledger.likes.like("u1", "item-1");
  lab.receiver.answer = () => 503;
  assert.equal(await lab.delivery.step(), 1, "the first attempt fails");
  const waiting = (await lab.registry.cursors(id)).find((c) => c.source === "likes")!;
  assert.ok(
    waiting.nextAttemptAt.getTime() - Date.now() > 60_000,
    `the retry waits minutes (next attempt at ${waiting.nextAttemptAt.toISOString()})`,
  );
  lab.receiver.answer = () => 200;
  // The control: the back-off does hold the event back while the endpoint is not paused and resumed.
  assert.equal(await lab.delivery.step(), 0, "nothing is due during the back-off");
  await lab.registry.setPaused(id, true);
  assert.equal(await lab.delivery.step(), 0, "nothing is due while paused");
  assert.equal((await lab.registry.setPaused(id, false)).status, "active");
  assert.equal(await lab.delivery.step(), 1, "due at once after the resume");
  assert.deepEqual(
    lab.receiver.deliveries.map((d) => [d.id, d.status]),
    [
      ["evt_likes_0_1", 503],
      ["evt_likes_0_1", 200],
    ],
  );
  const cursor = (await lab.registry.cursors(id)).find((c) => c.source === "likes")!;
  assert.deepEqual([cursor.deliveredUpto, cursor.attempts], [1, 0]);
});

test("an endpoint counts as failing exactly at the configured number of failed attempts (one fewer: active), in get, list and the metrics", async (t) => {
  const failingAfter = 4; // neither the default (5) nor the lab's (3): the configured value is the one used
  const registry = new client.Registry();
  // No back-off: each step retries at once, so the test counts attempts step by step.
  const lab = await webhookLab(t, {
    partitions: 1,
    registry: { failingAfter },
    delivery: { ...FAST_RETRIES, retryBaseMs: 0, maxBackoffMs: 0 },
  });
  new WebhookMetrics(registry, lab.db.pool, failingAfter); // its gauges read the database on the registry's refresh
  await lab.seed();
  const { id } = await lab.register(["like.created"]);
  await lab.ledger.likes.like("u1", "item-1");
  lab.receiver.answer = () => 503;
  const statusAfter = async () => {
    await refresherOf(registry).refresh();
    const gauge = new RegExp(`^ledger_webhook_endpoint_failing\\{endpoint="${id}"\\} (\\d)$`, "m").exec(
      await registry.metrics(),
    )?.[1];
    const listed = (await lab.registry.list()).find((e) => e.id === id)!.status;
    return { get: (await lab.registry.get(id)).status, list: listed, gauge };
  };
  for (let attempt = 1; attempt <= failingAfter + 1; attempt++) {
    assert.equal(await lab.delivery.step(), 1, `attempt ${attempt} is due at once`);
    const cursor = (await lab.registry.cursors(id)).find((c) => c.source === "likes")!;
    assert.deepEqual(
      [cursor.attempts, lab.receiver.deliveries.length],
      [attempt, attempt],
      `${attempt} failed attempts, ${attempt} requests`,
    );
    const expected =
      attempt >= failingAfter
        ? { get: "failing", list: "failing", gauge: "1" }
        : { get: "active", list: "active", gauge: "0" };
    assert.deepEqual(await statusAfter(), expected, `after ${attempt} failed attempt(s) of ${failingAfter}`);
  }
  lab.receiver.answer = () => 200;
  assert.equal(await lab.delivery.step(), 1);
  assert.deepEqual(await statusAfter(), { get: "active", list: "active", gauge: "0" }, "the first 2xx ends failing");
});

test("replay from a position re-sends the events under their ids; a position below the retention floor or past the end is refused", async (t) => {
  const lab = await webhookLab(t, { partitions: 1 });
  await lab.seed();
  const { id } = await lab.register(["like.created"]);
  for (const u of ["u1", "u2", "u3", "u4"]) await lab.ledger.likes.like(u, "item-1");
  await lab.deliverAll();
  await lab.registry.replay(id, { source: "likes", partition: 0, fromSeq: 2 });
  await lab.deliverAll();
  assert.deepEqual(
    lab.receiver.deliveries.map((d) => d.id),
    [
      "evt_likes_0_1",
      "evt_likes_0_2",
      "evt_likes_0_3",
      "evt_likes_0_4",
      "evt_likes_0_2",
      "evt_likes_0_3",
      "evt_likes_0_4",
    ],
  );
  assert.deepEqual(
    lab.receiver.deliveries.slice(4).map((d) => d.body),
    lab.receiver.deliveries.slice(1, 4).map((d) => d.body),
    "the same bodies",
  );
  await assert.rejects(lab.registry.replay(id, { source: "likes", partition: 0, fromSeq: 6 }), ReplayBeyondEndError);
  // Everything delivered and consumed: a prune without margin cuts to the end.
  await drainConsumers(lab);
  await pruneRetained(lab.db.pool, NO_MARGIN);
  assert.equal(await likeFloor(lab), 4);
  await assert.rejects(lab.registry.replay(id, { source: "likes", partition: 0, fromSeq: 3 }), (err: unknown) => {
    assert.ok(err instanceof ReplayBelowRetentionError);
    assert.match(err.message, /events up to 4 are pruned; the oldest position to replay from is 5/);
    return true;
  });
  const cursor = (await lab.registry.cursors(id)).find((c) => c.source === "likes")!;
  assert.equal(cursor.deliveredUpto, 4, "a refused replay moves nothing");
  await lab.registry.replay(id, { source: "likes", partition: 0, fromSeq: 5 }); // the end: allowed, nothing to send
});

test("the outbox prune stops at the slowest endpoint's cursor (a paused one too); the hold moves with the cursor and goes with the endpoint", async (t) => {
  const lab = await webhookLab(t, { partitions: 1 });
  await lab.seed();
  const fast = await lab.register(["like.created"]);
  const slow = await lab.register(["like.created"]);
  for (const u of ["u1", "u2", "u3", "u4", "u5"]) await lab.ledger.likes.like(u, "item-1");
  await lab.registry.setPaused(slow.id, true);
  await lab.deliverAll();
  await lab.ledger.likes.like("u6", "item-1");
  await lab.registry.setPaused(fast.id, true);
  await lab.registry.setPaused(slow.id, false);
  // The slow endpoint gets two events, then its receiver fails.
  lab.receiver.answer = (d) =>
    d.signedBy.includes(slow.secret) &&
    lab.receiver.deliveries.filter((x) => x.signedBy.includes(slow.secret)).length > 2
      ? 500
      : 200;
  await pollUntil(
    "the slow endpoint delivered 2 and failed once",
    async () => {
      await lab.delivery.pass();
      return (await lab.registry.cursors(slow.id)).find((c) => c.source === "likes")!;
    },
    (c) => c.deliveredUpto === 2 && c.attempts >= 1,
    30_000,
    5,
  );
  await drainConsumers(lab);
  const report = await pruneRetained(lab.db.pool, NO_MARGIN);
  const likes = report.kinds.find((k) => k.kind === "likes")!;
  t.diagnostic(`note prune: ${JSON.stringify(likes.partitions)}`);
  assert.equal(
    await likeFloor(lab),
    2,
    "the floor stops at the slow endpoint's cursor (2), not at the fast one's (5) or the watermark (6)",
  );
  assert.equal(likes.partitions[0]!.held, 2);
  // The slow receiver answers again: its cursor and hold move, and the next prune follows.
  lab.receiver.answer = () => 200;
  await lab.deliverAll(
    async () => (await lab.registry.cursors(slow.id)).find((c) => c.source === "likes")!.deliveredUpto === 6,
  );
  await pruneRetained(lab.db.pool, NO_MARGIN);
  assert.equal(await likeFloor(lab), 5, "now the paused fast endpoint (5) is the slowest");
  assert.deepEqual(await auditWebhooks(lab.db.pool), {
    cursorsPastEnd: 0,
    holdsOffCursor: 0,
    cursorsBelowFloor: 0,
    blockSequenceViolations: 0,
    accountSequenceViolations: 0,
  });
  await lab.registry.delete(fast.id);
  await pruneRetained(lab.db.pool, NO_MARGIN);
  assert.equal(await likeFloor(lab), 6, "a deleted endpoint holds nothing");
  const holds = await lab.db.pool.query("SELECT 1 FROM retention_hold WHERE holder = $1", [holderOf(fast.id)]);
  assert.equal(holds.rowCount, 0);
});

test("negative control: a prune that ignores an endpoint's hold deletes events it has not received; the worker refuses to skip them and says so", async (t) => {
  const lab = await webhookLab(t, { partitions: 1 });
  await lab.seed();
  const { id } = await lab.register(["like.created"]);
  await lab.registry.setPaused(id, true);
  for (const u of ["u1", "u2", "u3"]) await lab.ledger.likes.like(u, "item-1");
  await drainConsumers(lab);
  // The mutant: the endpoint's hold released behind its back, as a prune blind to cursors would be.
  await releaseRetention(lab.db.pool, holderOf(id));
  await pruneRetained(lab.db.pool, NO_MARGIN);
  assert.equal(await likeFloor(lab), 3, "the events the endpoint never received are gone");
  await lab.registry.setPaused(id, false);
  await lab.delivery.pass();
  const cursor = (await lab.registry.cursors(id)).find((c) => c.source === "likes")!;
  assert.equal(cursor.deliveredUpto, 0, "the cursor does not jump over the lost events");
  assert.match(cursor.lastError ?? "", /event 1 is no longer in the likes outbox/);
  assert.equal(lab.receiver.deliveries.length, 0, "the loss is visible: nothing was delivered, and the error names it");
  const audit = await auditWebhooks(lab.db.pool);
  assert.deepEqual(
    [audit.cursorsBelowFloor, audit.holdsOffCursor],
    [1, 6],
    "the audit names the pruned cursor and the missing holds (likes, relations, comments, blocks, posts, accounts)",
  );
});
