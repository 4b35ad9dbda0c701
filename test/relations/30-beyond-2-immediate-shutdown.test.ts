/**
 * 30-beyond-2: the chapter's stated gap ("本章没有对数据库做 immediate 停机实验"). An immediate
 * shutdown (pg_ctl stop -m immediate = SIGQUIT to the postmaster) hits 6 writers doing
 * follow / unfollow / decide / block / unblock and 1 projector loop. After the threshold of
 * acknowledged CHANGED results, the next projector batch to reach projector.beforeCommit and then
 * the next writer to reach relation.afterEvent (a SQL hook point inside the write function
 * production runs: its event row written, COMMIT not sent) are parked,
 * and the server is shut down with both open; every loop must then end with a typed connection
 * error. After crash recovery the parked transactions left no trace, every acknowledged change is
 * in relation_event, invariants 1-4 and the sequences are clean, and a drain makes the projection
 * equal to the truth.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { ConnectionLostError } from "../../src/db/errors.ts";
import { Hooks } from "../../src/hooks.ts";
import { crashLab } from "../support/crash-cluster.ts";
import { assertAllLostConnection, loopEnd, sqlStateOf, type LoopEnd } from "../support/loop-ends.ts";
import { RelationProjector } from "../../src/relations/projector.ts";
import { auditRelations, formatDiff, projectionDiff } from "../../src/relations/relation-audit.ts";
import { RelationService } from "../../src/relations/relation-service.ts";
import type { RelationEvent, RelationResult, RelationState } from "../../src/relations/types.ts";
import { seededRandom } from "../support/concurrency.ts";
import { ParkFirst } from "../support/park-first.ts";
import { SqlHook } from "../support/sql-hooks.ts";
import { formatOpenTransactions, openTransactions } from "../support/pg-locks.ts";
import { acct } from "./fixture.ts";

const WRITERS = 6;
const ACCOUNTS = 60;
/** A few hot followees, so pairs are revisited: follow/unfollow/block/decide interleave on the same rows. */
const HOT = 12;
/** Every fifth account is private: follows to it go PENDING and decide has work to do. */
const PRIVATE = Array.from({ length: ACCOUNTS / 5 }, (_, i) => 5 * (i + 1));
/** Acknowledged CHANGED results (that wrote events) after which one projector batch and one writer are parked before commit, and the server is shut down. */
const PARK_AFTER_ACKED = 300;

type Op = "follow" | "unfollow" | "decide" | "block" | "unblock";

/** The hook context (and pid) of the writer parked at relation.afterEvent (a block may park at the first of its two events). */
interface ParkedWrite {
  follower: string;
  followee: string;
  part: number;
  seq: number;
  version: number;
  pid: number;
}

/** The hook context of the projector batch parked at projector.beforeCommit. */
interface ParkedBatch {
  part: number;
  events: RelationEvent[];
  pid: number;
}

/** An acknowledged CHANGED follow / unfollow / decide: exactly one event, in the followee's partition. */
interface AckedPair {
  op: Op;
  part: number;
  seq: number;
  follower: string;
  followee: string;
  state: RelationState;
  version: number;
}

/**
 * An acknowledged CHANGED block that wrote events. The result describes the pair
 * (follower = blocked, followee = blocker); `seq` is the highest seq written, which may belong to
 * the reverse pair in another partition.
 */
interface AckedBlock {
  blocker: string;
  blocked: string;
  state: RelationState;
  version: number;
  seq: number;
  parts: number[];
}

async function run(t: TestContext, partitions: number, seed: number): Promise<void> {
  const lab = await crashLab(t, `ledger-30b2-p${partitions}-`, { partitions, poolSize: WRITERS + 4 });
  let pool = lab.pool;
  await pool.query(
    `INSERT INTO account (account_id, private)
     SELECT 'user-' || lpad(i::text, 4, '0'), i = ANY ($2::int[]) FROM generate_series(1, $1::int) AS i`,
    [ACCOUNTS, PRIVATE],
  );
  const hooks = new Hooks();
  const parkedProjector = new ParkFirst("projector.beforeCommit");
  lab.onTeardown(() => parkedProjector.release());
  hooks.on("projector.beforeCommit", parkedProjector.handler);
  const rel = await RelationService.open(pool);
  const projector = new RelationProjector(pool, { hooks });
  const parts = Array.from({ length: partitions }, (_, p) => p);

  const ackedPairs: AckedPair[] = [];
  const ackedBlocks: AckedBlock[] = [];
  const opCounts: Record<Op, { changed: number; other: number }> = {
    follow: { changed: 0, other: 0 },
    unfollow: { changed: 0, other: 0 },
    decide: { changed: 0, other: 0 },
    block: { changed: 0, other: 0 },
    unblock: { changed: 0, other: 0 },
  };
  let projectorPasses = 0;
  let projectedBeforeCrash = 0;
  const ackedCount = () => ackedPairs.length + ackedBlocks.length;

  const record = (op: Op, a: string, b: string, r: RelationResult): void => {
    if (r.outcome !== "CHANGED") {
      opCounts[op].other++;
      return;
    }
    opCounts[op].changed++;
    if (r.seq === 0) return; // unblock, or a block that only inserted the block row: no event
    if (op === "block") {
      ackedBlocks.push({
        blocker: a,
        blocked: b,
        state: r.state,
        version: r.version,
        seq: r.seq,
        parts: [rel.partitionOf(a), rel.partitionOf(b)],
      });
    } else {
      // follow/unfollow(follower=a, followee=b), decide(followee=a, follower=b)
      const [follower, followee] = op === "decide" ? [b, a] : [a, b];
      ackedPairs.push({
        op,
        part: rel.partitionOf(followee),
        seq: r.seq,
        follower,
        followee,
        state: r.state,
        version: r.version,
      });
    }
    if (ackedCount() === PARK_AFTER_ACKED) parkedProjector.arm();
  };

  const writer = async (w: number): Promise<LoopEnd> => {
    const random = seededRandom(seed + w);
    const pick = () => acct(1 + Math.floor(random() * ACCOUNTS));
    const pickHot = () => (random() < 0.6 ? acct(1 + Math.floor(random() * HOT)) : pick());
    // Pairs this writer has followed: unfollow / decide / block mostly act on them, so they
    // meet ACTIVE and PENDING rows instead of untouched v0 placeholders.
    const followed: [string, string][] = [];
    const requested: [string, string][] = []; // follows that went PENDING: decide prefers them
    const known = (): [string, string] => {
      const all = followed.length + requested.length;
      if (all > 0 && random() < 0.75) {
        const i = Math.floor(random() * all);
        return i < followed.length ? followed[i]! : requested[i - followed.length]!;
      }
      return [pick(), pickHot()];
    };
    try {
      for (;;) {
        const r = random();
        const [a, b] =
          r < 0.4
            ? [pick(), pickHot()]
            : r >= 0.58 && r < 0.8 && requested.length > 0 && random() < 0.8
              ? requested.splice(Math.floor(random() * requested.length), 1)[0]!
              : known();
        if (a === b) continue;
        if (r < 0.4) {
          const result = await rel.follow(a, b);
          if (result.outcome === "CHANGED") (result.state === "PENDING" ? requested : followed).push([a, b]);
          record("follow", a, b, result);
        } else if (r < 0.58) record("unfollow", a, b, await rel.unfollow(a, b));
        else if (r < 0.8) record("decide", b, a, await rel.decide(b, a, random() < 0.6));
        else if (r < 0.9) record("block", b, a, await rel.block(b, a));
        else record("unblock", b, a, await rel.unblock(b, a));
      }
    } catch (err) {
      return loopEnd(`writer-${w}`, err);
    }
  };

  const projectorLoop = async (): Promise<LoopEnd> => {
    try {
      for (;;) {
        const pass = await projector.pollOnce(parts, 50);
        projectorPasses++;
        projectedBeforeCrash += pass.applied + pass.stale + pass.dup;
      }
    } catch (err) {
      return loopEnd("projector", err);
    }
  };

  const started = Date.now();
  const loops = Promise.all([...Array.from({ length: WRITERS }, (_, w) => writer(w)), projectorLoop()]);
  // The projector first: a parked writer may hold its partition's sequence row, and with P = 1
  // no new event would then reach the projector.
  const batch = (await parkedProjector.parked()) as unknown as ParkedBatch;
  // The writer parks inside its write function (ledger_hook), the statement production runs.
  const writerHook = await SqlHook.arm(pool, "relation.afterEvent");
  lab.onTeardown(() => writerHook.release());
  const parkedAt = await writerHook.parked();
  const write = { ...parkedAt.context, pid: parkedAt.pid } as unknown as ParkedWrite;

  // What the crash will cut short, read on a connection of its own: the two parked transactions
  // are open with an xid, their rows are not committed, and the projector had committed work before.
  const open = await openTransactions(pool);
  const {
    rows: [committed],
  } = await pool.query<{ seqLast: number; pairVersion: number; batchWatermark: number; watermarks: number }>(
    `SELECT (SELECT last FROM event_seq WHERE part = $1) AS "seqLast",
            coalesce((SELECT version FROM relation WHERE follower = $2 AND followee = $3), 0) AS "pairVersion",
            (SELECT applied_upto FROM proj_watermark WHERE part = $4) AS "batchWatermark",
            (SELECT sum(applied_upto) FROM proj_watermark)::bigint AS watermarks`,
    [write.part, write.follower, write.followee, batch.part],
  );
  const batchSeqs = batch.events.map((e) => e.seq);
  const ackedAtCrash = ackedCount();
  t.diagnostic(`note in flight at the crash: ${formatOpenTransactions(open)}; acked CHANGED so far=${ackedAtCrash}`);
  t.diagnostic(
    `note   parked writer pid=${write.pid}: ${write.follower}->${write.followee} part=${write.part} seq=${write.seq} version=${write.version}; committed event_seq.last=${committed!.seqLast} pair version=${committed!.pairVersion}`,
  );
  t.diagnostic(
    `note   parked projector pid=${batch.pid}: part=${batch.part} ${batchSeqs.length} events seq=${Math.min(...batchSeqs)}..${Math.max(...batchSeqs)}; committed watermark there=${committed!.batchWatermark}, all partitions=${committed!.watermarks}`,
  );
  // The writer waits inside its statement (on the hook's lock); the projector between two statements.
  for (const [who, pid, state, waiting] of [
    ["writer", write.pid, "active", true],
    ["projector", batch.pid, "idle in transaction", false],
  ] as const) {
    const tx = open.find((o) => o.pid === pid);
    assert.ok(
      tx && tx.xid !== null && tx.state === state && tx.waitingOnLock === waiting,
      `the parked ${who} holds an open write transaction: ${JSON.stringify(tx)}`,
    );
  }
  assert.equal(committed!.seqLast, write.seq - 1, "the parked write's sequence number is not committed");
  assert.equal(committed!.pairVersion, write.version - 1, "the parked write's relation version is not committed");
  assert.ok(committed!.watermarks > 0, "the projector had committed batches before the crash");
  assert.ok(Math.min(...batchSeqs) > committed!.batchWatermark, "the parked batch is above the committed watermark");

  await lab.cluster.crashImmediate();
  await writerHook.release(); // the writer's statement and the projector's COMMIT now meet a dead server
  parkedProjector.release();
  const ends = await loops;

  const codes = ends.map((e) => `${e.who}:${(e.mapped as { code?: string }).code ?? "?"}/${sqlStateOf(e.mapped)}`);
  const endedByError = ends.filter((e) => e.mapped instanceof ConnectionLostError).length;
  const ops = Object.entries(opCounts)
    .map(([op, c]) => `${op}=${c.changed}/${c.changed + c.other}`)
    .join(" ");
  t.diagnostic(
    `note acked CHANGED before crash=${ackedAtCrash} (pairs=${ackedPairs.length} blocks=${ackedBlocks.length}) in ${Date.now() - started} ms; CHANGED/calls: ${ops}`,
  );
  t.diagnostic(`note loops ended by error=${endedByError}/${ends.length} codes=[${codes.join(", ")}]`);
  t.diagnostic(`note   projector passes before crash=${projectorPasses} events handled=${projectedBeforeCrash}`);
  assertAllLostConnection(t, ends, WRITERS + 1);

  // Crash recovery on restart.
  pool = await lab.restartAfterCrash();

  // The parked transactions left nothing: the writer's sequence number is free again, its pair
  // is at the committed version, the batch's events are unseen and its partition's watermark is
  // where it was committed.
  const {
    rows: [gone],
  } = await pool.query<{
    seqLast: number;
    eventRow: number;
    pairVersion: number;
    seen: number;
    batchWatermark: number;
  }>(
    `SELECT (SELECT last FROM event_seq WHERE part = $1) AS "seqLast",
            (SELECT count(*) FROM relation_event WHERE part = $1 AND seq = $2)::int AS "eventRow",
            coalesce((SELECT version FROM relation WHERE follower = $3 AND followee = $4), 0) AS "pairVersion",
            (SELECT count(*) FROM proj_seen WHERE part = $5 AND seq = ANY ($6::bigint[]))::int AS seen,
            (SELECT applied_upto FROM proj_watermark WHERE part = $5) AS "batchWatermark"`,
    [write.part, write.seq, write.follower, write.followee, batch.part, batchSeqs],
  );
  t.diagnostic(
    `note after recovery: writer's part event_seq.last=${gone!.seqLast} events at its seq=${gone!.eventRow} pair version=${gone!.pairVersion}; batch events seen=${gone!.seen}/${batchSeqs.length} watermark=${gone!.batchWatermark}`,
  );
  assert.deepEqual(
    { seqLast: gone!.seqLast, eventRow: gone!.eventRow, pairVersion: gone!.pairVersion },
    { seqLast: write.seq - 1, eventRow: 0, pairVersion: write.version - 1 },
    "the parked write is gone",
  );
  assert.deepEqual(
    { seen: gone!.seen, batchWatermark: gone!.batchWatermark },
    { seen: 0, batchWatermark: committed!.batchWatermark },
    "the parked projector batch is gone",
  );

  // Every acknowledged follow/unfollow/decide is in relation_event with the same (part, seq, follower, followee, state, version).
  assert.equal(
    new Set(ackedPairs.map((a) => `${a.part}:${a.seq}`)).size,
    ackedPairs.length,
    "acked (part, seq) are unique",
  );
  const { rows: foundPairs } = await pool.query<{ n: number }>(
    `SELECT count(*)::bigint AS n
       FROM unnest($1::int[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::bigint[])
            AS a(part, seq, follower, followee, state, version)
       JOIN relation_event e USING (part, seq, follower, followee, state, version)`,
    [
      ackedPairs.map((a) => a.part),
      ackedPairs.map((a) => a.seq),
      ackedPairs.map((a) => a.follower),
      ackedPairs.map((a) => a.followee),
      ackedPairs.map((a) => a.state),
      ackedPairs.map((a) => a.version),
    ],
  );
  // Every acknowledged block that wrote events: the (blocked -> blocker) pair is REMOVED at the
  // reported version (its event exists when the version is > 0), and the reported seq is a REMOVED
  // event of one of the two directions, in that direction's followee partition.
  const { rows: foundBlocks } = await pool.query<{ n: number }>(
    `SELECT count(*)::bigint AS n
       FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[]) AS a(blocker, blocked, state, version, seq)
      WHERE a.state = 'REMOVED'
        AND (a.version = 0 OR EXISTS (SELECT 1 FROM relation_event e
                                       WHERE e.follower = a.blocked AND e.followee = a.blocker
                                         AND e.version = a.version AND e.state = 'REMOVED'))
        AND EXISTS (SELECT 1 FROM relation_event e, ledger_config c
                     WHERE e.seq = a.seq AND e.state = 'REMOVED' AND e.part = ledger_partition(e.followee, c.partitions)
                       AND ((e.follower = a.blocked AND e.followee = a.blocker) OR (e.follower = a.blocker AND e.followee = a.blocked)))`,
    [
      ackedBlocks.map((b) => b.blocker),
      ackedBlocks.map((b) => b.blocked),
      ackedBlocks.map((b) => b.state),
      ackedBlocks.map((b) => b.version),
      ackedBlocks.map((b) => b.seq),
    ],
  );
  const { rows: totals } = await pool.query<{ events: number; last: number }>(
    "SELECT (SELECT count(*) FROM relation_event)::bigint AS events, (SELECT sum(last) FROM event_seq)::bigint AS last",
  );
  const { events, last } = totals[0]!;
  t.diagnostic(
    `note acked found after recovery: pairs=${foundPairs[0]!.n}/${ackedPairs.length} blocks=${foundBlocks[0]!.n}/${ackedBlocks.length}; relation_event rows=${events} sum(event_seq.last)=${last} (>= acked: a block may write two events, and a commit whose acknowledgement was lost also counts)`,
  );
  assert.equal(foundPairs[0]!.n, ackedPairs.length, "every acknowledged follow/unfollow/decide survived the crash");
  assert.equal(foundBlocks[0]!.n, ackedBlocks.length, "every acknowledged block's events survived the crash");
  assert.ok(events >= ackedPairs.length + ackedBlocks.length);

  const audit = await auditRelations(pool);
  const { rows: lagRows } = await pool.query<{ lag: number }>(
    "SELECT sum(s.last - w.applied_upto)::bigint AS lag FROM event_seq s JOIN proj_watermark w USING (part)",
  );
  t.diagnostic(`note after-recovery audit: ${JSON.stringify(audit)}; projection lag=${lagRows[0]!.lag}`);
  assert.deepEqual(audit, {
    invalidRows: 0,
    versionMismatchPairs: 0,
    blockedButNotRemoved: 0,
    illegalTransitions: 0,
    sequenceViolations: 0,
  });

  const drained = await new RelationProjector(pool).drain();
  const diff = await projectionDiff(pool);
  const { rows: marks } = await pool.query<{ part: number; applied_upto: number; last: number }>(
    "SELECT part, w.applied_upto, s.last FROM event_seq s JOIN proj_watermark w USING (part) ORDER BY part",
  );
  t.diagnostic(
    `note after-drain diff=${formatDiff(diff)} drained=${JSON.stringify(drained)} watermarks=[${marks.map((m) => `p${m.part}:${m.applied_upto}/${m.last}`).join(" ")}]`,
  );
  assert.equal(formatDiff(diff), "0,0,0");
  assert.equal(marks.length, partitions);
  for (const m of marks) assert.equal(m.applied_upto, m.last, `partition ${m.part}: watermark = event_seq.last`);
}

test(
  "30-beyond-2 P=1 immediate shutdown under 6 relation writers + 1 projector: acked changes survive, audit clean, drain converges",
  { timeout: 180_000 },
  async (t) => {
    await run(t, 1, 3021);
  },
);

test(
  "30-beyond-2 P=4 immediate shutdown under 6 relation writers + 1 projector: acked changes survive, audit clean, drain converges",
  { timeout: 180_000 },
  async (t) => {
    await run(t, 4, 3024);
  },
);
