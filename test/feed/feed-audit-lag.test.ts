/**
 * The home-timeline invariant under lag at the cap (docs/feed.md, "The invariant"): a pending post
 * event moves the cut of a full inbox's newest cap, so a row of another post differs too. That is
 * lag, not a lie; the reader is judged once the event is applied, and a real lie then shows.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { auditFeed } from "../../src/feed/feed-audit.ts";
import { drainFeed, feedFixture } from "./fixture.ts";

const CAP = 3;

test("feed audit: a full inbox with a newer post pending is lag (explained), not extra; a lie in it shows once the post is applied", async (t) => {
  const fx = await feedFixture(1, ["ann", "bob"], { maxItems: CAP });
  t.after(() => fx.close());
  const { ledger, db } = fx;
  await ledger.relations.follow("bob", "ann");
  for (let i = 1; i <= CAP; i++) await ledger.posts.createPost("ann", "PUBLIC", `post ${i}`);
  await drainFeed(ledger);
  const clean = await auditFeed(db.pool, CAP);
  assert.deepEqual([clean.extra, clean.missing, clean.explainedByPending], [0, 0, 0], "full inboxes, drained");

  await ledger.posts.createPost("ann", "PUBLIC", "post 4, not applied yet");
  const lagging = await auditFeed(db.pool, CAP);
  // ann's and bob's inboxes: the pending post is missing and their oldest row is past the cut.
  assert.deepEqual(
    [lagging.extra, lagging.missing, lagging.explainedByPending, lagging.lag],
    [0, 0, 4, 1],
    JSON.stringify(lagging),
  );

  // Negative control: the definition before this rule (a pending event explains its own row only),
  // loaded from its migration under another name, calls the pushed-out rows lies.
  const migration = await readFile(
    fileURLToPath(new URL("../../src/db/migrations/041_feed_audit_readers.sql", import.meta.url)),
    "utf8",
  );
  const rowRule = migration
    .slice(migration.indexOf("CREATE FUNCTION feed_audit_readers"), migration.indexOf("-- The full form:"))
    .replace("CREATE FUNCTION feed_audit_readers", "CREATE FUNCTION pg_temp.feed_audit_row_rule");
  const client = await db.pool.connect();
  try {
    await client.query(rowRule);
    const { rows } = await client.query<{ extra: number; missing: number }>(
      "SELECT extra, missing FROM pg_temp.feed_audit_row_rule(ARRAY['ann', 'bob'], $1)",
      [CAP],
    );
    assert.deepEqual(rows[0], { extra: 2, missing: 0 }, "the row rule reports each inbox's oldest row as extra");
  } finally {
    client.release(true);
  }

  // A lie in a lagging inbox is not hidden, only judged after the event: bob's newest row removed by hand.
  await db.pool.query(
    "DELETE FROM feed_inbox WHERE reader = 'bob' AND post_id = (SELECT post_id FROM post WHERE body = 'post 3')",
  );
  assert.deepEqual([(await auditFeed(db.pool, CAP)).missing, (await auditFeed(db.pool, CAP)).extra], [0, 0]);
  await drainFeed(ledger);
  const applied = await auditFeed(db.pool, CAP);
  assert.equal(applied.lag, 0);
  assert.deepEqual(
    [applied.missing, applied.extra],
    [1, 1],
    `bob lacks post 3 and keeps post 1: ${JSON.stringify(applied)}`,
  );
});
