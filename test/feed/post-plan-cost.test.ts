/**
 * The post consumer's plan (POST_SOURCE.planSql) of one post event reads the relation rows of
 * that post's author only (its followers, by relation_by_followee), not every follow: a batch
 * costs its posts' followers, not the whole graph. The control is the plan as a plain join of the
 * batch's posts with feed_truth: the truth's first branch (a join) is never flattened into the
 * query, so the post_id and author cannot reach it and it is built whole for every batch (the
 * bench:feed stream at 2,000 accounts took minutes per batch so). Both give the same rows.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { POST_SOURCE } from "../../src/feed/feed-sources.ts";
import { openLedger } from "../../src/ledger.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { explainAnalyze, rowsRead } from "../support/explain.ts";

const ACCOUNTS = 200;
const FOLLOWS_EACH = 20;

/** The plan as it was: the batch's posts joined with feed_truth on (post_id, author). */
const PLAIN_JOIN_PLAN_SQL = `
    WITH ev AS (SELECT DISTINCT o.post_id FROM post_outbox o WHERE o.part = $1 AND o.seq = ANY ($2::bigint[])),
    p AS (SELECT p.post_id, p.author, p.created_at, p.deleted_at IS NULL AS live FROM post p JOIN ev USING (post_id))
    SELECT 'add' AS op, t.reader, t.post_id, t.author
      FROM p JOIN feed_truth t ON t.post_id = p.post_id AND t.author = p.author WHERE p.live
    UNION ALL
    SELECT 'remove', i.reader, i.post_id, i.author FROM p JOIN feed_inbox i ON i.post_id = p.post_id WHERE NOT p.live`;

test("the post consumer's plan of one post reads its author's followers, not every follow; a plain join with feed_truth reads them all", async (t) => {
  const db = await createTestDatabase({ partitions: 2 });
  t.after(() => db.close());
  const ledger = await openLedger(db.pool);
  // ACCOUNTS accounts u001.., each following FOLLOWS_EACH others, with 5 posts each; then one live post.
  await db.pool.query(
    "INSERT INTO account (account_id) SELECT 'u' || lpad(a::text, 3, '0') FROM generate_series(1, $1::int) a",
    [ACCOUNTS],
  );
  const follows = `SELECT 'u' || lpad(f::text, 3, '0') AS follower, 'u' || lpad((1 + (f + k * 7) % $1::int)::text, 3, '0') AS followee
                     FROM generate_series(1, $1::int) f, generate_series(1, ${FOLLOWS_EACH}) k`;
  await db.pool.query(
    `INSERT INTO relation (follower, followee, state, version) SELECT DISTINCT follower, followee, 'ACTIVE', 1 FROM (${follows}) x`,
    [ACCOUNTS],
  );
  await db.pool.query(
    "INSERT INTO proj_follower (followee, follower, state, version, since) SELECT followee, follower, state, version, now() FROM relation",
  );
  const posts = "SELECT account_id || '-' || i AS id, account_id AS author FROM account, generate_series(1, 5) i";
  await db.pool.query(`INSERT INTO item (item_id, kind) SELECT id, 'post' FROM (${posts}) p`);
  await db.pool.query(
    `INSERT INTO post (post_id, author, visibility, body, part, acl_token) SELECT id, author, 'PUBLIC', 'x', 0, 0 FROM (${posts}) p`,
  );
  const post = await ledger.posts.createPost("u007", "PUBLIC", "the post");
  await db.pool.query("VACUUM ANALYZE relation, proj_follower, post, post_outbox");
  const { rows: event } = await db.pool.query<{ part: number; seq: number }>(
    "SELECT part, seq::int AS seq FROM post_outbox WHERE post_id = $1",
    [post.postId],
  );
  const { rows: count } = await db.pool.query<{ all: number; followers: number }>(
    "SELECT count(*)::int AS all, count(*) FILTER (WHERE followee = 'u007')::int AS followers FROM relation",
  );
  const values = [event[0]!.part, [event[0]!.seq]];

  const plan = await explainAnalyze(db.pool, POST_SOURCE.planSql, values);
  const control = await explainAnalyze(db.pool, PLAIN_JOIN_PLAN_SQL, values);
  t.diagnostic(
    `note relation rows read: ${rowsRead(plan, "relation")} (author's followers ${count[0]!.followers}); plain join ${rowsRead(control, "relation")} (all ${count[0]!.all})`,
  );
  assert.ok(count[0]!.followers > 0, "the author has followers");
  assert.ok(
    rowsRead(plan, "relation") <= count[0]!.followers,
    `reads at most the author's ${count[0]!.followers} follows, read ${rowsRead(plan, "relation")}`,
  );
  assert.ok(
    rowsRead(control, "relation") >= count[0]!.all,
    `the control reads every follow (${count[0]!.all}), read ${rowsRead(control, "relation")}`,
  );

  const rowsOf = async (sql: string) =>
    (await db.pool.query<{ r: string }>(`SELECT op || ' ' || reader AS r FROM (${sql}) x ORDER BY 1`, values)).rows.map(
      (x) => x.r,
    );
  const planned = await rowsOf(POST_SOURCE.planSql);
  assert.equal(planned.length, count[0]!.followers + 1, "the author and each follower");
  assert.deepEqual(planned, await rowsOf(PLAIN_JOIN_PLAN_SQL));
});
