/**
 * 32-L: immediate shutdown (pg_ctl stop -m immediate = SIGQUIT to the postmaster) while 6
 * writers and 1 consumer run. The crash is triggered from the writer path when the count of
 * acknowledged CHANGED results reaches the threshold; every loop must then end with a typed
 * connection error. After crash recovery every acknowledged change is in the outbox, the write
 * side is clean, the read-side identity holds, and a drain makes counts equal facts.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { ConnectionLostError } from "../../src/db/errors.ts";
import { crashLab } from "../support/crash-cluster.ts";
import { assertAllLostConnection, loopEnd, sqlStateOf, type LoopEnd } from "../support/loop-ends.ts";
import { formatReadSide, formatWriteSide, readSide, writeSide } from "../../src/likes/like-audit.ts";
import { LikeConsumer } from "../../src/likes/like-consumer.ts";
import { LikeService } from "../../src/likes/like-service.ts";
import { seededRandom } from "../support/concurrency.ts";
import { LAB_ITEMS, user } from "./fixture.ts";

const WRITERS = 6;
const USERS = 60;
/** Acknowledged CHANGED results after which the writer that reaches it shuts the server down. */
const CRASH_AFTER_ACKED = 300;

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
  const likes = await LikeService.open(pool);
  for (const item of LAB_ITEMS) await likes.createItem(item);
  const consumer = new LikeConsumer(pool);
  const parts = Array.from({ length: partitions }, (_, p) => p);

  const acked: Acked[] = [];
  let crash: Promise<void> | undefined;
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
        // The crash is triggered from the writer path, the moment the counter crosses the threshold.
        if (acked.length === CRASH_AFTER_ACKED) {
          crash = lab.cluster.crashImmediate();
          crash.catch(() => undefined); // awaited (and rethrown) after the loops end
        }
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

  const ends = await Promise.all([...Array.from({ length: WRITERS }, (_, w) => writer(w)), consumerLoop()]);
  assert.ok(crash, "the crash was triggered");
  await crash;
  const ackedAtCrash = acked.length;

  const writerStates = [...new Set(ends.filter((e) => e.who !== "consumer").map((e) => sqlStateOf(e.mapped)))].sort();
  const consumerEnd = ends.find((e) => e.who === "consumer")!;
  const states = [...writerStates, `consumer:${sqlStateOf(consumerEnd.mapped)}`];
  const endedByError = ends.filter((e) => e.mapped instanceof ConnectionLostError).length;
  t.diagnostic(`note acked CHANGED before crash=${ackedAtCrash}; threads ended by error=${endedByError} states=[${states.join(", ")}]`);
  t.diagnostic(`note   consumer passes before crash=${consumerPasses}`);
  assertAllLostConnection(t, ends, WRITERS + 1);
  assert.ok(ackedAtCrash >= CRASH_AFTER_ACKED);

  // Crash recovery on restart.
  pool = await lab.restartAfterCrash();

  // Every acknowledged CHANGED is in the outbox with the same (part, seq, user, item, version).
  assert.equal(new Set(acked.map((a) => `${a.part}:${a.seq}`)).size, acked.length, "acked (part, seq) are unique");
  const { rows: found } = await pool.query<{ n: number }>(
    `SELECT count(*)::bigint AS n
       FROM unnest($1::int[], $2::bigint[], $3::text[], $4::text[], $5::bigint[]) AS a(part, seq, user_id, item_id, version)
       JOIN like_outbox o USING (part, seq, user_id, item_id, version)`,
    [acked.map((a) => a.part), acked.map((a) => a.seq), acked.map((a) => a.user), acked.map((a) => a.item), acked.map((a) => a.version)],
  );
  const { rows: outbox } = await pool.query<{ n: number }>("SELECT count(*)::bigint AS n FROM like_outbox");
  t.diagnostic(`note acked found in outbox=${found[0]!.n} of ${acked.length}; outbox rows=${outbox[0]!.n} (>= acked; extra = committed, outcome unknown to the caller)`);
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
  t.diagnostic(`note drained: applied=${drained.applied} covered=${drained.covered} dup=${drained.dup} | ${formatReadSide(after)}`);
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

test("32-L P=1 immediate shutdown under 6 writers + 1 consumer: acked changes survive, audits clean", { timeout: 180_000 }, async (t) => {
  await run32L(t, 1, 3201);
});

test("32-L P=4 immediate shutdown under 6 writers + 1 consumer: acked changes survive, audits clean", { timeout: 180_000 }, async (t) => {
  await run32L(t, 4, 3204);
});
