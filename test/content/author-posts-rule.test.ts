/**
 * author_posts_page writes post_readable's rule out (so the checks of a reader and an author run
 * once per author, not once per post): on a fixture with every case of the rule (each visibility,
 * a token below and above the projection's watermark, a projection that still has an unfollow
 * to apply and one that has not seen a follow yet, blocks either way, a pending request, a
 * deleted post, the author, no token), the posts it returns are exactly those post_readable
 * allows in the default read mode. Mutants that drop a branch of the rule fail the comparison.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Pool } from "../../src/db/pool.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { replaceFunctionText } from "../support/function-mutant.ts";
import { RULE_CASE_READERS, insertReadRuleCases } from "../support/read-rule-cases.ts";

const SIGNATURE = "author_posts_page(text, text[], timestamptz, text, integer)";
const READERS = ["au", ...RULE_CASE_READERS, null] as const;

/** The expected pages, written by hand (they pin the fixture: every branch is reached). */
const EXPECTED: Record<string, string[]> = {
  au: ["pub-new", "fol-new", "self-new", "self-old", "fol-old", "pub-old"],
  fol: ["pub-new", "fol-new", "fol-old", "pub-old"],
  pend: ["pub-new", "pub-old"],
  gone: ["pub-new", "pub-old"],
  blocked: [],
  blocker: [],
  stranger: ["pub-new", "pub-old"],
  // Unfollowed in the truth, still ACTIVE in the projection: the old post's token is applied (projection), the new one's is not (truth).
  lagging: ["pub-new", "fol-old", "pub-old"],
  // Followed in the truth, not yet in the projection: the converse.
  unseen: ["pub-new", "fol-new", "pub-old"],
  null: ["pub-new", "pub-old"],
};

/** For each reader: [the function's page, post_readable's verdict over the same posts]. */
async function compare(pool: Pool): Promise<Map<string, [string[], string[]]>> {
  const out = new Map<string, [string[], string[]]>();
  for (const reader of READERS) {
    const page = await pool.query<{ post_id: string }>(
      `SELECT post_id FROM ${SIGNATURE.split("(")[0]}($1, ARRAY['au'], NULL, NULL, 200)`,
      [reader],
    );
    const rule = await pool.query<{ post_id: string }>(
      `SELECT post_id FROM post WHERE author = 'au' AND deleted_at IS NULL
          AND post_readable($1, author, visibility, part, acl_token, 'CONTENT_TOKEN')
        ORDER BY created_at DESC, post_id DESC`,
      [reader],
    );
    out.set(String(reader), [page.rows.map((r) => r.post_id), rule.rows.map((r) => r.post_id)]);
  }
  return out;
}

test("author_posts_page returns exactly the posts post_readable allows (CONTENT_TOKEN), for every case of the rule", async (t) => {
  const db = await createTestDatabase();
  t.after(() => db.close());
  await insertReadRuleCases(db.pool);
  for (const [reader, [page, rule]] of await compare(db.pool)) {
    assert.deepEqual(page, rule, `reader ${reader}: the page differs from post_readable`);
    assert.deepEqual(page, EXPECTED[reader], `reader ${reader}: the fixture reaches its case`);
  }
});

test("negative controls: author_posts_page without the block check, or reading the projection whatever the token, differs from post_readable", async (t) => {
  const db = await createTestDatabase();
  t.after(() => db.close());
  await insertReadRuleCases(db.pool);
  const differing = async () =>
    [...(await compare(db.pool))].filter(([, [page, rule]]) => page.join() !== rule.join()).map(([r]) => r);
  const define = async () =>
    (await db.pool.query<{ def: string }>("SELECT pg_get_functiondef($1::regprocedure) AS def", [SIGNATURE])).rows[0]!
      .def;
  const production = await define();

  await replaceFunctionText(db.pool, SIGNATURE, [["THEN p_reader IS NULL OR NOT EXISTS (", "THEN true OR EXISTS ("]]);
  assert.deepEqual(
    await differing(),
    ["blocked", "blocker"],
    "without the block check, blocked readers see PUBLIC posts",
  );

  await db.pool.query(production);
  await replaceFunctionText(db.pool, SIGNATURE, [
    ["WHEN (SELECT w.applied_upto FROM proj_watermark w WHERE w.part = q.part) >= q.acl_token THEN", "WHEN true THEN"],
  ]);
  assert.deepEqual(
    await differing(),
    ["lagging", "unseen"],
    "the projection alone: an unfollow it has not applied leaks a new post",
  );
});
