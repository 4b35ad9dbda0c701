/**
 * Import of a product's history at the realistic shape (bench/import-realistic.ts, at a small
 * size: hot items, Zipf followees, private accounts with PENDING and approved follows, blocks,
 * tombstones), by the empty-ledger path and by the resumable one in small batches (many batch
 * boundaries inside one hot followee's follows): every count, the follower projection and the
 * notification view equal the facts by the test's own SQL, the follow states are the rules', and
 * the audit is clean. The negative control breaks one derived row of each kind and sees each
 * check and the audit fail.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { createReadStream } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fullAudit } from "../../src/api/routes/admin.ts";
import type { Pool } from "../../src/db/pool.ts";
import { openLedger } from "../../src/ledger.ts";
import { importFacts } from "../../src/portability/import.ts";
import { writeRealisticFile, type ShapeCounts } from "../../bench/import-realistic.ts";
import { createTestDatabase } from "../support/test-db.ts";

const SHAPE = { accounts: 400, items: 1_000, likes: 3_000, follows: 1_200, blocks: 40, seed: 7 };

/** Rows of each derived table that differ from the facts, and facts that break a rule, by the test's own SQL. */
async function againstFacts(pool: Pool): Promise<Record<string, number>> {
  const { rows } = await pool.query<Record<string, number>>(`
    SELECT
      (SELECT count(*) FROM (SELECT item_id, count(*) AS n FROM like_fact WHERE liked GROUP BY item_id) f
         FULL JOIN (SELECT item_id, sum(n) AS n FROM like_count GROUP BY item_id HAVING sum(n) <> 0) c USING (item_id)
        WHERE f.n IS DISTINCT FROM c.n)::int AS like_counts,
      (SELECT count(*) FROM (SELECT followee, count(*) AS n FROM relation WHERE state = 'ACTIVE' GROUP BY followee) f
         FULL JOIN (SELECT followee, n FROM proj_count WHERE n <> 0) c USING (followee)
        WHERE f.n IS DISTINCT FROM c.n)::int AS follower_counts,
      (SELECT count(*) FROM (SELECT follower, followee, state FROM relation WHERE state <> 'REMOVED') r
         FULL JOIN (SELECT follower, followee, state FROM proj_follower WHERE state <> 'REMOVED') p USING (follower, followee)
        WHERE r.state IS DISTINCT FROM p.state)::int AS projection,
      (SELECT count(*) FROM (SELECT follower, followee, CASE state WHEN 'PENDING' THEN 'follow_request' ELSE 'follow' END AS type
                               FROM relation WHERE state <> 'REMOVED') r
         FULL JOIN (SELECT actor AS follower, subject AS followee, type FROM notification WHERE source = 'relation' AND active) n
              USING (follower, followee)
        WHERE r.type IS DISTINCT FROM n.type)::int AS notifications,
      (SELECT count(*) FROM relation r JOIN account x ON x.account_id = r.followee
        WHERE r.state = 'PENDING' AND NOT x.private)::int AS pending_of_public,
      (SELECT count(*) FROM block k JOIN relation r ON r.state <> 'REMOVED'
          AND ((r.follower = k.blocker AND r.followee = k.blocked) OR (r.follower = k.blocked AND r.followee = k.blocker)))::int AS follows_across_blocks`);
  return rows[0]!;
}

const CLEAN = {
  like_counts: 0,
  follower_counts: 0,
  projection: 0,
  notifications: 0,
  pending_of_public: 0,
  follows_across_blocks: 0,
};

/** The facts per kind against the file: every line is a fact (the file gives no pair twice and no line is refused). */
async function assertFactsOfFile(pool: Pool, shape: ShapeCounts): Promise<void> {
  const { rows } = await pool.query<Record<string, number>>(`
    SELECT (SELECT count(*) FROM account)::int AS accounts,
           (SELECT count(*) FROM account WHERE erased_state = 'ERASED')::int AS tombstones,
           (SELECT count(*) FROM item)::int AS items,
           (SELECT count(*) FROM like_fact WHERE liked)::int AS likes,
           (SELECT count(*) FROM relation WHERE state <> 'REMOVED')::int AS follows,
           (SELECT count(*) FROM relation WHERE state = 'PENDING')::int AS pending,
           (SELECT count(*) FROM block)::int AS blocks`);
  const r = rows[0]!;
  assert.deepEqual(
    {
      accounts: r.accounts,
      tombstones: r.tombstones,
      items: r.items,
      likes: r.likes,
      follows: r.follows,
      blocks: r.blocks,
    },
    {
      accounts: shape.accounts,
      tombstones: shape.tombstones,
      items: shape.items,
      likes: shape.likes,
      follows: shape.follows,
      blocks: shape.blocks,
    },
  );
  assert.ok(r.pending! > 0, "the shape has PENDING follows of private accounts");
}

test(
  "realistic shape: counts, projection and notifications equal the facts and the audit is clean, on both paths; breaking a derived row is seen",
  { timeout: 240_000 },
  async (t) => {
    const dir = await mkdtemp(path.join(tmpdir(), "import-realistic-"));
    t.after(() => rm(dir, { recursive: true, force: true }));
    const file = path.join(dir, "facts.ndjson");
    const shape = await writeRealisticFile(file, SHAPE);

    for (const mode of ["auto", "never"] as const) {
      const db = await createTestDatabase({ partitions: 4, poolSize: 8 });
      t.after(() => db.close());
      const report = await importFacts(db.pool, createReadStream(file), {
        emptyLedger: mode,
        // Batches of at most 97 lines: the hot followees' follows and the hot items' likes span many.
        ...(mode === "never" ? { batchSize: 97 } : {}),
      });
      assert.equal(report.path, mode === "auto" ? "empty-ledger" : "resumable");
      // The follows phase wrote every notification row: the phase after it found nobody to rebuild.
      assert.equal(report.applied.notifications, 0, JSON.stringify(report.applied));
      // Each apply phase that walks lines reports them.
      const follows = report.phases.find((p) => p.step === "apply: follows");
      assert.equal(follows?.lines, shape.follows);
      await assertFactsOfFile(db.pool, shape);
      assert.deepEqual(await againstFacts(db.pool), CLEAN, `${mode}: derived rows against the facts`);
      const audit = await fullAudit(await openLedger(db.pool));
      assert.ok(audit.clean, `${mode}: audit ${JSON.stringify(audit)}`);

      if (mode === "never") {
        // Negative control: one wrong row of each derived table is seen by its check and by the audit.
        await db.pool.query(
          "UPDATE like_count SET n = n + 1 WHERE (item_id, part) = (SELECT item_id, part FROM like_count ORDER BY n DESC LIMIT 1)",
        );
        await db.pool.query(
          "UPDATE proj_count SET n = n + 1 WHERE followee = (SELECT followee FROM proj_count ORDER BY n DESC LIMIT 1)",
        );
        await db.pool.query(
          "DELETE FROM notification WHERE (source, actor, subject) = (SELECT source, actor, subject FROM notification ORDER BY id LIMIT 1)",
        );
        await db.pool.query(
          "UPDATE proj_follower SET state = 'REMOVED' WHERE (followee, follower) = (SELECT followee, follower FROM proj_follower WHERE state = 'PENDING' LIMIT 1)",
        );
        const broken = await againstFacts(db.pool);
        assert.deepEqual(
          { ...broken, like_counts: broken.like_counts! > 0, follower_counts: broken.follower_counts! > 0 },
          { ...CLEAN, like_counts: true, follower_counts: true, projection: 1, notifications: 1 },
        );
        assert.equal((await fullAudit(await openLedger(db.pool))).clean, false);
      }
    }
  },
);
