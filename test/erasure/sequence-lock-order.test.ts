/**
 * An erasure batch takes the sequence rows of the partitions it numbers in ascending order, the
 * order like and relation batches take them in (the deadlock argument: every writer that holds
 * several sequence rows took them in the same order). Seen from outside: the test holds one
 * partition's row, the batch runs into it (pg_locks: it waits for the holder's transaction),
 * and a NOWAIT probe says which of its other rows it holds meanwhile. Ascending, a batch stopped
 * at the higher row holds the lower one, and one stopped at the lower row holds nothing of the
 * higher. Both sequences: like_seq (a batch of likes of the account's post, by likers of
 * partitions 1 and 3) and event_seq (a batch of its follows of accounts of partitions 1 and 3).
 * The controls reverse the order in this test's database (ORDER BY part DESC): the
 * observations flip.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { openLedger } from "../../src/ledger.ts";
import { replaceFunctionText } from "../support/function-mutant.ts";
import {
  holdSequenceRow,
  keyInPartition,
  sequenceRowHeld,
  waiterFor,
  type SequenceTable,
} from "../support/sequence-rows.ts";
import { createTestDatabase } from "../support/test-db.ts";

const P = 4;
const LOW = 1;
const HIGH = 3;

const PHASE_OF: Record<"like_seq" | "event_seq", string> = { like_seq: "post_likes", event_seq: "following" };

/** Where each reversed control edits: the sequence lock of erasure_unlike or of erasure_remove_relations. */
const REVERSED: Record<"like_seq" | "event_seq", [string, [string, string]]> = {
  like_seq: [
    "erasure_unlike(text[],text[],integer)",
    ["ORDER BY s.part FOR UPDATE", "ORDER BY s.part DESC FOR UPDATE"],
  ],
  event_seq: [
    "erasure_remove_relations(text[],text[],bigint[],integer)",
    ["ORDER BY s.part FOR UPDATE", "ORDER BY s.part DESC FOR UPDATE"],
  ],
};

/**
 * eve with a post liked by one liker of partition LOW and one of HIGH, and follows of one account
 * of each; her erasure is run up to the phase that numbers `table`'s events. Then the test holds
 * `heldPart`'s row of `table`, runs that phase's batch into it, and returns whether the batch
 * holds the other partition's row while it waits.
 */
async function batchAgainstHeldRow(
  t: TestContext,
  table: "like_seq" | "event_seq",
  heldPart: number,
  reversed: boolean,
): Promise<boolean> {
  const db = await createTestDatabase({ partitions: P });
  const ledger = await openLedger(db.pool, { erasureBatchSize: 100 });
  const pending: { release?: () => Promise<void>; running?: Promise<unknown> } = {};
  // Teardown lets the held row go first, so the batch ends before the pool is closed.
  t.after(async () => {
    await pending.release?.();
    await pending.running?.catch(() => undefined);
    await db.close();
  });
  const key = (part: number, prefix: string) => keyInPartition(db.pool, P, part, prefix);
  const stars = [await key(LOW, "star-"), await key(HIGH, "star-")];
  const likers = [await key(LOW, "liker-"), await key(HIGH, "liker-")];
  for (const a of ["eve", ...stars]) await ledger.relations.upsertAccount(a);
  const post = (await ledger.posts.createPost("eve", "PUBLIC", "eve's post")).postId;
  for (const liker of likers) await ledger.likes.like(liker, post);
  for (const star of stars) await ledger.relations.follow("eve", star);
  if (reversed) await replaceFunctionText(db.pool, REVERSED[table][0], [REVERSED[table][1]]);

  await ledger.erasure.start("eve", "admin");
  while ((await ledger.erasure.status("eve"))!.phase !== PHASE_OF[table]) await ledger.erasure.step("eve");
  const held = await holdSequenceRow(db.pool, table as SequenceTable, heldPart);
  pending.release = held.release;
  const running = ledger.erasure.step("eve");
  pending.running = running;
  running.catch(() => undefined);
  await waiterFor(db.pool, held.xid, `the ${PHASE_OF[table]} batch running into partition ${heldPart}'s ${table} row`);
  const otherHeld = await sequenceRowHeld(db.pool, table, heldPart === LOW ? HIGH : LOW);
  await held.release();
  const batch = (await running) as { phase: string; facts: number };
  assert.deepEqual([batch.phase, batch.facts], [PHASE_OF[table], 2], "the batch turned off both facts");
  return otherHeld;
}

for (const table of ["like_seq", "event_seq"] as const) {
  test(`P=4 an erasure batch numbering ${table} events of partitions 1 and 3, stopped at partition 3's row, already holds partition 1's`, async (t) => {
    assert.equal(
      await batchAgainstHeldRow(t, table, HIGH, false),
      true,
      "waiting for the higher row, the batch must hold the lower one (ascending order)",
    );
  });

  test(`P=4 the same ${table} batch stopped at partition 1's row holds nothing of partition 3 yet`, async (t) => {
    assert.equal(
      await batchAgainstHeldRow(t, table, LOW, false),
      false,
      "waiting for the lower row, the batch must not hold the higher one yet (ascending order)",
    );
  });

  test(`negative control: with ${table} locked in descending order, the batch holds partition 3's row while it waits for 1's, and not 1's while it waits for 3's`, async (t) => {
    assert.equal(await batchAgainstHeldRow(t, table, LOW, true), true);
    assert.equal(await batchAgainstHeldRow(t, table, HIGH, true), false);
  });
}
