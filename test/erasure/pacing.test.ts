/**
 * Paced erasures (docs/erasure.md "Pacing"): a batch's size follows the time budget from the
 * last full batch of its phase, by at most ×2 or ÷2 per batch and within [the pacing's minimum,
 * batchSize]; and pacing changes how the work is cut, never what it leaves: an erasure paced
 * with small batches and rests between them leaves exactly the state one of whole batches back
 * to back leaves (facts, versions, events, counts, audit), id for id. The budgets used make the
 * sizes deterministic: 10 s is more than any batch takes (every full batch doubles), 0.001 ms is
 * less (every full batch halves). The rests are production timers; nothing here waits on them
 * to synchronise.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { fullAudit } from "../../src/api/routes/admin.ts";
import { ErasureService, MIN_PACED_ERASURE_BATCH, type ErasurePhase } from "../../src/erasure/erasure-service.ts";
import { UNPACED, type PacingOptions } from "../../src/workers/pacer.ts";
import type { TestDatabase } from "../support/test-db.ts";
import { buildWorld, drain, readCounts, type World } from "./fixture.ts";

const EXTRA_LIKES = 150;
const EXTRA_LIKERS = 150;
const EXTRA_FOLLOWERS = 150;

/** The fixture's world and more of eve's facts, so that like and relation phases take several batches. */
async function biggerWorld(): Promise<World> {
  const w = await buildWorld();
  const { pool } = w.db;
  const p = w.ledger.partitions;
  await pool.query(
    "INSERT INTO item (item_id, kind) SELECT 'extra-' || i, 'plain' FROM generate_series(1, $1::int) i",
    [EXTRA_LIKES],
  );
  await pool.query(
    "SELECT count(*) FROM generate_series(1, $1::int) i, LATERAL like_set('eve', 'extra-' || i, true, ledger_partition('eve', $2))",
    [EXTRA_LIKES, p],
  );
  await pool.query(
    "SELECT count(*) FROM generate_series(1, $1::int) i, LATERAL like_set('liker-' || i, $3, true, ledger_partition('liker-' || i, $2))",
    [EXTRA_LIKERS, p, w.evePosts[0]],
  );
  await pool.query("INSERT INTO account (account_id) SELECT 'fan-' || i FROM generate_series(1, $1::int) i", [
    EXTRA_FOLLOWERS,
  ]);
  await pool.query(
    "SELECT count(*) FROM generate_series(1, $1::int) i, LATERAL relation_follow('fan-' || i, 'eve', $2)",
    [EXTRA_FOLLOWERS, p],
  );
  await drain(w.ledger);
  return w;
}

/** Erases eve with `pacing` and batches of at most `batchSize`; the size of every batch, by phase. */
async function erase(w: World, batchSize: number, pacing: PacingOptions): Promise<Map<ErasurePhase, number[]>> {
  const erasure = await ErasureService.open(w.db.pool, { hooks: w.hooks, batchSize, pacing });
  const sizes = new Map<ErasurePhase, number[]>();
  const off = w.hooks.on("erasure.betweenBatches", (ctx) => {
    const { phase, size } = ctx as { phase: ErasurePhase; size: number };
    sizes.set(phase, [...(sizes.get(phase) ?? []), size]);
  });
  try {
    await erasure.start("eve", "admin");
    assert.equal((await erasure.run("eve")).phase, "done");
  } finally {
    off();
  }
  await drain(w.ledger);
  return sizes;
}

test("pacing: a batch's size doubles after a full batch under budget, halves after one over it, bounded by [minimum, batchSize] and by x2 per batch", async (t) => {
  const fast = await biggerWorld();
  t.after(() => fast.close());
  const fastSizes = await erase(fast, 100, { budgetMs: 10_000, duty: 1 });
  // likes: 153 of eve's likes; 64 (the start) was full and fast, so 100 (batchSize, not 128); then the rest.
  assert.deepEqual(fastSizes.get("likes"), [64, 100]);
  const slow = await biggerWorld();
  t.after(() => slow.close());
  const slowSizes = await erase(slow, 100, { budgetMs: 0.001, duty: 0.5 });
  // Every full batch took longer than the budget: 64, 32, then the minimum from there on.
  const likes = slowSizes.get("likes")!;
  assert.deepEqual(likes.slice(0, 3), [64, 32, MIN_PACED_ERASURE_BATCH]);
  assert.ok(
    likes.every((s, i) => i < 2 || s === MIN_PACED_ERASURE_BATCH),
    `likes: ${likes.join(",")}`,
  );
  for (const [phase, list] of [...fastSizes, ...slowSizes]) {
    for (const [i, s] of list.entries()) {
      assert.ok(s >= MIN_PACED_ERASURE_BATCH && s <= 100, `${phase}: size ${s} out of bounds`);
      if (i > 0)
        assert.ok(
          s <= 2 * list[i - 1]! && s >= list[i - 1]! / 2,
          `${phase}: ${list[i - 1]} -> ${s} moved by more than x2`,
        );
    }
  }
  // Unpaced, a batch is always batchSize.
  const fixed = await biggerWorld();
  t.after(() => fixed.close());
  for (const list of (await erase(fixed, 100, UNPACED)).values()) assert.ok(list.every((s) => s === 100));
});

/** Every fact, event and count of the database, with content ids (random uuids) replaced by their creation rank. */
async function dump(db: TestDatabase): Promise<Record<string, unknown>> {
  const q = async (sql: string) => (await db.pool.query(sql)).rows;
  const ids = new Map<string, string>();
  for (const r of await q("SELECT post_id AS id FROM post ORDER BY created_at, post_id"))
    ids.set(r.id as string, `post#${ids.size}`);
  for (const r of await q("SELECT comment_id AS id FROM comment ORDER BY created_at, comment_id"))
    ids.set(r.id as string, `comment#${ids.size}`);
  const name = (id: unknown) => ids.get(id as string) ?? (id as string);
  const sorted = (rows: Record<string, unknown>[], ...idColumns: string[]) =>
    rows
      .map((r) =>
        JSON.stringify(Object.fromEntries(Object.entries(r).map(([k, v]) => [k, idColumns.includes(k) ? name(v) : v]))),
      )
      .sort();
  const counts = await readCounts(db);
  const renamed = (m: Record<string, number>) =>
    Object.fromEntries(
      Object.entries(m)
        .map(([k, v]) => [name(k), v])
        .sort(),
    );
  return {
    likeFacts: sorted(await q("SELECT user_id, item_id, liked, version FROM like_fact"), "item_id"),
    likeEvents: sorted(await q("SELECT user_id, item_id, delta, version FROM like_outbox"), "item_id"),
    relations: sorted(await q("SELECT follower, followee, state, version FROM relation")),
    relationEvents: sorted(await q("SELECT follower, followee, state, version FROM relation_event")),
    posts: sorted(await q("SELECT post_id, author, deleted_at IS NOT NULL AS deleted, body FROM post"), "post_id"),
    comments: sorted(
      await q(
        "SELECT comment_id, post_id, author, deleted_at IS NOT NULL AS deleted, body, version, idempotency_key FROM comment",
      ),
      "comment_id",
      "post_id",
    ),
    commentEvents: sorted(
      await q("SELECT comment_id, post_id, delta, version FROM comment_outbox"),
      "comment_id",
      "post_id",
    ),
    blocks: sorted(await q("SELECT blocker, blocked FROM block")),
    accounts: sorted(await q("SELECT account_id, erased_state, private, hide_collections FROM account")),
    erasure: sorted(await q("SELECT account_id, phase, done, total FROM account_erasure")),
    counts: {
      likes: renamed(counts.likes),
      comments: renamed(counts.comments),
      followers: counts.followers,
      following: counts.following,
      blocks: counts.blocks,
    },
  };
}

test("pacing: an erasure in small paced batches with rests leaves exactly the state of one in whole batches back to back", async (t) => {
  const whole = await biggerWorld();
  t.after(() => whole.close());
  const paced = await biggerWorld();
  t.after(() => paced.close());
  const wholeSizes = await erase(whole, 500, UNPACED);
  const pacedSizes = await erase(paced, 500, { budgetMs: 0.001, duty: 0.5 });
  // The two erasures were cut differently: one batch per phase against many.
  assert.equal(wholeSizes.get("likes")!.length, 1);
  assert.ok(
    pacedSizes.get("likes")!.length >= 5 &&
      pacedSizes.get("followers")!.length >= 2 &&
      pacedSizes.get("post_likes")!.length >= 2,
  );
  const a = await dump(whole.db);
  const b = await dump(paced.db);
  assert.deepEqual(b, a);
  assert.equal((a.erasure as string[]).length, 1);
  assert.match((a.erasure as string[])[0]!, /"phase":"done"/);
  assert.equal((await fullAudit(whole.ledger)).clean, true);
  assert.equal((await fullAudit(paced.ledger)).clean, true);
});

test("control: the dump sees a difference of one fact (so the equality above could fail)", async (t) => {
  const a = await biggerWorld();
  t.after(() => a.close());
  const b = await biggerWorld();
  t.after(() => b.close());
  await erase(a, 500, UNPACED);
  await erase(b, 500, { budgetMs: 0.001, duty: 0.5 });
  await b.ledger.likes.like("u1", "extra-1");
  await drain(b.ledger);
  assert.notDeepEqual(await dump(b.db), await dump(a.db));
});
