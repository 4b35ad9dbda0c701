/**
 * Post and account events (docs/webhooks.md, "Events"): post.created / post.deleted from the post
 * outbox with no body, account.created / account.updated / account.erased from the account
 * outbox, each written in the transaction of its fact, delivered gapless per partition to a real
 * receiver; an erasure is one account.erased, and afterwards nothing else of the account is sent,
 * on a replay neither.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { setHideCollections } from "../../src/relations/account-settings.ts";
import { WebhookDelivery } from "../../src/webhooks/delivery-worker.ts";
import { assertContiguous, FAST_RETRIES, webhookLab } from "./fixture.ts";
import { seqsByPartition } from "./receiver.ts";

const SECRET_TEXT = "body-text-that-must-never-leave";

test("post.created and post.deleted carry id, author, visibility and times for every visibility, never the body", async (t) => {
  const lab = await webhookLab(t, { partitions: 2 });
  await lab.seed();
  await lab.register(["post.created", "post.deleted"]);
  const { posts } = lab.ledger;
  const made = [];
  for (const visibility of ["PUBLIC", "FOLLOWERS", "SELF"] as const)
    made.push(await posts.createPost("bob", visibility, `${SECRET_TEXT} ${visibility}`));
  await posts.deletePost("bob", made[2]!.postId);
  await posts.deletePost("bob", made[2]!.postId); // a repeated delete changes nothing and writes nothing
  await lab.deliverAll();

  const got = lab.receiver.deliveries;
  assert.deepEqual(
    got.map((d) => [d.parsed.type, d.parsed.data.postId, d.parsed.data.visibility]),
    [
      ["post.created", made[0]!.postId, "PUBLIC"],
      ["post.created", made[1]!.postId, "FOLLOWERS"],
      ["post.created", made[2]!.postId, "SELF"],
      ["post.deleted", made[2]!.postId, "SELF"],
    ],
  );
  // The control: the text is there to be leaked (the two live posts hold it).
  const bodies = await lab.db.pool.query("SELECT 1 FROM post WHERE body LIKE $1", [`${SECRET_TEXT}%`]);
  assert.equal(bodies.rowCount, 2);
  for (const d of got) {
    assert.ok(!d.body.includes(SECRET_TEXT), `${d.id} carries no post text`);
    assert.match(d.id, /^evt_posts_\d+_\d+$/);
    assert.equal(d.parsed.data.author, "bob");
  }
  const { rows } = await lab.db.pool.query<{ post_id: string; created_at: Date; deleted_at: Date | null }>(
    "SELECT post_id, created_at, deleted_at FROM post WHERE author = 'bob'",
  );
  const row = (id: unknown) => rows.find((r) => r.post_id === id)!;
  for (const d of got) assert.equal(d.parsed.data.createdAt, row(d.parsed.data.postId).created_at.toISOString());
  assert.equal(got[3]!.parsed.data.deletedAt, row(made[2]!.postId).deleted_at!.toISOString());
  assert.deepEqual(
    got.map((d) => d.parsed.data.version),
    [1, 1, 1, 2],
  );
  assert.deepEqual(Object.keys(got[0]!.parsed.data).sort(), [
    "author",
    "createdAt",
    "partition",
    "postId",
    "seq",
    "version",
    "visibility",
  ]);
  assertContiguous(seqsByPartition(got), "post events");
});

test("account.created, account.updated only when a setting changes, and a rolled-back write leaves no event and no gap", async (t) => {
  const lab = await webhookLab(t, { partitions: 1 });
  await lab.seed();
  await lab.register(["account.created", "account.updated", "account.erased"]);
  const { relations } = lab.ledger;
  await relations.upsertAccount("erin");
  await relations.upsertAccount("erin"); // the same settings: no event
  await relations.upsertAccount("erin", { private: true });
  await relations.upsertAccount("erin", { private: true }); // unchanged: no event
  await setHideCollections(lab.db.pool, "erin", true);
  // A write rolled back takes its event and its sequence number with it.
  const client = await lab.db.pool.connect();
  try {
    await client.query("BEGIN");
    await client.query("UPDATE account SET private = false WHERE account_id = 'erin'");
    await client.query("ROLLBACK");
  } finally {
    client.release();
  }
  await relations.upsertAccount("erin", { private: false });
  await lab.deliverAll();

  const got = lab.receiver.deliveries.map((d) => [
    d.parsed.type,
    d.parsed.data.accountId,
    d.parsed.data.private,
    d.parsed.data.hideCollections,
  ]);
  assert.deepEqual(got, [
    ["account.created", "erin", false, false],
    ["account.updated", "erin", true, false],
    ["account.updated", "erin", true, true],
    ["account.updated", "erin", false, true],
  ]);
  assertContiguous(seqsByPartition(lab.receiver.deliveries), "account events");
  // The control of "no event when nothing changed": the outbox holds exactly the four.
  const { rows } = await lab.db.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM account_outbox WHERE account_id = 'erin'",
  );
  assert.equal(rows[0]!.n, 4);
});

test("an erasure is one account.erased, written in the erasure's finishing transaction; afterwards nothing else of the account is sent, on a replay neither", async (t) => {
  const lab = await webhookLab(t, { partitions: 1 });
  await lab.seed();
  const { id } = await lab.register([
    "post.created",
    "post.deleted",
    "account.created",
    "account.updated",
    "account.erased",
  ]);
  const { relations, posts, erasure } = lab.ledger;
  await relations.upsertAccount("erin", { private: true });
  for (let i = 0; i < 3; i++) await posts.createPost("erin", "PUBLIC", `erin's post ${i}`);
  await posts.createPost("bob", "PUBLIC", "bob's post");
  await lab.deliverAll();
  const naming = (from: number) =>
    lab.receiver.deliveries
      .slice(from)
      .filter((d) => d.body.includes('"erin"'))
      .map((d) => d.parsed.type);
  // The control: before the erasure, erin's events are sent.
  assert.deepEqual(naming(0).sort(), ["account.created", "post.created", "post.created", "post.created"]);

  await erasure.start("erin", "admin");
  await erasure.run("erin", {});
  const { rows } = await lab.db.pool.query<{ kind: string; same_tx: boolean; private: boolean | null }>(
    `SELECT o.kind, o.xmin::text = a.xmin::text AS same_tx, o.private
       FROM account_outbox o JOIN account a USING (account_id) WHERE o.account_id = 'erin' ORDER BY o.seq`,
  );
  assert.deepEqual(
    rows.map((r) => r.kind),
    ["created", "erased"],
    "one account.erased; the reset of its settings is no account.updated",
  );
  assert.equal(rows[1]!.same_tx, true, "account.erased committed with the account's ERASED state");
  assert.equal(rows[0]!.private, null, "the settings its account.created recorded are emptied");
  // The erasure's post tombstones wrote post.deleted events (the feed needs them) ...
  const deleted = await lab.db.pool.query("SELECT 1 FROM post_outbox WHERE author = 'erin' AND kind = 'deleted'");
  assert.equal(deleted.rowCount, 3);
  const before = lab.receiver.deliveries.length;
  await lab.deliverAll();
  // ... but once it is done, the account's events are redacted: account.erased stands for them.
  assert.deepEqual(naming(before), ["account.erased"]);
  assert.deepEqual(Object.keys(lab.receiver.deliveries.at(-1)!.parsed.data).sort(), ["accountId", "partition", "seq"]);

  // A replay from the start of both outboxes: bob's post and erin's account.erased, nothing else of erin.
  await lab.registry.replay(id, { source: "posts", partition: 0, fromSeq: 1 });
  await lab.registry.replay(id, { source: "accounts", partition: 0, fromSeq: 1 });
  const replayFrom = lab.receiver.deliveries.length;
  await lab.deliverAll();
  assert.deepEqual(naming(replayFrom), ["account.erased"]);
  assert.ok(
    lab.receiver.deliveries.slice(replayFrom).some((d) => d.parsed.data.author === "bob"),
    "the replay did re-send the other accounts' posts",
  );
});

test("posts and account changes written concurrently arrive once each, in order per partition, with two workers", async (t) => {
  const lab = await webhookLab(t, { partitions: 3 });
  await lab.seed();
  await lab.register(["*"]);
  const authors = ["alice", "bob", "carol", "dave"];
  const writes = authors.flatMap((author) =>
    Array.from({ length: 15 }, async (_, i) => {
      const post = await lab.ledger.posts.createPost(author, "PUBLIC", `p${i}`);
      if (i % 3 === 0) await lab.ledger.posts.deletePost(author, post.postId);
      await lab.ledger.relations.upsertAccount(`${author}-${i}`);
    }),
  );
  const second = new WebhookDelivery(lab.db.pool, FAST_RETRIES);
  await Promise.all([...writes, lab.deliverAll(), second.pass()]);
  await lab.deliverAll();

  const got = lab.receiver.deliveries.filter((d) => /^evt_(posts|accounts)_/.test(d.id));
  assert.equal(new Set(got.map((d) => d.id)).size, got.length, "no event twice");
  assertContiguous(seqsByPartition(got), "post and account events");
  assert.equal(got.filter((d) => d.parsed.type === "post.created").length, 60);
  assert.equal(got.filter((d) => d.parsed.type === "post.deleted").length, 20);
  assert.equal(got.filter((d) => d.parsed.type === "account.created").length, 60);
});
