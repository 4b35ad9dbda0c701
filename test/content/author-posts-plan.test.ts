/**
 * The hot-author merge's cost is bounded by the page, not by the authors' histories: the plan of
 * author_posts_page over 20 authors with 500 posts each reads one range of post_author_newest per
 * author, stopped after the page's rows (the LIMIT inside the LATERAL), on the first page and on a
 * deep one (the keyset is an index condition). A mutant without the inner LIMIT reads every post.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Pool } from "../../src/db/pool.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { explainAnalyze, rowsRead, rowsReadVia, type PlanNode } from "../support/explain.ts";
import { replaceFunctionText } from "../support/function-mutant.ts";

const AUTHORS = 20;
const POSTS_EACH = 500;
const LIMIT = 20;
const PAGE = "SELECT post_id FROM author_posts_page($1, $2::text[], $3::timestamptz, $4::text, $5::int)";

async function fixture(pool: Pool): Promise<string[]> {
  const authors = Array.from({ length: AUTHORS }, (_, i) => `hot${i + 1}`);
  await pool.query("INSERT INTO account (account_id) SELECT unnest($1::text[]) UNION ALL SELECT 'reader'", [authors]);
  await pool.query(
    `INSERT INTO relation (follower, followee, state, version) SELECT 'reader', a, 'ACTIVE', 1 FROM unnest($1::text[]) a`,
    [authors],
  );
  await pool.query(
    `INSERT INTO proj_follower (followee, follower, state, version, since) SELECT a, 'reader', 'ACTIVE', 1, now() FROM unnest($1::text[]) a`,
    [authors],
  );
  const posts = `SELECT a || '-' || i AS id, a AS author, i FROM unnest($1::text[]) a, generate_series(1, ${POSTS_EACH}) i`;
  await pool.query(`INSERT INTO item (item_id, kind) SELECT id, 'post' FROM (${posts}) p`, [authors]);
  await pool.query(
    `INSERT INTO post (post_id, author, visibility, body, part, acl_token, created_at)
     SELECT id, author, CASE WHEN i % 4 = 0 THEN 'FOLLOWERS' ELSE 'PUBLIC' END, 'x', 0, 0,
            timestamptz '2026-01-01' - (i * 60 + length(author)) * interval '1 second' FROM (${posts}) p`,
    [authors],
  );
  await pool.query("VACUUM ANALYZE post, relation, proj_follower");
  return authors;
}

function nodes(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(nodes)];
}

async function readCost(pool: Pool, authors: string[], before: [string, string] | null) {
  const plan = await explainAnalyze(pool, PAGE, ["reader", authors, before?.[0] ?? null, before?.[1] ?? null, LIMIT]);
  return {
    viaIndex: rowsReadVia(plan, "post_author_newest"),
    fromPost: rowsRead(plan, "post"),
    seqScans: nodes(plan).filter((n) => n["Node Type"] === "Seq Scan" && n["Relation Name"] === "post").length,
  };
}

test("author_posts_page over 20 authors reads at most page-size rows per author through post_author_newest, on the first page and deep in the history", async (t) => {
  const db = await createTestDatabase();
  t.after(() => db.close());
  const authors = await fixture(db.pool);
  const { rows } = await db.pool.query<{ at: string; id: string }>(
    "SELECT created_at::text AS at, post_id AS id FROM post ORDER BY created_at DESC, post_id DESC OFFSET 4000 LIMIT 1",
  );
  for (const before of [null, [rows[0]!.at, rows[0]!.id] as [string, string]]) {
    const cost = await readCost(db.pool, authors, before);
    const where = before ? "a deep page" : "the first page";
    assert.equal(cost.seqScans, 0, `${where}: no sequential scan of post`);
    assert.ok(cost.viaIndex > 0, `${where}: the page reads post_author_newest`);
    assert.ok(
      cost.fromPost <= AUTHORS * LIMIT,
      `${where}: ${cost.fromPost} rows read, more than ${AUTHORS} authors x ${LIMIT}`,
    );
    t.diagnostic(`${where}: ${cost.fromPost} post rows read of ${AUTHORS * POSTS_EACH}`);
  }
  const page = await db.pool.query<{ post_id: string }>(PAGE, ["reader", authors, null, null, LIMIT]);
  assert.equal(page.rows.length, LIMIT);
});

test("negative control: without the LIMIT inside the LATERAL, the merge reads every post of every author", async (t) => {
  const db = await createTestDatabase();
  t.after(() => db.close());
  const authors = await fixture(db.pool);
  await replaceFunctionText(db.pool, "author_posts_page(text, text[], timestamptz, text, integer)", [
    ["       ORDER BY q.created_at DESC, q.post_id DESC\n       LIMIT p_limit) p", "       ) p"],
  ]);
  const cost = await readCost(db.pool, authors, null);
  assert.ok(cost.fromPost >= AUTHORS * POSTS_EACH, `the unbounded variant read ${cost.fromPost} rows`);
});
