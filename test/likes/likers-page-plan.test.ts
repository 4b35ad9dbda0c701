/**
 * A deep page of an item's likers costs its page, not its depth. The likers
 * list pages on (changed_at DESC, user_id ASC); the cursor's time must bound the index scan of
 * like_fact_likers. The scale bench found the earlier form (one OR of `<` and `=`) applied as a
 * filter: a page at depth 50,000 read 50,001 rows. Here EXPLAIN ANALYZE of the statement
 * listLikers sends, at a cursor 2,500 rows deep (with ties on one instant), reads about a page;
 * the old form, the negative control, reads the whole depth. The pages themselves are compared
 * with an independent ORDER BY over all likers.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { LIKERS_PAGE_SQL, listLikers } from "../../src/likes/like-reads.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";

const LIKERS = 3000;
const PAGE = 20;

/** The earlier form: the bound inside an OR, which the planner applies as a filter. */
const OLD_LIKERS_PAGE_SQL = LIKERS_PAGE_SQL.replace(
  /AND \(\$2::timestamptz IS NULL OR \(changed_at <= \$2::timestamptz AND \(changed_at < \$2::timestamptz OR user_id > \$3::text\)\)\)/,
  "AND ($2::timestamptz IS NULL OR changed_at < $2::timestamptz OR (changed_at = $2::timestamptz AND user_id > $3::text))",
);

/** Accounts that block the viewer, among the likers around the deep page: a page of the viewer's skips them. */
const BLOCKERS = Array.from({ length: 24 }, (_, i) => `u${String(560 + 3 * i).padStart(5, "0")}`);

let db: TestDatabase;

before(async () => {
  db = await createTestDatabase();
  await db.pool.query("INSERT INTO item (item_id, kind) VALUES ('hot', 'plain'), ('cold', 'plain')");
  // Ten likers share each instant, so the cursor's own instant has rows on both sides of it.
  await db.pool.query(
    `INSERT INTO like_fact (user_id, item_id, liked, version, changed_at)
     SELECT 'u' || lpad(g::text, 5, '0'), 'hot', true, 1, timestamptz '2026-01-01' + (g / 10) * interval '1 second'
       FROM generate_series(1, $1::int) g
     UNION ALL
     SELECT 'u' || lpad(g::text, 5, '0'), 'cold', true, 1, timestamptz '2026-01-01' FROM generate_series(1, 50) g`,
    [LIKERS],
  );
  await db.pool.query("INSERT INTO account (account_id) SELECT unnest($1::text[]) UNION ALL SELECT 'viewer'", [
    BLOCKERS,
  ]);
  await db.pool.query("INSERT INTO block (blocker, blocked) SELECT unnest($1::text[]), 'viewer'", [BLOCKERS]);
  await db.pool.query("ANALYZE like_fact");
  await db.pool.query("ANALYZE block");
});

after(async () => {
  await db?.close();
});

interface PlanNode {
  "Actual Rows"?: number;
  "Rows Removed by Filter"?: number;
  "Index Name"?: string;
  Plans?: PlanNode[];
}

/** Rows the scan of like_fact read: those it returned plus those its filter removed. */
function rowsRead(node: PlanNode): number {
  const own =
    node["Index Name"] !== undefined || node["Rows Removed by Filter"] !== undefined
      ? (node["Actual Rows"] ?? 0) + (node["Rows Removed by Filter"] ?? 0)
      : 0;
  return own + (node.Plans ?? []).reduce((sum, child) => sum + rowsRead(child), 0);
}

async function pageAtDepth(
  depth: number,
  viewer: string | null = null,
): Promise<{ cursor: string; expected: string[] }> {
  const all = (
    await db.pool.query<{ user_id: string }>(
      "SELECT user_id FROM like_fact WHERE item_id = 'hot' AND liked ORDER BY changed_at DESC, user_id ASC",
    )
  ).rows
    .map((r) => r.user_id)
    .filter((id) => viewer === null || !BLOCKERS.includes(id));
  let cursor: string | undefined;
  let seen = 0;
  while (seen < depth) {
    const page = await listLikers(db.pool, "hot", { limit: 200, viewer, ...(cursor ? { cursor } : {}) });
    seen += page.likers.length;
    cursor = page.nextCursor!;
  }
  return { cursor: cursor!, expected: all.slice(seen, seen + PAGE) };
}

async function explainRowsRead(sql: string, cursor: string, viewer: string | null = null): Promise<number> {
  const [at, id] = JSON.parse(Buffer.from(cursor, "base64url").toString()) as [string, string];
  const { rows } = await db.pool.query<{ "QUERY PLAN": { Plan: PlanNode }[] }>(
    `EXPLAIN (ANALYZE, FORMAT JSON) ${sql}`,
    ["hot", at, id, PAGE + 1, viewer],
  );
  return rowsRead(rows[0]!["QUERY PLAN"][0]!.Plan);
}

test("a likers page 2,400 rows deep reads about one page of like_fact_likers, and is the right page", async () => {
  const { cursor, expected } = await pageAtDepth(2400);
  const page = await listLikers(db.pool, "hot", { limit: PAGE, cursor });
  assert.deepEqual(
    page.likers.map((l) => l.userId),
    expected,
  );
  const read = await explainRowsRead(LIKERS_PAGE_SQL, cursor);
  assert.ok(
    read <= PAGE + 1 + 10,
    `the page read ${read} rows; a page is ${PAGE + 1}, plus at most the cursor instant's ties`,
  );
});

test("a viewer's deep likers page leaves out the accounts that block them, is full, and reads about a page plus those", async () => {
  const { cursor, expected } = await pageAtDepth(2400, "viewer");
  const page = await listLikers(db.pool, "hot", { limit: PAGE, cursor, viewer: "viewer" });
  assert.deepEqual(
    page.likers.map((l) => l.userId),
    expected,
  );
  assert.equal(page.likers.length, PAGE);
  const skipped = BLOCKERS.length;
  const read = await explainRowsRead(LIKERS_PAGE_SQL, cursor, "viewer");
  assert.ok(read <= PAGE + 1 + 10 + skipped + 2 * (PAGE + 1 + skipped), `the page read ${read} rows`);
});

test("control: the bound inside one OR is a filter, and the same page reads the whole depth", async () => {
  assert.notEqual(OLD_LIKERS_PAGE_SQL, LIKERS_PAGE_SQL, "the control's rewrite must apply");
  const { cursor } = await pageAtDepth(2400);
  const read = await explainRowsRead(OLD_LIKERS_PAGE_SQL, cursor);
  assert.ok(read >= 2400, `the old form read ${read} rows at depth 2400`);
});
