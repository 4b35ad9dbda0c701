/**
 * An erased account is a tombstone (docs/erasure.md, "What remains, and the id afterwards"): the
 * blocks made against it stay (they are their blockers' data), its id can never act again on any
 * path (HTTP, the library, the batched writes, likes that need no account row), a leftover fact
 * fails the audit and a second erasure request turns it off, and the block outbox no longer names
 * it. Every fact is read with the test's own SQL.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { fullAudit } from "../../src/api/routes/admin.ts";
import { AccountErasedError } from "../../src/db/errors.ts";
import type { Pool } from "../../src/db/pool.ts";
import { openLedger, type Ledger } from "../../src/ledger.ts";
import { stablePartition } from "../../src/partition.ts";
import { deliverable, readEvents } from "../../src/webhooks/webhook-events.ts";
import { assertError, ok, startApi, type ApiResponse } from "../api/harness.ts";
import { replaceFunctionText } from "../support/function-mutant.ts";
import { createTestDatabase } from "../support/test-db.ts";

const blockRows = async (pool: Pool) =>
  (await pool.query<{ blocker: string; blocked: string }>("SELECT blocker, blocked FROM block ORDER BY 1, 2")).rows;
const accountState = async (pool: Pool, id: string) =>
  (await pool.query<{ erased_state: string | null }>("SELECT erased_state FROM account WHERE account_id = $1", [id]))
    .rows[0]?.erased_state;

test("HTTP: carol blocks dave; dave erases himself; every write of his token after it is 410 ACCOUNT_ERASED and carol's block stays", async (t) => {
  const h = await startApi({ partitions: 2 });
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  ok(await admin.put("/v1/accounts/carol"));
  ok(await admin.put("/v1/accounts/dave"));
  ok(await admin.put("/v1/accounts/bob"));
  ok(await admin.put("/v1/items/plain-1"));
  const bob = await h.as("bob");
  const carol = await h.as("carol");
  const dave = await h.as("dave");
  ok(await carol.put("/v1/accounts/me/blocks/dave"));
  ok(await dave.put("/v1/accounts/me/blocks/carol"));
  const post = ok(await bob.post<{ id: string }>("/v1/posts", { visibility: "PUBLIC", body: "bob's" }), 201);

  const erased = await dave.delete("/v1/accounts/me");
  assert.equal(erased.status, 200, erased.text);
  // The erasure deleted the block dave made, not the one made against him.
  assert.deepEqual(await blockRows(h.db.pool), [{ blocker: "carol", blocked: "dave" }]);

  const writes: [string, Promise<ApiResponse>][] = [
    ["follow", dave.put("/v1/accounts/me/following/carol")],
    ["block", dave.put("/v1/accounts/me/blocks/carol")],
    ["create account", dave.put("/v1/accounts/dave")],
    ["create account, private", dave.put("/v1/accounts/dave", { private: true })],
    ["like", dave.put("/v1/items/plain-1/likes/me")],
    ["unlike", dave.delete("/v1/items/plain-1/likes/me")],
    ["post", dave.post("/v1/posts", { visibility: "PUBLIC", body: "back" })],
    ["comment", dave.post(`/v1/posts/${post.id}/comments`, { body: "back" })],
  ];
  for (const [what, pending] of writes) assertError(await pending, 410, "ACCOUNT_ERASED", what);
  // An admin cannot bring the id back either.
  assertError(await admin.put("/v1/accounts/dave"), 410, "ACCOUNT_ERASED", "admin re-create");

  assert.equal(await accountState(h.db.pool, "dave"), "ERASED");
  assert.deepEqual(await blockRows(h.db.pool), [{ blocker: "carol", blocked: "dave" }]);
  const likes = await h.db.pool.query("SELECT 1 FROM like_fact WHERE user_id = 'dave'");
  assert.equal(likes.rowCount, 0);
  assert.equal((await h.db.pool.query("SELECT 1 FROM post WHERE author = 'dave'")).rowCount, 0);
  // carol's block list keeps it; towards the tombstone every write answers as towards an account that does not exist.
  const blocks = ok(await carol.get<{ blocks: unknown[] }>("/v1/accounts/me/blocks"));
  assert.equal(blocks.blocks.length, 1);
  assert.match(JSON.stringify(blocks.blocks[0]), /"dave"/);
  assertError(await carol.put("/v1/accounts/me/following/dave"), 404, "ACCOUNT_NOT_FOUND", "towards");
  assertError(await carol.delete("/v1/accounts/me/blocks/dave"), 404, "ACCOUNT_NOT_FOUND", "unblock towards");
  await h.drain();
  assert.equal((await fullAudit(h.ledger)).clean, true);
});

async function erasedWorld(t: { after(fn: () => Promise<void>): void }): Promise<{ pool: Pool; ledger: Ledger }> {
  const db = await createTestDatabase({ partitions: 4 });
  t.after(() => db.close());
  const ledger = await openLedger(db.pool);
  for (const a of ["carol", "dave", "bob"]) await ledger.relations.upsertAccount(a);
  await ledger.likes.createItem("plain-1");
  await ledger.relations.block("carol", "dave");
  await ledger.relations.block("dave", "bob");
  await ledger.likes.like("dave", "plain-1");
  await ledger.erasure.start("dave", "cli");
  await ledger.erasure.run("dave");
  return { pool: db.pool, ledger };
}

test("library and batched writes: an erased id never acts again (AccountErasedError or a REJECTED ACCOUNT_ERASED row), nothing written", async (t) => {
  const { pool, ledger } = await erasedWorld(t);
  assert.deepEqual(await blockRows(pool), [{ blocker: "carol", blocked: "dave" }]);
  const refused = async (what: string, write: () => Promise<unknown>) =>
    assert.rejects(write, (err: unknown) => err instanceof AccountErasedError && err.code === "ACCOUNT_ERASED", what);
  await refused("upsertAccount", () => ledger.relations.upsertAccount("dave"));
  await refused("upsertAccount private", () => ledger.relations.upsertAccount("dave", { private: true }));
  await refused("follow", () => ledger.relations.follow("dave", "carol"));
  await refused("unfollow", () => ledger.relations.unfollow("dave", "carol"));
  await refused("block", () => ledger.relations.block("dave", "carol"));
  await refused("like", () => ledger.likes.like("dave", "plain-1"));
  await refused("unlike", () => ledger.likes.unlike("dave", "plain-1"));
  await refused("post", () => ledger.posts.createPost("dave", "PUBLIC", "back", { ensureAuthor: true }));

  // Group commit's batches, as production sends them: dave's write is its own refusal, bob's goes through.
  const relBatch = (ledger.relations as unknown as { runBatch(w: object[]): Promise<unknown[]> }).runBatch.bind(
    ledger.relations,
  );
  const relAnswers = await relBatch([
    { op: "follow", a: "dave", b: "carol", approve: null },
    { op: "follow", a: "bob", b: "carol", approve: null },
  ]);
  assert.ok(relAnswers[0] instanceof AccountErasedError, String(relAnswers[0]));
  assert.equal((relAnswers[1] as { outcome: string }).outcome, "CHANGED");
  const { rows: likeRows } = await pool.query<{
    ord: number;
    outcome: string;
    code: string | null;
    account: string | null;
  }>(
    "SELECT ord, outcome, code, account FROM like_set_batch($1::text[], $2::text[], $3::boolean[], $4::integer[], $5::boolean[]) ORDER BY ord",
    [
      ["dave", "bob"],
      ["plain-1", "plain-1"],
      [true, true],
      [stablePartition("dave", 4), stablePartition("bob", 4)],
      [false, false],
    ],
  );
  assert.deepEqual(
    likeRows.map((r) => [r.outcome, r.code, r.account]),
    [
      ["REJECTED", "ACCOUNT_ERASED", "dave"],
      ["CHANGED", null, null],
    ],
  );

  assert.equal(await accountState(pool, "dave"), "ERASED");
  assert.equal((await pool.query("SELECT 1 FROM like_fact WHERE user_id = 'dave' AND liked")).rowCount, 0);
  assert.equal(
    (await pool.query("SELECT 1 FROM relation WHERE (follower = 'dave' OR followee = 'dave') AND state <> 'REMOVED'"))
      .rowCount,
    0,
  );
  assert.deepEqual(await blockRows(pool), [{ blocker: "carol", blocked: "dave" }]);
});

test("negative control: without the like write's tombstone check (like_set_batch asks the guard's question itself and skips the trigger), an erased id's like is written (the refusal above is that check's) and the audit's leftover check sees it", async (t) => {
  const { pool, ledger } = await erasedWorld(t);
  await replaceFunctionText(pool, "like_set_batch(text[],text[],boolean[],integer[],boolean[])", [
    ["AND a.erased_state = 'ERASED' AND NOT erasure_writing())", "AND false)"],
  ]);
  assert.equal((await ledger.likes.like("dave", "plain-1")).outcome, "CHANGED");
  assert.deepEqual((await pool.query("SELECT account_id, what, n::int FROM erasure_leftovers()")).rows, [
    { account_id: "dave", what: "likes", n: 1 },
  ]);
});

test("a leftover fact of an erased id fails the audit (erasure_leftovers); a second erasure request turns it off", async (t) => {
  const { pool, ledger } = await erasedWorld(t);
  const drain = async () => {
    await ledger.likeConsumer.drain();
    await ledger.projector.drain();
    await ledger.commentConsumer.drain();
  };
  await drain();
  // The control: nothing left, clean.
  let report = await fullAudit(ledger);
  assert.deepEqual(report.erasure, { leftovers: 0 });
  assert.equal(report.clean, true);
  const first = await ledger.erasure.start("dave", "self");
  assert.equal(first.outcome, "ERASED");

  // A like that slipped past the guard (as a write whose statement began before the finish could):
  // like_set itself, with the guard's question and trigger skipped for this transaction (the
  // erasure's own writes skip them so; a lone like is a batch of one, which asks the question itself).
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    await client.query("SET LOCAL ledger.erasure = 'test'");
    await client.query("SELECT * FROM like_set('dave', 'plain-1', true, $1)", [stablePartition("dave", 4)]);
    await client.query("COMMIT");
  } finally {
    client.release();
  }
  await drain();
  report = await fullAudit(ledger);
  assert.deepEqual(report.erasure, { leftovers: 1 });
  assert.equal(report.clean, false);
  assert.deepEqual((await pool.query("SELECT account_id, what, n::int FROM erasure_leftovers()")).rows, [
    { account_id: "dave", what: "likes", n: 1 },
  ]);

  const again = await ledger.erasure.start("dave", "self");
  assert.equal(again.outcome, "STARTED");
  const status = await ledger.erasure.run("dave");
  assert.equal(status.phase, "done");
  assert.equal(status.done, 1);
  await drain();
  assert.equal((await pool.query("SELECT 1 FROM like_fact WHERE user_id = 'dave' AND liked")).rowCount, 0);
  assert.equal(
    (await pool.query("SELECT coalesce(sum(n), 0)::int AS n FROM like_count WHERE item_id = 'plain-1'")).rows[0].n,
    0,
  );
  report = await fullAudit(ledger);
  assert.equal(report.clean, true, JSON.stringify(report));
  assert.equal(await accountState(pool, "dave"), "ERASED");
});

test("the block outbox names no erased account after its erasure: its events are redacted and never delivered", async (t) => {
  const { pool, ledger } = await erasedWorld(t);
  await ledger.relations.unblock("carol", "bob").catch(() => undefined);
  await ledger.relations.block("carol", "bob");
  const { rows: naming } = await pool.query(
    "SELECT part, seq FROM webhook_block_event WHERE 'dave' IN (blocker, blocked)",
  );
  assert.deepEqual(naming, []);
  const client = await pool.connect();
  try {
    const events = [];
    for (let part = 0; part < 4; part++) events.push(...(await readEvents(client, "blocks", part, 0, 100)));
    // carol->dave, dave->bob and the erasure's deletion of dave->bob: three redacted; carol->bob sent.
    assert.equal(events.filter((e) => e.redacted).length, 3);
    assert.ok(events.every((e) => !JSON.stringify(e.data).includes("dave")));
    assert.deepEqual(
      events.filter((e) => deliverable(["*"], e)).map((e) => e.data),
      [
        {
          blocker: "carol",
          blocked: "bob",
          blocking: true,
          partition: events.find((e) => !e.redacted)!.part,
          seq: events.find((e) => !e.redacted)!.seq,
        },
      ],
    );
  } finally {
    client.release();
  }
  assert.equal((await fullAudit(ledger)).webhooks.blockSequenceViolations, 0);
});
