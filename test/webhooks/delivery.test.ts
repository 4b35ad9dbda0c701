/**
 * Signed webhooks from the outboxes (docs/webhooks.md) against a real receiver on loopback that
 * checks each signature with its own HMAC: every event type, retries (same webhook-id), order per
 * partition with two workers at once, a receiver down and back, and secret rotation.
 */
import { test } from "node:test";
import os from "node:os";
import assert from "node:assert/strict";
import { EVENT_TYPES } from "../../src/webhooks/webhook-events.ts";
import { WebhookDelivery } from "../../src/webhooks/delivery-worker.ts";
import { auditWebhooks } from "../../src/webhooks/webhook-audit.ts";
import { pollUntil } from "../../support/poll.ts";
import { withDeadline } from "../support/line-child.ts";
import { assertContiguous, FAST_RETRIES, webhookLab } from "./fixture.ts";
import { documentedEvents } from "./event-docs.ts";
import { seqsByPartition, signersOf, TestReceiver } from "./receiver.ts";

test("the receiver's own HMAC agrees with the Standard Webhooks test vector (so it is a real check)", () => {
  const header = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
  const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
  assert.deepEqual(signersOf([secret], "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", '{"test": 2432232314}', header), [
    secret,
  ]);
  // One byte of the body, the id or the timestamp changed: not signed by it.
  assert.deepEqual(
    signersOf([secret], "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", '{"test": 2432232315}', header),
    [],
  );
  assert.deepEqual(
    signersOf([secret], "msg_p5jXN8AQM9LWM0D4loKWxJeK", "1614265330", '{"test": 2432232314}', header),
    [],
  );
  assert.deepEqual(
    signersOf([secret], "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265331", '{"test": 2432232314}', header),
    [],
  );
});

test("every event type the outboxes hold is delivered once, signed, with a stable id, its facts, and in order per partition", async (t) => {
  const lab = await webhookLab(t, { partitions: 2 });
  const { postId } = await lab.seed();
  await lab.ledger.relations.upsertAccount("erin");
  const { id: endpointId, secret } = await lab.register(["*"]);
  assert.match(secret, /^whsec_[A-Za-z0-9+/]{43}=$/, "whsec_ + base64 of 32 bytes");
  const { ledger } = lab;
  await ledger.likes.like("bob", "item-1");
  await ledger.likes.unlike("bob", "item-1");
  await ledger.relations.follow("bob", "alice"); // follow.created
  await ledger.relations.follow("bob", "priv"); // follow.requested
  await ledger.relations.decide("priv", "bob", false); // follow.request_removed (rejected)
  await ledger.relations.follow("carol", "priv");
  await ledger.relations.decide("priv", "carol", true); // follow.created from PENDING
  await ledger.relations.unfollow("bob", "alice"); // follow.removed
  await ledger.relations.follow("dave", "alice");
  await ledger.relations.block("alice", "dave"); // block.created, follow.removed (dave -> alice)
  await ledger.relations.unblock("alice", "dave"); // block.removed
  const comment = await ledger.comments.create("bob", postId, "nice");
  await ledger.comments.delete("bob", comment.id);
  const post = await ledger.posts.createPost("carol", "FOLLOWERS", "a post"); // post.created
  await ledger.posts.deletePost("carol", post.postId); // post.deleted
  await ledger.relations.upsertAccount("frank"); // account.created
  await ledger.relations.upsertAccount("frank", { private: true }); // account.updated
  await ledger.erasure.start("erin", "admin");
  await ledger.erasure.run("erin"); // account.erased
  const before = Math.floor(Date.now() / 1000);
  await lab.deliverAll();

  const got = lab.receiver.deliveries;
  t.diagnostic(`note ${got.length} deliveries: ${got.map((d) => d.parsed.type).join(", ")}`);
  assert.deepEqual(
    [...new Set(got.map((d) => d.parsed.type))].sort(),
    [...EVENT_TYPES].sort(),
    "every event type was delivered",
  );
  assert.equal(new Set(got.map((d) => d.id)).size, got.length, "each event once");
  for (const d of got) {
    assert.deepEqual(d.signedBy, [secret], `${d.id} is signed with the endpoint's secret`);
    assert.equal(d.signature.split(" ").length, 1, "one signature without a rotation");
    const m = /^evt_(likes|relations|comments|blocks|posts|accounts)_(\d+)_(\d+)$/.exec(d.id)!;
    assert.ok(m, `id ${d.id}`);
    assert.deepEqual(
      [d.parsed.data.partition, d.parsed.data.seq],
      [Number(m[2]), Number(m[3])],
      "data names the event's partition and seq",
    );
    assert.ok(Math.abs(Number(d.timestamp) - before) < 120, "webhook-timestamp is unix seconds of the attempt");
    assert.ok(!Number.isNaN(Date.parse(d.parsed.timestamp)), "the body's timestamp is the event's time");
    assert.deepEqual(Object.keys(d.parsed).sort(), ["data", "timestamp", "type"]);
  }
  assertContiguous(seqsByPartition(got), "all events");
  // Each body's data is what docs/webhooks.md's Events table says of its type, field for field.
  const documented = await documentedEvents();
  for (const d of got)
    assert.deepEqual(
      Object.keys(d.parsed.data).sort(),
      [...documented.get(d.parsed.type)!.fields, "partition", "seq"].sort(),
      `${d.parsed.type}'s data as documented`,
    );
  const byType = (type: string) => got.filter((d) => d.parsed.type === type).map((d) => d.parsed.data);
  assert.deepEqual(
    byType("like.created").map((x) => [x.userId, x.itemId, x.liked]),
    [["bob", "item-1", true]],
  );
  assert.deepEqual(
    byType("like.removed").map((x) => [x.userId, x.itemId, x.liked]),
    [["bob", "item-1", false]],
  );
  assert.deepEqual(
    byType("follow.created")
      .map((x) => [x.follower, x.followee, x.previousState])
      .sort(),
    [
      ["bob", "alice", "REMOVED"],
      ["carol", "priv", "PENDING"],
      ["dave", "alice", "REMOVED"],
    ],
  );
  assert.deepEqual(
    byType("follow.requested")
      .map((x) => [x.follower, x.followee])
      .sort(),
    [
      ["bob", "priv"],
      ["carol", "priv"],
    ],
  );
  assert.deepEqual(
    byType("follow.request_removed").map((x) => [x.follower, x.followee, x.state]),
    [["bob", "priv", "REMOVED"]],
  );
  assert.deepEqual(
    byType("follow.removed")
      .map((x) => [x.follower, x.followee, x.previousState])
      .sort(),
    [
      ["bob", "alice", "ACTIVE"],
      ["dave", "alice", "ACTIVE"],
    ],
  );
  assert.deepEqual(
    byType("block.created").map((x) => [x.blocker, x.blocked, x.blocking]),
    [["alice", "dave", true]],
  );
  assert.deepEqual(
    byType("block.removed").map((x) => [x.blocker, x.blocked, x.blocking]),
    [["alice", "dave", false]],
  );
  assert.deepEqual(
    byType("comment.created").map((x) => [x.commentId, x.postId, x.author]),
    [[comment.id, postId, "bob"]],
  );
  assert.deepEqual(
    byType("comment.deleted").map((x) => [x.commentId, x.deletedBy]),
    [[comment.id, "bob"]],
  );
  assert.deepEqual(
    byType("post.created").map((x) => [x.postId, x.author, x.visibility]),
    [[post.postId, "carol", "FOLLOWERS"]],
  );
  assert.deepEqual(
    byType("post.deleted").map((x) => [x.postId, x.author]),
    [[post.postId, "carol"]],
  );
  assert.deepEqual(
    byType("account.created").map((x) => [x.accountId, x.private]),
    [["frank", false]],
  );
  assert.deepEqual(
    byType("account.updated").map((x) => [x.accountId, x.private]),
    [["frank", true]],
  );
  assert.deepEqual(
    byType("account.erased").map((x) => x.accountId),
    ["erin"],
  );
  const endpoint = await lab.registry.get(endpointId);
  assert.equal(endpoint.backlog, 0);
  assert.equal(endpoint.status, "active");
  assert.deepEqual(
    await auditWebhooks(lab.db.pool),
    {
      cursorsPastEnd: 0,
      holdsOffCursor: 0,
      cursorsBelowFloor: 0,
      blockSequenceViolations: 0,
      accountSequenceViolations: 0,
    },
    "the block outbox is gapless, every cursor holds retention at its position",
  );
});

test("an endpoint gets the types it subscribed to only; the others are passed over without a request", async (t) => {
  const lab = await webhookLab(t, { partitions: 1 });
  await lab.seed();
  const { id } = await lab.register(["follow.created"]);
  await lab.ledger.likes.like("bob", "item-1");
  await lab.ledger.relations.follow("bob", "alice");
  await lab.ledger.likes.unlike("bob", "item-1");
  await lab.deliverAll();
  assert.deepEqual(
    lab.receiver.deliveries.map((d) => d.parsed.type),
    ["follow.created"],
  );
  assert.equal((await lab.registry.get(id)).backlog, 0, "the like events are past the cursor too");
});

test("a 500 is retried with backoff: the retry carries the same webhook-id, the cursor moves only after the 200", async (t) => {
  // A backoff of 1..2 s: long enough that a loaded machine's next step still comes before it ends.
  const lab = await webhookLab(t, {
    partitions: 1,
    delivery: { ...FAST_RETRIES, retryBaseMs: 2_000, maxBackoffMs: 4_000 },
  });
  await lab.seed();
  const { id } = await lab.register(["like.created", "like.removed"]);
  await lab.ledger.likes.like("bob", "item-1");
  await lab.ledger.likes.unlike("bob", "item-1");
  lab.receiver.answer = (_d, index) => (index === 0 ? 500 : 200);
  assert.equal(await lab.delivery.step(), 1, "the first attempt");
  const failed = (await lab.registry.cursors(id)).find((c) => c.source === "likes")!;
  assert.deepEqual(
    [failed.deliveredUpto, failed.attempts, failed.lastStatus],
    [0, 1, 500],
    "not advanced; one failed attempt recorded",
  );
  assert.ok(failed.nextAttemptAt.getTime() > Date.now(), "the retry waits for its backoff");
  assert.equal(await lab.delivery.step(), 0, "nothing is due before the backoff ends");
  await lab.deliverAll();
  const ids = lab.receiver.deliveries.map((d) => d.id);
  assert.deepEqual(ids, ["evt_likes_0_1", "evt_likes_0_1", "evt_likes_0_2"]);
  assert.deepEqual(
    lab.receiver.deliveries.map((d) => d.status),
    [500, 200, 200],
  );
  const gap = lab.receiver.deliveries[1]!.receivedAt - lab.receiver.deliveries[0]!.receivedAt;
  t.diagnostic(`note retry after ${gap} ms (base 2000 ms, jitter: 1000..2000 ms)`);
  assert.ok(gap >= 1_000, "the retry came after the backoff");
  const done = (await lab.registry.cursors(id)).find((c) => c.source === "likes")!;
  assert.deepEqual([done.deliveredUpto, done.attempts], [2, 0]);
});

test("two workers at once: every partition's events are delivered one at a time, in order, each once", async (t) => {
  const lab = await webhookLab(t, { partitions: 4 });
  await lab.seed();
  await lab.register(["like.created"]);
  const users = Array.from({ length: 24 }, (_, i) => `fan-${i}`);
  for (const u of users) await lab.ledger.likes.like(u, "item-1");
  // The first request is held until a request of another partition arrives: the second worker
  // must find other work while the first one's partition is locked, and never that partition.
  const inFlight = new Map<string, number>();
  let overlapSamePartition = 0;
  let otherArrived: () => void = () => undefined;
  const other = new Promise<void>((resolve) => (otherArrived = resolve));
  let firstPartition: string | undefined;
  lab.receiver.answer = (d, index) => {
    const key = String(d.parsed.data.partition);
    inFlight.set(key, (inFlight.get(key) ?? 0) + 1);
    if (inFlight.get(key)! > 1) overlapSamePartition++;
    const done = () => {
      inFlight.set(key, inFlight.get(key)! - 1);
      return 200;
    };
    if (index === 0) {
      firstPartition = key;
      return withDeadline(other, 20_000, () => "a request of another partition while the first is held").then(done);
    }
    if (key !== firstPartition) otherArrived();
    return Promise.resolve(done());
  };
  const second = new WebhookDelivery(lab.db.pool, FAST_RETRIES);
  await Promise.all([
    lab.deliverAll(),
    pollUntil(
      "second worker drains",
      async () => (await second.pass()) === 0 && lab.receiver.accepted().length >= users.length,
      (ok) => ok,
      30_000,
      5,
    ),
  ]);
  assert.equal(overlapSamePartition, 0, "never two requests of one partition at once");
  assert.equal(lab.receiver.deliveries.length, users.length, "each event once");
  assertContiguous(seqsByPartition(lab.receiver.deliveries), "two workers");
});

test("a receiver that is down for a while and then back gets every event, in order, the failed one again under its id", async (t) => {
  const lab = await webhookLab(t, { partitions: 1 });
  await lab.seed();
  const { id } = await lab.register(["*"]);
  const port = lab.receiver.port;
  await lab.receiver.close(); // down: connection refused
  for (const u of ["u1", "u2", "u3"]) await lab.ledger.likes.like(u, "item-1");
  await pollUntil(
    "three failed attempts",
    async () => {
      await lab.delivery.pass();
      return (await lab.registry.cursors(id)).find((c) => c.source === "likes")!;
    },
    (c) => c.attempts >= 3,
    30_000,
    5,
  );
  const cursor = (await lab.registry.cursors(id)).find((c) => c.source === "likes")!;
  assert.equal(cursor.deliveredUpto, 0);
  assert.match(cursor.lastError ?? "", /ECONNREFUSED/);
  assert.equal((await lab.registry.get(id)).status, "failing", "3 failed attempts in a row (failingAfter 3)");
  const back = await TestReceiver.start("/hook", port);
  t.after(() => back.close());
  back.secrets.push(...lab.receiver.secrets);
  await lab.deliverAll();
  assert.deepEqual(
    back.deliveries.map((d) => d.id),
    ["evt_likes_0_1", "evt_likes_0_2", "evt_likes_0_3"],
  );
  assert.ok(back.deliveries.every((d) => d.signedBy.length === 1));
  assert.equal((await lab.registry.get(id)).status, "active", "a 2xx ends failing");
});

test("rotation: during the grace period each delivery carries two v1 signatures (new and old secret); with no grace only the new one", async (t) => {
  const lab = await webhookLab(t, { partitions: 1 });
  await lab.seed();
  const { id, secret: first } = await lab.register(["like.created"]);
  const { secret: second, endpoint } = await lab.registry.rotateSecret(id, 3600);
  lab.receiver.secrets.push(second);
  assert.notEqual(first, second);
  assert.ok(endpoint.previousSecretValidUntil, "the grace period is shown");
  await lab.ledger.likes.like("u1", "item-1");
  await lab.deliverAll();
  const rotated = lab.receiver.deliveries[0]!;
  assert.equal(rotated.signature.split(" ").length, 2, "two signatures, space-separated");
  assert.deepEqual(rotated.signedBy.sort(), [first, second].sort(), "a receiver with either secret verifies it");
  const { secret: third } = await lab.registry.rotateSecret(id, 0);
  lab.receiver.secrets.push(third);
  await lab.ledger.likes.like("u2", "item-1");
  await lab.deliverAll();
  assert.deepEqual(lab.receiver.deliveries[1]!.signedBy, [third], "only the newest secret signs once the grace is 0");
});

test("after a rotation's grace period ends the previous secret no longer signs, and the next pass erases it from the row", async (t) => {
  const lab = await webhookLab(t, { partitions: 1 });
  await lab.seed();
  const { id, secret: first } = await lab.register(["like.created"]);
  const { secret: second } = await lab.registry.rotateSecret(id, 3600);
  lab.receiver.secrets.push(second);
  await lab.ledger.likes.like("u1", "item-1");
  await lab.deliverAll();
  // The control: within the grace the receiver does see the old secret's signature.
  assert.deepEqual(lab.receiver.deliveries[0]!.signedBy.sort(), [first, second].sort(), "within the grace both sign");
  // The grace ends now, by the database's clock (as an hour passing would end it).
  await lab.db.pool.query("UPDATE webhook_endpoint SET previous_secret_until = now() WHERE endpoint_id = $1", [id]);
  const stored = await lab.db.pool.query<{ ended: boolean; kept: boolean }>(
    "SELECT previous_secret_until < now() AS ended, previous_secret IS NOT NULL AS kept FROM webhook_endpoint WHERE endpoint_id = $1",
    [id],
  );
  assert.deepEqual(
    stored.rows[0],
    { ended: true, kept: true },
    "the precondition: the grace has ended and the old secret is still in the row",
  );
  assert.equal((await lab.registry.get(id)).previousSecretValidUntil, undefined, "get no longer shows a grace");
  await lab.ledger.likes.like("u2", "item-1");
  // One step, not a pass: the claim itself must stop using the old secret, whether or not a pass erased it yet.
  assert.equal(await lab.delivery.step(), 1);
  const after = lab.receiver.deliveries[1]!;
  assert.equal(after.id, "evt_likes_0_2");
  assert.deepEqual(after.signedBy, [second], "after the grace only the current secret signs");
  assert.equal(after.signature.split(" ").length, 1, "one signature in the header");
  await lab.delivery.pass();
  const forgotten = await lab.db.pool.query(
    "SELECT previous_secret, previous_secret_until FROM webhook_endpoint WHERE endpoint_id = $1",
    [id],
  );
  assert.deepEqual(
    forgotten.rows[0],
    { previous_secret: null, previous_secret_until: null },
    "the old secret is not kept once its grace has ended",
  );
  const live = await lab.registry.rotateSecret(id, 3600);
  await lab.delivery.pass();
  const kept = await lab.db.pool.query<{ previous_secret: string }>(
    "SELECT previous_secret FROM webhook_endpoint WHERE endpoint_id = $1",
    [id],
  );
  assert.equal(kept.rows[0]!.previous_secret, second, "a secret within its grace is kept by the same pass");
  assert.notEqual(live.secret, second);
});

test("a missing event stops the cursor there: the worker never skips ahead over a gap, at the cursor or behind events it passes over", async (t) => {
  // A long backoff: the failed step is not retried within the test's passes.
  const lab = await webhookLab(t, {
    partitions: 1,
    delivery: { ...FAST_RETRIES, retryBaseMs: 600_000, maxBackoffMs: 600_000 },
  });
  await lab.seed();
  const created = await lab.register(["like.created"]);
  const removed = await lab.register(["like.removed"]);
  for (const u of ["u1", "u2", "u3"]) await lab.ledger.likes.like(u, "item-1"); // seq 1..3
  await lab.ledger.likes.unlike("u1", "item-1"); // seq 4
  // The gap: event 2 deleted behind the endpoints' retention holds (as a prune or an erasure that ignored them would).
  const gone = await lab.db.pool.query("DELETE FROM like_outbox WHERE part = 0 AND seq = 2 RETURNING *");
  assert.equal(gone.rowCount, 1);
  await lab.delivery.pass();
  const cursorOf = async (id: string) => (await lab.registry.cursors(id)).find((c) => c.source === "likes")!;
  // like.created: 1 is delivered, then 2 is missing right after the cursor: 3 is not sent.
  assert.deepEqual(
    lab.receiver.deliveries.filter((d) => d.signedBy.includes(created.secret)).map((d) => d.id),
    ["evt_likes_0_1"],
  );
  // like.removed: 1 is passed over (not subscribed); 4 comes after the gap and is not sent either.
  assert.deepEqual(
    lab.receiver.deliveries.filter((d) => d.signedBy.includes(removed.secret)).map((d) => d.id),
    [],
  );
  for (const id of [created.id, removed.id]) {
    const c = await cursorOf(id);
    assert.deepEqual(
      [c.deliveredUpto, c.attempts],
      [1, 1],
      `${id}: stopped right before the missing event, one failed attempt`,
    );
    assert.match(c.lastError ?? "", /event 2 is no longer in the likes outbox/);
  }
  // The negative control: the event put back, both endpoints get what they stopped before, in order,
  // so what held them back was the gap and nothing else.
  const row = gone.rows[0] as Record<string, unknown>;
  const columns = Object.keys(row);
  await lab.db.pool.query(
    `INSERT INTO like_outbox (${columns.join(", ")}) VALUES (${columns.map((_, i) => `$${i + 1}`).join(", ")})`,
    columns.map((c) => row[c]),
  );
  await lab.db.pool.query("UPDATE webhook_cursor SET next_attempt_at = now()");
  await lab.deliverAll();
  assert.deepEqual(
    lab.receiver.deliveries.filter((d) => d.signedBy.includes(created.secret)).map((d) => d.id),
    ["evt_likes_0_1", "evt_likes_0_2", "evt_likes_0_3"],
  );
  assert.deepEqual(
    lab.receiver.deliveries.filter((d) => d.signedBy.includes(removed.secret)).map((d) => d.id),
    ["evt_likes_0_4"],
  );
});

test("figure: one worker delivers a backlog of 100 events in order (one transaction and one request per event)", async (t) => {
  const lab = await webhookLab(t, { partitions: 4 });
  await lab.seed();
  await lab.register(["like.created"]);
  const users = Array.from({ length: 100 }, (_, i) => `fan-${i}`);
  for (const u of users) await lab.ledger.likes.like(u, "item-1");
  const started = performance.now();
  await lab.deliverAll();
  const ms = performance.now() - started;
  t.diagnostic(
    `note 100 events delivered by one worker in ${Math.round(ms)} ms: ${Math.round(100_000 / ms)} events/s, ${(ms / 100).toFixed(2)} ms per event (receiver on loopback; load average ${os.loadavg()[0]!.toFixed(1)} on ${os.cpus().length} cores)`,
  );
  assert.equal(lab.receiver.accepted().length, 100);
  assertContiguous(seqsByPartition(lab.receiver.deliveries), "backlog");
});
