/**
 * A counter consumer's apply (applyWithDedup) joins the events it inserted into the processed
 * table back to the batch, to add each new event's delta: for a round of thousands of events that
 * join must be a hash join, not a nested loop comparing every inserted event with every event of
 * the batch (2,000 events: four million comparisons, 20-40 ms a round under load). The planner
 * chooses from estimates (an unnest of four arrays is ten rows to it, whatever it holds), so the
 * shape of the statement decides. The negative control is the shape the round first had, the
 * watermark joined into the batch's CTE: its estimate of one row made the planner loop.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { applyWithDedup } from "../../src/counters/counter-consumer.ts";
import type { CountEvent } from "../../src/counters/counter-spec.ts";
import type { PoolClient } from "../../src/db/pool.ts";
import { LIKE_COUNTER } from "../../src/likes/like-spec.ts";
import { executedGenericPlan, rowsRemovedByJoinFilters } from "../support/explain.ts";
import { createTestDatabase } from "../support/test-db.ts";

const P = 4;
const ITEMS = 100;
const PER_PART = 500;

/** The round's first shape: the watermark joined into the batch's CTE. */
const WATERMARK_JOINED = `
  WITH ev AS (SELECT e.* FROM unnest($1::int[], $2::bigint[], $3::text[], $4::int[]) AS e(part, seq, key, delta)
                JOIN counter_watermark w ON w.part = e.part
               WHERE e.seq > w.applied_upto),
  fresh AS (
    INSERT INTO processed_event (part, seq, how)
    SELECT ev.part, ev.seq, CASE WHEN ev.seq <= c.base_seq THEN 'COVERED' ELSE 'APPLIED' END
      FROM ev JOIN like_count c ON c.item_id = ev.key AND c.part = ev.part
    ON CONFLICT DO NOTHING
    RETURNING part, seq, how),
  added AS (
    UPDATE like_count c SET n = c.n + d.delta
      FROM (SELECT ev.part, ev.key, sum(ev.delta) AS delta FROM fresh JOIN ev USING (part, seq)
             WHERE fresh.how = 'APPLIED' GROUP BY ev.part, ev.key) d
     WHERE c.item_id = d.key AND c.part = d.part
    RETURNING 1)
  SELECT count(*) FILTER (WHERE how = 'APPLIED')::int AS applied FROM fresh`;

const events: CountEvent[] = Array.from({ length: P * PER_PART }, (_, i) => ({
  part: i % P,
  seq: Math.floor(i / P) + 1,
  factId: `u-${i}`,
  key: `item-${i % ITEMS}`,
  delta: 1,
  version: 1,
}));

const values = [
  events.map((e) => e.part),
  events.map((e) => e.seq),
  events.map((e) => e.key),
  events.map((e) => e.delta),
];

/** Rows every nested loop of the executed generic plan compared and threw away, over all its loops. */
async function rowsRemovedByJoins(client: PoolClient, name: string, run: () => Promise<unknown>): Promise<number> {
  const literals = values.map((v) => `'{${v.join(",")}}'`).join(", ");
  return rowsRemovedByJoinFilters(await executedGenericPlan(client, name, run, literals));
}

test("a counter round's apply joins its inserted events back to the batch by hash: it compares about as many rows as the round holds; the watermark-joined shape loops over every pair", async (t) => {
  const db = await createTestDatabase({ partitions: P });
  const client = await db.pool.connect();
  t.after(async () => {
    client.release();
    await db.close();
  });
  await client.query(
    "INSERT INTO item (item_id, kind) SELECT 'item-' || i, 'plain' FROM generate_series(0, $1::int - 1) AS i",
    [ITEMS],
  );
  await client.query(
    "INSERT INTO like_count (item_id, part) SELECT 'item-' || i, p FROM generate_series(0, $1::int - 1) AS i, generate_series(0, $2::int - 1) AS p",
    [ITEMS, P],
  );
  await client.query("ANALYZE");
  const apply = applyWithDedup(LIKE_COUNTER);
  const removed = await rowsRemovedByJoins(client, `${LIKE_COUNTER.kind}_apply`, () => apply(client, events));
  const control = await rowsRemovedByJoins(client, "apply_watermark_joined", () =>
    client.query({
      name: "apply_watermark_joined",
      text: WATERMARK_JOINED,
      values: [
        events.map((e) => e.part),
        events.map((e) => e.seq),
        events.map((e) => e.key),
        events.map((e) => e.delta),
      ],
    }),
  );
  t.diagnostic(
    `note rows removed by join filters for a round of ${events.length}: apply ${removed}, control ${control}`,
  );
  assert.ok(removed <= events.length, `the apply compares about the round's rows: ${removed}`);
  assert.ok(control >= events.length * 100, `the control compares every pair: ${control}`);
});
