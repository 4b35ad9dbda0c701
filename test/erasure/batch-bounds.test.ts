/**
 * The pacing promise of the erasure (docs/erasure.md "Pacing"): each batch touches at most its
 * configured number of facts, in every phase, the blocks phase included. eve has 5 facts of
 * every kind (posts, comments, likes of her posts, likes of her comments, her likes, her follows,
 * her followers, the accounts she blocks); her erasure runs with batches of 2, unpaced. After
 * each committed batch (at erasure.betweenBatches, no transaction open) the test counts eve's
 * remaining facts with SQL of its own: no batch may take more than 2 of them, and the batch's own
 * figure must agree. Negative control against a pass by accident: every phase must have had a
 * full batch (2) and needed at least three batches, so every phase had more facts than one batch
 * may take. The control in this file runs the same erasure with the blocks phase's LIMIT removed
 * and sees its first batch take all five.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import type { Pool } from "../../src/db/pool.ts";
import { ErasureService } from "../../src/erasure/erasure-service.ts";
import { openLedger } from "../../src/ledger.ts";
import { UNPACED } from "../../src/workers/pacer.ts";
import { replaceFunctionText } from "../support/function-mutant.ts";
import { createTestDatabase } from "../support/test-db.ts";

const BATCH = 2;
const EACH = 5;
const KINDS = [
  "posts",
  "comments",
  "post_likes",
  "comment_likes",
  "likes",
  "following",
  "followers",
  "blocks",
] as const;
type Kind = (typeof KINDS)[number];

/** eve's facts of each kind that an erasure turns off, counted by the test's own SQL. */
async function eveFacts(pool: Pool): Promise<Record<Kind, number>> {
  const { rows } = await pool.query<Record<Kind, string>>(
    `SELECT (SELECT count(*) FROM post WHERE author = 'eve' AND deleted_at IS NULL) AS posts,
            (SELECT count(*) FROM comment WHERE author = 'eve' AND deleted_at IS NULL) AS comments,
            (SELECT count(*) FROM like_fact f JOIN post p ON p.post_id = f.item_id WHERE p.author = 'eve' AND f.liked) AS post_likes,
            (SELECT count(*) FROM like_fact f JOIN comment c ON c.comment_id = f.item_id WHERE c.author = 'eve' AND f.liked) AS comment_likes,
            (SELECT count(*) FROM like_fact WHERE user_id = 'eve' AND liked) AS likes,
            (SELECT count(*) FROM relation WHERE follower = 'eve' AND state <> 'REMOVED') AS following,
            (SELECT count(*) FROM relation WHERE followee = 'eve' AND state <> 'REMOVED') AS followers,
            (SELECT count(*) FROM block WHERE blocker = 'eve') AS blocks`,
  );
  return Object.fromEntries(KINDS.map((k) => [k, Number(rows[0]![k])])) as Record<Kind, number>;
}

interface Batch {
  phase: string;
  facts: number;
  /** How many of eve's facts, of any kind, the batch turned off (the test's count before minus after). */
  taken: number;
}

async function eraseInBatches(t: TestContext, blocksWithoutLimit: boolean): Promise<Batch[]> {
  const db = await createTestDatabase({ partitions: 4 });
  t.after(() => db.close());
  const ledger = await openLedger(db.pool);
  const ids = (prefix: string) => Array.from({ length: EACH }, (_, i) => `${prefix}${i}`);
  for (const a of ["eve", "carl", ...ids("liker-"), ...ids("star-"), ...ids("fan-"), ...ids("blocked-")])
    await ledger.relations.upsertAccount(a);
  const carlPost = (await ledger.posts.createPost("carl", "PUBLIC", "carl's post")).postId;
  const posts = [];
  for (let i = 0; i < EACH; i++) posts.push((await ledger.posts.createPost("eve", "PUBLIC", `eve ${i}`)).postId);
  const comments = [];
  for (let i = 0; i < EACH; i++) comments.push((await ledger.comments.create("eve", carlPost, `eve on carl ${i}`)).id);
  for (const liker of ids("liker-")) {
    await ledger.likes.like(liker, posts[0]!);
    await ledger.likes.like(liker, comments[0]!);
  }
  for (const item of ids("plain-")) {
    await ledger.likes.createItem(item);
    await ledger.likes.like("eve", item);
  }
  for (const star of ids("star-")) await ledger.relations.follow("eve", star);
  for (const fan of ids("fan-")) await ledger.relations.follow(fan, "eve");
  for (const blocked of ids("blocked-")) await ledger.relations.block("eve", blocked);
  assert.deepEqual(
    Object.values(await eveFacts(db.pool)),
    KINDS.map(() => EACH),
    "the world: five facts of every kind",
  );
  if (blocksWithoutLimit) {
    await replaceFunctionText(db.pool, "erasure_step(text,integer,integer)", [
      [" LIMIT p_limit),\n    del AS (DELETE FROM block", "),\n    del AS (DELETE FROM block"],
    ]);
  }

  const erasure = await ErasureService.open(db.pool, { hooks: ledger.hooks, batchSize: BATCH, pacing: UNPACED });
  const batches: Batch[] = [];
  let before = await eveFacts(db.pool);
  ledger.hooks.on("erasure.betweenBatches", async (ctx) => {
    const after = await eveFacts(db.pool);
    const taken = KINDS.reduce((n, k) => n + before[k] - after[k], 0);
    batches.push({ phase: ctx.phase as string, facts: ctx.facts as number, taken });
    before = after;
  });
  await erasure.start("eve", "admin");
  assert.equal((await erasure.run("eve")).phase, "done");
  return batches;
}

test(`every erasure batch, in every phase (blocks included), turns off at most its configured ${BATCH} facts, and each phase needed several full batches`, async (t) => {
  const batches = await eraseInBatches(t, false);
  t.diagnostic(`note batches: ${batches.map((b) => `${b.phase}:${b.facts}/${b.taken}`).join(" ")}`);
  for (const [i, b] of batches.entries()) {
    assert.ok(b.taken <= BATCH, `batch ${i + 1} (${b.phase}) turned off ${b.taken} of eve's facts, more than ${BATCH}`);
    assert.ok(b.facts <= BATCH, `batch ${i + 1} (${b.phase}) reports ${b.facts} facts, more than ${BATCH}`);
    assert.equal(b.facts, b.taken, `batch ${i + 1} (${b.phase}): its own figure and the test's count agree`);
  }
  for (const kind of KINDS) {
    const ofPhase = batches.filter((b) => b.phase === kind);
    assert.ok(ofPhase.length >= Math.ceil(EACH / BATCH), `${kind}: ${ofPhase.length} batches for ${EACH} facts`);
    assert.ok(
      ofPhase.some((b) => b.facts === BATCH),
      `${kind}: no full batch, so the bound was never tested there`,
    );
    assert.equal(
      ofPhase.reduce((n, b) => n + b.taken, 0),
      EACH,
      `${kind}: every fact turned off`,
    );
  }
});

test("negative control: with the blocks phase's LIMIT removed, its first batch takes all five blocks, which the bound above catches", async (t) => {
  const batches = await eraseInBatches(t, true);
  const blocks = batches.filter((b) => b.phase === "blocks");
  t.diagnostic(`note blocks batches without the LIMIT: ${blocks.map((b) => `${b.facts}/${b.taken}`).join(" ")}`);
  assert.equal(blocks[0]!.taken, EACH);
});
