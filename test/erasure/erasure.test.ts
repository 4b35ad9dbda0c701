/**
 * Erasing an account through the library (ErasureService, erasure_step): every count the account
 * touched drops by exactly its facts and no other count moves (the control account carl keeps
 * his), the audit is clean, the account is missing on every read, writes by or towards it are
 * refused while it runs and answered as towards a missing account afterwards, its id can be used
 * again once it is done, and starting twice, or for an unknown id, says what it found.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { fullAudit } from "../../src/api/routes/admin.ts";
import { AccountBeingErasedError } from "../../src/db/errors.ts";
import { Gate } from "../../src/hooks.ts";
import { listLikedItems, listLikers } from "../../src/likes/like-reads.ts";
import { listFollowers, readAccount, relationships } from "../../src/relations/relation-reads.ts";
import { replaceFunctionText } from "../support/function-mutant.ts";
import { buildWorld, drain, expectCounts, nonZero, readCounts, type World } from "./fixture.ts";

function eveDelta(w: World) {
  const [p1, , p3] = w.evePosts;
  const [c1, , c3] = w.eveComments;
  return {
    likes: {
      [w.carlPost]: -1,
      "plain-x": -1,
      [w.u1Comment]: -1,
      [p1!]: -3,
      [p3!]: -1,
      [c1!]: -1,
      [c3!]: -1,
      [w.eveDeletedPost]: -1,
    },
    comments: { [w.carlPost]: -2, [p1!]: -1 },
    followers: { carl: -1, u1: -1, eve: -2 },
    following: { eve: -2, u1: -1, u3: -1 },
    // eve's block of u5; u6's block of eve is u6's and stays.
    blocks: -1,
  };
}

/** How many facts of each kind the world gives eve (the start's count must say the same); of the blocks, the one she made. */
const EVE_FACTS = 3 + 3 + 5 + 2 + 3 + 3 + 3 + 1;

test("erasure: every count eve touched drops exactly by her facts, carl's and everyone else's stay, the audit is clean", async (t) => {
  const w = await buildWorld({ batchSize: 2 });
  t.after(() => w.close());
  const before = await readCounts(w.db);
  const started = await w.ledger.erasure.start("eve", "admin");
  assert.equal(started.outcome, "STARTED");
  assert.equal(started.status.total, EVE_FACTS);
  const status = await w.ledger.erasure.run("eve");
  await drain(w.ledger);
  assert.equal(status.phase, "done");
  assert.equal(status.done, EVE_FACTS);
  assert.equal(status.remaining, 0);
  assert.deepEqual(nonZero(await readCounts(w.db)), nonZero(expectCounts(before, eveDelta(w))));

  const audit = await fullAudit(w.ledger);
  assert.equal(audit.clean, true, JSON.stringify(audit));
  // Independent SQL: nothing of eve is live, and the tombstones carry no text.
  const {
    rows: [left],
  } = await w.db.pool.query(`SELECT
      (SELECT count(*) FROM post WHERE author = 'eve' AND (deleted_at IS NULL OR body <> ''))::int AS posts,
      (SELECT count(*) FROM comment WHERE author = 'eve' AND (deleted_at IS NULL OR body IS NOT NULL OR idempotency_key IS NOT NULL))::int AS comments,
      (SELECT count(*) FROM like_fact WHERE liked AND (user_id = 'eve' OR item_id IN (SELECT post_id FROM post WHERE author = 'eve' UNION ALL SELECT comment_id FROM comment WHERE author = 'eve')))::int AS likes,
      (SELECT count(*) FROM relation WHERE (follower = 'eve' OR followee = 'eve') AND state <> 'REMOVED')::int AS relations,
      (SELECT count(*) FROM block WHERE blocker = 'eve')::int AS blocks,
      (SELECT count(*) FROM block WHERE blocked = 'eve' AND blocker = 'u6')::int AS blocks_of_her,
      (SELECT count(*) FROM account WHERE account_id = 'eve' AND (private OR hide_collections OR erased_state IS DISTINCT FROM 'ERASED'))::int AS settings`);
  assert.deepEqual(left, { posts: 0, comments: 0, likes: 0, relations: 0, blocks: 0, blocks_of_her: 1, settings: 0 });
  // Each kind went through its outbox: one event per fact turned off.
  const {
    rows: [events],
  } = await w.db.pool.query(`SELECT
      (SELECT count(*) FROM like_outbox WHERE delta = -1)::int AS unlikes,
      (SELECT count(*) FROM comment_outbox WHERE delta = -1)::int AS uncomments,
      (SELECT count(*) FROM relation_event WHERE state = 'REMOVED' AND 'eve' IN (follower, followee))::int AS removals`);
  // carl's unfollow of eve in the world is one REMOVED event of its own (the blocks found nothing to remove).
  assert.deepEqual(events, { unlikes: 5 + 2 + 3, uncomments: 3, removals: 1 + 6 });
});

test("erasure: afterwards eve is missing on every read, her id is refused as a target, and it never acts again (a tombstone)", async (t) => {
  const w = await buildWorld({ batchSize: 3 });
  t.after(() => w.close());
  await w.ledger.erasure.start("eve", "self");
  await w.ledger.erasure.run("eve");
  await drain(w.ledger);
  assert.equal(await readAccount(w.db.pool, "eve"), null);
  await assert.rejects(w.ledger.relations.relationship("u1", "eve"), { code: "ACCOUNT_NOT_FOUND" });
  assert.deepEqual(await relationships(w.db.pool, "u1", ["eve", "carl"]).then((r) => r.map((x) => x.id)), ["carl"]);
  assert.ok(!(await listFollowers(w.db.pool, "u1")).followers.some((f) => f.accountId === "eve"));
  assert.ok(!(await listFollowers(w.db.pool, "carl")).followers.some((f) => f.accountId === "eve"));
  assert.deepEqual((await listFollowers(w.db.pool, "eve")).followers, []);
  assert.ok(!(await listLikers(w.db.pool, w.carlPost)).likers.some((l) => l.userId === "eve"));
  assert.deepEqual((await listLikedItems(w.db.pool, "eve")).likes, []);
  for (const post of [...w.evePosts, w.eveDeletedPost])
    await assert.rejects(w.ledger.posts.getPost(post), { code: "POST_NOT_FOUND" });
  const listed = await w.ledger.comments.listTopLevel(null, w.carlPost);
  assert.ok(!listed.comments.some((c) => c.author === "eve" || w.eveComments.includes(c.id)), JSON.stringify(listed));

  // Towards the erased id: as towards an account that does not exist.
  await assert.rejects(w.ledger.relations.follow("u1", "eve"), {
    code: "ACCOUNT_NOT_FOUND",
    message: "unknown account: eve",
  });
  await assert.rejects(w.ledger.relations.block("u1", "eve"), { code: "ACCOUNT_NOT_FOUND" });
  await assert.rejects(w.ledger.relations.unblock("u6", "eve"), { code: "ACCOUNT_NOT_FOUND" });
  await assert.rejects(w.ledger.posts.createPost("eve", "PUBLIC", "back?"), { code: "ACCOUNT_ERASED" });
  // Starting again: done already, nothing written; an unknown id is an unknown account.
  const seqs = async () =>
    (
      await w.db.pool.query(
        "SELECT (SELECT sum(last) FROM like_seq) + (SELECT sum(last) FROM event_seq) + (SELECT sum(last) FROM comment_seq) AS n",
      )
    ).rows[0]!.n;
  const seqBefore = await seqs();
  assert.equal((await w.ledger.erasure.start("eve", "admin")).outcome, "ERASED");
  assert.equal(await seqs(), seqBefore);
  await assert.rejects(w.ledger.erasure.start("nobody", "admin"), { code: "ACCOUNT_NOT_FOUND" });

  // The id is a tombstone: no write creates it anew, and u6's block of it stays; the erasure's record stays too.
  await assert.rejects(w.ledger.relations.upsertAccount("eve"), { code: "ACCOUNT_ERASED" });
  assert.equal((await w.ledger.erasure.status("eve"))?.phase, "done");
  await assert.rejects(w.ledger.relations.follow("eve", "u1"), { code: "ACCOUNT_ERASED" });
  await assert.rejects(w.ledger.likes.like("eve", w.carlPost), { code: "ACCOUNT_ERASED" });
  await assert.rejects(
    w.ledger.comments.create("eve", w.carlPost, "again", { idempotencyKey: "k1", ensureAuthor: true }),
    { code: "ACCOUNT_ERASED" },
  );
  assert.equal((await w.db.pool.query("SELECT 1 FROM block WHERE blocker = 'u6' AND blocked = 'eve'")).rowCount, 1);
  await drain(w.ledger);
  assert.equal((await fullAudit(w.ledger)).clean, true);
});

test("erasure: while it runs, eve reads as missing and every write by or towards her (or her content) is refused with ACCOUNT_BEING_ERASED, writing nothing", async (t) => {
  const w = await buildWorld({ batchSize: 2 });
  t.after(() => w.close());
  const gate = new Gate("erasure.betweenBatches");
  const off = w.hooks.on("erasure.betweenBatches", gate.handler);
  await w.ledger.erasure.start("eve", "admin");
  const running = w.ledger.erasure.run("eve");
  await gate.waitArrived();
  const seqs = async () =>
    (
      await w.db.pool.query(
        "SELECT (SELECT sum(last) FROM like_seq) + (SELECT sum(last) FROM event_seq) + (SELECT sum(last) FROM comment_seq) AS n, (SELECT count(*) FROM block) AS b, (SELECT count(*) FROM post) AS p",
      )
    ).rows[0];
  const before = await seqs();
  assert.equal(await readAccount(w.db.pool, "eve"), null);
  // The first batch made tombstones of two posts (404 from then on); the third is still live.
  const { rows: live } = await w.db.pool.query<{ post_id: string }>(
    "SELECT post_id FROM post WHERE author = 'eve' AND deleted_at IS NULL",
  );
  assert.equal(live.length, 1);
  const livePost = live[0]!.post_id;
  const refused: [string, () => Promise<unknown>][] = [
    ["like by eve", () => w.ledger.likes.like("eve", "plain-x")],
    ["unlike by eve", () => w.ledger.likes.unlike("eve", w.carlPost)],
    ["like of eve's post", () => w.ledger.likes.like("u4", livePost)],
    ["like of eve's comment", () => w.ledger.likes.like("u4", w.eveComments[1]!)],
    ["follow eve", () => w.ledger.relations.follow("u5", "eve")],
    ["eve follows", () => w.ledger.relations.follow("eve", "u3")],
    ["block eve", () => w.ledger.relations.block("u3", "eve")],
    ["unblock eve", () => w.ledger.relations.unblock("u6", "eve")],
    ["eve's settings", () => w.ledger.relations.upsertAccount("eve", { private: false })],
    ["eve posts", () => w.ledger.posts.createPost("eve", "PUBLIC", "still here")],
    ["comment on eve's post", () => w.ledger.comments.create("u1", livePost, "hello")],
    ["eve comments", () => w.ledger.comments.create("eve", w.carlPost, "hello")],
  ];
  for (const [what, write] of refused) {
    await assert.rejects(
      write(),
      (err: unknown) => {
        assert.ok(
          err instanceof AccountBeingErasedError || (err as { code?: string }).code === "ACCOUNT_BEING_ERASED",
          `${what}: ${String(err)}`,
        );
        assert.match((err as Error).message, /account eve is being erased/, what);
        return true;
      },
      what,
    );
  }
  assert.deepEqual(await seqs(), before);
  // u2 (private, with eve's request pending) goes public: allowed; eve's request is left to her erasure.
  assert.deepEqual(await w.ledger.relations.upsertAccount("u2", { private: false }), {
    accountId: "u2",
    private: false,
    created: false,
    approvedRequests: 0,
  });
  // Starting again while it runs starts nothing.
  assert.equal((await w.ledger.erasure.start("eve", "self")).outcome, "RUNNING");
  off();
  gate.release();
  assert.equal((await running).phase, "done");
});

test("erasure: a batch turns off at most batchSize facts in one transaction, and between batches a live like is served with no erasure transaction open", async (t) => {
  const w = await buildWorld({ batchSize: 2 });
  t.after(() => w.close());
  let between = 0;
  const gate = new Gate("erasure.betweenBatches");
  const off = w.hooks.on("erasure.betweenBatches", async (ctx) => {
    between++;
    if (between === 6) await gate.handler(ctx);
  });
  await w.ledger.erasure.start("eve", "admin");
  const running = w.ledger.erasure.run("eve");
  await gate.waitArrived();
  const { rows: open } = await w.db.pool.query(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
  );
  assert.equal(open[0]!.n, 0);
  assert.equal((await w.ledger.likes.like("u4", w.carlPost)).outcome, "CHANGED");
  off();
  gate.release();
  const done = await running;
  // Every transaction's events share its now(): the outboxes' rows since the start, grouped by it.
  const { rows } = await w.db.pool.query<{ n: number; events: number }>(`
    WITH since AS (SELECT started_at AS t FROM account_erasure WHERE account_id = 'eve'),
    g AS (
      SELECT created_at, count(*) AS n FROM like_outbox, since WHERE created_at >= since.t AND delta = -1 GROUP BY created_at
      UNION ALL SELECT created_at, count(*) FROM comment_outbox, since WHERE created_at >= since.t GROUP BY created_at
      UNION ALL SELECT created_at, count(*) FROM relation_event, since WHERE created_at >= since.t GROUP BY created_at)
    SELECT max(n)::int AS n, sum(n)::int AS events FROM g`);
  assert.deepEqual(rows[0], { n: 2, events: 10 + 3 + 6 });
  // 24 facts in batches of at most 2, plus a batch per phase that found fewer than 2 (or none).
  assert.ok(done.batches >= 12 && done.batches <= 12 + 8, `batches ${done.batches}`);
  await drain(w.ledger);
  assert.equal((await fullAudit(w.ledger)).clean, true);
});

test("negative control: an erasure that turns likes off without their outbox events leaves counts that never drop and an audit that is not clean", async (t) => {
  const w = await buildWorld({ batchSize: 2 });
  t.after(() => w.close());
  await replaceFunctionText(w.db.pool, "erasure_unlike(text[], text[], integer)", [
    ["FROM numbered nb JOIN moved m USING (part)", "FROM numbered nb JOIN moved m USING (part) WHERE false"],
  ]);
  const before = await readCounts(w.db);
  await w.ledger.erasure.start("eve", "admin");
  await w.ledger.erasure.run("eve");
  // The like consumer stops at the first missing sequence number: the gap the mutant left.
  await assert.rejects(w.ledger.likeConsumer.drain(), /drain stalled/);
  await w.ledger.projector.drain();
  await w.ledger.commentConsumer.drain();
  const after = await readCounts(w.db);
  assert.equal(after.likes[w.carlPost], before.likes[w.carlPost], "the like count of carl's post did not drop");
  assert.notDeepEqual(nonZero(after), nonZero(expectCounts(before, eveDelta(w))));
  const audit = await fullAudit(w.ledger);
  assert.equal(audit.clean, false);
  assert.ok(
    audit.likes.writeSide.seqGapPartitions > 0 && audit.likes.writeSide.versionMismatchPairs > 0,
    JSON.stringify(audit.likes.writeSide),
  );
});

test("negative control: without the write guard on likes, eve's like during her erasure is accepted (the refusal test would fail); the finish's check still finds it and goes round again", async (t) => {
  const w = await buildWorld({ batchSize: 2 });
  t.after(() => w.close());
  await replaceFunctionText(w.db.pool, "erasure_guard_like()", [
    ["IF NOT EXISTS (SELECT 1 FROM account_erasure WHERE finished_at IS NULL) THEN", "IF true THEN"],
  ]);
  // The batched like path (like_set_batch) asks the same rule itself.
  await replaceFunctionText(w.db.pool, "like_erasure_refusal(text,text)", [
    ["SELECT CASE", "SELECT CASE WHEN true THEN NULL::text"],
  ]);
  const gate = new Gate("erasure.betweenBatches");
  let seen = 0;
  // Park once the likes phase is over: a like then is not found by any later phase.
  const off = w.hooks.on("erasure.betweenBatches", async (ctx) => {
    if (ctx.phase === "likes" && ctx.nextPhase === "following" && seen++ === 0) await gate.handler(ctx);
  });
  await w.ledger.erasure.start("eve", "admin");
  const running = w.ledger.erasure.run("eve");
  await gate.waitArrived();
  assert.equal((await w.ledger.likes.like("eve", "plain-x")).outcome, "CHANGED");
  off();
  gate.release();
  const status = await running;
  assert.deepEqual([status.phase, status.total, status.done], ["done", EVE_FACTS + 1, EVE_FACTS + 1]);
  const { rows } = await w.db.pool.query("SELECT count(*)::int AS n FROM like_fact WHERE user_id = 'eve' AND liked");
  assert.equal(rows[0]!.n, 0);
  await drain(w.ledger);
  assert.equal((await fullAudit(w.ledger)).clean, true);
});
