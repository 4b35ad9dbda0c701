/**
 * Retention of the dedup keys (pruneDedupKeys): processed_event and proj_seen rows at or below
 * their watermark are deleted; a redelivery of every old event afterwards counts nothing, the
 * audits stay clean, and a rebuild after the prune is exact. While a rebuild runs the prune
 * does nothing; the negative control deletes the same keys under a running rebuild and the
 * rebuild then installs a wrong count.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { Gate } from "../../src/hooks.ts";
import { pruneDedupKeys } from "../../src/retention/retention.ts";
import { openLedger, type Ledger } from "../../src/ledger.ts";
import { readSide, readSideClean, writeSide, writeSideClean } from "../../src/likes/like-audit.ts";
import { formatDiff, projectionDiff } from "../../src/relations/relation-audit.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";

const ITEMS = ["item-r1", "item-r2", "item-r3"];

async function setup(partitions: number): Promise<{ db: TestDatabase; ledger: Ledger }> {
  const db = await createTestDatabase({ partitions });
  const ledger = await openLedger(db.pool);
  for (const item of ITEMS) await ledger.likes.createItem(item);
  await db.pool.query("INSERT INTO account (account_id) SELECT 'acct-' || n FROM generate_series(1, 12) AS n");
  return { db, ledger };
}

async function writeSome(ledger: Ledger, round: number): Promise<void> {
  for (let u = 0; u < 30; u++) {
    await ledger.likes.like(`user-${round}-${u}`, ITEMS[u % ITEMS.length]!);
    if (u % 4 === 0) await ledger.likes.unlike(`user-${round}-${u}`, ITEMS[u % ITEMS.length]!);
  }
  for (let a = 1; a <= 12; a++) {
    const b = ((a + round) % 12) + 1;
    if (a !== b)
      await (round % 2 === 0
        ? ledger.relations.follow(`acct-${a}`, `acct-${b}`)
        : ledger.relations.unfollow(`acct-${a}`, `acct-${(a % 12) + 1}`));
  }
}

async function scalar(db: TestDatabase, sql: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(sql);
  return Number(rows[0]!.n);
}

test("P=4 prune the dedup keys at the watermarks, redeliver every event: no double count, audits clean, a later rebuild is exact", async (t) => {
  const { db, ledger } = await setup(4);
  t.after(() => db.close());
  await writeSome(ledger, 0);
  await writeSome(ledger, 1);
  await ledger.likeConsumer.drain();
  await ledger.projector.drain();
  const report = await pruneDedupKeys(db.pool);
  const left = await scalar(
    db,
    "SELECT (SELECT count(*) FROM processed_event) + (SELECT count(*) FROM proj_seen) AS n",
  );
  t.diagnostic(
    `note pruned processed_event=${report.processedEventRows} proj_seen=${report.projSeenRows}, ${left} keys left`,
  );
  assert.equal(report.pruned, true);
  assert.ok(report.processedEventRows > 0 && report.projSeenRows > 0);
  assert.equal(left, 0, "everything was at or below the watermarks");

  let dup = 0;
  let applied = 0;
  for (let part = 0; part < 4; part++) {
    const likeEvents = await ledger.likeConsumer.fetchRange(part, 1, Number.MAX_SAFE_INTEGER);
    if (likeEvents.length > 0) {
      const r = await ledger.likeConsumer.applyBatch(likeEvents);
      dup += r.dup;
      applied += r.applied + r.covered;
    }
    const relationEvents = await ledger.projector.fetchRange(part, 1, Number.MAX_SAFE_INTEGER);
    if (relationEvents.length > 0) {
      const r = await ledger.projector.applyBatch(relationEvents);
      dup += r.dup;
      applied += r.applied + r.stale;
    }
  }
  t.diagnostic(`note redelivered everything after the prune: dup=${dup} applied=${applied}`);
  assert.equal(applied, 0);
  const read = await readSide(db.pool);
  assert.ok(writeSideClean(await writeSide(db.pool)));
  assert.ok(readSideClean(read) && read.countMismatchItems === 0, JSON.stringify(read));
  assert.equal(formatDiff(await projectionDiff(db.pool)), "0,0,0");

  await writeSome(ledger, 2);
  await ledger.likeConsumer.drain();
  const rebuilt = await ledger.likeRebuild.rebuild();
  assert.equal(rebuilt.totalAbsDrift, 0);
  const after = await readSide(db.pool);
  assert.ok(readSideClean(after) && after.countMismatchItems === 0, JSON.stringify(after));
});

test("P=1 while a rebuild runs the prune deletes nothing; negative control: deleting the keys anyway makes the rebuild install a wrong count", async (t) => {
  const { db, ledger } = await setup(1);
  const gate = new Gate("rebuild.afterSnapshot");
  t.after(async () => {
    gate.release();
    await db.close();
  });
  await writeSome(ledger, 0);
  await ledger.likeConsumer.drain();
  ledger.hooks.on("rebuild.afterSnapshot", gate.handler);
  const rebuild = ledger.likeRebuild.rebuild();
  const { snapshotSeqs } = (await gate.waitArrived()) as { snapshotSeqs: number[] };
  // Events after the snapshot, applied: the watermark passes S, and the keys in (S, watermark]
  // are what the install needs to count them.
  await writeSome(ledger, 1);
  await ledger.likeConsumer.drain();
  const watermark = await scalar(db, "SELECT applied_upto AS n FROM counter_watermark");
  assert.ok(watermark > snapshotSeqs[0]!);

  const skipped = await pruneDedupKeys(db.pool);
  assert.deepEqual(skipped, { pruned: false, processedEventRows: 0, projSeenRows: 0 });
  assert.equal(await scalar(db, "SELECT count(*) AS n FROM processed_event"), watermark, "nothing was deleted");

  // The unsafe prune: the same DELETE without the rebuild's lock.
  await db.pool.query(
    "DELETE FROM processed_event pe USING counter_watermark w WHERE pe.part = w.part AND pe.seq <= w.applied_upto",
  );
  gate.release();
  const report = await rebuild;
  const read = await readSide(db.pool);
  t.diagnostic(
    `note snapshot S=${snapshotSeqs[0]} watermark=${watermark}; after the unsafe prune the rebuild reports drift ${report.totalAbsDrift}, ${read.countMismatchItems} items miscounted`,
  );
  assert.ok(read.countMismatchItems > 0, "the install lost the events applied after its snapshot");
  assert.equal((await pruneDedupKeys(db.pool)).pruned, true, "with the rebuild done, the prune runs");
});
