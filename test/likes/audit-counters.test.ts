import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { readSide, writeSide, type ReadSideAudit, type WriteSideAudit } from "../../src/likes/like-audit.ts";
import { stablePartition } from "../../src/partition.ts";
import { likesFixture, user, type LikesFixture } from "./fixture.ts";

/**
 * Each counter of the chapter-32 audits (src/likes/like-audit.ts), which gate most likes
 * tests, seen to fire: a healthy ledger audits clean, then one corruption written with direct
 * SQL makes exactly that counter count it, and the other counters of the same audit stay
 * where they were. A regression that makes a counter return 0 fails here.
 */

const PARTITIONS = 4;
const CONSUMED = "item-lab-01";
const PENDING = "item-lab-03";

/**
 * A healthy ledger with P = 4: twelve users like item-lab-01 and item-lab-02, user-01 unlikes
 * item-lab-01, four users like item-lab-03, all consumed; then users 05..07 like item-lab-03
 * and those three events stay pending.
 */
async function healthyLedger(t: TestContext): Promise<LikesFixture> {
  const f = await likesFixture(PARTITIONS);
  t.after(() => f.close());
  for (let u = 1; u <= 12; u++) {
    await f.likes.like(user(u), CONSUMED);
    await f.likes.like(user(u), "item-lab-02");
  }
  await f.likes.unlike(user(1), CONSUMED);
  for (let u = 1; u <= 4; u++) await f.likes.like(user(u), PENDING);
  await f.consumer.drain();
  for (let u = 5; u <= 7; u++) await f.likes.like(user(u), PENDING);
  return f;
}

type WriteCounters = Omit<WriteSideAudit, "lastSeq" | "outboxRows">;
type ReadCounters = Pick<
  ReadSideAudit,
  "countMismatchItems" | "exactViolations" | "boundViolations" | "unprocessedOverLag"
>;

async function writeCounters(f: LikesFixture): Promise<WriteCounters> {
  const { seqGapPartitions, versionMismatchPairs, deltaSumMismatchItems, misplacedEvents } = await writeSide(f.db.pool);
  return { seqGapPartitions, versionMismatchPairs, deltaSumMismatchItems, misplacedEvents };
}

async function readCounters(f: LikesFixture): Promise<ReadCounters> {
  const { countMismatchItems, exactViolations, boundViolations, unprocessedOverLag } = await readSide(f.db.pool);
  return { countMismatchItems, exactViolations, boundViolations, unprocessedOverLag };
}

const WRITE_CLEAN: WriteCounters = {
  seqGapPartitions: 0,
  versionMismatchPairs: 0,
  deltaSumMismatchItems: 0,
  misplacedEvents: 0,
};
// item-lab-03's three pending events make its count differ from its facts: lag, not a violation.
const READ_CLEAN: ReadCounters = {
  countMismatchItems: 1,
  exactViolations: 0,
  boundViolations: 0,
  unprocessedOverLag: false,
};

async function healthyWriteSide(t: TestContext): Promise<LikesFixture> {
  const f = await healthyLedger(t);
  assert.deepEqual(await writeCounters(f), WRITE_CLEAN);
  return f;
}

async function healthyReadSide(t: TestContext): Promise<LikesFixture> {
  const f = await healthyLedger(t);
  assert.deepEqual(await readCounters(f), READ_CLEAN);
  return f;
}

test("audit seqGapPartitions: an event renumbered past its partition's last seq is one partition with a gap", async (t) => {
  const f = await healthyWriteSide(t);
  await f.db.pool.query(
    `UPDATE like_outbox SET seq = seq + 100
      WHERE (part, seq) = (SELECT part, last FROM like_seq WHERE last > 0 ORDER BY part LIMIT 1)`,
  );
  assert.deepEqual(await writeCounters(f), { ...WRITE_CLEAN, seqGapPartitions: 1 });
});

test("audit versionMismatchPairs: a fact whose version is one more than its events is one mismatched pair", async (t) => {
  const f = await healthyWriteSide(t);
  await f.db.pool.query("UPDATE like_fact SET version = version + 1 WHERE user_id = $1 AND item_id = $2", [
    user(3),
    "item-lab-02",
  ]);
  assert.deepEqual(await writeCounters(f), { ...WRITE_CLEAN, versionMismatchPairs: 1 });
});

test("audit deltaSumMismatchItems: a liked fact deleted while its event stays is one item whose deltas exceed its likes", async (t) => {
  // The pair check reads from the facts, so a pair without a fact row is the item check's alone.
  const f = await healthyWriteSide(t);
  await f.db.pool.query("DELETE FROM like_fact WHERE user_id = $1 AND item_id = $2", [user(4), "item-lab-02"]);
  assert.deepEqual(await writeCounters(f), { ...WRITE_CLEAN, deltaSumMismatchItems: 1 });
});

test("audit misplacedEvents: an event whose user hashes to another partition is one misplaced event", async (t) => {
  // user-05 has one event on item-lab-02. Renaming the user in that event and in its fact keeps
  // pair and item consistent, so only the placement rule is broken.
  const f = await healthyWriteSide(t);
  const from = user(5);
  const home = stablePartition(from, PARTITIONS);
  const to = ["moved-1", "moved-2", "moved-3", "moved-4", "moved-5"].find(
    (u) => stablePartition(u, PARTITIONS) !== home,
  )!;
  await f.db.pool.query(
    `WITH fact AS (UPDATE like_fact SET user_id = $2 WHERE user_id = $1 AND item_id = $3)
     UPDATE like_outbox SET user_id = $2 WHERE user_id = $1 AND item_id = $3`,
    [from, to, "item-lab-02"],
  );
  assert.deepEqual(await writeCounters(f), { ...WRITE_CLEAN, misplacedEvents: 1 });
});

test("audit boundViolations: a count further from its facts than the item's pending events is one bound violation", async (t) => {
  // Every bound violation also breaks the exact identity and the count, so those fire with it;
  // the first step shows the bound is its own check: an error within the pending events is not one.
  const f = await healthyReadSide(t);
  const oneRow = `(SELECT item_id, part FROM like_count WHERE item_id = $1 ORDER BY part LIMIT 1)`;
  await f.db.pool.query(`UPDATE like_count SET n = n + 1 WHERE (item_id, part) = ${oneRow}`, [PENDING]);
  assert.deepEqual(
    await readCounters(f),
    { ...READ_CLEAN, exactViolations: 1 },
    "|n - facts| = 2 <= 3 pending: within the bound",
  );
  await f.db.pool.query(`UPDATE like_count SET n = n - 2 WHERE (item_id, part) = ${oneRow}`, [PENDING]);
  assert.deepEqual(
    await readCounters(f),
    { ...READ_CLEAN, exactViolations: 1, boundViolations: 1 },
    "|n - facts| = 4 > 3 pending",
  );
  await f.db.pool.query(`UPDATE like_count SET n = n + 1 WHERE (item_id, part) = ${oneRow}`, [CONSUMED]);
  assert.deepEqual(
    await readCounters(f),
    { countMismatchItems: 2, exactViolations: 2, boundViolations: 2, unprocessedOverLag: false },
    "a drained item has no slack at all",
  );
});

test("audit unprocessedOverLag: a sequence row one behind its events leaves more unprocessed events than lag", async (t) => {
  const f = await healthyReadSide(t);
  await f.db.pool.query("UPDATE like_seq SET last = last - 1 WHERE part = $1", [stablePartition(user(5), PARTITIONS)]);
  assert.deepEqual(await readCounters(f), { ...READ_CLEAN, unprocessedOverLag: true });
});
