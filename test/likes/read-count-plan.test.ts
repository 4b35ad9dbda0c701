import { test } from "node:test";
import assert from "node:assert/strict";
import type { PoolClient } from "../../src/db/pool.ts";
import { READ_COUNT_SQL, readCount } from "../../src/likes/like-audit.ts";
import { runWorkers, seededRandom } from "../support/concurrency.ts";
import { count, likesFixture, type LikesFixture } from "./fixture.ts";
import { planNodes, type PlanNode } from "../support/explain.ts";

/**
 * readCount's pendingForItem must be a range read on like_outbox_item_seq, never a scan of
 * the outbox: its cost has to follow the item's own pending events, not the table size.
 */

const PARTITIONS = 4;
const ITEMS = Array.from({ length: 300 }, (_, i) => `item-${String(i).padStart(3, "0")}`);
const USERS = 400;
const LIKES_PER_USER = 10;

/** Buffer pages the whole executed plan touched (the root node's BUFFERS count everything below it). */
async function pagesTouched(client: PoolClient, itemId: string): Promise<number> {
  const { rows } = await client.query<{ "QUERY PLAN": [{ Plan: PlanNode }] }>(
    `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${READ_COUNT_SQL}`,
    [itemId],
  );
  const root = rows[0]!["QUERY PLAN"][0].Plan;
  return (root["Shared Hit Blocks"] ?? 0) + (root["Shared Read Blocks"] ?? 0);
}

/** The plan's accesses to like_outbox, and why each is (not) a range read on like_outbox_item_seq. */
function outboxAccesses(plan: PlanNode): { node: PlanNode; ok: boolean; how: string }[] {
  return planNodes(plan)
    .filter((n) => n["Relation Name"] === "like_outbox")
    .map((node) => {
      const type = node["Node Type"];
      if (type === "Index Scan" || type === "Index Only Scan") {
        return { node, ok: node["Index Name"] === "like_outbox_item_seq", how: `${type} using ${node["Index Name"]}` };
      }
      if (type === "Bitmap Heap Scan") {
        const indexes = planNodes(node)
          .filter((n) => n["Node Type"] === "Bitmap Index Scan")
          .map((n) => n["Index Name"]);
        return {
          node,
          ok: indexes.length > 0 && indexes.every((i) => i === "like_outbox_item_seq"),
          how: `${type} on ${indexes.join("+")}`,
        };
      }
      return { node, ok: false, how: type };
    });
}

async function explain(client: PoolClient, itemId: string, analyze = false): Promise<PlanNode> {
  const { rows } = await client.query<{ "QUERY PLAN": [{ Plan: PlanNode }] }>(
    `EXPLAIN (${analyze ? "ANALYZE, " : ""}FORMAT JSON) ${READ_COUNT_SQL}`,
    [itemId],
  );
  return rows[0]!["QUERY PLAN"][0].Plan;
}

function describe(plan: PlanNode): string {
  return outboxAccesses(plan)
    .map((a) => a.how)
    .join(", ");
}

let f: LikesFixture;
let sample: { cold: string; median: string; hot: string };
let outboxRows = 0;

test.before(async () => {
  f = await likesFixture(PARTITIONS, []);
  // Only speed: thousands of one-row commits need not each wait for a WAL flush here.
  await f.db.pool.query(
    "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET synchronous_commit = off', current_database()); END $$",
  );
  await f.db.pool.query("SET synchronous_commit = off"); // the pool's one open connection predates the ALTER
  for (const item of ITEMS) await f.likes.createItem(item);
  const random = seededRandom(7);
  const plan = Array.from({ length: USERS }, (_, u) => ({
    user: `reader-${String(u).padStart(3, "0")}`,
    items: Array.from({ length: LIKES_PER_USER }, () => ITEMS[Math.floor(random() * ITEMS.length)]!),
  }));
  const half = Math.floor(USERS * 0.75);
  const write = async (slice: typeof plan) =>
    runWorkers(8, async (w) => {
      for (let i = w; i < slice.length; i += 8) {
        const { user, items } = slice[i]!;
        for (const item of items) await f.likes.like(user, item);
        await f.likes.unlike(user, items[0]!);
      }
    });
  // Three quarters consumed (watermarks well above 0), the rest pending.
  await write(plan.slice(0, half));
  await runWorkers(PARTITIONS, async (part) => {
    // One consumer per partition, in parallel (batches of one partition never share row locks with another's).
    for (
      let events = await f.consumer.fetchPending(part, 500);
      events.length > 0;
      events = await f.consumer.fetchPending(part, 500)
    ) {
      await f.consumer.applyBatch(events);
    }
  });
  await write(plan.slice(half));
  outboxRows = await count(f.db, "SELECT count(*) AS n FROM like_outbox");
  assert.ok(outboxRows > 3000, `a few thousand events (${outboxRows})`);
  assert.ok((await count(f.db, "SELECT sum(applied_upto) AS n FROM counter_watermark")) > 0);
  assert.ok(
    (await count(
      f.db,
      "SELECT sum(s.last - w.applied_upto) AS n FROM like_seq s JOIN counter_watermark w USING (part)",
    )) > 0,
  );
  await f.db.pool.query("ANALYZE");
  const { rows } = await f.db.pool.query<{ item_id: string; n: number }>(
    "SELECT item_id, count(*)::int AS n FROM like_outbox GROUP BY item_id ORDER BY n, item_id",
  );
  sample = {
    cold: rows[0]!.item_id,
    median: rows[Math.floor(rows.length / 2)]!.item_id,
    hot: rows[rows.length - 1]!.item_id,
  };
});

test.after(async () => {
  await f?.close();
});

test("READ_COUNT_SQL reads like_outbox through like_outbox_item_seq, never by a Seq Scan", async (t) => {
  const client = await f.db.pool.connect();
  try {
    for (const [label, item] of Object.entries(sample)) {
      const plan = await explain(client, item);
      const accesses = outboxAccesses(plan);
      t.diagnostic(`note ${label} item ${item}: ${describe(plan)}`);
      assert.ok(accesses.length > 0, "the plan reads like_outbox");
      assert.ok(
        !planNodes(plan).some((n) => n["Node Type"] === "Seq Scan" && n["Relation Name"] === "like_outbox"),
        "no Seq Scan on like_outbox",
      );
      for (const a of accesses) assert.ok(a.ok, `${label}: like_outbox read by ${a.how}`);
    }
    // A generic plan (what a prepared statement may switch to) must not scan either.
    await client.query("SET plan_cache_mode = force_generic_plan");
    await client.query(`PREPARE read_count(text) AS ${READ_COUNT_SQL}`);
    const { rows } = await client.query<{ "QUERY PLAN": [{ Plan: PlanNode }] }>(
      `EXPLAIN (FORMAT JSON) EXECUTE read_count('${sample.median}')`,
    );
    const generic = rows[0]!["QUERY PLAN"][0].Plan;
    t.diagnostic(`note generic plan: ${describe(generic)}`);
    const genericAccesses = outboxAccesses(generic);
    assert.ok(genericAccesses.length > 0, "the generic plan reads like_outbox");
    for (const a of genericAccesses) assert.ok(a.ok, `generic plan: like_outbox read by ${a.how}`);
    await client.query("DEALLOCATE read_count");
    await client.query("RESET plan_cache_mode");
  } finally {
    client.release();
  }
});

/**
 * Rows a plan's like_outbox accesses produced or read and discarded, over all loops. EXPLAIN
 * prints per-loop averages rounded to whole rows, so the product can overshoot by up to half a
 * row per loop: that slack is subtracted, so a negative control's "read more" is never rounding.
 */
function outboxRowsRead(plan: PlanNode): number {
  return outboxAccesses(plan).reduce((sum, { node }) => {
    const loops = node["Actual Loops"] ?? 1;
    const perLoop =
      (node["Actual Rows"] ?? 0) + (node["Rows Removed by Filter"] ?? 0) + (node["Rows Removed by Index Recheck"] ?? 0);
    return sum + Math.max(0, (perLoop - 0.5) * loops);
  }, 0);
}

/** The item's events above its partitions' watermarks: the range pendingForItem may read. */
async function eventsAboveWatermark(item: string): Promise<number> {
  return count(
    f.db,
    `SELECT count(*) AS n FROM like_outbox o JOIN counter_watermark w ON w.part = o.part AND o.seq > w.applied_upto
      WHERE o.item_id = $1`,
    [item],
  );
}

test("executed, the outbox side touches only the item's events above the watermarks, not its history", async () => {
  const client = await f.db.pool.connect();
  try {
    for (const item of Object.values(sample)) {
      const itemEvents = await count(f.db, "SELECT count(*) AS n FROM like_outbox WHERE item_id = $1", [item]);
      const above = await eventsAboveWatermark(item);
      assert.ok(
        above < itemEvents,
        `${item}: part of its history is below the watermarks (${above} of ${itemEvents} above)`,
      );
      const plan = await explain(client, item, true);
      assert.ok(outboxAccesses(plan).length > 0, `${item}: the executed plan reads like_outbox`);
      const read = outboxRowsRead(plan);
      assert.ok(
        read <= above,
        `${item}: read ${read} outbox rows; ${above} of its ${itemEvents} events are above the watermarks (table: ${outboxRows})`,
      );
      // And the figure agrees with a direct count.
      const expected = await count(
        f.db,
        `SELECT count(*) AS n FROM like_outbox o JOIN counter_watermark w ON w.part = o.part AND o.seq > w.applied_upto
          WHERE o.item_id = $1 AND NOT EXISTS (SELECT 1 FROM processed_event pe WHERE pe.part = o.part AND pe.seq = o.seq)`,
        [item],
      );
      assert.equal((await readCount(f.db.pool, item, 0)).pendingForItem, expected);
    }
  } finally {
    client.release();
  }
});

test("negative control: the earlier form of the pending part (a join filtered by the watermark) reads the item's whole history", async (t) => {
  // The form READ_COUNT_SQL had before its pending part became a LATERAL aggregate.
  const joinThenFilter = `
    SELECT count(*) FROM counter_watermark w
      JOIN like_outbox o ON o.item_id = $1 AND o.part = w.part AND o.seq > w.applied_upto
     WHERE NOT EXISTS (SELECT 1 FROM processed_event pe WHERE pe.part = o.part AND pe.seq = o.seq)`;
  const above = await eventsAboveWatermark(sample.hot);
  const client = await f.db.pool.connect();
  try {
    // The hash join it was planned as when the P-row watermark table had no statistics.
    await client.query("BEGIN");
    await client.query("SET LOCAL enable_nestloop = off");
    const { rows } = await client.query<{ "QUERY PLAN": [{ Plan: PlanNode }] }>(
      `EXPLAIN (ANALYZE, FORMAT JSON) ${joinThenFilter}`,
      [sample.hot],
    );
    const plan = rows[0]!["QUERY PLAN"][0].Plan;
    const read = outboxRowsRead(plan);
    t.diagnostic(`note join-then-filter: ${describe(plan)}, read ${read} outbox rows, ${above} above the watermarks`);
    assert.ok(read > above, `the check of the previous test rejects it: read ${read} > ${above}`);
  } finally {
    await client.query("ROLLBACK");
    client.release();
  }
});

test("negative control: without like_outbox_item_seq the query reads other items' events, and both checks say so", async (t) => {
  // Counted first: once DROP INDEX holds its lock on like_outbox, another connection would wait for it.
  const above = await eventsAboveWatermark(sample.median);
  const client = await f.db.pool.connect();
  try {
    const pagesWithIndex = await pagesTouched(client, sample.median);
    await client.query("BEGIN");
    await client.query("DROP INDEX like_outbox_item_seq");
    const plan = await explain(client, sample.median, true);
    const read = outboxRowsRead(plan);
    const pagesWithout = await pagesTouched(client, sample.median);
    // Without the item index the best remaining plan reads every item's backlog (the primary key
    // range above each watermark), scans the table, or walks a whole other index for the item's
    // entries (a bitmap over the UNIQUE (user_id, item_id, version) index): more rows, or more pages.
    t.diagnostic(
      `note without the index: ${describe(plan)}, read ${read} outbox rows, ${above} above the watermarks; pages touched ${pagesWithout} against ${pagesWithIndex} with it`,
    );
    assert.ok(
      outboxAccesses(plan).some((a) => !a.ok),
      "the check of the first test rejects this plan",
    );
    assert.ok(
      read > above || pagesWithout > 2 * pagesWithIndex,
      `the executed plan reads more than the item's range: rows ${read} > ${above}, or pages ${pagesWithout} > 2 × ${pagesWithIndex}`,
    );
  } finally {
    await client.query("ROLLBACK");
    client.release();
  }
  const { rows } = await f.db.pool.query("SELECT 1 FROM pg_indexes WHERE indexname = 'like_outbox_item_seq'");
  assert.equal(rows.length, 1, "the index is back after the rollback");
});
