/**
 * Two like counter rounds over the same two partitions, their batches in opposite orders (A:
 * partition 1 then 3; B: 3 then 1), neither deadlock nor apply an event twice, because a round
 * takes the counter_watermark rows of its partitions in ascending partition order whatever order
 * its batches came in (lockWatermarks). The race is made deterministic from outside, as for the
 * writers (batch-opposite-orders.test.ts): the test holds partition 1's watermark row, A runs into
 * it (pg_locks: A waits for the holder), then B runs into it behind A; a NOWAIT probe says whether
 * B holds partition 3's row while it waits. Then the holder commits.
 *
 * Negative control: the same rounds through a frame that locks each batch's watermark row as the
 * batch comes (input order). B then takes partition 3's row before it waits for partition 1's;
 * when the holder commits, A takes 1 and waits for 3 (B's), B waits for 1 (A's): PostgreSQL's
 * deadlock detector aborts one of them with SQLSTATE 40P01, which withTransaction retries (its
 * `transactionStats.retries` counts it): the rounds still end, one of them having paid a deadlock.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { applyWithDedup } from "../../src/counters/counter-consumer.ts";
import { watermarkTablesOf, type CountEvent } from "../../src/counters/counter-spec.ts";
import { advanceWatermarks, lockWatermark } from "../../src/counters/watermark.ts";
import { createPool, type Pool } from "../../src/db/pool.ts";
import { transactionStats, withTransaction } from "../../src/db/transaction.ts";
import { LikeConsumer, toCountEvent } from "../../src/likes/like-consumer.ts";
import { LIKE_COUNTER } from "../../src/likes/like-spec.ts";
import type { LikeEvent } from "../../src/likes/types.ts";
import { waitForLockWait } from "../support/pg-locks.ts";
import { holdSequenceRow, keyInPartition, sequenceRowHeld, waitUntilWaitingFor } from "../support/sequence-rows.ts";
import { likesFixture } from "./fixture.ts";

const P = 4;
const LOW = 1;
const HIGH = 3;

type Round = (pool: Pool, batches: readonly (readonly LikeEvent[])[]) => Promise<{ applied: number; dup: number }>;

/** The production round: LikeConsumer.applyRound on a pool of its own. */
const productionRound: Round = (pool, batches) => new LikeConsumer(pool).applyRound(batches);

/** The wrong frame: each batch's watermark row locked as the batch comes, then the same apply. */
const inputOrderRound: Round = (pool, batches) =>
  withTransaction(pool, async (client) => {
    const tables = watermarkTablesOf(LIKE_COUNTER);
    for (const batch of batches) await lockWatermark(client, tables, batch[0]!.part);
    const events: CountEvent[] = batches.flat().map(toCountEvent);
    const stats = await applyWithDedup(LIKE_COUNTER)(client, events);
    await advanceWatermarks(
      client,
      tables,
      batches.map((b) => b[0]!.part),
    );
    return stats;
  });

interface Seen {
  highHeldByB: boolean;
  /** Transactions re-run after a deadlock (40P01) or serialization failure while the rounds ran. */
  retries: number;
  /** Each round's tally, or the SQLSTATE it failed with. */
  a: { applied: number; dup: number } | string;
  b: { applied: number; dup: number } | string;
  /** like_count per partition of the item, and the watermarks, after both ended. */
  counts: Record<number, number>;
  watermarks: Record<number, number>;
}

async function settle<T>(running: Promise<T>): Promise<T | string> {
  try {
    return await running;
  } catch (err) {
    return String((err as { code?: string }).code);
  }
}

async function oppositeRounds(t: TestContext, round: Round): Promise<Seen> {
  const f = await likesFixture(P, ["item-a"]);
  const pools = [
    createPool({ connectionString: f.db.url, max: 1 }),
    createPool({ connectionString: f.db.url, max: 1 }),
  ];
  t.after(async () => {
    for (const pool of pools) await pool.end();
    await f.close();
  });
  const users = [await keyInPartition(f.db.pool, P, LOW, "u-"), await keyInPartition(f.db.pool, P, HIGH, "u-")];
  for (const u of users) await f.likes.like(u, "item-a");
  const low = await f.consumer.fetchPending(LOW, 10);
  const high = await f.consumer.fetchPending(HIGH, 10);
  assert.equal(low.length + high.length, 2, "one event in each partition");
  const pids: number[] = [];
  for (const pool of pools)
    pids.push((await pool.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid);
  const held = await holdSequenceRow(f.db.pool, "counter_watermark", LOW);
  t.after(() => held.release());
  const retriesBefore = transactionStats.retries;
  const a = settle(round(pools[0]!, [low, high]));
  await waitUntilWaitingFor(f.db.pool, () => pids[0], held.xid, "round A running into partition 1's watermark row");
  const b = settle(round(pools[1]!, [high, low]));
  const wait = await waitForLockWait(f.db.pool, () => pids[1]);
  t.diagnostic(`note round B waits: locktype=${wait.locktype} mode=${wait.mode}`);
  const highHeldByB = await sequenceRowHeld(f.db.pool, "counter_watermark", HIGH);
  await held.release();
  const [seenA, seenB] = [await a, await b];
  const { rows: counts } = await f.db.pool.query<{ part: number; n: number }>(
    "SELECT part, n FROM like_count WHERE item_id = 'item-a' ORDER BY part",
  );
  const { rows: marks } = await f.db.pool.query<{ part: number; applied_upto: number }>(
    "SELECT part, applied_upto FROM counter_watermark WHERE part IN ($1, $2) ORDER BY part",
    [LOW, HIGH],
  );
  return {
    highHeldByB,
    retries: transactionStats.retries - retriesBefore,
    a: typeof seenA === "string" ? seenA : { applied: seenA.applied, dup: seenA.dup },
    b: typeof seenB === "string" ? seenB : { applied: seenB.applied, dup: seenB.dup },
    counts: Object.fromEntries(counts.map((r) => [r.part, r.n])),
    watermarks: Object.fromEntries(marks.map((r) => [r.part, r.applied_upto])),
  };
}

test("P=4 two like counter rounds over partitions 1 and 3 in opposite orders, racing on partition 1's watermark row: both commit, each event applied once, no deadlock", async (t) => {
  const seen = await oppositeRounds(t, productionRound);
  t.diagnostic(`note ascending: ${JSON.stringify(seen)}`);
  assert.equal(seen.highHeldByB, false, "B waits for partition 1's row holding nothing of partition 3 (ascending)");
  assert.equal(seen.retries, 0, "no deadlock, no re-run");
  assert.deepEqual(seen.a, { applied: 2, dup: 0 }, "A applies both partitions' events");
  assert.deepEqual(seen.b, { applied: 0, dup: 2 }, "B finds both already applied");
  assert.deepEqual(seen.counts, { [LOW]: 1, [HIGH]: 1 }, "each like counted once");
  assert.deepEqual(seen.watermarks, { [LOW]: 1, [HIGH]: 1 }, "both watermarks advanced");
});

test("negative control: a round locking its watermark rows in input order: B holds partition 3's row while it waits for partition 1's, and one round dies of a deadlock (40P01)", async (t) => {
  const seen = await oppositeRounds(t, inputOrderRound);
  t.diagnostic(`note input order: ${JSON.stringify(seen)}`);
  assert.equal(seen.highHeldByB, true, "B took partition 3's row first, as its batches came");
  assert.equal(seen.retries, 1, "exactly one round is the deadlock's victim, and re-runs");
});
