/**
 * The consumer loop's pacing (src/workers/partition-worker.ts), on pass results given to it: a
 * pass that handled at least `idleBelow` events is followed at once by the next pass; a smaller
 * one by the idle wait, as an empty one is. The idle wait is set far beyond the test's life, so a
 * loop that waits never runs another pass on its own: the next pass happening (or not) after the
 * event loop has been flushed is what is observed, never a duration. The negative control runs the
 * same script with idleBelow 1 (the loop before the option): a pass of a few events goes straight on.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { setImmediate as flush } from "node:timers/promises";
import { PartitionWorker } from "../../src/workers/partition-worker.ts";

const NEVER_MS = 1_000_000_000;

/** A loop over scripted pass results; after the script every pass handles 0 events. */
function scripted(handled: number[], idleBelow?: number) {
  let calls = 0;
  const worker = new PartitionWorker(
    "scripted",
    async () => handled[calls++] ?? 0,
    idleBelow === undefined ? { idleMs: NEVER_MS } : { idleMs: NEVER_MS, idleBelow },
  );
  return { worker, calls: () => calls };
}

/** Lets every pass that is due run: a few turns of the event loop, no timer involved. */
async function settle(): Promise<void> {
  for (let i = 0; i < 10; i++) await flush();
}

test("partition worker: a pass of idleBelow events or more goes straight on; a smaller one waits like an empty one", async () => {
  const { worker, calls } = scripted([150, 100, 99, 500], 100);
  worker.start();
  await settle();
  // 150 and 100 went straight on; 99 waits (the fourth pass would run only after the idle wait).
  assert.equal(calls(), 3);
  assert.equal(worker.processed, 349);
  await worker.stop();
  assert.equal(calls(), 3, "stop() ends the wait without another pass");
});

test("partition worker, negative control: with idleBelow 1 the same script never waits until a pass is empty", async () => {
  const { worker, calls } = scripted([150, 100, 99, 500], 1);
  worker.start();
  await settle();
  assert.equal(calls(), 5, "four passes with events, then the empty one that waits");
  await worker.stop();
});

test("partition worker: without idleBelow only an empty pass waits", async () => {
  const { worker, calls } = scripted([1, 1, 1]);
  worker.start();
  await settle();
  assert.equal(calls(), 4);
  await worker.stop();
});
