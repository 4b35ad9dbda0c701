import { test } from "node:test";
import assert from "node:assert/strict";
import { Gate } from "../../src/hooks.ts";
import { installOverwrite } from "./negative-controls.ts";
import { readFactPage, readSnapshotHeader } from "../../src/likes/like-rebuild.ts";
import { withTransaction } from "../../src/db/transaction.ts";
import { factCount, likesFixture, user, type LikesFixture } from "./fixture.ts";

const ITEM = "item-lab-01";

async function n(f: LikesFixture): Promise<number> {
  const { rows } = await f.db.pool.query<{ n: number }>(
    "SELECT coalesce(sum(n), 0)::int AS n FROM like_count WHERE item_id = $1",
    [ITEM],
  );
  return rows[0]!.n;
}

async function likeUsers(f: LikesFixture, from: number, to: number): Promise<void> {
  for (let u = from; u <= to; u++) assert.equal((await f.likes.like(user(u), ITEM)).seq, u);
}

async function applySeqs(f: LikesFixture, seqs: number[]) {
  const events = (await f.consumer.fetchRange(0, 1, 100)).filter((e) => seqs.includes(e.seq));
  return f.consumer.applyBatch(events);
}

async function processed(f: LikesFixture): Promise<string> {
  const { rows } = await f.db.pool.query<{ seq: number; how: string }>(
    "SELECT seq, how FROM processed_event ORDER BY seq",
  );
  return rows.map((r) => `${r.seq}:${r.how}`).join(" ");
}

test("32-H P=1 rebuild and online increments interleaved: baseline install neither double-counts nor loses (table 32-3)", async (t) => {
  const f = await likesFixture(1);
  const snapshotTaken = new Gate("rebuild.afterSnapshot");
  t.after(async () => {
    snapshotTaken.release(); // a failed assertion must not leave the snapshot transaction parked
    await f.close();
  });
  // Step 1: events 1..6, consumer applies 1..3.
  await likeUsers(f, 1, 6);
  await applySeqs(f, [1, 2, 3]);
  assert.equal(await n(f), 3);

  // Step 2: the rebuild takes its snapshot (S=6, C(S)=6) and stops there.
  const removeHook = f.hooks.on("rebuild.afterSnapshot", snapshotTaken.handler);
  const rebuilding = f.rebuild.rebuild({ items: [ITEM] });
  const { snapshotSeqs } = await snapshotTaken.waitArrived();
  assert.deepEqual(snapshotSeqs, [6]);

  // Step 3: events 7 and 8 are written; the consumer applies 7 first.
  await likeUsers(f, 7, 8);
  await applySeqs(f, [7]);
  assert.equal(await n(f), 4);

  // Step 4: install n = C(S) + applied above S = 6 + 1, base_seq = 6.
  snapshotTaken.release();
  const report = await rebuilding;
  removeHook();
  const { rows: base } = await f.db.pool.query<{ n: number; base_seq: number }>(
    "SELECT n, base_seq FROM like_count WHERE item_id = $1",
    [ITEM],
  );
  t.diagnostic(
    `note baseline install: n ${report.drifted[0]?.oldN ?? 4}->${base[0]!.n} base_seq=${base[0]!.base_seq} drifted_items=${report.drifted.length}`,
  );
  assert.deepEqual(base[0], { n: 7, base_seq: 6 });
  assert.equal(report.drifted.length, 0, "late is not drift: events 4..6 were pending, not lost");

  // Step 5: the consumer applies 4, 5, 6, 8: 4..6 are COVERED, 8 is APPLIED.
  const step5 = await applySeqs(f, [4, 5, 6, 8]);
  t.diagnostic(
    `note baseline: applied{4,5,6,8} applied=${step5.applied} covered=${step5.covered} dup=${step5.dup} n=${await n(f)} truth=${await factCount(f.db, ITEM)}`,
  );
  t.diagnostic(`note processed: ${await processed(f)}`);
  assert.deepEqual({ applied: step5.applied, covered: step5.covered }, { applied: 1, covered: 3 });
  assert.equal(await n(f), 8);
  assert.equal(await factCount(f.db, ITEM), 8);

  // Redelivering 1..8 changes nothing.
  const again = await applySeqs(f, [1, 2, 3, 4, 5, 6, 7, 8]);
  t.diagnostic(`note redeliver 1..8: dup=${again.dup} n=${await n(f)}`);
  assert.equal(again.dup, 8);
  assert.equal(await n(f), 8);
});

test("32-H P=1 negative control: overwriting with the snapshot count double-counts {4,5,6} and loses {7}", async (t) => {
  const f = await likesFixture(1);
  const snapshotTaken = new Gate("overwrite after its snapshot");
  t.after(async () => {
    snapshotTaken.release(); // a failed assertion must not leave the snapshot transaction parked
    await f.close();
  });
  await likeUsers(f, 1, 6);
  await applySeqs(f, [1, 2, 3]);

  // The snapshot is read in its own REPEATABLE READ transaction, held open across step 3.
  const overwrite = withTransaction(
    f.db.pool,
    async (client) => {
      const header = await readSnapshotHeader(client);
      const page = await readFactPage(client, header.partitions, "", [ITEM]);
      await snapshotTaken.handler({ snapshotSeqs: header.snapshotSeqs });
      return installOverwrite(f.db.pool, ITEM, page[0]!.counts);
    },
    { isolation: "REPEATABLE READ", readOnly: true, maxAttempts: 1 },
  );
  await snapshotTaken.waitArrived();
  await likeUsers(f, 7, 8);
  await applySeqs(f, [7]);
  snapshotTaken.release();
  const { oldN, newN } = await overwrite;
  const step5 = await applySeqs(f, [4, 5, 6, 8]);
  const truth = await factCount(f.db, ITEM);
  const final = await n(f);
  t.diagnostic(
    `note naive overwrite: ${ITEM}:overwritten(n ${oldN}->${newN}, base_seq=0, appliedAfterBase=0); applied{4,5,6,8} applied=${step5.applied} n=${final} truth=${truth}`,
  );
  t.diagnostic(`note naive: double-counted {4,5,6}=+3, lost {7}=-1, error=${final - truth}`);
  assert.deepEqual({ oldN, newN }, { oldN: 4, newN: 6 });
  assert.equal(step5.applied, 4);
  assert.equal(final, 10);
  assert.equal(truth, 8);
});
