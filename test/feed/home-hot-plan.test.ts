/**
 * The home page of a reader following 20 hot authors (500 posts each) and holding an inbox of 200
 * rows reads at most a page of rows per hot author (author_posts_page's LATERAL with the LIMIT
 * inside) and a page of inbox rows, on the first page and deep in the history. A mutant without
 * the inner LIMIT reads every post of every hot author.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Pool } from "../../src/db/pool.ts";
import { HOME_PAGE_SQL } from "../../src/feed/feed-reads.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { explainAnalyze, rowsRead, rowsReadVia, type PlanNode } from "../support/explain.ts";
import { replaceFunctionText } from "../support/function-mutant.ts";

const HOT_AUTHORS = 20;
const POSTS_EACH = 500;
const INBOX = 200;
const LIMIT = 20;

async function fixture(pool: Pool): Promise<void> {
  const hot = Array.from({ length: HOT_AUTHORS }, (_, i) => `hot${i + 1}`);
  await pool.query("INSERT INTO account (account_id) SELECT unnest($1::text[]) UNION ALL VALUES ('reader'), ('cold')", [
    hot,
  ]);
  await pool.query(
    `INSERT INTO relation (follower, followee, state, version)
     SELECT 'reader', a, 'ACTIVE', 1 FROM unnest($1::text[] || '{cold}') a`,
    [hot],
  );
  await pool.query(
    `INSERT INTO proj_follower (followee, follower, state, version, since)
     SELECT a, 'reader', 'ACTIVE', 1, now() FROM unnest($1::text[] || '{cold}') a`,
    [hot],
  );
  await pool.query("INSERT INTO feed_hot_author (author) SELECT unnest($1::text[])", [hot]);
  const posts = `SELECT a || '-' || i AS id, a AS author, i FROM unnest($1::text[]) a, generate_series(1, ${POSTS_EACH}) i
                 UNION ALL SELECT 'cold-' || i, 'cold', i FROM generate_series(1, ${INBOX}) i`;
  await pool.query(`INSERT INTO item (item_id, kind) SELECT id, 'post' FROM (${posts}) p`, [hot]);
  await pool.query(
    `INSERT INTO post (post_id, author, visibility, body, part, acl_token, created_at)
     SELECT id, author, CASE WHEN i % 4 = 0 THEN 'FOLLOWERS' ELSE 'PUBLIC' END, 'x', 0, 0,
            timestamptz '2026-01-01' - (i * 60 + length(author)) * interval '1 second' FROM (${posts}) p`,
    [hot],
  );
  await pool.query(
    "INSERT INTO feed_inbox (reader, post_id, author, at) SELECT 'reader', post_id, author, created_at FROM post WHERE author = 'cold'",
  );
  await pool.query("VACUUM ANALYZE post, relation, proj_follower, feed_inbox, feed_hot_author");
}

function nodes(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(nodes)];
}

async function readCost(pool: Pool, before: [string, string] | null) {
  const plan = await explainAnalyze(pool, HOME_PAGE_SQL, [
    "reader",
    before?.[0] ?? null,
    before?.[1] ?? null,
    LIMIT + 1,
  ]);
  return {
    viaAuthorIndex: rowsReadVia(plan, "post_author_newest"),
    fromPost: rowsRead(plan, "post"),
    fromInbox: rowsRead(plan, "feed_inbox"),
    seqScans: nodes(plan).filter(
      (n) => n["Node Type"] === "Seq Scan" && ["post", "feed_inbox"].includes(n["Relation Name"] ?? ""),
    ).length,
  };
}

test("a home page of a reader following 20 hot authors reads at most a page per hot author and a page of its inbox, on the first page and deep in the history", async (t) => {
  const db = await createTestDatabase();
  t.after(() => db.close());
  await fixture(db.pool);
  const { rows } = await db.pool.query<{ at: string; id: string }>(
    "SELECT created_at::text AS at, post_id AS id FROM post ORDER BY created_at DESC, post_id DESC OFFSET 4000 LIMIT 1",
  );
  for (const before of [null, [rows[0]!.at, rows[0]!.id] as [string, string]]) {
    const cost = await readCost(db.pool, before);
    const where = before ? "a page 4,000 posts deep" : "the first page";
    assert.equal(cost.seqScans, 0, `${where}: no sequential scan of post or feed_inbox`);
    assert.ok(cost.viaAuthorIndex > 0, `${where}: the merge reads post_author_newest`);
    assert.ok(
      cost.viaAuthorIndex <= HOT_AUTHORS * (LIMIT + 1),
      `${where}: ${cost.viaAuthorIndex} hot posts read, more than ${HOT_AUTHORS} authors x ${LIMIT + 1}`,
    );
    assert.ok(cost.fromInbox <= LIMIT + 1, `${where}: ${cost.fromInbox} inbox rows read`);
    // Beside the hot ranges: the inbox rows' posts and the page's posts, by primary key.
    assert.ok(cost.fromPost <= (HOT_AUTHORS + 2) * (LIMIT + 1), `${where}: ${cost.fromPost} post rows read`);
    t.diagnostic(
      `${where}: ${cost.viaAuthorIndex} hot posts read of ${HOT_AUTHORS * POSTS_EACH}, ${cost.fromPost} post rows in all, ${cost.fromInbox} inbox rows of ${INBOX}`,
    );
  }
  const page = await db.pool.query<{ post_id: string }>(HOME_PAGE_SQL, ["reader", null, null, LIMIT + 1]);
  assert.equal(page.rows.length, LIMIT + 1);
  assert.ok(page.rows.some((r) => r.post_id.startsWith("hot")) && page.rows.some((r) => r.post_id.startsWith("cold")));
});

test("negative control: without the LIMIT inside author_posts_page's LATERAL, the home page reads every post of every hot author", async (t) => {
  const db = await createTestDatabase();
  t.after(() => db.close());
  await fixture(db.pool);
  await replaceFunctionText(db.pool, "author_posts_page(text, text[], timestamptz, text, integer)", [
    ["       ORDER BY q.created_at DESC, q.post_id DESC\n       LIMIT p_limit) p", "       ) p"],
  ]);
  const cost = await readCost(db.pool, null);
  assert.ok(cost.fromPost >= HOT_AUTHORS * POSTS_EACH, `the unbounded variant read ${cost.fromPost} rows`);
});
