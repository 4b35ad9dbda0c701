import { test } from "node:test";
import assert from "node:assert/strict";
import { COMMENT_COUNTER } from "../../src/content/comment-spec.ts";
import { auditCounter, counterAuditClean, formatCounterAudit } from "../../src/counters/counter-audit.ts";
import { readCounter } from "../../src/counters/counter-reads.ts";
import { CounterRebuild } from "../../src/counters/counter-rebuild.ts";
import { openLedger } from "../../src/ledger.ts";
import { acct } from "../relations/fixture.ts";
import { createTestDatabase } from "../support/test-db.ts";

async function fixture(partitions: number) {
  const db = await createTestDatabase({ partitions });
  await db.pool.query(
    "INSERT INTO account (account_id) SELECT 'user-' || lpad(i::text, 4, '0') FROM generate_series(1, 60) AS i",
  );
  const ledger = await openLedger(db.pool);
  const post = await ledger.posts.createPost(acct(1), "PUBLIC", "the post");
  return { db, ledger, post };
}

async function truth(pool: import("../../src/db/pool.ts").Pool, postId: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM counted_comment WHERE post_id = $1",
    [postId],
  );
  return rows[0]!.n;
}

test("comment count: 40 commenters over 4 partitions with interleaved deletes and concurrent consumers converge exactly", async (t) => {
  const { db, ledger, post } = await fixture(4);
  t.after(() => db.close());
  let consuming = true;
  const consumers = [0, 1].map(async () => {
    while (consuming) await ledger.commentConsumer.pollOnce([0, 1, 2, 3], 7);
  });
  await Promise.all(
    Array.from({ length: 40 }, async (_, i) => {
      const author = acct(i + 2);
      const ids: string[] = [];
      for (let k = 0; k < 5; k++)
        ids.push((await ledger.comments.create(author, post.postId, `c${k} by ${author}`)).id);
      // Deletes interleave with other writers' creates; the post author deletes some, twice is a NOOP.
      await ledger.comments.delete(author, ids[i % 5]!);
      if (i % 3 === 0) {
        assert.equal((await ledger.comments.delete(acct(1), ids[(i + 1) % 5]!)).outcome, "CHANGED");
        assert.equal((await ledger.comments.delete(author, ids[(i + 1) % 5]!)).outcome, "NOOP");
      }
    }),
  );
  consuming = false;
  await Promise.all(consumers);
  await ledger.commentConsumer.drain();
  const expected = 40 * 5 - 40 - 14;
  assert.equal(await truth(db.pool, post.postId), expected, "facts");
  const reading = await readCounter(db.pool, COMMENT_COUNTER, post.postId, 0);
  assert.deepEqual(reading, { n: expected, lag: 0, pending: 0, stale: false });
  const audit = await auditCounter(db.pool, COMMENT_COUNTER);
  t.diagnostic(formatCounterAudit("comments", audit));
  assert.ok(counterAuditClean(audit), formatCounterAudit("comments", audit));
  assert.equal(audit.countMismatchKeys, 0);
});

test("comment count: a redelivered or duplicated event changes nothing; a forged one is refused", async (t) => {
  const { db, ledger, post } = await fixture(1);
  t.after(() => db.close());
  const a = await ledger.comments.create(acct(2), post.postId, "one");
  await ledger.comments.create(acct(3), post.postId, "two");
  await ledger.comments.delete(acct(2), a.id);
  const events = await ledger.commentConsumer.fetchRange(0, 1, 10);
  assert.deepEqual(
    events.map((e) => e.delta),
    [1, 1, -1],
  );
  const first = await ledger.commentConsumer.applyBatch([...events, events[0]!]);
  assert.deepEqual(
    { applied: first.applied, dup: first.dup, watermark: first.watermark },
    { applied: 3, dup: 1, watermark: 3 },
  );
  const again = await ledger.commentConsumer.applyBatch(events);
  assert.deepEqual(
    { applied: again.applied, covered: again.covered, dup: again.dup },
    { applied: 0, covered: 0, dup: 3 },
  );
  assert.equal((await readCounter(db.pool, COMMENT_COUNTER, post.postId, 0)).n, 1);
  await assert.rejects(ledger.commentConsumer.applyBatch([{ ...events[0]!, delta: -1 }]), /does not match the outbox/);
  assert.equal((await readCounter(db.pool, COMMENT_COUNTER, post.postId, 0)).n, 1, "the forged event changed nothing");
});

test("comment count: lag and pendingForPost bound the error before the consumer runs", async (t) => {
  const { db, ledger, post } = await fixture(2);
  t.after(() => db.close());
  for (let i = 0; i < 5; i++) await ledger.comments.create(acct(i + 2), post.postId, "x");
  const before = await readCounter(db.pool, COMMENT_COUNTER, post.postId, 2);
  assert.deepEqual(before, { n: 0, lag: 5, pending: 5, stale: true });
  assert.ok(Math.abs(before.n - (await truth(db.pool, post.postId))) <= before.pending);
  await ledger.commentConsumer.drain();
  assert.deepEqual(await readCounter(db.pool, COMMENT_COUNTER, post.postId, 2), {
    n: 5,
    lag: 0,
    pending: 0,
    stale: false,
  });
});

test("comment count: the audit reports a corrupted (even negative) count, never clamped; the rebuild repairs it and records the drift", async (t) => {
  const { db, ledger, post } = await fixture(2);
  t.after(() => db.close());
  for (let i = 0; i < 6; i++) await ledger.comments.create(acct(i + 2), post.postId, "x");
  await ledger.commentConsumer.drain();
  const clean = await ledger.commentRebuild.rebuild();
  assert.equal(clean.totalAbsDrift, 0, "no drift on a correct count");
  await db.pool.query(
    "UPDATE comment_count SET n = n - 10 WHERE post_id = $1 AND part = (SELECT min(part) FROM comment_count WHERE post_id = $1)",
    [post.postId],
  );
  const broken = await auditCounter(db.pool, COMMENT_COUNTER);
  assert.equal(broken.countMismatchKeys, 1);
  assert.equal(broken.boundViolations, 1);
  assert.ok(broken.negativeCounts >= 1, "the negative count is reported");
  assert.equal(
    (await readCounter(db.pool, COMMENT_COUNTER, post.postId, 0)).n,
    -4,
    "the read shows the negative count as it is",
  );
  // Events written after the rebuild's snapshot still count once (base_seq / COVERED).
  await ledger.comments.create(acct(30), post.postId, "late");
  const report = await ledger.commentRebuild.rebuild();
  assert.deepEqual(
    report.drifted.map((d) => [d.key, d.drift]),
    [[post.postId, 10]],
  );
  const { rows } = await db.pool.query<{ drift: number }>("SELECT drift FROM comment_rebuild_drift WHERE run_id = $1", [
    report.runId,
  ]);
  assert.deepEqual(
    rows.map((r) => r.drift),
    [10],
  );
  await ledger.commentConsumer.drain();
  assert.equal((await readCounter(db.pool, COMMENT_COUNTER, post.postId, 0)).n, 7);
  assert.ok(counterAuditClean(await auditCounter(db.pool, COMMENT_COUNTER)));
});

test("comment count, negative control for the one definition: a rebuild that counts deleted comments (Lemmy's bug) drifts, and the audit sees it", async (t) => {
  const { db, ledger, post } = await fixture(1);
  t.after(() => db.close());
  const ids = [];
  for (let i = 0; i < 5; i++) ids.push((await ledger.comments.create(acct(i + 2), post.postId, "x")).id);
  for (const id of ids.slice(0, 2)) await ledger.comments.delete(acct(1), id);
  await ledger.commentConsumer.drain();
  assert.ok(counterAuditClean(await auditCounter(db.pool, COMMENT_COUNTER)));
  const everyRow = {
    ...COMMENT_COUNTER,
    countedSql: "SELECT post_id AS key, part, count(*) AS n FROM comment GROUP BY post_id, part",
  };
  const report = await new CounterRebuild(db.pool, everyRow).rebuild();
  assert.deepEqual(
    report.drifted.map((d) => [d.oldN, d.newN]),
    [[3, 5]],
    "the second definition disagrees by the 2 tombstones",
  );
  const audit = await auditCounter(db.pool, COMMENT_COUNTER);
  assert.equal(audit.countMismatchKeys, 1, formatCounterAudit("comments", audit));
  assert.equal(counterAuditClean(audit), false);
});
