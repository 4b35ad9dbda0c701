/**
 * The shared counter machinery as the comment counter uses it, for what moving likes onto it
 * added: the "at or below the watermark is a duplicate" rule (so comment_processed may be pruned
 * like processed_event), the rebuild's key filter and typed error for unknown keys, and the
 * spec's hook prefix. The like counter's own tests (test/likes/) run on the same code.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { COMMENT_COUNTER } from "../../src/content/comment-spec.ts";
import {
  auditCounter,
  counterAuditClean,
  counterReadSideClean,
  formatCounterAudit,
  readCounterSide,
} from "../../src/counters/counter-audit.ts";
import { readCounter } from "../../src/counters/counter-reads.ts";
import { UnknownCounterKeysError } from "../../src/counters/counter-rebuild.ts";
import { Gate } from "../../src/hooks.ts";
import { openLedger, type Ledger } from "../../src/ledger.ts";
import { acct } from "../relations/fixture.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";

async function fixture(t: { after(fn: () => Promise<void>): void }) {
  const db = await createTestDatabase({ partitions: 1 });
  t.after(() => db.close());
  await db.pool.query(
    "INSERT INTO account (account_id) SELECT 'user-' || lpad(i::text, 4, '0') FROM generate_series(1, 30) AS i",
  );
  const ledger = await openLedger(db.pool);
  const post = await ledger.posts.createPost(acct(1), "PUBLIC", "the post");
  return { db, ledger, postId: post.postId };
}

async function one(db: TestDatabase, sql: string, values: unknown[] = []): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(sql, values);
  return Number(rows[0]!.n);
}

const watermark = (db: TestDatabase) => one(db, "SELECT applied_upto AS n FROM comment_watermark WHERE part = 0");
const truth = (db: TestDatabase, postId: string) =>
  one(db, "SELECT count(*) AS n FROM counted_comment WHERE post_id = $1", [postId]);
const prune = async (db: TestDatabase, upto: number) =>
  (await db.pool.query("DELETE FROM comment_processed WHERE part = 0 AND seq <= $1", [upto])).rowCount ?? 0;

/** 20 comments by different authors; every event but `gapSeq` applied, so the watermark stops below it. */
async function commentsWithGap(ledger: Ledger, postId: string, gapSeq: number): Promise<number> {
  for (let i = 0; i < 20; i++) await ledger.comments.create(acct(i + 2), postId, `comment ${i}`);
  const events = await ledger.commentConsumer.fetchRange(0, 1, 20);
  await ledger.commentConsumer.applyBatch(events.filter((e) => e.seq !== gapSeq));
  return events.length;
}

test("comment counter: comment_processed pruned at the watermark, a redelivery is a duplicate and the count stays exact", async (t) => {
  const { db, ledger, postId } = await fixture(t);
  assert.equal(await commentsWithGap(ledger, postId, 5), 20);
  assert.equal(await watermark(db), 4, "the gap at seq 5 holds the watermark at 4");
  assert.equal(await prune(db, 4), 4);
  const early = await ledger.commentConsumer.applyBatch(await ledger.commentConsumer.fetchRange(0, 1, 4));
  assert.deepEqual([early.applied, early.covered, early.dup], [0, 0, 4]);
  await ledger.commentConsumer.applyBatch(await ledger.commentConsumer.fetchRange(0, 5, 5));
  assert.equal(await watermark(db), 20);
  assert.equal(await prune(db, 20), 16);
  const again = await ledger.commentConsumer.applyBatch(await ledger.commentConsumer.fetchRange(0, 1, 20));
  t.diagnostic(`note redelivery of 20 pruned events: applied=${again.applied} dup=${again.dup}`);
  assert.deepEqual([again.applied, again.covered, again.dup], [0, 0, 20]);
  assert.deepEqual(await readCounter(db.pool, COMMENT_COUNTER, postId, 0), { n: 20, lag: 0, pending: 0, stale: false });
  const audit = await auditCounter(db.pool, COMMENT_COUNTER);
  assert.ok(counterAuditClean(audit), formatCounterAudit("comments", audit));
  assert.ok(counterReadSideClean(await readCounterSide(db.pool, COMMENT_COUNTER)));
});

test("comment counter negative control: pruning above the watermark (past a gap) lets redelivered events count twice, and both audits see it", async (t) => {
  const { db, ledger, postId } = await fixture(t);
  await commentsWithGap(ledger, postId, 5);
  assert.equal(await prune(db, 20), 19, "unsafe: up to the highest processed seq, not the watermark");
  const again = await ledger.commentConsumer.applyBatch(
    (await ledger.commentConsumer.fetchRange(0, 1, 20)).filter((e) => e.seq !== 5),
  );
  assert.equal(again.applied, 15, "the 15 events above the watermark whose keys were pruned are applied again");
  const { n } = await readCounter(db.pool, COMMENT_COUNTER, postId, 0);
  assert.equal(n, (await truth(db, postId)) - 1 + 15, "double counted (the gap event is still pending)");
  const audit = await auditCounter(db.pool, COMMENT_COUNTER);
  t.diagnostic(`note ${formatCounterAudit("comments", audit)}`);
  assert.equal(audit.boundViolations, 1);
  assert.equal(counterReadSideClean(await readCounterSide(db.pool, COMMENT_COUNTER)), false);
});

test("comment rebuild: comments.rebuild.* hook points, only the posts asked for, and an unknown post is a typed error that records no run", async (t) => {
  const { db, ledger, postId } = await fixture(t);
  const other = (await ledger.posts.createPost(acct(2), "PUBLIC", "another post")).postId;
  for (const p of [postId, other]) await ledger.comments.create(acct(3), p, "hi");
  await ledger.commentConsumer.drain();
  await db.pool.query("UPDATE comment_count SET n = n + 2");
  const runs = () => one(db, "SELECT count(*) AS n FROM comment_rebuild_run");

  await assert.rejects(
    ledger.commentRebuild.rebuild({ keys: [postId, "no-such-post"] }),
    (err) =>
      err instanceof UnknownCounterKeysError && err.code === "POST_NOT_FOUND" && err.keys.join() === "no-such-post",
  );
  assert.equal(await runs(), 0);

  const snapshotTaken = new Gate("comments.rebuild.afterSnapshot");
  const installed: unknown[] = [];
  const offSnapshot = ledger.hooks.on("comments.rebuild.afterSnapshot", snapshotTaken.handler);
  const offInstall = ledger.hooks.on("comments.rebuild.beforeCommit", (ctx) => void installed.push(ctx.postId));
  t.after(() => {
    snapshotTaken.release();
    offSnapshot();
    offInstall();
  });
  const rebuilding = ledger.commentRebuild.rebuild({ keys: [postId] });
  assert.deepEqual((await snapshotTaken.waitArrived()).snapshotSeqs, [2]);
  snapshotTaken.release();
  const report = await rebuilding;
  assert.deepEqual(installed, [postId], "the hook context names the key by the spec's keyName");
  assert.equal(report.keysChecked, 1);
  assert.deepEqual(
    report.drifted.map((d) => [d.key, d.oldN, d.newN, d.drift]),
    [[postId, 3, 1, -2]],
  );
  assert.equal((await readCounter(db.pool, COMMENT_COUNTER, other, 0)).n, 3, "the other post was not rebuilt");
  assert.equal(await runs(), 1);
});
