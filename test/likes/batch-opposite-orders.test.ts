/**
 * Two like batches over the same two partitions, their writes in opposite orders (A: partition 1
 * then 3; B: 3 then 1), neither deadlock nor break the numbering, because like_set_batch takes
 * the like_seq rows of a batch in ascending partition order whatever the order its writes came
 * in. The race is made deterministic from outside: the test holds partition 1's row, A runs into
 * it (pg_locks: A waits for the holder), then B runs into it behind A; a NOWAIT probe says
 * whether B holds partition 3's row while it waits. Then the holder commits.
 *
 * Negative control: like_set_batch taking the rows in the order its writes came in (in this
 * test's database). B then takes partition 3's row before it waits for partition 1's; when the
 * holder commits, A takes 1 and waits for 3 (B's), B waits for 1 (A's): PostgreSQL's deadlock
 * detector aborts one of them with SQLSTATE 40P01.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import type { PoolClient } from "../../src/db/pool.ts";
import { writeSide, writeSideClean } from "../../src/likes/like-audit.ts";
import { replaceFunctionText } from "../support/function-mutant.ts";
import { waitForLockWait } from "../support/pg-locks.ts";
import { holdSequenceRow, keyInPartition, sequenceRowHeld, waitUntilWaitingFor } from "../support/sequence-rows.ts";
import { likesFixture } from "./fixture.ts";

const P = 4;
const LOW = 1;
const HIGH = 3;
const BATCH =
  "SELECT seq FROM like_set_batch($1::text[], $2::text[], $3::boolean[], $4::integer[], $5::boolean[]) ORDER BY ord";

interface Seen {
  /** Whether B held partition HIGH's row while it waited for partition LOW's. */
  highHeldByB: boolean;
  /** Each batch's numbers in its input order, or the SQLSTATE it failed with. */
  a: number[] | string;
  b: number[] | string;
  /** like_outbox's numbers per partition after both ended. */
  numbers: Record<number, number[]>;
}

async function settle(running: Promise<{ rows: { seq: string }[] }>): Promise<number[] | string> {
  try {
    return (await running).rows.map((r) => Number(r.seq));
  } catch (err) {
    return String((err as { code?: string; sqlState?: string }).sqlState ?? (err as { code?: string }).code);
  }
}

async function oppositeBatches(t: TestContext, inputOrder: boolean): Promise<Seen> {
  const f = await likesFixture(P, ["item-a", "item-b"]);
  const clients: PoolClient[] = [await f.db.pool.connect(), await f.db.pool.connect()];
  const held = await holdSequenceRow(f.db.pool, "like_seq", LOW);
  t.after(async () => {
    await held.release();
    for (const c of clients) c.release();
    await f.close();
  });
  if (inputOrder) {
    await replaceFunctionText(f.db.pool, "like_set_batch(text[],text[],boolean[],integer[],boolean[])", [
      [
        "FROM unnest(p_parts, o_outcome) AS w(part, outcome)\n     WHERE w.outcome = 'CHANGED' GROUP BY w.part ORDER BY w.part\n",
        "FROM unnest(p_parts, o_outcome) WITH ORDINALITY AS w(part, outcome, o)\n     WHERE w.outcome = 'CHANGED' GROUP BY w.part ORDER BY min(w.o)\n",
      ],
    ]);
  }
  const low = [await keyInPartition(f.db.pool, P, LOW, "a-"), await keyInPartition(f.db.pool, P, LOW, "b-")];
  const high = [await keyInPartition(f.db.pool, P, HIGH, "a-"), await keyInPartition(f.db.pool, P, HIGH, "b-")];
  const pids: number[] = [];
  for (const c of clients) pids.push((await c.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid);
  const [clientA, clientB] = clients as [PoolClient, PoolClient];
  // A: partition LOW's write first; B: partition HIGH's first. Distinct pairs: only the sequence rows are shared.
  const a = clientA.query<{ seq: string }>(BATCH, [
    [low[0], high[0]],
    ["item-a", "item-a"],
    [true, true],
    [LOW, HIGH],
    [false, false],
  ]);
  a.catch(() => undefined);
  await waitUntilWaitingFor(f.db.pool, () => pids[0], held.xid, "batch A running into partition 1's like_seq row");
  const b = clientB.query<{ seq: string }>(BATCH, [
    [high[1], low[1]],
    ["item-b", "item-b"],
    [true, true],
    [HIGH, LOW],
    [false, false],
  ]);
  b.catch(() => undefined);
  const wait = await waitForLockWait(f.db.pool, () => pids[1]);
  t.diagnostic(`note batch B waits: locktype=${wait.locktype} mode=${wait.mode}`);
  const highHeldByB = await sequenceRowHeld(f.db.pool, "like_seq", HIGH);
  await held.release();
  const [seenA, seenB] = [await settle(a), await settle(b)];
  const { rows } = await f.db.pool.query<{ part: number; seqs: number[] }>(
    "SELECT part, array_agg(seq::int ORDER BY seq) AS seqs FROM like_outbox GROUP BY part ORDER BY part",
  );
  assert.ok(writeSideClean(await writeSide(f.db.pool)));
  return {
    highHeldByB,
    a: seenA,
    b: seenB,
    numbers: Object.fromEntries(rows.map((r) => [r.part, r.seqs])),
  };
}

test("P=4 two like batches over partitions 1 and 3 in opposite orders, racing on partition 1's sequence row: both commit, 1, 2 in each partition, no deadlock", async (t) => {
  const seen = await oppositeBatches(t, false);
  t.diagnostic(`note ascending: ${JSON.stringify(seen)}`);
  assert.equal(seen.highHeldByB, false, "B waits for partition 1's row holding nothing of partition 3 (ascending)");
  assert.deepEqual(seen.a, [1, 1], "A: first in both partitions");
  assert.deepEqual(seen.b, [2, 2], "B: next in both partitions (its HIGH write first in its input)");
  assert.deepEqual(seen.numbers, { [LOW]: [1, 2], [HIGH]: [1, 2] }, "gapless in each partition");
});

test("negative control: like_set_batch taking sequence rows in input order: B holds partition 3's row while it waits for partition 1's, and one batch dies of a deadlock (40P01)", async (t) => {
  const seen = await oppositeBatches(t, true);
  t.diagnostic(`note input order: ${JSON.stringify(seen)}`);
  assert.equal(seen.highHeldByB, true, "B took partition 3's row first, as its input came");
  assert.deepEqual(
    [seen.a, seen.b].filter((x) => x === "40P01").length,
    1,
    "exactly one batch is the deadlock's victim",
  );
});
