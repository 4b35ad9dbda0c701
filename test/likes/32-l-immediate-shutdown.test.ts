/**
 * 32-L: immediate shutdown (pg_ctl stop -m immediate = SIGQUIT to the postmaster) while 6
 * writers and 1 consumer run. After the threshold of acknowledged CHANGED results, the next
 * consumer batch to reach consumer.beforeCommit and then the next writer to reach like.beforeCommit
 * (a SQL hook point inside like_set, the statement production runs) are parked there (every row
 * written, COMMIT not sent), and the server is shut down with both
 * open; every loop must then end with a typed connection error. After crash recovery the two
 * parked transactions left no trace (their sequence number is free again, the watermark is where
 * it was committed), every acknowledged change is in the outbox, the write side is gapless, the
 * read-side identity holds, and a drain makes counts equal facts.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { ConnectionLostError } from "../../src/db/errors.ts";
import { Hooks } from "../../src/hooks.ts";
import type { LikeEvent } from "../../src/likes/types.ts";
import { crashLab } from "../support/crash-cluster.ts";
import { assertAllLostConnection, loopEnd, sqlStateOf, type LoopEnd } from "../support/loop-ends.ts";
import { formatReadSide, formatWriteSide, readSide, writeSide } from "../../src/likes/like-audit.ts";
import { LikeConsumer } from "../../src/likes/like-consumer.ts";
import { LikeService } from "../../src/likes/like-service.ts";
import { seededRandom } from "../support/concurrency.ts";
import { ParkFirst } from "../support/park-first.ts";
import { SqlHook } from "../support/sql-hooks.ts";
import { formatOpenTransactions, openTransactions } from "../support/pg-locks.ts";
import { LAB_ITEMS, user } from "./fixture.ts";

const WRITERS = 6;
const USERS = 60;
/** Acknowledged CHANGED results after which one writer and one consumer batch are parked before commit, and the server is shut down. */
const PARK_AFTER_ACKED = 300;

/** The hook context (and pid) of the writer parked at like.beforeCommit. */
interface ParkedWrite {
  userId: string;
  itemId: string;
  part: number;
  seq: number;
  version: number;
  pid: number;
}

/** The hook context of the consumer batch parked at consumer.beforeCommit. */
interface ParkedBatch {
  part: number;
  events: LikeEvent[];
  pid: number;
}

interface Acked {
  part: number;
  seq: number;
  user: string;
  item: string;
  version: number;
}

async function run32L(t: TestContext, partitions: number, seed: number): Promise<void> {
  const lab = await crashLab(t, `ledger-32l-p${partitions}-`, { partitions, poolSize: WRITERS + 4 });
  let pool = lab.pool;
  const hooks = new Hooks();
  const parkedConsumer = new ParkFirst("consumer.beforeCommit");
  lab.onTeardown(() => parkedConsumer.release());
  hooks.on("consumer.beforeCommit", parkedConsumer.handler);
  const likes = await LikeService.open(pool);
  for (const item of LAB_ITEMS) await likes.createItem(item);
  const consumer = new LikeConsumer(pool, { hooks });
  const parts = Array.from({ length: partitions }, (_, p) => p);

  const acked: Acked[] = [];
  let consumerPasses = 0;

  const writer = async (w: number): Promise<LoopEnd> => {
    const random = seededRandom(seed + w);
    try {
      for (;;) {
        const u = user(1 + Math.floor(random() * USERS));
        const item = LAB_ITEMS[Math.floor(random() * LAB_ITEMS.length)]!;
        const result = random() < 0.6 ? await likes.like(u, item) : await likes.unlike(u, item);
        if (result.outcome !== "CHANGED") continue;
        acked.push({ part: result.part, seq: result.seq, user: u, item, version: result.version });
        if (acked.length === PARK_AFTER_ACKED) parkedConsumer.arm();
      }
    } catch (err) {
      return loopEnd(`writer-${w}`, err);
    }
  };

  const consumerLoop = async (): Promise<LoopEnd> => {
    try {
      for (;;) {
        await consumer.pollOnce(parts, 50);
        consumerPasses++;
      }
    } catch (err) {
      return loopEnd("consumer", err);
    }
  };

  const loops = Promise.all([...Array.from({ length: WRITERS }, (_, w) => writer(w)), consumerLoop()]);
  // The consumer first: a parked writer may hold its partition's sequence row, and with P = 1
  // no new event would then reach the consumer.
  const batch = (await parkedConsumer.parked()) as unknown as ParkedBatch;
  // The writer parks inside its write function (ledger_hook), the statement production runs.
  const writerHook = await SqlHook.arm(pool, "like.beforeCommit");
  lab.onTeardown(() => writerHook.release());
  const parkedAt = await writerHook.parked();
  const write = { ...parkedAt.context, pid: parkedAt.pid } as unknown as ParkedWrite;

  // What the crash will cut short, read on a connection of its own: the two parked transactions
  // are open with an xid, their rows are not committed, and the consumer had committed work before.
  const open = await openTransactions(pool);
  const {
    rows: [committed],
  } = await pool.query<{ seqLast: number; factVersion: number; batchWatermark: number; watermarks: number }>(
    `SELECT (SELECT last FROM like_seq WHERE part = $1) AS "seqLast",
            coalesce((SELECT version FROM like_fact WHERE user_id = $2 AND item_id = $3), 0) AS "factVersion",
            (SELECT applied_upto FROM counter_watermark WHERE part = $4) AS "batchWatermark",
            (SELECT sum(applied_upto) FROM counter_watermark)::bigint AS watermarks`,
    [write.part, write.userId, write.itemId, batch.part],
  );
  const batchSeqs = batch.events.map((e) => e.seq);
  const ackedAtCrash = acked.length;
  t.diagnostic(`note in flight at the crash: ${formatOpenTransactions(open)}; acked CHANGED so far=${ackedAtCrash}`);
  t.diagnostic(
    `note   parked writer pid=${write.pid}: ${write.userId} ${write.itemId} part=${write.part} seq=${write.seq} version=${write.version}; committed like_seq.last=${committed!.seqLast} fact version=${committed!.factVersion}`,
  );
  t.diagnostic(
    `note   parked consumer pid=${batch.pid}: part=${batch.part} ${batchSeqs.length} events seq=${Math.min(...batchSeqs)}..${Math.max(...batchSeqs)}; committed watermark there=${committed!.batchWatermark}, all partitions=${committed!.watermarks}`,
  );
  // The writer waits inside its statement (on the hook's lock); the consumer between two statements.
  for (const [who, pid, state, waiting] of [
    ["writer", write.pid, "active", true],
    ["consumer", batch.pid, "idle in transaction", false],
  ] as const) {
    const tx = open.find((o) => o.pid === pid);
    assert.ok(
      tx && tx.xid !== null && tx.state === state && tx.waitingOnLock === waiting,
      `the parked ${who} holds an open write transaction: ${JSON.stringify(tx)}`,
    );
  }
  assert.equal(committed!.seqLast, write.seq - 1, "the parked write's sequence number is not committed");
  assert.equal(committed!.factVersion, write.version - 1, "the parked write's fact version is not committed");
  assert.ok(committed!.watermarks > 0, "the consumer had committed batches before the crash");
  assert.ok(Math.min(...batchSeqs) > committed!.batchWatermark, "the parked batch is above the committed watermark");

  await lab.cluster.crashImmediate();
  await writerHook.release(); // the writer's statement and the consumer's COMMIT now meet a dead server
  parkedConsumer.release();
  const ends = await loops;

  const writerStates = [...new Set(ends.filter((e) => e.who !== "consumer").map((e) => sqlStateOf(e.mapped)))].sort();
  const consumerEnd = ends.find((e) => e.who === "consumer")!;
  const states = [...writerStates, `consumer:${sqlStateOf(consumerEnd.mapped)}`];
  const endedByError = ends.filter((e) => e.mapped instanceof ConnectionLostError).length;
  t.diagnostic(
    `note threads ended by error=${endedByError} states=[${states.join(", ")}]; consumer passes before crash=${consumerPasses}`,
  );
  assertAllLostConnection(t, ends, WRITERS + 1);

  // Crash recovery on restart.
  pool = await lab.restartAfterCrash();

  // The parked transactions left nothing: the writer's sequence number is free again (no gap
  // follows from it), its fact is at the committed version, the batch's events are unprocessed
  // and its partition's watermark is where it was committed.
  const {
    rows: [gone],
  } = await pool.query<{
    seqLast: number;
    outboxRow: number;
    factVersion: number;
    processed: number;
    batchWatermark: number;
  }>(
    `SELECT (SELECT last FROM like_seq WHERE part = $1) AS "seqLast",
            (SELECT count(*) FROM like_outbox WHERE part = $1 AND seq = $2)::int AS "outboxRow",
            coalesce((SELECT version FROM like_fact WHERE user_id = $3 AND item_id = $4), 0) AS "factVersion",
            (SELECT count(*) FROM processed_event WHERE part = $5 AND seq = ANY ($6::bigint[]))::int AS processed,
            (SELECT applied_upto FROM counter_watermark WHERE part = $5) AS "batchWatermark"`,
    [write.part, write.seq, write.userId, write.itemId, batch.part, batchSeqs],
  );
  t.diagnostic(
    `note after recovery: writer's part like_seq.last=${gone!.seqLast} outbox rows at its seq=${gone!.outboxRow} fact version=${gone!.factVersion}; batch events processed=${gone!.processed}/${batchSeqs.length} watermark=${gone!.batchWatermark}`,
  );
  assert.deepEqual(
    { seqLast: gone!.seqLast, outboxRow: gone!.outboxRow, factVersion: gone!.factVersion },
    { seqLast: write.seq - 1, outboxRow: 0, factVersion: write.version - 1 },
    "the parked write is gone",
  );
  assert.deepEqual(
    { processed: gone!.processed, batchWatermark: gone!.batchWatermark },
    { processed: 0, batchWatermark: committed!.batchWatermark },
    "the parked consumer batch is gone",
  );

  // Every acknowledged CHANGED is in the outbox with the same (part, seq, user, item, version).
  assert.equal(new Set(acked.map((a) => `${a.part}:${a.seq}`)).size, acked.length, "acked (part, seq) are unique");
  const { rows: found } = await pool.query<{ n: number }>(
    `SELECT count(*)::bigint AS n
       FROM unnest($1::int[], $2::bigint[], $3::text[], $4::text[], $5::bigint[]) AS a(part, seq, user_id, item_id, version)
       JOIN like_outbox o USING (part, seq, user_id, item_id, version)`,
    [
      acked.map((a) => a.part),
      acked.map((a) => a.seq),
      acked.map((a) => a.user),
      acked.map((a) => a.item),
      acked.map((a) => a.version),
    ],
  );
  const { rows: outbox } = await pool.query<{ n: number }>("SELECT count(*)::bigint AS n FROM like_outbox");
  t.diagnostic(
    `note acked found in outbox=${found[0]!.n} of ${acked.length}; outbox rows=${outbox[0]!.n} (>= acked; extra = committed, outcome unknown to the caller)`,
  );
  assert.equal(found[0]!.n, acked.length, "every acknowledged CHANGED survived the crash");
  assert.ok(outbox[0]!.n >= acked.length);

  const ws = await writeSide(pool);
  t.diagnostic(`note after recovery write-side: ${formatWriteSide(ws)}`);
  assert.equal(ws.lastSeq, ws.outboxRows, "no gap, nothing lost between like_seq and the outbox");
  assert.equal(ws.seqGapPartitions, 0);
  assert.equal(ws.versionMismatchPairs, 0, "facts and events moved together");
  assert.equal(ws.deltaSumMismatchItems, 0);
  assert.equal(ws.misplacedEvents, 0);

  const rs = await readSide(pool);
  t.diagnostic(`note after recovery read-side:  ${formatReadSide(rs)}`);
  assert.equal(rs.lastSeq, ws.lastSeq);
  assert.equal(rs.exactViolations, 0, "n + pending delta = facts for every item");
  assert.equal(rs.boundViolations, 0);
  assert.equal(rs.unprocessedOverLag, false);

  const drained = await new LikeConsumer(pool).drain();
  const after = await readSide(pool);
  t.diagnostic(
    `note drained: applied=${drained.applied} covered=${drained.covered} dup=${drained.dup} | ${formatReadSide(after)}`,
  );
  assert.equal(after.lag, 0);
  assert.equal(after.unprocessed, 0);
  assert.equal(after.countMismatchItems, 0, "counts equal facts after the drain");
  assert.equal(after.exactViolations, 0);
  const { rows: perItem } = await pool.query<{ item_id: string; n: number; facts: number }>(
    `SELECT i.item_id,
            (SELECT coalesce(sum(n), 0) FROM like_count c WHERE c.item_id = i.item_id)::bigint AS n,
            (SELECT count(*) FROM like_fact f WHERE f.item_id = i.item_id AND f.liked)::bigint AS facts
       FROM item i ORDER BY i.item_id`,
  );
  for (const r of perItem) assert.equal(r.n, r.facts, `${r.item_id} count = facts`);
}

test(
  "32-L P=1 immediate shutdown under 6 writers + 1 consumer: acked changes survive, audits clean",
  { timeout: 180_000 },
  async (t) => {
    await run32L(t, 1, 3201);
  },
);

test(
  "32-L P=4 immediate shutdown under 6 writers + 1 consumer: acked changes survive, audits clean",
  { timeout: 180_000 },
  async (t) => {
    await run32L(t, 4, 3204);
  },
);
