/**
 * The home page writes the inbox's read-time rule out (INBOX_RULE_SQL, feed_entry_visible written
 * out so no function is started per inbox row): on a fixture with every case of the rule (each
 * visibility, a token below and above the projection's watermark, a projection that still has an
 * unfollow to apply and one that has not seen a follow yet, blocks either way with and without a
 * follow, a pending request, a deleted post, the author, an account followed by nobody), the
 * inbox rows the page shows are exactly those feed_entry_visible allows, which is: live, and the
 * reader's own post, or the reader follows the author now (the relation table) and post_readable
 * allows it in the default read mode (CONTENT_TOKEN). Mutants that drop a branch of the rule fail
 * the comparison.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Pool } from "../../src/db/pool.ts";
import { HOME_PAGE_SQL, INBOX_RULE_SQL } from "../../src/feed/feed-reads.ts";
import { FOLLOW_AND_BLOCK_READERS, RULE_CASE_READERS, insertReadRuleCases } from "../support/read-rule-cases.ts";
import { createTestDatabase } from "../support/test-db.ts";

// In the order the negative controls' expectations list them.
const READERS = [
  "au",
  ...RULE_CASE_READERS.slice(0, 5),
  ...FOLLOW_AND_BLOCK_READERS,
  ...RULE_CASE_READERS.slice(5),
] as const;

/** The expected pages, written by hand (they pin the fixture: every branch is reached). */
const EXPECTED: Record<string, string[]> = {
  au: ["pub-new", "fol-new", "self-new", "self-old", "fol-old", "pub-old"],
  fol: ["pub-new", "fol-new", "fol-old", "pub-old"],
  // Not following now: nothing, whatever the inbox holds.
  pend: [],
  gone: [],
  blocked: [],
  blocker: [],
  stranger: [],
  // Unfollowed in the truth, still ACTIVE in the projection: not followed now.
  lagging: [],
  // A follow and a block together (a state the writes never leave; the rule must still hide PUBLIC posts): the projection still shows the follow.
  blockedfol: ["fol-new", "fol-old"],
  blockerfol: ["fol-new", "fol-old"],
  // Followed in the truth, not yet in the projection: the old post's token is applied (projection), the new one's is not (truth).
  unseen: ["pub-new", "fol-new", "pub-old"],
};

async function fixture(pool: Pool): Promise<void> {
  await insertReadRuleCases(pool, { followAndBlock: true });
  // Every reader's inbox holds every post, deleted and SELF included: the inbox is only a candidate.
  await pool.query("INSERT INTO feed_reader (reader) SELECT unnest($1::text[])", [READERS]);
  await pool.query(
    `INSERT INTO feed_inbox (reader, post_id, author, at)
     SELECT r, p.post_id, p.author, p.created_at FROM unnest($1::text[]) r, post p`,
    [READERS],
  );
}

/** For each reader: [the page, feed_entry_visible's verdict, post_readable's (with the follow-now check)] over the inbox. */
async function compare(pool: Pool, pageSql: string): Promise<Map<string, [string[], string[], string[]]>> {
  const out = new Map<string, [string[], string[], string[]]>();
  for (const reader of READERS) {
    const page = await pool.query<{ post_id: string }>(pageSql, [reader, null, null, 200]);
    const entry = await pool.query<{ post_id: string }>(
      `SELECT p.post_id FROM feed_inbox i JOIN post p USING (post_id) WHERE i.reader = $1
          AND feed_entry_visible($1, p.author, p.visibility, p.part, p.acl_token, p.deleted_at)
        ORDER BY p.created_at DESC, p.post_id DESC`,
      [reader],
    );
    const readable = await pool.query<{ post_id: string }>(
      `SELECT p.post_id FROM feed_inbox i JOIN post p USING (post_id) WHERE i.reader = $1 AND p.deleted_at IS NULL
          AND ($1 = p.author OR EXISTS (SELECT 1 FROM relation r WHERE r.follower = $1 AND r.followee = p.author AND r.state = 'ACTIVE'))
          AND post_readable($1, p.author, p.visibility, p.part, p.acl_token, 'CONTENT_TOKEN')
        ORDER BY p.created_at DESC, p.post_id DESC`,
      [reader],
    );
    const ids = (rows: { post_id: string }[]) => rows.map((r) => r.post_id);
    out.set(reader, [ids(page.rows), ids(entry.rows), ids(readable.rows)]);
  }
  return out;
}

/** HOME_PAGE_SQL with one edit of its inbox rule; the edited text must occur exactly once. */
function mutant(from: string, to: string): string {
  assert.equal(HOME_PAGE_SQL.split(from).length - 1, 1, `expected exactly one ${JSON.stringify(from)}`);
  assert.ok(INBOX_RULE_SQL.includes(from), "the edit is in the inbox's rule");
  return HOME_PAGE_SQL.replace(from, () => to);
}

test("the home page shows exactly the inbox rows feed_entry_visible and post_readable allow, for every case of the rule", async (t) => {
  const db = await createTestDatabase();
  t.after(() => db.close());
  await fixture(db.pool);
  for (const [reader, [page, entry, readable]] of await compare(db.pool, HOME_PAGE_SQL)) {
    assert.deepEqual(page, entry, `reader ${reader}: the page differs from feed_entry_visible`);
    assert.deepEqual(page, readable, `reader ${reader}: the page differs from post_readable`);
    assert.deepEqual(page, EXPECTED[reader], `reader ${reader}: the fixture reaches its case`);
  }
});

test("negative controls: the page's rule without a branch differs from feed_entry_visible", async (t) => {
  const db = await createTestDatabase();
  t.after(() => db.close());
  await fixture(db.pool);
  const differing = async (pageSql: string) =>
    [...(await compare(db.pool, pageSql))].filter(([, [page, entry]]) => page.join() !== entry.join()).map(([r]) => r);

  assert.deepEqual(
    await differing(mutant("THEN NOT EXISTS (", "THEN true OR EXISTS (")),
    ["blockedfol", "blockerfol"],
    "without the block check, a follower in a block either way sees PUBLIC posts",
  );
  assert.deepEqual(
    await differing(
      mutant(
        "WHEN (SELECT w.applied_upto FROM proj_watermark w WHERE w.part = p.part) >= p.acl_token THEN",
        "WHEN true THEN",
      ),
    ),
    ["unseen"],
    "the projection alone: a follow it has not applied hides a post the truth allows",
  );
  assert.deepEqual(
    await differing(
      mutant(
        "EXISTS (SELECT 1 FROM relation r WHERE r.follower = $1 AND r.followee = p.author AND r.state = 'ACTIVE')\n         AND CASE",
        "CASE",
      ),
    ),
    ["pend", "gone", "stranger", "lagging"],
    "without the follow-now check, an account not followed shows in the inbox as PUBLIC posts (and the lagging projection's FOLLOWERS post)",
  );
  assert.deepEqual(
    await differing(mutant("p.deleted_at IS NULL\n       AND (", "(")),
    ["au", "fol", "unseen"],
    "without the deletion check, a deleted post shows",
  );
  assert.deepEqual(
    await differing(
      mutant("WHEN p.visibility <> 'FOLLOWERS' THEN false", "WHEN p.visibility <> 'FOLLOWERS' THEN true"),
    ),
    ["fol", "blockedfol", "blockerfol", "unseen"],
    "a SELF post shows to followers",
  );
});
