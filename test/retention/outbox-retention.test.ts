/**
 * Retention of the outboxes (pruneRetained, docs/retention.md): like_outbox, relation_event and
 * comment_outbox lose every event at or below the proven boundary, the dedup keys every key at or
 * below the watermark. The audits give the same figures before and after (the pruned-prefix
 * baseline), a redelivery of every pruned event is `expired` (no count, no error), and later
 * writes, consumers and rebuilds stay exact. Negative controls: dedup keys pruned above the
 * watermark double count; an outbox pruned without its baseline breaks the write-side audit;
 * an outbox pruned above the watermark makes the read's error bound lie.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { fullAudit } from "../../src/api/routes/admin.ts";
import { COMMENT_COUNTER } from "../../src/content/comment-spec.ts";
import { auditCounter } from "../../src/counters/counter-audit.ts";
import type { Pool } from "../../src/db/pool.ts";
import { holdRetention, RetentionHoldBelowFloorError } from "../../src/db/retention-boundary.ts";
import { deleteOutboxPrefix, pruneRetained } from "../../src/retention/retention.ts";
import { withTransaction } from "../../src/db/transaction.ts";
import { openLedger, type Ledger } from "../../src/ledger.ts";
import { readSide, writeSide, writeSideClean } from "../../src/likes/like-audit.ts";
import type { LikeEvent } from "../../src/likes/types.ts";
import { auditRelations, projectionDiff } from "../../src/relations/relation-audit.ts";
import type { RelationEvent } from "../../src/relations/types.ts";
import type { CountEvent } from "../../src/counters/counter-spec.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";

const ITEMS = ["item-a", "item-b", "item-c", "item-d"];
const ACCOUNTS = 16;
const acct = (i: number) => `acct-${String(i).padStart(2, "0")}`;
const NOW = { keepLast: 0, keepSeconds: 0 };

interface Fixture {
  db: TestDatabase;
  ledger: Ledger;
  postId: string;
}

async function setup(partitions: number): Promise<Fixture> {
  const db = await createTestDatabase({ partitions });
  const ledger = await openLedger(db.pool);
  for (const item of ITEMS) await ledger.likes.createItem(item);
  await db.pool.query(
    "INSERT INTO account (account_id) SELECT 'acct-' || lpad(n::text, 2, '0') FROM generate_series(1, $1::int) AS n",
    [ACCOUNTS],
  );
  await ledger.relations.upsertAccount(acct(ACCOUNTS), { private: true });
  const post = await ledger.posts.createPost(acct(1), "PUBLIC", "the post");
  return { db, ledger, postId: post.postId };
}

/** Likes and unlikes, follows, unfollows, a request approved, a block; comments created and deleted. */
async function writeMix({ ledger, postId }: Fixture, round: number): Promise<void> {
  for (let u = 0; u < 24; u++) {
    const user = `user-${u}`;
    const item = ITEMS[(u + round) % ITEMS.length]!;
    await ledger.likes.like(user, item);
    if ((u + round) % 3 === 0) await ledger.likes.unlike(user, item);
  }
  for (let a = 1; a < ACCOUNTS; a++) {
    const b = ((a + round) % (ACCOUNTS - 1)) + 1;
    if (a === b) continue;
    await ledger.relations.follow(acct(a), acct(b));
    if ((a + round) % 4 === 0) await ledger.relations.unfollow(acct(a), acct(b));
  }
  await ledger.relations.follow(acct((round % 10) + 2), acct(ACCOUNTS));
  await ledger.relations.decide(acct(ACCOUNTS), acct((round % 10) + 2), round % 2 === 0);
  if (round === 1) await ledger.relations.block(acct(3), acct(4));
  const created = [];
  for (let a = 2; a < 8; a++) created.push(await ledger.comments.create(acct(a), postId, `round ${round} by ${a}`));
  for (const c of created.filter((_, i) => i % 2 === round % 2)) await ledger.comments.delete(acct(1), c.id);
}

async function drainAll(ledger: Ledger): Promise<void> {
  await ledger.likeConsumer.drain();
  await ledger.projector.drain();
  await ledger.commentConsumer.drain();
  await ledger.notifications.drain();
  await ledger.feed.drain();
}

interface Captured {
  likes: LikeEvent[][];
  relations: RelationEvent[][];
  comments: CountEvent[][];
}

/** Every event still in the outboxes, per partition: what a transport may redeliver later. */
async function capture(ledger: Ledger, partitions: number): Promise<Captured> {
  const out: Captured = { likes: [], relations: [], comments: [] };
  for (let p = 0; p < partitions; p++) {
    out.likes.push(await ledger.likeConsumer.fetchRange(p, 1, Number.MAX_SAFE_INTEGER));
    out.relations.push(await ledger.projector.fetchRange(p, 1, Number.MAX_SAFE_INTEGER));
    out.comments.push(await ledger.commentConsumer.fetchRange(p, 1, Number.MAX_SAFE_INTEGER));
  }
  return out;
}

/** Redelivers every captured event; returns what the consumers did with them. */
async function redeliver(
  ledger: Ledger,
  events: Captured,
): Promise<{ delivered: number; expired: number; counted: number }> {
  const total = { delivered: 0, expired: 0, counted: 0 };
  for (const batch of events.likes.filter((b) => b.length > 0)) {
    const r = await ledger.likeConsumer.applyBatch(batch);
    Object.assign(total, {
      delivered: total.delivered + batch.length,
      expired: total.expired + r.expired,
      counted: total.counted + r.applied + r.covered,
    });
  }
  for (const batch of events.relations.filter((b) => b.length > 0)) {
    const r = await ledger.projector.applyBatch(batch);
    Object.assign(total, {
      delivered: total.delivered + batch.length,
      expired: total.expired + r.expired,
      counted: total.counted + r.applied + r.stale,
    });
  }
  for (const batch of events.comments.filter((b) => b.length > 0)) {
    const r = await ledger.commentConsumer.applyBatch(batch);
    Object.assign(total, {
      delivered: total.delivered + batch.length,
      expired: total.expired + r.expired,
      counted: total.counted + r.applied + r.covered,
    });
  }
  return total;
}

async function scalar(pool: Pool, sql: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(sql);
  return Number(rows[0]!.n);
}

const OUTBOX_ROWS =
  "SELECT (SELECT count(*) FROM like_outbox) + (SELECT count(*) FROM relation_event) + (SELECT count(*) FROM comment_outbox) AS n";
const KEY_ROWS =
  "SELECT (SELECT count(*) FROM processed_event) + (SELECT count(*) FROM proj_seen) + (SELECT count(*) FROM comment_processed) AS n";

for (const partitions of [1, 4]) {
  test(`P=${partitions} prune every outbox at the watermarks: audits give the same figures, every pruned event redelivered is expired (no count, no error), later writes and rebuilds are exact`, async (t) => {
    const fx = await setup(partitions);
    const { db, ledger } = fx;
    t.after(() => db.close());
    await writeMix(fx, 0);
    await writeMix(fx, 1);
    await drainAll(ledger);
    const old = await capture(ledger, partitions);
    const before = await fullAudit(ledger);
    assert.ok(before.clean, JSON.stringify(before));

    const report = await pruneRetained(db.pool, NOW);
    const pruned = Object.fromEntries(report.kinds.map((k) => [k.kind, k.outboxRows]));
    t.diagnostic(
      `note pruned outbox rows ${JSON.stringify(pruned)}; keys ${report.kinds.map((k) => k.keyRows).join("/")}`,
    );
    assert.ok(
      report.kinds.every((k) => k.outboxRows > 0 && k.skipped === undefined),
      JSON.stringify(report),
    );
    assert.equal(await scalar(db.pool, OUTBOX_ROWS), 0, "every event was at or below its watermark");
    assert.equal(await scalar(db.pool, KEY_ROWS), 0);
    const after = await fullAudit(ledger);
    assert.deepEqual(after, before, "the baseline keeps every audit figure");

    const again = await redeliver(ledger, old);
    t.diagnostic(
      `note redelivered ${again.delivered} pruned events: expired=${again.expired} counted=${again.counted}`,
    );
    assert.deepEqual(again, { delivered: again.delivered, expired: again.delivered, counted: 0 });
    assert.deepEqual(await fullAudit(ledger), before, "the redelivery changed nothing");

    await writeMix(fx, 2);
    await drainAll(ledger);
    assert.equal((await ledger.likeRebuild.rebuild()).totalAbsDrift, 0);
    assert.equal((await ledger.commentRebuild.rebuild()).totalAbsDrift, 0);
    // A second prune folds into the existing baseline (pairs and posts pruned twice).
    await pruneRetained(db.pool, NOW);
    await writeMix(fx, 3);
    await drainAll(ledger);
    const end = await fullAudit(ledger);
    assert.ok(end.clean, JSON.stringify(end));
    assert.equal(end.likes.readSide.countMismatchItems, 0);
    assert.equal(end.comments.countMismatchKeys, 0);
    assert.deepEqual(end.relations.projectionDiff, { resurrected: 0, missing: 0, wrongCounts: 0 });
  });
}

test("the boundary: the margin keeps the newest events, a retention_hold caps it, a hold below the floor is refused, a cap that cannot be read keeps the outbox", async (t) => {
  const fx = await setup(1);
  const { db, ledger } = fx;
  t.after(() => db.close());
  await writeMix(fx, 0);
  await drainAll(ledger);
  const last = await scalar(db.pool, "SELECT last AS n FROM like_seq");
  assert.ok(last > 10);

  await pruneRetained(db.pool, { keepLast: 5, keepSeconds: 0 });
  assert.equal(await scalar(db.pool, "SELECT count(*) AS n FROM like_outbox"), 5, "keepLast 5 keeps the newest five");
  assert.equal(await scalar(db.pool, "SELECT min(seq) AS n FROM like_outbox"), last - 4);
  await pruneRetained(db.pool, { keepLast: 0, keepSeconds: 3600 });
  assert.equal(await scalar(db.pool, "SELECT count(*) AS n FROM like_outbox"), 5, "nothing older than an hour");

  await withTransaction(db.pool, (c) => holdRetention(c, "relay-test", "likes", 0, last - 2));
  await pruneRetained(db.pool, NOW);
  assert.equal(await scalar(db.pool, "SELECT min(seq) AS n FROM like_outbox"), last - 1, "the hold caps the prune");
  await assert.rejects(
    withTransaction(db.pool, (c) => holdRetention(c, "late-relay", "likes", 0, 1)),
    (err: unknown) => err instanceof RetentionHoldBelowFloorError && err.code === "RETENTION_HOLD_BELOW_FLOOR",
  );

  await writeMix(fx, 1);
  await drainAll(ledger);
  const relationRows = await scalar(db.pool, "SELECT count(*) AS n FROM relation_event");
  const commentRows = await scalar(db.pool, "SELECT count(*) AS n FROM comment_outbox");
  const report = await pruneRetained(db.pool, {
    ...NOW,
    caps: [
      async (kind) => {
        if (kind === "relations") throw new Error("down");
        return new Map([[0, 0]]);
      },
    ],
  });
  assert.equal(report.kinds.find((k) => k.kind === "relations")!.skipped, "CAP_UNAVAILABLE");
  assert.equal(
    await scalar(db.pool, "SELECT count(*) AS n FROM relation_event"),
    relationRows,
    "an unreadable cap keeps the outbox",
  );
  const comments = report.kinds.find((k) => k.kind === "comments")!;
  assert.equal(comments.partitions[0]!.capped, 0);
  assert.equal(
    await scalar(db.pool, "SELECT count(*) AS n FROM comment_outbox"),
    commentRows,
    "a cap of 0 keeps every new event",
  );
  assert.ok((await fullAudit(ledger)).clean);
});

test("negative control: dedup keys pruned above the watermark let a redelivery count twice; the safe prune deletes none of them", async (t) => {
  const fx = await setup(1);
  const { db, ledger } = fx;
  t.after(() => db.close());
  for (let u = 0; u < 10; u++) await ledger.likes.like(`user-${u}`, "item-a");
  const events = await ledger.likeConsumer.fetchRange(0, 1, 10);
  // Seq 1 is late: 2..10 are processed, the watermark stays at 0.
  const first = await ledger.likeConsumer.applyBatch(events.slice(1));
  assert.deepEqual([first.applied, first.watermark], [9, 0]);

  await pruneRetained(db.pool, NOW);
  assert.equal(
    await scalar(db.pool, "SELECT count(*) AS n FROM processed_event"),
    9,
    "nothing at or below watermark 0",
  );
  const safe = await ledger.likeConsumer.applyBatch(events.slice(1));
  assert.deepEqual([safe.applied, safe.dup], [0, 9]);

  // The unsafe boundary: every key at or below the sequence, above the watermark.
  await db.pool.query("DELETE FROM processed_event pe USING like_seq s WHERE pe.part = s.part AND pe.seq <= s.last");
  const unsafe = await ledger.likeConsumer.applyBatch(events.slice(1));
  await ledger.likeConsumer.drain();
  const read = await readSide(db.pool);
  t.diagnostic(`note unsafe key prune: redelivery applied ${unsafe.applied} again; count off by ${read.maxAbsErr}`);
  assert.equal(unsafe.applied, 9);
  assert.equal(read.maxAbsErr, 9, "the item counts 19 likes for 10 facts");
});

test("negative controls: an outbox pruned without its baseline breaks the write-side audit; pruned above the watermark, the read's error bound lies", async (t) => {
  const fx = await setup(1);
  const { db, ledger } = fx;
  t.after(() => db.close());
  await writeMix(fx, 0);
  await drainAll(ledger);
  const watermark = await scalar(db.pool, "SELECT applied_upto AS n FROM counter_watermark");

  // What a prune without the baseline is: the same rows deleted, nothing recorded.
  await db.pool.query("DELETE FROM like_outbox WHERE seq <= $1", [Math.floor(watermark / 2)]);
  const bare = await writeSide(db.pool);
  t.diagnostic(`note outbox pruned without the baseline: ${JSON.stringify(bare)}`);
  assert.ok(!writeSideClean(bare) && bare.seqGapPartitions === 1 && bare.versionMismatchPairs > 0);

  // Pruned above the watermark: new events, not yet consumed, deleted with their baseline.
  const fx2 = await setup(1);
  t.after(() => fx2.db.close());
  await writeMix(fx2, 0);
  await fx2.ledger.likeConsumer.drain();
  await writeMix(fx2, 1);
  const last = await scalar(fx2.db.pool, "SELECT last AS n FROM like_seq");
  await withTransaction(fx2.db.pool, (c) => deleteOutboxPrefix(c, "likes", 0, last));
  await fx2.ledger.likeConsumer.pollOnce([0]);
  const read = await readSide(fx2.db.pool);
  t.diagnostic(`note outbox pruned above the watermark: ${JSON.stringify(read)}`);
  assert.ok(writeSideClean(await writeSide(fx2.db.pool)), "the baseline keeps the write side whole");
  assert.ok(
    read.boundViolations > 0 && read.lag > 0,
    "the count is off by more than pendingForItem admits, and stays so",
  );
});

test("P=4 concurrent writers, consumers, redeliveries of pruned events and a prune loop converge: counts = facts, audits clean", async (t) => {
  const fx = await setup(4);
  const { db, ledger } = fx;
  t.after(() => db.close());
  await writeMix(fx, 0);
  await drainAll(ledger);
  const old = await capture(ledger, 4);
  let running = true;
  let prunes = 0;
  let expired = 0;
  const loops = [
    (async () => {
      while (running) {
        await ledger.likeConsumer.pollOnce([0, 1, 2, 3], 13);
        await ledger.projector.pollOnce([0, 1, 2, 3], 13);
        await ledger.commentConsumer.pollOnce([0, 1, 2, 3], 13);
      }
    })(),
    (async () => {
      while (running) {
        await pruneRetained(db.pool, { ...NOW, chunk: 7 });
        prunes++;
      }
    })(),
    (async () => {
      while (running) expired += (await redeliver(ledger, old)).expired;
    })(),
  ];
  // Four writers keep going (at least two rounds each, at most 30) until the prune loop has
  // passed over their events several times.
  await Promise.all(
    [1, 2, 3, 4].map(async (w) => {
      for (let round = w; round <= 4 * 30 && (round <= w + 4 || prunes < 6); round += 4) await writeMix(fx, round);
    }),
  );
  running = false;
  await Promise.all(loops);
  await drainAll(ledger);
  await pruneRetained(db.pool, NOW);
  const end = await fullAudit(ledger);
  t.diagnostic(
    `note ${prunes} prune passes, ${expired} expired redeliveries; outbox rows left ${await scalar(db.pool, OUTBOX_ROWS)}`,
  );
  assert.ok(prunes >= 6 && expired > 0);
  assert.ok(end.clean, JSON.stringify(end));
  assert.equal(end.likes.readSide.countMismatchItems, 0);
  assert.equal(end.comments.countMismatchKeys, 0);
  assert.equal((await auditCounter(db.pool, COMMENT_COUNTER)).deltaSumMismatchKeys, 0);
  assert.deepEqual(await projectionDiff(db.pool), { resurrected: 0, missing: 0, wrongCounts: 0 });
  assert.ok(Object.values(await auditRelations(db.pool)).every((n) => n === 0));
  assert.equal(await scalar(db.pool, OUTBOX_ROWS), 0);
});

test("a rebuild whose snapshot is below a retention floor stops before installing (REBUILD_SNAPSHOT_PRUNED)", async (t) => {
  const fx = await setup(2);
  const { db, ledger } = fx;
  t.after(() => db.close());
  await writeMix(fx, 0);
  await drainAll(ledger);
  await pruneRetained(db.pool, NOW);
  // The window the check closes (a whole prune committing between the rebuild's snapshot and its
  // lock) cannot be paused at from outside; a floor above every S_p is what it leaves behind.
  await db.pool.query(
    "UPDATE retention_floor f SET keys_pruned_upto = s.last + 1 FROM like_seq s WHERE f.kind = 'likes' AND f.part = s.part AND s.part = 1",
  );
  await db.pool.query(
    "UPDATE retention_floor f SET pruned_upto = s.last + 1 FROM comment_seq s WHERE f.kind = 'comments' AND f.part = s.part AND s.part = 0",
  );
  const before = await scalar(db.pool, "SELECT sum(n) + sum(base_seq) AS n FROM like_count");
  await assert.rejects(
    ledger.likeRebuild.rebuild(),
    (err: unknown) => (err as { code?: string }).code === "REBUILD_SNAPSHOT_PRUNED",
  );
  await assert.rejects(
    ledger.commentRebuild.rebuild(),
    (err: unknown) => (err as { code?: string }).code === "REBUILD_SNAPSHOT_PRUNED",
  );
  assert.equal(
    await scalar(db.pool, "SELECT sum(n) + sum(base_seq) AS n FROM like_count"),
    before,
    "nothing was installed",
  );
});
