/**
 * The periodic audit's feed section (incrementalAudit, feed_audit_readers) checks the readers the
 * post and relation events since its last clean run touched, plus a rotating sample of readers
 * (feed_reader), not every home timeline. An inbox drift of a touched reader (a post's follower) is
 * found by the next run; the same drift in an untouched reader is found when the sample reaches it,
 * and by the full audit (feed_audit). Its cost follows the change: over 3,000 posts, the invariant
 * for the one reader a follow touched reads that reader's rows of relation, post and feed_inbox,
 * where the full form reads them all (EXPLAIN ANALYZE rows). A cursor below the post or relation
 * outbox's retention floor forces the full form.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { fullAudit } from "../../src/api/routes/admin.ts";
import { incrementalAudit } from "../../src/audit/incremental-audit.ts";
import { FEED_TOUCHED_READERS_SQL } from "../../src/audit/incremental-invariants.ts";
import { auditFeedReaders, FEED_AUDIT_READERS_SQL } from "../../src/feed/feed-audit.ts";
import type { Ledger } from "../../src/ledger.ts";
import { explainAnalyze, rowsRead, type PlanNode } from "../support/explain.ts";
import { feedFixture } from "../feed/fixture.ts";

const MAX = 800;

async function drain(ledger: Ledger): Promise<void> {
  await ledger.likeConsumer.drain();
  await ledger.projector.drain();
  await ledger.commentConsumer.drain();
  await ledger.notifications.drain();
  await ledger.feed.drain();
}

async function world(t: { after: (fn: () => Promise<void>) => void }) {
  const f = await feedFixture(2, ["alice", "bob", "carol", "dave", "erin"]);
  t.after(() => f.close());
  const { ledger } = f;
  await ledger.relations.follow("bob", "alice");
  await ledger.relations.follow("carol", "dave");
  await ledger.relations.follow("erin", "dave");
  await ledger.posts.createPost("alice", "PUBLIC", "a1");
  await ledger.posts.createPost("dave", "PUBLIC", "d1");
  await drain(ledger);
  return f;
}

/** Removes a reader's inbox rows of an author's posts: the drift, made without any event. */
async function dropInboxRows(ledger: Ledger, reader: string, author: string): Promise<void> {
  const { rowCount } = await ledger.pool.query("DELETE FROM feed_inbox WHERE reader = $1 AND author = $2", [
    reader,
    author,
  ]);
  assert.ok(rowCount! > 0, `${reader} had rows of ${author} to lose`);
}

test("a drift in a touched reader's inbox is found by the next run; in an untouched reader's when the sample reaches it", async (t) => {
  const { db, ledger } = await world(t);
  const first = await incrementalAudit(db.pool, { sample: 0 });
  assert.equal(first.scope.feed.mode, "full", "no cursor yet: the full form");
  assert.equal(first.clean, true, JSON.stringify(first));
  const idle = await incrementalAudit(db.pool, { sample: 0 });
  assert.equal(idle.scope.feed.mode, "incremental");
  assert.equal(idle.scope.feed.touched, 0, "nothing changed: no reader touched");
  assert.equal(idle.clean, true, JSON.stringify(idle));

  // alice posts: alice and her follower bob are touched; carol (dave's follower) is not.
  await ledger.posts.createPost("alice", "PUBLIC", "a2");
  await drain(ledger);
  await dropInboxRows(ledger, "bob", "alice");
  await dropInboxRows(ledger, "carol", "dave");

  const next = await incrementalAudit(db.pool, { sample: 0 });
  assert.equal(next.scope.feed.touched, 2, "alice and bob");
  assert.equal(next.feed.missing, 2, `bob's two rows of alice; carol's not seen: ${JSON.stringify(next.feed)}`);
  assert.equal(next.clean, false);
  assert.equal(next.scope.feed.held, true, "the feed found drift: its cursor stays");
  // Negative control: the same invariant with the touched set left empty does not see bob's drift.
  const untouched = await auditFeedReaders(db.pool, [], MAX);
  assert.equal(untouched.missing, 0, JSON.stringify(untouched));

  // Held: bob is reported again (the range did not move on), and the sample reaches carol.
  const sampled = await incrementalAudit(db.pool, { sample: 10 });
  assert.equal(sampled.scope.feed.touched, 2, "the held range touches alice and bob again");
  assert.ok(sampled.scope.feed.sampled >= 4, JSON.stringify(sampled.scope.feed));
  assert.equal(sampled.feed.missing, 3, `bob's two rows and carol's one: ${JSON.stringify(sampled.feed)}`);
  const full = await fullAudit(ledger);
  assert.equal(full.feed.missing, 3);

  // Rebuilt, the feed is clean again and its cursors move to the present.
  await db.pool.query("SELECT feed_install_reader(r, $1) FROM unnest(ARRAY['bob', 'carol']) r", [MAX]);
  const repaired = await incrementalAudit(db.pool, { sample: 0 });
  assert.equal(repaired.clean, true, JSON.stringify(repaired));
  const after = await incrementalAudit(db.pool, { sample: 0 });
  assert.equal(after.scope.feed.touched, 0, "the cursors moved past alice's post");
  assert.deepEqual(after.scope.feed.ranges.posts!.from, after.scope.feed.ranges.posts!.to);
});

test("an event the feed has not applied yet stays in the next run's range", async (t) => {
  const { db, ledger } = await world(t);
  await incrementalAudit(db.pool, { sample: 0 });
  await ledger.posts.createPost("alice", "PUBLIC", "a2");
  await ledger.projector.drain();
  await ledger.notifications.drain();
  const lagging = await incrementalAudit(db.pool, { sample: 0 });
  assert.equal(lagging.scope.feed.touched, 0, "above the feed's watermark: not in this run's range");
  assert.equal(lagging.clean, true, JSON.stringify(lagging));
  await ledger.feed.drain();
  await dropInboxRows(ledger, "bob", "alice");
  const applied = await incrementalAudit(db.pool, { sample: 0 });
  assert.equal(applied.scope.feed.touched, 2, "applied now: alice and bob");
  assert.equal(applied.feed.missing, 2, JSON.stringify(applied.feed));
});

test("a cursor below the post or relation outbox's retention floor forces the feed's full form", async (t) => {
  const { db, ledger } = await world(t);
  for (const [kind, sequence] of [
    ["posts", "post_seq"],
    ["relations", "event_seq"],
  ] as const) {
    await incrementalAudit(db.pool, { sample: 0 });
    assert.equal((await incrementalAudit(db.pool, { sample: 0 })).scope.feed.mode, "incremental");
    if (kind === "posts") await ledger.posts.createPost("dave", "PUBLIC", "d2");
    else await ledger.relations.follow("alice", "dave");
    await drain(ledger);
    // As if a prune passed the audit's cursor: the events it would read next are gone.
    await db.pool.query(
      `INSERT INTO retention_floor (kind, part, pruned_upto) SELECT $1, part, last FROM ${sequence}
       ON CONFLICT (kind, part) DO UPDATE SET pruned_upto = EXCLUDED.pruned_upto`,
      [kind],
    );
    const report = await incrementalAudit(db.pool, { sample: 0 });
    assert.equal(report.scope.feed.mode, "full", kind);
    assert.equal(report.feed.readers, 5, `${kind}: the full form judges every reader`);
  }
});

test("O(change): over 3,000 posts, the invariant for the one reader a follow touched reads that reader's rows; the full form reads them all", async (t) => {
  const { db, ledger } = await feedFixture(2, []);
  t.after(() => db.close());
  const AUTHORS = 40,
    POSTS_EACH = 75,
    READERS = 200;
  await db.pool.query(
    `INSERT INTO account (account_id) SELECT 'a' || lpad(g::text, 3, '0') FROM generate_series(1, $1::int) g
     UNION ALL SELECT 'r' || lpad(g::text, 3, '0') FROM generate_series(1, $2::int) g`,
    [AUTHORS, READERS],
  );
  await db.pool.query(
    `WITH p AS (SELECT 'p' || lpad(g::text, 5, '0') AS post_id, 'a' || lpad((1 + g % $1::int)::text, 3, '0') AS author, g
                  FROM generate_series(1, $1::int * $2::int) g),
     i AS (INSERT INTO item (item_id, kind) SELECT post_id, 'post' FROM p)
     INSERT INTO post (post_id, author, visibility, body, part, acl_token, created_at)
     SELECT post_id, author, 'PUBLIC', 'b', ledger_partition(author, 2), 0, now() - make_interval(secs => g) FROM p`,
    [AUTHORS, POSTS_EACH],
  );
  // Each reader follows 4 authors (rows as the relation writer leaves them; no event: the history).
  await db.pool.query(
    `INSERT INTO relation (follower, followee, state, version)
     SELECT 'r' || lpad(g::text, 3, '0'), 'a' || lpad((1 + (g + k * 7) % $2::int)::text, 3, '0'), 'ACTIVE', 1
       FROM generate_series(1, $1::int) g, generate_series(0, 3) k`,
    [READERS, AUTHORS],
  );
  await ledger.feed.drain();
  const before = (await db.pool.query<{ part: number; last: number }>("SELECT part, last FROM event_seq ORDER BY part"))
    .rows;
  const posts = (await db.pool.query<{ part: number; last: number }>("SELECT part, last FROM post_seq ORDER BY part"))
    .rows;
  // The change: one reader follows one more author.
  await ledger.relations.follow("r001", "a040");
  await ledger.projector.drain();
  await ledger.feed.drain();
  await db.pool.query("ANALYZE");
  const after = (await db.pool.query<{ last: number }>("SELECT last FROM event_seq ORDER BY part")).rows;
  const touched = (
    await db.pool.query<{ reader: string }>(FEED_TOUCHED_READERS_SQL, [
      posts.map((p) => p.part),
      posts.map((p) => p.last),
      posts.map((p) => p.last),
      before.map((p) => p.part),
      before.map((p) => p.last),
      after.map((p) => p.last),
    ])
  ).rows.map((r) => r.reader);
  assert.deepEqual(touched, ["r001"]);
  // The full form, feed_audit, is this statement over every reader (its body passes them as an
  // array built by a subquery, which PostgreSQL does not inline, so EXPLAIN would not show its plan).
  const everyone = (
    await db.pool.query<{ r: string }>(
      `SELECT i.reader AS r FROM feed_inbox i UNION SELECT r.follower FROM relation r WHERE r.state = 'ACTIVE'
       UNION SELECT p.author FROM post p WHERE p.deleted_at IS NULL`,
    )
  ).rows.map((r) => r.r);
  const read = (plan: PlanNode) => ({
    relation: rowsRead(plan, "relation"),
    post: rowsRead(plan, "post"),
    inbox: rowsRead(plan, "feed_inbox"),
  });
  const one = read(await explainAnalyze(db.pool, FEED_AUDIT_READERS_SQL, [touched, MAX]));
  const all = read(await explainAnalyze(db.pool, FEED_AUDIT_READERS_SQL, [everyone, MAX]));
  t.diagnostic(`rows read for 1 touched reader: ${JSON.stringify(one)}; full form: ${JSON.stringify(all)}`);
  // r001 follows 5 authors of 75 posts: 375 truth rows and as many inbox rows, read once or twice.
  assert.ok(one.post <= 5 * POSTS_EACH * 2, `post rows read for one reader: ${one.post}`);
  assert.ok(one.relation <= 5 * 2 + 10, `relation rows read for one reader: ${one.relation}`);
  assert.ok(one.inbox <= 5 * POSTS_EACH * 2, `inbox rows read for one reader: ${one.inbox}`);
  assert.ok(all.post >= AUTHORS * POSTS_EACH, `control: the full form reads every post (${all.post})`);
  assert.ok(all.inbox >= READERS * 4 * POSTS_EACH, `control: the full form reads every inbox (${all.inbox})`);
  // Same answer either way for r001 as the full form gives (clean: no drift anywhere).
  const audit = await auditFeedReaders(db.pool, touched, MAX);
  assert.deepEqual([audit.readers, audit.extra, audit.missing], [1, 0, 0], JSON.stringify(audit));
});
