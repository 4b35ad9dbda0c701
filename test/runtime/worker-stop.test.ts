/**
 * Stopping a consumer loop (PartitionWorker.stop on a loop createWorkers built) lets the round it
 * is applying commit and takes no further round, however many rounds its pass had left. The like
 * counter's loop is given a backlog of five rounds (50 events, batches of 10) and parked at its
 * first round's consumer.beforeCommit hook point; stop() is called there, then the round is let go.
 * The watermark shows what the pass applied: one round. The idle wait is set far beyond the test's
 * life, so no second pass can run on its own.
 *
 * Negative control: the same loop whose pass is not given the stop signal (the loop before it was)
 * applies its whole pass, all five rounds, before stop() returns.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { Gate } from "../../src/hooks.ts";
import { createWorkers, openLedger, type Ledger } from "../../src/ledger.ts";
import { PartitionWorker } from "../../src/workers/partition-worker.ts";
import { createTestDatabase } from "../support/test-db.ts";

const NEVER_MS = 1_000_000_000;
const BATCH = 10;
const EVENTS = 50;
const ITEM = "item-stop";

async function backlogged(t: TestContext): Promise<Ledger> {
  const db = await createTestDatabase({ partitions: 1 });
  t.after(() => db.close());
  const ledger = await openLedger(db.pool);
  await ledger.likes.createItem(ITEM);
  for (let n = 0; n < EVENTS; n++) await ledger.likes.like(`user-${n}`, ITEM);
  return ledger;
}

async function likeWatermark(ledger: Ledger): Promise<number> {
  const { rows } = await ledger.pool.query<{ applied: string }>(
    "SELECT applied_upto AS applied FROM counter_watermark WHERE part = 0",
  );
  return Number(rows[0]!.applied);
}

/** Starts `worker`, stops it while its first round is parked before commit, then lets the round go; the watermark after stop(). */
async function stopDuringFirstRound(t: TestContext, ledger: Ledger, worker: PartitionWorker): Promise<number> {
  const gate = new Gate("consumer.beforeCommit");
  t.after(() => gate.release());
  ledger.hooks.on("consumer.beforeCommit", gate.handler);
  worker.start();
  const parked = await gate.waitArrived();
  assert.equal((parked.events as unknown[]).length, BATCH, "the first round is one batch of BATCH events");
  const stopped = worker.stop();
  gate.release();
  await stopped;
  return likeWatermark(ledger);
}

test("a consumer loop stopped while it applies a round commits that round and takes no further one", async (t) => {
  const ledger = await backlogged(t);
  const loop = createWorkers(ledger, { batchSize: BATCH, idleMs: NEVER_MS, loops: 1 }).find(
    (w) => w.name === "like-counter#0",
  )!;
  assert.equal(await stopDuringFirstRound(t, ledger, loop), BATCH, "one round applied, four left for the next loop");
  assert.equal(loop.processed, BATCH);
  // Nothing was lost by stopping: the next consumer goes on from the watermark.
  await ledger.likeConsumer.drain();
  assert.equal(await likeWatermark(ledger), EVENTS);
  const { rows } = await ledger.pool.query<{ n: number }>(
    "SELECT coalesce(sum(n), 0)::int AS n FROM like_count WHERE item_id = $1",
    [ITEM],
  );
  assert.equal(rows[0]!.n, EVENTS);
});

test("negative control: a loop whose pass does not get the stop signal applies its whole pass before stop() returns", async (t) => {
  const ledger = await backlogged(t);
  const deaf = new PartitionWorker(
    "like-counter, deaf",
    async () => {
      const s = await ledger.likeConsumer.pollOnce([0], BATCH);
      return s.applied + s.covered + s.dup;
    },
    { idleMs: NEVER_MS },
  );
  assert.equal(await stopDuringFirstRound(t, ledger, deaf), EVENTS, "all five rounds applied after stop() was called");
});
