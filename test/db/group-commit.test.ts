/**
 * The group-commit batcher (src/db/group-commit.ts) on its own, with a batch runner the test
 * completes by hand: a write goes at once while fewer than K batches are in flight, later ones
 * queue and go together (at most N) when a batch returns, each caller gets its own answer, and
 * a failed or short batch fails exactly its own writes.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { GroupCommit } from "../../src/db/group-commit.ts";

/** A runner whose batches the test finishes one by one, recording what each was sent. */
function handRunner() {
  const sent: number[][] = [];
  const finish: ((how: "ok" | "fail" | "short") => void)[] = [];
  const run = (inputs: readonly number[]) =>
    new Promise<number[]>((resolve, reject) => {
      sent.push([...inputs]);
      finish.push((how) =>
        how === "fail"
          ? reject(new Error("batch failed"))
          : resolve(inputs.map((x) => x * 10).slice(how === "short" ? 1 : 0)),
      );
    });
  return { sent, finish, run };
}

const settled = () => new Promise((resolve) => setImmediate(resolve));

test("K=2 N=3: the first two writes go at once, alone; the next four wait and go as [3,4,5] then [6]; each caller gets its own answer", async () => {
  const r = handRunner();
  const batcher = new GroupCommit(r.run, { maxBatch: 3, maxInFlight: 2 });
  const answers = [1, 2, 3, 4, 5, 6].map((x) => batcher.submit(x));
  assert.deepEqual(r.sent, [[1], [2]], "sent at once while fewer than K were in flight; no timer, no wait");
  r.finish[1]!("ok");
  await settled();
  assert.deepEqual(r.sent, [[1], [2], [3, 4, 5]], "when a batch returns, the queue goes, at most N");
  r.finish[0]!("ok");
  await settled();
  assert.deepEqual(r.sent, [[1], [2], [3, 4, 5], [6]]);
  r.finish[2]!("ok");
  r.finish[3]!("ok");
  assert.deepEqual(await Promise.all(answers), [10, 20, 30, 40, 50, 60]);
  assert.deepEqual(batcher.stats, { batches: 4, writes: 6, largest: 3 });
});

test("a failed batch rejects its own writes only; a batch with fewer answers than writes rejects all of them", async () => {
  const r = handRunner();
  const batcher = new GroupCommit(r.run, { maxBatch: 10, maxInFlight: 1 });
  const a = batcher.submit(1);
  const queued = [batcher.submit(2), batcher.submit(3)];
  r.finish[0]!("fail");
  await assert.rejects(a, /batch failed/);
  await settled();
  assert.deepEqual(r.sent, [[1], [2, 3]]);
  r.finish[1]!("short");
  for (const q of queued) await assert.rejects(q, /a batch of 2 writes returned 1 answers/);
  const later = batcher.submit(4);
  r.finish[2]!("ok");
  assert.equal(await later, 40);
});

test("control: with K=1 the second write is not sent while the first is in flight (the first test's check sees the difference)", async () => {
  const r = handRunner();
  const batcher = new GroupCommit(r.run, { maxBatch: 3, maxInFlight: 1 });
  const answers = [batcher.submit(1), batcher.submit(2)];
  assert.notDeepEqual(r.sent, [[1], [2]]);
  r.finish[0]!("ok");
  await settled();
  r.finish[1]!("ok");
  assert.deepEqual(await Promise.all(answers), [10, 20]);
});
