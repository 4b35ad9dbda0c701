import { test } from "node:test";
import assert from "node:assert/strict";
import { Gate, type HookContext } from "../../src/hooks.ts";
import { LIKE_COUNTER } from "../../src/likes/like-spec.ts";
import { LikeRebuild } from "../../src/likes/like-rebuild.ts";
import { ChunksOutsideSnapshotRebuild } from "./negative-controls.ts";
import { UNPACED } from "../../src/workers/pacer.ts";
import { factCount, likesFixture, user, type LikesFixture } from "./fixture.ts";

/**
 * The rebuild of an item with more likes than one chunk (a hot item, at test size):
 * chunks of 25 along like_fact_likers, with live likes and unlikes committed and applied while
 * the rebuild is parked between two chunks (hook point rebuild.afterChunk).
 */
const ITEM = "item-lab-01";
const CHUNK = 25;
const SEEDED = 120;

/** Per partition: like_count's n against the liked facts. */
async function perPartition(f: LikesFixture): Promise<{ count: number[]; facts: number[] }> {
  const count = [0, 0];
  const facts = [0, 0];
  const c = await f.db.pool.query<{ part: number; n: number }>(
    "SELECT part, n::int AS n FROM like_count WHERE item_id = $1",
    [ITEM],
  );
  for (const r of c.rows) count[r.part] = r.n;
  const t = await f.db.pool.query<{ part: number; n: number }>(
    "SELECT ledger_partition(user_id, 2) AS part, count(*)::int AS n FROM like_fact WHERE item_id = $1 AND liked GROUP BY 1",
    [ITEM],
  );
  for (const r of t.rows) facts[r.part] = r.n;
  return { count, facts };
}

/**
 * 120 likes of ITEM, their changed_at set in groups of seven equal instants (ties across chunk
 * borders, the cursor's tie-break on user_id) with a microsecond fraction (the cursor's text round
 * trip), all applied; then like_count of partition 0 raised by 5 (drift the rebuild must find).
 */
async function seeded(): Promise<LikesFixture> {
  const f = await likesFixture(2);
  for (let u = 1; u <= SEEDED; u++) await f.likes.like(user(u), ITEM);
  await f.likes.like(user(1), "item-lab-02");
  await f.db.pool.query(
    `UPDATE like_fact SET changed_at = timestamptz '2026-01-01 00:00:00.123457+00' + (substring(user_id FROM 6)::int / 7) * interval '1 second'
      WHERE item_id = $1`,
    [ITEM],
  );
  await f.consumer.drain();
  await f.db.pool.query("UPDATE like_count SET n = n + 5 WHERE item_id = $1 AND part = 0", [ITEM]);
  return f;
}

/**
 * Runs `rebuild` over every item, parked after its second chunk of ITEM while 3 new likes (their
 * changed_at now: the range already read), 2 unlikes of the newest likers (read) and 4 of the
 * oldest (not read yet) commit and are applied. Returns the chunks seen and the report.
 */
async function interleaved<R>(f: LikesFixture, rebuild: { rebuild(): Promise<R> }) {
  const parked = new Gate("rebuild.afterChunk");
  const chunks: HookContext[] = [];
  const remove = f.hooks.on("rebuild.afterChunk", async (ctx) => {
    chunks.push(ctx);
    if (ctx.chunk === 1) await parked.handler(ctx);
  });
  try {
    const running = rebuild.rebuild();
    const at = await parked.waitArrived();
    assert.deepEqual({ itemId: at.itemId, chunk: at.chunk, rows: at.rows }, { itemId: ITEM, chunk: 1, rows: CHUNK });
    for (let u = 201; u <= 203; u++) await f.likes.like(user(u), ITEM);
    for (const u of [120, 110, 5, 10, 20, 30]) await f.likes.unlike(user(u), ITEM);
    await f.consumer.drain();
    parked.release();
    const report = await running;
    await f.consumer.drain();
    return { chunks, report };
  } finally {
    parked.release(); // a failed assertion must not leave the snapshot transaction parked
    remove();
  }
}

test("chunked rebuild of an item larger than one chunk: the exact count at its snapshot, live writes between chunks included once", async (t) => {
  const f = await seeded();
  t.after(() => f.close());
  const { chunks, report } = await interleaved(
    f,
    new LikeRebuild(f.db.pool, { hooks: f.hooks, pacing: UNPACED, chunkRows: CHUNK }),
  );
  const { count, facts } = await perPartition(f);
  t.diagnostic(
    `note chunks ${chunks.map((c) => `${c.chunk}:${c.rows}`).join(" ")}; like_count ${count} facts ${facts}; drift ${report.drifted.map((d) => d.drift)}`,
  );
  // 120 facts in the snapshot: 25, 25, 25, 25, 20, whatever was written after it.
  assert.deepEqual(
    chunks.map((c) => c.rows),
    [25, 25, 25, 25, 20],
  );
  assert.ok(
    chunks.every((c) => c.itemId === ITEM),
    "items under the cap (item-lab-02's one like) are counted with their page",
  );
  assert.equal(await factCount(f.db, ITEM), SEEDED + 3 - 6);
  assert.deepEqual(count, facts);
  assert.deepEqual(
    report.drifted.map((d) => ({ itemId: d.itemId, drift: d.drift })),
    [{ itemId: ITEM, drift: -5 }],
  );
  assert.equal(report.itemsChecked, 4);
});

test("chunked rebuild negative control: each chunk in a fresh snapshot subtracts the unlikes of the unread range twice", async (t) => {
  const f = await seeded();
  t.after(() => f.close());
  const broken = new ChunksOutsideSnapshotRebuild(f.db.pool, LIKE_COUNTER, {
    hooks: f.hooks,
    pacing: UNPACED,
    chunkRows: CHUNK,
  });
  const { chunks } = await interleaved(f, broken);
  const { count, facts } = await perPartition(f);
  const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
  t.diagnostic(
    `note chunks ${chunks.map((c) => `${c.chunk}:${c.rows}`).join(" ")}; like_count ${count} facts ${facts}`,
  );
  // The chunks after the park miss the 4 oldest likers' unlikes, which the install subtracts again.
  assert.equal(sum(chunks.map((c) => Number(c.rows))), SEEDED - 4);
  assert.equal(sum(facts), SEEDED + 3 - 6);
  assert.equal(sum(count), sum(facts) - 4);
});
