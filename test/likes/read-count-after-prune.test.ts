/**
 * The count read after retention emptied processed_event below the watermarks (docs/retention.md).
 * A DELETE leaves the table's pages (and index pages) in place until VACUUM, and the statistics then
 * say "almost empty": the planner was seen to turn the read's "not yet processed" check into a merge
 * anti join that walks the whole primary-key index, ~65x slower than probing it per pending event.
 * The check is fenced (OFFSET 0 keeps the NOT EXISTS a per-row subplan), so what it reads of
 * processed_event stays bounded by the item's pending events. The history is made with set-based
 * INSERTs: the plan depends on table sizes and statistics, not on how the rows were written.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { READ_COUNT_SQL } from "../../src/likes/like-audit.ts";
import type { Pool } from "../../src/db/pool.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { planNodes, type PlanNode } from "../support/explain.ts";

const PARTS = 4;
const PER_PART = 25_000;
const WATERMARK = 24_900;
const ITEMS = 100;

/** Rows the executed plan took from processed_event (rows per loop times loops, over every node reading it). */
async function processedRowsRead(pool: Pool, sql: string, item: string): Promise<number> {
  const { rows } = await pool.query<{ "QUERY PLAN": [{ Plan: PlanNode }] }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${sql}`, [
    item,
  ]);
  return planNodes(rows[0]!["QUERY PLAN"][0].Plan)
    .filter((n) => n["Relation Name"] === "processed_event")
    .reduce((sum, n) => sum + (n["Actual Rows"] ?? 0) * (n["Actual Loops"] ?? 1), 0);
}

test("after a prune emptied processed_event, the count read takes from it no more than the item's pending events; the unfenced check walks the whole index", async (t) => {
  const db = await createTestDatabase({ partitions: PARTS });
  t.after(() => db.close());
  const pool = db.pool;
  await pool.query(
    "INSERT INTO item (item_id, kind) SELECT 'item-' || i, 'plain' FROM generate_series(0, $1::int - 1) AS i",
    [ITEMS],
  );
  await pool.query(
    `INSERT INTO like_outbox (part, seq, user_id, item_id, delta, version)
     SELECT p, s, 'u-' || p || '-' || s, 'item-' || (s % $2), 1, 1 FROM generate_series(0, $3::int - 1) AS p, generate_series(1, $1::int) AS s`,
    [PER_PART, ITEMS, PARTS],
  );
  await pool.query("UPDATE like_seq SET last = $1", [PER_PART]);
  // Every event processed, the watermark a little below the end; then the prune of the keys at or below it.
  await pool.query("INSERT INTO processed_event (part, seq, how) SELECT part, seq, 'APPLIED' FROM like_outbox");
  await pool.query("UPDATE counter_watermark SET applied_upto = $1", [WATERMARK]);
  await pool.query(
    "DELETE FROM processed_event p USING counter_watermark w WHERE p.part = w.part AND p.seq <= w.applied_upto",
  );
  await pool.query("ANALYZE");

  const unfenced = READ_COUNT_SQL.replace(" OFFSET 0)", ")");
  assert.notEqual(unfenced, READ_COUNT_SQL, "the read has the fence the control removes");
  const pendingPerItem = PARTS * ((PER_PART - WATERMARK) / ITEMS); // every item has one event per partition above each watermark
  let controlSaw = 0;
  for (let i = 0; i < ITEMS; i += 10) {
    const item = `item-${i}`;
    const fenced = await processedRowsRead(pool, READ_COUNT_SQL, item);
    assert.ok(
      fenced <= pendingPerItem,
      `${item}: the read took ${fenced} processed_event rows for ${pendingPerItem} pending events`,
    );
    controlSaw = Math.max(controlSaw, await processedRowsRead(pool, unfenced, item));
  }
  t.diagnostic(
    `note processed_event rows read per count read: fenced <= ${pendingPerItem}; unfenced up to ${controlSaw}`,
  );
  assert.ok(
    controlSaw > 10 * pendingPerItem,
    `the control (no fence) reads the whole index for some item: ${controlSaw}`,
  );
  // The reading is still exact: the pending part counts the events above the watermarks that are not processed.
  const { rows } = await pool.query<{ n: string; lag: string; pending: string }>(READ_COUNT_SQL, ["item-50"]);
  assert.deepEqual(
    { lag: Number(rows[0]!.lag), pending: Number(rows[0]!.pending) },
    { lag: PARTS * (PER_PART - WATERMARK), pending: 0 },
  );
});
