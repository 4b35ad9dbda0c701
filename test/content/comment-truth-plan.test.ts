/**
 * The truth of one post's comment count (counted_comment by post_id, read by the Redis layer's
 * reconciliation) is an index read of that post's comments, not a scan of every comment
 * (the index comment_by_post). The planner is told to avoid sequential scans so that a small test table
 * shows the plan a large one gets; without the index it has no choice but to scan (the control).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { COMMENT_COUNTS } from "../../src/cache/counter-kinds.ts";
import type { PoolClient } from "../../src/db/pool.ts";
import { openLedger } from "../../src/ledger.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { planNodes, type PlanNode } from "../support/explain.ts";

async function commentReads(client: PoolClient, postId: string): Promise<string[]> {
  const { rows } = await client.query<{ "QUERY PLAN": [{ Plan: PlanNode }] }>(
    `EXPLAIN (FORMAT JSON) ${COMMENT_COUNTS.truthSql}`,
    [[postId], null],
  );
  return planNodes(rows[0]!["QUERY PLAN"][0].Plan)
    .filter((n) => n["Relation Name"] === "comment")
    .map((n) => `${n["Node Type"]}${n["Index Name"] ? ` using ${n["Index Name"]}` : ""}`);
}

test("the comment-count truth of one post reads comment through comment_by_post; without the index it scans the table", async (t) => {
  const db = await createTestDatabase({ partitions: 2 });
  t.after(() => db.close());
  const ledger = await openLedger(db.pool);
  await db.pool.query("INSERT INTO account (account_id) VALUES ('alice'), ('bob')");
  const post = await ledger.posts.createPost("alice", "PUBLIC", "p");
  const first = await ledger.comments.create("bob", post.postId, "top");
  await ledger.comments.create("alice", post.postId, "reply", { parentId: first.id });
  const other = await ledger.posts.createPost("alice", "PUBLIC", "q");
  for (let i = 0; i < 20; i++) await ledger.comments.create("bob", other.postId, `c${i}`);
  await db.pool.query("ANALYZE comment");

  const client = await db.pool.connect();
  try {
    await client.query("BEGIN");
    await client.query("SET LOCAL enable_seqscan = off");
    const withIndex = await commentReads(client, post.postId);
    t.diagnostic(`note with comment_by_post: ${withIndex.join(", ")}`);
    assert.ok(withIndex.length > 0, "the truth reads comment");
    assert.ok(
      withIndex.every((how) => !how.startsWith("Seq Scan")),
      `no Seq Scan on comment: ${withIndex.join(", ")}`,
    );
    assert.ok(
      withIndex.some((how) => how.includes("comment_by_post")),
      `read through comment_by_post: ${withIndex.join(", ")}`,
    );

    await client.query("DROP INDEX comment_by_post"); // rolled back below
    const without = await commentReads(client, post.postId);
    t.diagnostic(`note without it: ${without.join(", ")}`);
    assert.ok(
      without.some((how) => how.startsWith("Seq Scan")),
      `the control scans comment: ${without.join(", ")}`,
    );
  } finally {
    await client.query("ROLLBACK");
    client.release();
  }
  const { rows } = await db.pool.query("SELECT 1 FROM pg_indexes WHERE indexname = 'comment_by_post'");
  assert.equal(rows.length, 1, "the index is back after the rollback");
});
