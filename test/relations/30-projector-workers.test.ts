/**
 * Two projector workers on one partition with overlapping batches (X fetched [1], Y fetched
 * [1, 2], and Y's sort puts seq 2 first). When the watermark was locked last, Y held
 * proj_count(F) and wanted seq 1's proj_seen key while X held that key and wanted
 * proj_count(F): a deadlock, found in review. With the watermark locked first, X waits at the
 * watermark before touching any row, seen in pg_locks, and nothing is retried. (Run against
 * the old placement, this test fails with retries=1 deadlocks=1.)
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { Gate } from "../../src/hooks.ts";
import { transactionStats } from "../../src/db/transaction.ts";
import { RelationProjector, projectVersioned, type ProjectStep } from "../../src/relations/projector.ts";
import { formatDiff, projectionDiff } from "../../src/relations/relation-audit.ts";
import { waitForAnyLockWait } from "../support/pg-locks.ts";
import { acct, relationsFixture } from "./fixture.ts";

test("30-projector P=1 overlapping batches of two workers on one partition take turns: no deadlock, no retry", async (t) => {
  const f = await relationsFixture(1, 10);
  const yMidBatch = new Gate("worker Y after its first event");
  t.after(async () => {
    yMidBatch.release();
    await f.close();
  });
  const followee = acct(5);
  await f.rel.follow(acct(3), followee); // seq 1
  await f.rel.follow(acct(2), followee); // seq 2, sorts first in a batch
  const forX = await f.projector.fetchPending(0, 1);
  const forY = await f.projector.fetchPending(0, 10);
  assert.deepEqual([forX.map((e) => e.seq), forY.map((e) => e.seq)], [[1], [1, 2]]);

  let first = true;
  const stepY: ProjectStep = async (client, e) => {
    const verdict = await projectVersioned(client, e);
    if (first) {
      first = false; // Y now holds seq 2's proj_seen key, its proj_follower row and proj_count(followee)
      await yMidBatch.handler({});
    }
    return verdict;
  };
  const deadlocksBefore = await deadlocks(f);
  const retriesBefore = transactionStats.retries;
  const y = new RelationProjector(f.db.pool, { step: stepY }).applyBatch(forY);
  await yMidBatch.waitArrived();
  const x = f.projector.applyBatch(forX);
  const wait = await waitForAnyLockWait(f.db.pool);
  t.diagnostic(`note worker X waits before touching a row: locktype=${wait.locktype} granted=${wait.granted}`);
  yMidBatch.release();
  const [ry, rx] = await Promise.all([y, x]);
  t.diagnostic(
    `note Y=[${ry.verdicts.join(",")}] X=[${rx.verdicts.join(",")}] retries=${transactionStats.retries - retriesBefore} deadlocks=${(await deadlocks(f)) - deadlocksBefore}`,
  );
  assert.deepEqual(ry.verdicts, ["applied", "applied"]);
  assert.deepEqual(rx.verdicts, ["dup"]);
  assert.equal(transactionStats.retries - retriesBefore, 0);
  assert.equal((await deadlocks(f)) - deadlocksBefore, 0);
  assert.equal(formatDiff(await projectionDiff(f.db.pool)), "0,0,0");
});

async function deadlocks(f: Awaited<ReturnType<typeof relationsFixture>>): Promise<number> {
  const { rows } = await f.db.pool.query<{ n: number }>(
    "SELECT deadlocks AS n FROM pg_stat_database WHERE datname = current_database()",
  );
  return Number(rows[0]!.n);
}
