/**
 * The relation side of test/likes/batch-opposite-orders.test.ts: two follow batches whose followees
 * are in partitions 1 and 3, in opposite orders (A: 1 then 3; B: 3 then 1), race on partition 1's
 * event_seq row, held by the test. relation_set_batch takes the event_seq rows in ascending
 * partition order: B waits for partition 1's row holding nothing of partition 3, both commit, and
 * each partition is numbered 1, 2. Negative control: the function taking them in input order (in
 * this test's database): B holds partition 3's row while it waits, and one batch dies of a
 * deadlock (SQLSTATE 40P01).
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import type { PoolClient } from "../../src/db/pool.ts";
import { auditRelations, relationAuditClean } from "../../src/relations/relation-audit.ts";
import { stablePartition } from "../../src/partition.ts";
import { replaceFunctionText } from "../support/function-mutant.ts";
import { waitForLockWait } from "../support/pg-locks.ts";
import { holdSequenceRow, sequenceRowHeld, waitUntilWaitingFor } from "../support/sequence-rows.ts";
import { acct, relationsFixture } from "./fixture.ts";

const P = 4;
const LOW = 1;
const HIGH = 3;
const BATCH =
  "SELECT seq FROM relation_set_batch($1::text[], $2::text[], $3::text[], $4::boolean[], $5::integer) ORDER BY ord";

async function settle(running: Promise<{ rows: { seq: string }[] }>): Promise<number[] | string> {
  try {
    return (await running).rows.map((r) => Number(r.seq));
  } catch (err) {
    return String((err as { sqlState?: string }).sqlState ?? (err as { code?: string }).code);
  }
}

async function oppositeBatches(t: TestContext, inputOrder: boolean) {
  const f = await relationsFixture(P, 60);
  const clients: PoolClient[] = [await f.db.pool.connect(), await f.db.pool.connect()];
  const held = await holdSequenceRow(f.db.pool, "event_seq", LOW);
  t.after(async () => {
    await held.release();
    for (const c of clients) c.release();
    await f.close();
  });
  if (inputOrder) {
    await replaceFunctionText(f.db.pool, "relation_set_batch(text[],text[],text[],boolean[],integer)", [
      [
        "FROM unnest(v_part, o_outcome) AS w(part, outcome)\n     WHERE w.outcome = 'CHANGED' GROUP BY w.part ORDER BY w.part\n",
        "FROM unnest(v_part, o_outcome) WITH ORDINALITY AS w(part, outcome, o)\n     WHERE w.outcome = 'CHANGED' GROUP BY w.part ORDER BY min(w.o)\n",
      ],
    ]);
  }
  const accounts = Array.from({ length: 60 }, (_, i) => acct(i + 1));
  const [lowStar] = accounts.filter((a) => stablePartition(a, P) === LOW);
  const [highStar] = accounts.filter((a) => stablePartition(a, P) === HIGH);
  const fans = accounts.filter((a) => a !== lowStar && a !== highStar).slice(0, 2);
  const pids: number[] = [];
  for (const c of clients) pids.push((await c.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid);
  const [clientA, clientB] = clients as [PoolClient, PoolClient];
  const a = clientA.query<{ seq: string }>(BATCH, [
    ["follow", "follow"],
    [fans[0], fans[0]],
    [lowStar, highStar],
    [null, null],
    P,
  ]);
  a.catch(() => undefined);
  await waitUntilWaitingFor(f.db.pool, () => pids[0], held.xid, "batch A running into partition 1's event_seq row");
  const b = clientB.query<{ seq: string }>(BATCH, [
    ["follow", "follow"],
    [fans[1], fans[1]],
    [highStar, lowStar],
    [null, null],
    P,
  ]);
  b.catch(() => undefined);
  await waitForLockWait(f.db.pool, () => pids[1]);
  const highHeldByB = await sequenceRowHeld(f.db.pool, "event_seq", HIGH);
  await held.release();
  const [seenA, seenB] = [await settle(a), await settle(b)];
  const { rows } = await f.db.pool.query<{ part: number; seqs: number[] }>(
    "SELECT part, array_agg(seq::int ORDER BY seq) AS seqs FROM relation_event GROUP BY part ORDER BY part",
  );
  assert.ok(relationAuditClean(await auditRelations(f.db.pool)));
  return { highHeldByB, a: seenA, b: seenB, numbers: Object.fromEntries(rows.map((r) => [r.part, r.seqs])) };
}

test("P=4 two follow batches over partitions 1 and 3 in opposite orders, racing on partition 1's event_seq row: both commit, 1, 2 in each partition, no deadlock", async (t) => {
  const seen = await oppositeBatches(t, false);
  t.diagnostic(`note ascending: ${JSON.stringify(seen)}`);
  assert.equal(seen.highHeldByB, false, "B waits for partition 1's row holding nothing of partition 3 (ascending)");
  assert.deepEqual(seen.a, [1, 1]);
  assert.deepEqual(seen.b, [2, 2]);
  assert.deepEqual(seen.numbers, { [LOW]: [1, 2], [HIGH]: [1, 2] }, "gapless in each partition");
});

test("negative control: relation_set_batch taking event_seq rows in input order: B holds partition 3's row while it waits for partition 1's, and one batch dies of a deadlock (40P01)", async (t) => {
  const seen = await oppositeBatches(t, true);
  t.diagnostic(`note input order: ${JSON.stringify(seen)}`);
  assert.equal(seen.highHeldByB, true, "B took partition 3's row first, as its input came");
  assert.deepEqual(
    [seen.a, seen.b].filter((x) => x === "40P01").length,
    1,
    "exactly one batch is the deadlock's victim",
  );
});
