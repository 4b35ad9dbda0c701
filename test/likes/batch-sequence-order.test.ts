/**
 * A like batch that spans partitions takes their like_seq rows in ascending partition order (the
 * write path's deadlock argument: every writer that holds several sequence rows took them in the
 * same order). Seen from outside: the test holds one partition's row, the batch runs into it
 * (pg_locks: it waits for the holder's transaction), and a NOWAIT probe says which of the
 * batch's other rows it holds while it waits. Ascending, a batch stopped at the higher row holds
 * the lower one, and one stopped at the lower row holds nothing of the higher. The control is
 * like_set_batch with its numbering loop reversed (ORDER BY part DESC), in this test's database:
 * both observations flip.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import type { PoolClient } from "../../src/db/pool.ts";
import { writeSide, writeSideClean } from "../../src/likes/like-audit.ts";
import { replaceFunctionText } from "../support/function-mutant.ts";
import { holdSequenceRow, keyInPartition, sequenceRowHeld, waitUntilWaitingFor } from "../support/sequence-rows.ts";
import { likesFixture } from "./fixture.ts";

const P = 4;
const LOW = 1;
const HIGH = 3;

interface Seen {
  /** Whether the batch held the other partition's row while it waited for the held one. */
  otherHeld: boolean;
  seqs: number[];
}

/**
 * One batch with a like in partition HIGH (first, so arrival order is descending) and one in
 * LOW; the test holds `heldPart`'s like_seq row. Returns whether, while the batch waits for it,
 * the other partition's row is held.
 */
async function batchAgainstHeldRow(t: TestContext, heldPart: number, reversed: boolean): Promise<Seen> {
  const f = await likesFixture(P, ["item-a", "item-b"]);
  const otherPart = heldPart === LOW ? HIGH : LOW;
  const client: PoolClient = await f.db.pool.connect();
  const held = await holdSequenceRow(f.db.pool, "like_seq", heldPart);
  // Teardown releases the held row first, so the batch ends before its connection and the pool are closed.
  t.after(async () => {
    await held.release();
    client.release();
    await f.close();
  });
  if (reversed) {
    await replaceFunctionText(f.db.pool, "like_set_batch(text[],text[],boolean[],integer[],boolean[])", [
      [
        "WHERE w.outcome = 'CHANGED' GROUP BY w.part ORDER BY w.part\n",
        "WHERE w.outcome = 'CHANGED' GROUP BY w.part ORDER BY w.part DESC\n",
      ],
    ]);
  }
  const high = await keyInPartition(f.db.pool, P, HIGH, "liker-");
  const low = await keyInPartition(f.db.pool, P, LOW, "liker-");
  const pid = (await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;
  const running = client.query<{ seq: string }>(
    "SELECT seq FROM like_set_batch($1::text[], $2::text[], $3::boolean[], $4::integer[], $5::boolean[]) ORDER BY ord",
    [
      [high, low],
      ["item-a", "item-b"],
      [true, true],
      [HIGH, LOW],
      [false, false],
    ],
  );
  running.catch(() => undefined);
  await waitUntilWaitingFor(
    f.db.pool,
    () => pid,
    held.xid,
    `the batch running into partition ${heldPart}'s like_seq row`,
  );
  const otherHeld = await sequenceRowHeld(f.db.pool, "like_seq", otherPart);
  await held.release();
  const { rows } = await running;
  assert.ok(writeSideClean(await writeSide(f.db.pool)));
  return { otherHeld, seqs: rows.map((r) => Number(r.seq)) };
}

test("P=4 a like batch spanning partitions 1 and 3, stopped at partition 3's sequence row, already holds partition 1's", async (t) => {
  const seen = await batchAgainstHeldRow(t, HIGH, false);
  assert.equal(seen.otherHeld, true, "waiting for the higher row, the batch must hold the lower one (ascending order)");
  assert.deepEqual(seen.seqs, [1, 1], "each partition's first number");
});

test("P=4 the same batch stopped at partition 1's sequence row holds nothing of partition 3 yet", async (t) => {
  const seen = await batchAgainstHeldRow(t, LOW, false);
  assert.equal(
    seen.otherHeld,
    false,
    "waiting for the lower row, the batch must not hold the higher one yet (ascending order)",
  );
  assert.deepEqual(seen.seqs, [1, 1]);
});

test("negative control: like_set_batch numbering its partitions in descending order holds partition 3's row while it waits for partition 1's, and not partition 1's while it waits for 3's", async (t) => {
  assert.equal((await batchAgainstHeldRow(t, LOW, true)).otherHeld, true);
  assert.equal((await batchAgainstHeldRow(t, HIGH, true)).otherHeld, false);
});
