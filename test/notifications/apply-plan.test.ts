/**
 * The notification apply (applyWithDedup) reads the outbox rows of the events it registered as
 * fresh: one primary-key probe per event (freshOutboxRows), whatever the statistics say. The trap
 * is statistics taken while the outbox was small (autovacuum's analyze runs behind a fast-growing
 * table): as a plain join of the outbox with the fresh events, the planner then read the
 * partition's whole outbox and compared each of its rows with every fresh event, a cost that grew
 * with the outbox's history (the bench's notification drain at P = 16 fell from 127,000 to 25,000
 * events/s). Here the outbox is analyzed at 2 rows per partition and then holds 4,000; autovacuum
 * is off for it, so the stale statistics stay. The negative control is the join the sources had.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import type { PoolClient } from "../../src/db/pool.ts";
import { applyWithDedup } from "../../src/notifications/notification-consumer.ts";
import { LIKE_SOURCE, type NotificationSource } from "../../src/notifications/notification-sources.ts";
import { executedGenericPlan, rowsRead, rowsRemovedByJoinFilters, type PlanNode } from "../support/explain.ts";
import { createTestDatabase } from "../support/test-db.ts";

const P = 2;
const PER_PART = 4_000;
const BATCH = 500;
const PART = 1;

/** The like source as it was: the outbox joined to the fresh events, partition in the WHERE. */
const JOINED: NotificationSource = {
  ...LIKE_SOURCE,
  name: "likes_joined" as NotificationSource["name"],
  candidatesSql: `
    SELECT 'like'::text AS source, o.user_id AS actor, o.item_id AS subject, a.author AS recipient, 'like'::text AS type,
           o.item_id, o.delta = 1 AS active, o.version, o.created_at AS at, o.part, o.seq
      FROM like_outbox o JOIN fresh USING (seq) JOIN notification_item_author a ON a.item_id = o.item_id
     WHERE o.part = $1 AND a.author <> o.user_id`,
};

const seqs = Array.from({ length: BATCH }, (_, i) => PER_PART - BATCH + 1 + i);

/** The executed generic plan of the source's apply over the batch (every run rolled back: the events stay fresh). */
function applyPlan(client: PoolClient, source: NotificationSource): Promise<PlanNode> {
  return executedGenericPlan(
    client,
    `notifications_${source.name}_apply`,
    () => applyWithDedup(client, source, PART, seqs),
    `${PART}, '{${seqs.join(",")}}'`,
  );
}

test("a notification batch's apply reads its own events from the outbox by primary key, also under statistics of a small outbox; the joined shape compares every row of the partition with every event", async (t) => {
  const db = await createTestDatabase({ partitions: P });
  const client = await db.pool.connect();
  t.after(async () => {
    client.release();
    await db.close();
  });
  await client.query("ALTER TABLE like_outbox SET (autovacuum_enabled = off)");
  await client.query("INSERT INTO item (item_id, kind) VALUES ('item-plan', 'plain')");
  const outboxRows = (from: number, to: number) =>
    client.query(
      `INSERT INTO like_outbox (part, seq, user_id, item_id, delta, version)
       SELECT p, s, 'u-' || p || '-' || s, 'item-plan', 1, 1 FROM generate_series(0, $1::int - 1) AS p, generate_series($2::int, $3::int) AS s`,
      [P, from, to],
    );
  await outboxRows(1, 2);
  await client.query("ANALYZE like_outbox");
  await outboxRows(3, PER_PART);

  const plan = await applyPlan(client, LIKE_SOURCE);
  const control = await applyPlan(client, JOINED);
  const read = rowsRead(plan, "like_outbox");
  const removed = rowsRemovedByJoinFilters(plan);
  t.diagnostic(
    `note a batch of ${BATCH} of a partition of ${PER_PART}: apply reads ${read} outbox rows, removes ${removed} by join filters; ` +
      `control reads ${rowsRead(control, "like_outbox")}, removes ${rowsRemovedByJoinFilters(control)}`,
  );
  assert.ok(read <= BATCH, `the apply reads the batch's rows only: ${read}`);
  assert.ok(removed <= BATCH, `the apply compares about the batch's rows: ${removed}`);
  assert.ok(
    rowsRemovedByJoinFilters(control) >= BATCH * 100,
    `the control compares the partition's rows with every event: ${rowsRemovedByJoinFilters(control)}`,
  );
});
