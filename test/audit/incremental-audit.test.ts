/**
 * The periodic audit (incrementalAudit) checks the targets changed since its last run
 * and a rotating sample of the others. A drift injected by a direct UPDATE into a target that
 * changed since the last run is found by the next run; the same drift in an untouched target is
 * not (by design: nothing about that target moved), but the sample finds it when its turn comes,
 * and so does the full audit. O(change): the incremental statement reads the outbox by a range
 * of its primary key, so over a history of 5k like events it reads a handful of outbox rows
 * where the full form (the control) reads them all (EXPLAIN ANALYZE, rows read from like_outbox).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { fullAudit } from "../../src/api/routes/admin.ts";
import { incrementalAudit } from "../../src/audit/incremental-audit.ts";
import { LIKE_WRITE_SIDE_INCREMENTAL_SQL } from "../../src/audit/incremental-invariants.ts";
import { WRITE_SIDE_SQL } from "../../src/likes/like-audit.ts";
import { openLedger, type Ledger } from "../../src/ledger.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { explainAnalyze, rowsRead } from "../support/explain.ts";

async function drain(ledger: Ledger): Promise<void> {
  await ledger.likeConsumer.drain();
  await ledger.projector.drain();
  await ledger.commentConsumer.drain();
  await ledger.notifications.drain();
}

async function world(t: { after: (fn: () => Promise<void>) => void }) {
  const db = await createTestDatabase({ partitions: 2 });
  t.after(() => db.close());
  const ledger = await openLedger(db.pool);
  for (const item of ["item-a", "item-b", "item-c"]) await ledger.likes.createItem(item);
  for (const a of ["alice", "bob", "carol", "dave"]) await ledger.relations.upsertAccount(a);
  for (const item of ["item-a", "item-b", "item-c"]) await ledger.likes.like("u1", item);
  await ledger.relations.follow("bob", "alice");
  await ledger.relations.follow("carol", "dave");
  await drain(ledger);
  return { db, ledger };
}

test("a drift in a target changed since the last run is found by the next incremental run; in an untouched one only by the sample or the full audit", async (t) => {
  const { db, ledger } = await world(t);
  const first = await incrementalAudit(db.pool, { sample: 0 });
  assert.equal(first.clean, true, JSON.stringify(first));
  assert.deepEqual(
    [first.scope.likes.mode, first.scope.relations.mode, first.scope.comments.mode, first.scope.notifications.mode],
    ["full", "full", "full", "full"],
    "no cursor yet: the full forms",
  );
  const idle = await incrementalAudit(db.pool, { sample: 0 });
  assert.equal(idle.clean, true, JSON.stringify(idle));
  assert.deepEqual(
    Object.values(idle.scope).map((s) => s.mode),
    ["incremental", "incremental", "incremental", "incremental", "incremental", "incremental"],
  );
  assert.deepEqual(
    idle.scope.likes.ranges.likes!.from,
    idle.scope.likes.ranges.likes!.to,
    "nothing changed: empty ranges",
  );

  // item-a and alice change; item-b and dave do not. The same drift goes into both of each pair.
  await ledger.likes.like("u2", "item-a");
  await ledger.relations.follow("dave", "alice");
  await drain(ledger);
  await db.pool.query(
    "UPDATE like_count SET n = n + 5 WHERE (item_id, part) IN (SELECT item_id, min(part) FROM like_count WHERE item_id IN ('item-a', 'item-b') GROUP BY 1)",
  );
  await db.pool.query("UPDATE proj_count SET n = n + 1 WHERE followee IN ('alice', 'dave')");

  const next = await incrementalAudit(db.pool, { sample: 0 });
  assert.equal(next.clean, false);
  assert.equal(next.likes.readSide.exactViolations, 1, "item-a's drift; item-b was not touched, so not audited");
  assert.equal(next.likes.readSide.maxAbsErr, 5);
  assert.equal(next.relations.projectionDiff?.wrongCounts, 1, "alice's; dave's is not seen");
  assert.deepEqual(
    [next.scope.likes.held, next.scope.relations.held, next.scope.comments.held],
    [true, true, false],
    "the sections that found drift keep their cursors",
  );

  // Held: the next run reports item-a again (the range did not move on), and the sample reaches item-b.
  const sampled = await incrementalAudit(db.pool, { sample: 10 });
  assert.equal(sampled.likes.readSide.exactViolations, 2, "item-a (range held) and item-b (sampled)");
  assert.equal(sampled.relations.projectionDiff?.wrongCounts, 2, "alice and dave (sampled)");
  assert.ok(sampled.scope.likes.sampled >= 3, JSON.stringify(sampled.scope.likes));
  const full = await fullAudit(ledger);
  assert.equal(full.likes.readSide.exactViolations, 2);
  assert.equal(full.relations.projectionDiff?.wrongCounts, 2);

  // Repaired, the sections are clean again and their cursors move to the present.
  await db.pool.query(
    "UPDATE like_count SET n = n - 5 WHERE (item_id, part) IN (SELECT item_id, min(part) FROM like_count WHERE item_id IN ('item-a', 'item-b') GROUP BY 1)",
  );
  await db.pool.query("UPDATE proj_count SET n = n - 1 WHERE followee IN ('alice', 'dave')");
  const repaired = await incrementalAudit(db.pool, { sample: 0 });
  assert.equal(repaired.clean, true, JSON.stringify(repaired));
  const after = await incrementalAudit(db.pool, { sample: 0 });
  assert.deepEqual(after.scope.likes.ranges.likes!.from, after.scope.likes.ranges.likes!.to);
});

test("a cursor below the retention floor falls back to the full form for that section", async (t) => {
  const { db, ledger } = await world(t);
  await incrementalAudit(db.pool, { sample: 0 });
  await ledger.likes.like("u3", "item-c");
  await drain(ledger);
  // As if a prune passed the audit's cursor: the events it would read next are gone.
  await db.pool.query(
    "INSERT INTO retention_floor (kind, part, pruned_upto) SELECT 'likes', part, last FROM like_seq ON CONFLICT (kind, part) DO UPDATE SET pruned_upto = EXCLUDED.pruned_upto",
  );
  const report = await incrementalAudit(db.pool, { sample: 0 });
  assert.equal(report.scope.likes.mode, "full");
  assert.equal(report.scope.relations.mode, "incremental");
});

test("O(change): over 5k like events the incremental write-side statement reads the range's outbox rows, the full form (control) reads all of them", async (t) => {
  const { db, ledger } = await world(t);
  await db.pool.query("INSERT INTO item (item_id, kind) SELECT 'h-' || i, 'plain' FROM generate_series(1, 5000) i");
  await db.pool.query(
    "SELECT count(*) FROM generate_series(1, 5000) i, LATERAL like_set('u-' || (i % 50), 'h-' || i, true, ledger_partition('u-' || (i % 50), 2))",
  );
  await drain(ledger);
  await incrementalAudit(db.pool, { sample: 0 }); // the cursors at the present
  await ledger.likes.like("u9", "item-b");
  await db.pool.query("ANALYZE");
  const { rows } = await db.pool.query<{ section: string; part: number; audited_upto: number }>(
    "SELECT * FROM audit_cursor WHERE section = 'likes' ORDER BY part",
  );
  const last = (await db.pool.query<{ part: number; last: number }>("SELECT part, last FROM like_seq ORDER BY part"))
    .rows;
  const values = [last.map((p) => p.part), rows.map((c) => c.audited_upto), last.map((p) => p.last), [], null]; // $5 null: no key audited by induction
  const incremental = rowsRead(await explainAnalyze(db.pool, LIKE_WRITE_SIDE_INCREMENTAL_SQL, values), "like_outbox");
  const full = rowsRead(await explainAnalyze(db.pool, WRITE_SIDE_SQL, []), "like_outbox");
  t.diagnostic(`like_outbox rows read: incremental ${incremental}, full ${full}`);
  assert.ok(incremental <= 10, `the incremental form read ${incremental} outbox rows for one new event`);
  assert.ok(full >= 5000, `control: the full form reads the history (${full})`);
});

test("comments and notifications: a drift in a changed post's count and a changed pair's notification is found; the same in untouched ones waits for the full audit", async (t) => {
  const { db, ledger } = await world(t);
  const touched = (await ledger.posts.createPost("alice", "PUBLIC", "touched")).postId;
  const untouched = (await ledger.posts.createPost("alice", "PUBLIC", "untouched")).postId;
  await ledger.comments.create("bob", touched, "one");
  await ledger.comments.create("bob", untouched, "one");
  await drain(ledger);
  assert.equal((await incrementalAudit(db.pool, { sample: 0 })).clean, true);
  await ledger.comments.create("carol", touched, "two");
  await ledger.likes.like("carol", touched);
  await ledger.likes.like("carol", untouched);
  await drain(ledger);
  assert.equal((await incrementalAudit(db.pool, { sample: 0 })).clean, true, "the changes alone are clean");
  await ledger.comments.create("dave", touched, "three");
  await ledger.likes.like("dave", touched);
  await drain(ledger);
  await db.pool.query(
    "UPDATE comment_count SET n = n + 2 WHERE (post_id, part) IN (SELECT post_id, min(part) FROM comment_count WHERE post_id IN ($1, $2) GROUP BY 1)",
    [touched, untouched],
  );
  // A notification's type rewritten (the recipient is part of a row's key, so a rewritten one is an extra and a
  // missing row): dave's like of the touched post (changed) and carol's like of the untouched one.
  await db.pool.query(
    "UPDATE notification SET type = 'mention' WHERE source = 'like' AND ((actor = 'dave' AND subject = $1) OR (actor = 'carol' AND subject = $2))",
    [touched, untouched],
  );
  const report = await incrementalAudit(db.pool, { sample: 0 });
  assert.equal(report.comments.countMismatchKeys, 1, JSON.stringify(report.comments));
  assert.equal(report.notifications.differing, 1, JSON.stringify(report.notifications));
  const full = await fullAudit(ledger);
  assert.equal(full.comments.countMismatchKeys, 2);
  assert.equal(full.notifications.differing, 2);
});
