/**
 * A consumer's read of its next batch (fetchPendingSql, shared by the like and comment counters,
 * the follower projector and the notification view) must cost the batch, not the partition's
 * history: a running service keeps at least a day of events and every dedup key above the
 * retention floor, and the consumer reads a batch many times a second. The negative control is
 * the form the consumers had before, the watermark joined as a table: its bound was a join filter
 * after an index scan from the partition's first event, and the seen check a merge anti join over
 * every seen key. The history is made with set-based INSERTs: the plan depends on table sizes and
 * statistics, not on how the rows were written.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { fetchPendingSql } from "../../src/counters/watermark.ts";
import { LIKE_COUNTER } from "../../src/likes/like-spec.ts";
import { watermarkTablesOf } from "../../src/counters/counter-spec.ts";
import type { Pool } from "../../src/db/pool.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { planNodes, type PlanNode } from "../support/explain.ts";

const HISTORY = 30_000;
const WATERMARK = 29_000;
const BATCH = 200;
const COLUMNS = "o.part, o.seq, o.user_id AS fact_id, o.item_id AS key, o.delta, o.version";

/** The form before: the watermark joined as a table, the seen check unbounded. */
const JOINED = `SELECT ${COLUMNS} FROM like_outbox o JOIN counter_watermark w ON w.part = o.part
                 WHERE o.part = $1 AND o.seq > w.applied_upto AND $3::bigint >= 0
                   AND NOT EXISTS (SELECT 1 FROM processed_event p WHERE p.part = o.part AND p.seq = o.seq)
                 ORDER BY o.seq LIMIT $2`;

let statements = 0;

/** Rows the executed plan took from each table (rows per loop times loops, over every node reading it). */
async function rowsRead(
  pool: Pool,
  sql: string,
  after: number,
): Promise<{ outbox: number; seen: number; seqs: number[] }> {
  const client = await pool.connect();
  const name = `fetch_pending_${statements++}`;
  try {
    // The service runs it as a named statement: after five custom plans, the generic one.
    let fetched: number[] = [];
    for (let i = 0; i < 6; i++) {
      const { rows } = await client.query<{ seq: number }>({ name, text: sql, values: [0, BATCH, after] });
      fetched = rows.map((r) => Number(r.seq));
    }
    const { rows } = await client.query<{ "QUERY PLAN": [{ Plan: PlanNode }] }>(
      `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE ${name}(0, ${BATCH}, ${after})`,
    );
    const read = (table: string) =>
      planNodes(rows[0]!["QUERY PLAN"][0].Plan)
        .filter((n) => n["Relation Name"] === table)
        .reduce((sum, n) => sum + (n["Actual Rows"] ?? 0) * (n["Actual Loops"] ?? 1), 0);
    return { outbox: read("like_outbox"), seen: read("processed_event"), seqs: fetched };
  } finally {
    client.release();
  }
}

test("a consumer's next batch is a range above the watermark: it reads the batch's events and seen keys, not the partition's history; the joined form reads all of it", async (t) => {
  const db = await createTestDatabase({ partitions: 1 });
  t.after(() => db.close());
  const pool = db.pool;
  await pool.query("INSERT INTO item (item_id, kind) SELECT 'item-' || i, 'plain' FROM generate_series(0, 99) AS i");
  await pool.query(
    `INSERT INTO like_outbox (part, seq, user_id, item_id, delta, version)
     SELECT 0, s, 'u-' || s, 'item-' || (s % 100), 1, 1 FROM generate_series(1, $1::int) AS s`,
    [HISTORY],
  );
  await pool.query("UPDATE like_seq SET last = $1", [HISTORY]);
  // Everything up to the watermark processed, and one out-of-order key above it (as a transport leaves).
  await pool.query(
    "INSERT INTO processed_event (part, seq, how) SELECT 0, s, 'APPLIED' FROM generate_series(1, $1::int) AS s",
    [WATERMARK],
  );
  await pool.query("INSERT INTO processed_event (part, seq, how) VALUES (0, $1, 'APPLIED')", [WATERMARK + 2]);
  await pool.query("UPDATE counter_watermark SET applied_upto = $1", [WATERMARK]);
  await pool.query("ANALYZE");

  const sql = fetchPendingSql("like_outbox", COLUMNS, watermarkTablesOf(LIKE_COUNTER));
  const bounded = await rowsRead(pool, sql, 0);
  const control = await rowsRead(pool, JOINED, 0);
  t.diagnostic(
    `note rows read for a batch of ${BATCH} at seq ${WATERMARK} of ${HISTORY}: outbox ${bounded.outbox}, seen keys ${bounded.seen}; ` +
      `joined form: outbox ${control.outbox}, seen keys ${control.seen}`,
  );
  const expected = Array.from({ length: BATCH + 1 }, (_, i) => WATERMARK + 1 + i).filter((s) => s !== WATERMARK + 2);
  assert.deepEqual(bounded.seqs, expected, "the batch: the events above the watermark, the seen one left out");
  assert.deepEqual(control.seqs, expected, "the control reads the same batch");
  assert.ok(bounded.outbox <= BATCH + 2, `outbox rows read: ${bounded.outbox}`);
  assert.ok(bounded.seen <= BATCH + 2, `seen keys read: ${bounded.seen}`);
  assert.ok(
    control.outbox + control.seen > 10 * (bounded.outbox + bounded.seen),
    `the joined form reads the history: outbox ${control.outbox}, seen ${control.seen}`,
  );

  // Read ahead: above a batch still being applied (its last seq), the next batch.
  const ahead = await rowsRead(pool, sql, WATERMARK + 500);
  assert.deepEqual(
    ahead.seqs,
    Array.from({ length: BATCH }, (_, i) => WATERMARK + 501 + i),
    "the events above `after`",
  );
  assert.ok(ahead.outbox <= BATCH + 1, `outbox rows read ahead: ${ahead.outbox}`);
});
