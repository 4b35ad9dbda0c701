/**
 * Group commit of relation writes (docs/write-path.md; relation_set_batch;
 * RelationService's batchers): every write of a batch is decided on its own, in arrival order,
 * with the single functions' outcomes, reasons and codes (a missing account amid good rows, a
 * private account, a block, a decision, a follow, an unfollow and a follow again of one pair);
 * through the service each caller gets its own answer or error; a batch parked at
 * relation.afterEvent holds its partition's event_seq row, so a batch of that partition waits
 * for it while one of another partition commits; and 16 concurrent writers keep every
 * invariant with no deadlock. Negative control: the function with every row given the first
 * row's outcome.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Pool } from "../../src/db/pool.ts";
import { transactionStats } from "../../src/db/transaction.ts";
import { AccountNotFoundError } from "../../src/relations/errors.ts";
import { auditRelations, formatDiff, projectionDiff, relationAuditClean } from "../../src/relations/relation-audit.ts";
import { RelationService } from "../../src/relations/relation-service.ts";
import { formatRelationResult, type RelationResult } from "../../src/relations/types.ts";
import { stablePartition } from "../../src/partition.ts";
import { runWorkers, seededRandom } from "../support/concurrency.ts";
import { replaceFunctionText } from "../support/function-mutant.ts";
import { waitForAnyLockWait, waitForLockWait } from "../support/pg-locks.ts";
import { SqlHook } from "../support/sql-hooks.ts";
import { acct, relationsFixture, scalar } from "./fixture.ts";

type Op = "follow" | "unfollow" | "decide";

/** A write in the single function's argument order: follow/unfollow(a = follower, b = followee), decide(a = followee, b = follower). */
interface Write {
  op: Op;
  a: string;
  b: string;
  approve?: boolean;
}

interface BatchRow {
  ord: number;
  outcome: string;
  state: string;
  version: number;
  seq: number;
  reason: string;
  code: string | null;
  account: string | null;
}

/** One relation_set_batch call, as RelationService sends it. */
async function batch(pool: Pool, partitions: number, writes: readonly Write[]): Promise<BatchRow[]> {
  const { rows } = await pool.query<BatchRow>(
    "SELECT ord, outcome, state, version, seq, reason, code, account FROM relation_set_batch($1::text[], $2::text[], $3::text[], $4::boolean[], $5::integer) ORDER BY ord",
    [
      writes.map((w) => w.op),
      writes.map((w) => w.a),
      writes.map((w) => w.b),
      writes.map((w) => w.approve ?? null),
      partitions,
    ],
  );
  return rows;
}

const show = (r: {
  outcome: string;
  state: string;
  version: number;
  seq: number;
  reason: string;
  code?: string | null;
}) => `${r.outcome}${r.code ? `:${r.code}` : ""} ${r.state} v${r.version} seq${r.seq} (${r.reason})`;

/** Accounts 1..10; 5 is private; 6 blocks 4 (set up before the batch). */
const MIXED: Write[] = [
  { op: "follow", a: acct(1), b: acct(2) },
  { op: "follow", a: acct(1), b: "nobody" },
  { op: "follow", a: acct(3), b: acct(5) },
  { op: "follow", a: acct(4), b: acct(6) },
  { op: "follow", a: acct(7), b: acct(8) },
  { op: "unfollow", a: acct(7), b: acct(8) },
  { op: "follow", a: acct(7), b: acct(8) },
  { op: "decide", a: acct(5), b: acct(3), approve: true },
  { op: "decide", a: acct(5), b: acct(1), approve: true },
  { op: "follow", a: acct(1), b: acct(2) },
  { op: "unfollow", a: acct(9), b: acct(10) },
];

const MIXED_WANT = [
  "CHANGED ACTIVE v1 seq1 (REMOVED->ACTIVE)",
  "REJECTED:ACCOUNT_NOT_FOUND REMOVED v0 seq0 (nobody)",
  "CHANGED PENDING v1 seq2 (REMOVED->PENDING)",
  "REJECTED:BLOCKED REMOVED v0 seq0 (blocked)",
  "CHANGED ACTIVE v1 seq3 (REMOVED->ACTIVE)",
  "CHANGED REMOVED v2 seq4 (ACTIVE->REMOVED)",
  "CHANGED ACTIVE v3 seq5 (REMOVED->ACTIVE)",
  "CHANGED ACTIVE v2 seq6 (PENDING->ACTIVE)",
  "REJECTED:NOT_PENDING REMOVED v0 seq0 (not PENDING (REMOVED))",
  "NOOP ACTIVE v1 seq0 (already ACTIVE)",
  "NOOP REMOVED v0 seq0 (already REMOVED)",
];

const EVENTS_WANT = [
  `1:${acct(1)}>${acct(2)}:ACTIVE:v1`,
  `2:${acct(3)}>${acct(5)}:PENDING:v1`,
  `3:${acct(7)}>${acct(8)}:ACTIVE:v1`,
  `4:${acct(7)}>${acct(8)}:REMOVED:v2`,
  `5:${acct(7)}>${acct(8)}:ACTIVE:v3`,
  `6:${acct(3)}>${acct(5)}:ACTIVE:v2`,
].join(" ");

async function mixedFixture() {
  const f = await relationsFixture(1, 10, [5]);
  await f.rel.block(acct(6), acct(4));
  return f;
}

async function eventsShown(pool: Pool): Promise<string> {
  const { rows } = await pool.query<{
    seq: number;
    follower: string;
    followee: string;
    state: string;
    version: number;
  }>("SELECT seq, follower, followee, state, version FROM relation_event ORDER BY part, seq");
  return rows.map((e) => `${e.seq}:${e.follower}>${e.followee}:${e.state}:v${e.version}`).join(" ");
}

/** Runs MIXED as one batch; returns what differs from the wanted rows and events (empty: right). */
async function mixedBatchProblems(pool: Pool): Promise<string[]> {
  const rows = await batch(pool, 1, MIXED);
  const problems = rows
    .map((r, i) => (show(r) === MIXED_WANT[i] ? "" : `row ${i + 1}: ${show(r)} instead of ${MIXED_WANT[i]}`))
    .filter(Boolean);
  if (rows.length !== MIXED.length) problems.push(`${rows.length} rows for ${MIXED.length} writes`);
  const events = await eventsShown(pool);
  if (events !== EVENTS_WANT) problems.push(`events ${events} instead of ${EVENTS_WANT}`);
  return problems;
}

test("one batch: a missing account amid good rows is its own row, a private account PENDING, a blocked follow REJECTED BLOCKED, decisions, and a follow, an unfollow and a follow of one pair (v1, v2, v3: three events in order)", async (t) => {
  const f = await mixedFixture();
  t.after(() => f.close());
  assert.deepEqual(await mixedBatchProblems(f.db.pool), []);
  assert.ok(relationAuditClean(await auditRelations(f.db.pool)));
});

test("the same writes one by one through the single functions (LEDGER_WRITE_BATCH_MAX = 1) give the same answers, reasons and codes, and the same relation and event rows", async (t) => {
  const batched = await mixedFixture();
  const single = await mixedFixture();
  t.after(async () => {
    await batched.close();
    await single.close();
  });
  const rows = await batch(batched.db.pool, 1, MIXED);
  const unbatched = await RelationService.open(single.db.pool, { batchMax: 1 });
  const answers: string[] = [];
  for (const w of MIXED) {
    try {
      const r = await (w.op === "decide" ? unbatched.decide(w.a, w.b, w.approve!) : unbatched[w.op](w.a, w.b));
      answers.push(show(r));
    } catch (err) {
      assert.ok(err instanceof AccountNotFoundError, String(err));
      answers.push(`REJECTED:ACCOUNT_NOT_FOUND REMOVED v0 seq0 (${err.message.replace(/^unknown account: /, "")})`);
    }
  }
  assert.deepEqual(rows.map(show), answers);
  const tables = async (pool: Pool) =>
    (
      await pool.query<{ t: string }>(
        `SELECT (SELECT string_agg(follower || '>' || followee || ':' || state || ':v' || version, ' ' ORDER BY follower, followee) FROM relation)
            || ' | ' || (SELECT string_agg(part || ':' || last, ' ' ORDER BY part) FROM event_seq) AS t`,
      )
    ).rows[0]!.t;
  assert.equal(await tables(batched.db.pool), await tables(single.db.pool));
  assert.equal(await eventsShown(batched.db.pool), await eventsShown(single.db.pool));
});

test("negative control: a relation_set_batch that answers every row with the first row's outcome is caught by the same check", async (t) => {
  const f = await mixedFixture();
  t.after(() => f.close());
  await replaceFunctionText(f.db.pool, "relation_set_batch(text[],text[],text[],boolean[],integer)", [
    ["RETURN QUERY SELECT w.ord::integer, w.outcome,", "RETURN QUERY SELECT w.ord::integer, o_outcome[1],"],
  ]);
  const problems = await mixedBatchProblems(f.db.pool);
  t.diagnostic(`note mutant: ${problems.slice(0, 3).join("; ")}`);
  assert.ok(
    problems.some((p) => p.startsWith("row 2: CHANGED")),
    problems.join("; "),
  );
});

test("one batch with accounts being erased and erased: each write refused on its own as the single call refuses it (AccountBeingErasedError naming the first erasing account of the pair, AccountErasedError for an erased actor, AccountNotFoundError naming the missing ids), the others written", async (t) => {
  const erasing = acct(5);
  const erased = acct(6);
  const writes: Write[] = [
    { op: "follow", a: acct(1), b: acct(2) },
    { op: "follow", a: acct(1), b: erasing },
    { op: "follow", a: acct(1), b: erased },
    { op: "follow", a: erased, b: erasing },
    { op: "unfollow", a: erasing, b: acct(3) },
    { op: "decide", a: acct(3), b: erasing, approve: true },
    { op: "follow", a: acct(4), b: acct(3) },
  ];
  const setUp = async () => {
    const f = await relationsFixture(1, 10);
    await f.db.pool.query("UPDATE account SET erased_state = 'ERASING' WHERE account_id = $1", [erasing]);
    await f.db.pool.query("UPDATE account SET erased_state = 'ERASED' WHERE account_id = $1", [erased]);
    return f;
  };
  const batched = await setUp();
  const single = await setUp();
  t.after(async () => {
    await batched.close();
    await single.close();
  });
  // An erased acting account is a tombstone's write (the service turns its ACCOUNT_NOT_FOUND into AccountErasedError).
  const tombstone = `AccountErasedError account ${erased} was erased: its id can never act again, and no new fact may name it`;
  const rows = (await batch(batched.db.pool, 1, writes)).map((r, i) =>
    r.code === "ACCOUNT_NOT_FOUND" && writes[i]!.a === erased
      ? tombstone
      : r.code === "ACCOUNT_NOT_FOUND"
        ? `AccountNotFoundError unknown account: ${r.reason}`
        : r.code === "ACCOUNT_BEING_ERASED"
          ? `AccountBeingErasedError ${r.account}`
          : show(r),
  );
  const unbatched = await RelationService.open(single.db.pool, { batchMax: 1 });
  const answers: string[] = [];
  for (const w of writes) {
    try {
      answers.push(
        show(await (w.op === "decide" ? unbatched.decide(w.a, w.b, w.approve!) : unbatched[w.op](w.a, w.b))),
      );
    } catch (err) {
      const name = (err as Error).constructor.name;
      answers.push(
        name === "AccountBeingErasedError"
          ? `${name} ${/account (\S+) is being erased/.exec((err as Error).message)?.[1]}`
          : `${name} ${(err as Error).message}`,
      );
    }
  }
  t.diagnostic(`note ${rows.join("; ")}`);
  assert.deepEqual(rows, [
    "CHANGED ACTIVE v1 seq1 (REMOVED->ACTIVE)",
    `AccountBeingErasedError ${erasing}`,
    `AccountNotFoundError unknown account: ${erased}`,
    tombstone,
    `AccountBeingErasedError ${erasing}`,
    `AccountBeingErasedError ${erasing}`,
    "CHANGED ACTIVE v1 seq2 (REMOVED->ACTIVE)",
  ]);
  assert.deepEqual(rows, answers, "the single calls refuse the same writes the same way");
  assert.equal(await eventsShown(batched.db.pool), await eventsShown(single.db.pool));
});

test("through the service: writes queued behind two batches in flight go as one batch, and each caller gets its own answer, a missing account its own AccountNotFoundError", async (t) => {
  const f = await relationsFixture(1, 20, [12]);
  const gate = await SqlHook.arm(f.db.pool, "relation.afterEvent");
  t.after(async () => {
    await gate.release();
    await f.close();
  });
  const rel = await RelationService.open(f.db.pool, { batchMax: 16 });
  // First batch (one write) parks holding event_seq; the second waits for it; the next three queue.
  const first = rel.follow(acct(1), acct(2));
  const { pid } = await gate.parked();
  const second = rel.follow(acct(3), acct(4));
  const secondWait = await waitForAnyLockWait(f.db.pool);
  assert.equal(secondWait.locktype, "transactionid", "the second batch waits for the parked one's event_seq row");
  const queued = [
    rel.follow(acct(5), acct(6)),
    rel.follow(acct(7), "nobody").then(
      () => "resolved",
      (err: unknown) => (err instanceof AccountNotFoundError ? `AccountNotFoundError ${err.message}` : String(err)),
    ),
    rel.follow(acct(11), acct(12)),
    rel.unfollow(acct(5), acct(6)),
  ] as const;
  assert.equal(rel.batchStats()!.batches, 2, "two batches in flight; the rest queue");
  t.diagnostic(`note parked pid=${pid}`);
  await gate.release();
  const [r1, r2] = await Promise.all([first, second]);
  const [q1, q2, q3, q4] = await Promise.all(queued);
  const shown = [r1, r2, q1 as RelationResult, q3 as RelationResult, q4 as RelationResult].map(formatRelationResult);
  t.diagnostic(`note answers: ${shown.join(", ")}; missing: ${q2}; stats ${JSON.stringify(rel.batchStats())}`);
  assert.deepEqual(shown, [
    "CHANGED(ACTIVE,v1,seq1)",
    "CHANGED(ACTIVE,v1,seq2)",
    "CHANGED(ACTIVE,v1,seq3)",
    "CHANGED(PENDING,v1,seq4)",
    "CHANGED(REMOVED,v2,seq5)",
  ]);
  assert.equal(q2, "AccountNotFoundError unknown account: nobody");
  assert.deepEqual(
    [rel.batchStats()!.batches, rel.batchStats()!.largest],
    [3, 4],
    "the four queued writes went as one batch",
  );
  assert.ok(relationAuditClean(await auditRelations(f.db.pool)));
});

test("P=4 a batch parked at relation.afterEvent holds its partition's event_seq row: a batch of that partition waits for it (pg_locks), one of another partition commits; then the next numbers follow", async (t) => {
  const f = await relationsFixture(4, 200);
  const gate = await SqlHook.arm(f.db.pool, "relation.afterEvent");
  t.after(async () => {
    await gate.release();
    await f.close();
  });
  const inPart = (p: number) =>
    Array.from({ length: 200 }, (_, i) => acct(i + 1)).filter((u) => stablePartition(u, 4) === p);
  const [e1, e2, e3] = inPart(0);
  const [o1] = inPart(1);
  const parked = batch(f.db.pool, 4, [
    { op: "follow", a: acct(1), b: e1! },
    { op: "follow", a: acct(2), b: e2! },
  ]);
  const { pid, context } = await gate.parked();
  t.diagnostic(`note parked batch pid=${pid} context=${JSON.stringify(context)}`);
  assert.deepEqual(
    [context.followee, context.part, context.seq, context.version],
    [e1, 0, 1, 1],
    "the batch's first event",
  );
  const other = await batch(f.db.pool, 4, [{ op: "follow", a: acct(3), b: o1! }]);
  assert.deepEqual(other.map(show), ["CHANGED ACTIVE v1 seq1 (REMOVED->ACTIVE)"], "another partition is not held up");
  const client = await f.db.pool.connect();
  try {
    const waiterPid = (await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;
    const waiting = client.query<BatchRow>(
      "SELECT ord, outcome, state, version, seq, reason, code, account FROM relation_set_batch($1::text[], $2::text[], $3::text[], $4::boolean[], $5::integer)",
      [["follow", "unfollow"], [acct(4), acct(4)], [e3!, e3!], [null, null], 4],
    );
    const wait = await waitForLockWait(f.db.pool, () => waiterPid);
    const {
      rows: [holder],
    } = await f.db.pool.query<{ pid: number }>(
      `SELECT l.pid FROM pg_locks l WHERE l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' AND l.granted
          AND l.transactionid = (SELECT w.transactionid FROM pg_locks w WHERE w.pid = $1 AND NOT w.granted AND w.locktype = 'transactionid')`,
      [waiterPid],
    );
    t.diagnostic(
      `note the same partition's batch waits: locktype=${wait.locktype} mode=${wait.mode}, for pid ${holder?.pid}`,
    );
    assert.equal(wait.locktype, "transactionid");
    assert.equal(holder?.pid, pid, "it waits for the parked batch's transaction");
    assert.equal(
      await scalar(f, "SELECT count(*) AS n FROM relation_event WHERE part = 0"),
      0,
      "nothing of the parked batch is visible",
    );
    await gate.release();
    const [first, next] = await Promise.all([parked, waiting]);
    assert.deepEqual(
      first.map((r) => r.seq),
      [1, 2],
    );
    assert.deepEqual(next.rows.map(show), [
      "CHANGED ACTIVE v1 seq3 (REMOVED->ACTIVE)",
      "CHANGED REMOVED v2 seq4 (ACTIVE->REMOVED)",
    ]);
  } finally {
    client.release();
  }
  assert.ok(relationAuditClean(await auditRelations(f.db.pool)));
});

for (const partitions of [1, 4]) {
  test(`P=${partitions} 16 writers, follow/unfollow/decide over overlapping pairs, batched: audit clean, one event per CHANGED with its own (part, seq), projection converges, no deadlock`, async (t) => {
    const f = await relationsFixture(partitions, 12, [3, 7]);
    t.after(() => f.close());
    const rel = await RelationService.open(f.db.pool, { batchMax: 16 });
    const retriesBefore = transactionStats.retries;
    const random = seededRandom(2230 + partitions);
    const pick = () => acct(1 + Math.floor(random() * 8));
    const plan = Array.from({ length: 16 }, () =>
      Array.from({ length: 40 }, () => {
        const r = random();
        return {
          op: (r < 0.5 ? "follow" : r < 0.8 ? "unfollow" : "decide") as Op,
          a: pick(),
          b: pick(),
          approve: random() < 0.6,
        };
      }),
    );
    const results = (
      await runWorkers(16, async (w) => {
        const mine: { op: Op; follower: string; followee: string; r: RelationResult }[] = [];
        for (const p of plan[w]!) {
          const r = await (p.op === "decide" ? rel.decide(p.a, p.b, p.approve) : rel[p.op](p.a, p.b));
          mine.push({ op: p.op, follower: p.op === "decide" ? p.b : p.a, followee: p.op === "decide" ? p.a : p.b, r });
        }
        return mine;
      })
    ).flat();
    const stats = rel.batchStats()!;
    const changed = results.filter((x) => x.r.outcome === "CHANGED");
    t.diagnostic(
      `note ${results.length} writes in ${stats.batches} batches (largest ${stats.largest}); CHANGED=${changed.length}; retries=${transactionStats.retries - retriesBefore}`,
    );
    assert.ok(stats.largest > 1, "writes were committed together");
    assert.equal(transactionStats.retries - retriesBefore, 0, "no deadlock or serialization failure was retried");
    // Every CHANGED answer names its own event: (part, seq) unique, and the event row has its pair, state and version.
    const parts = changed.map((x) => stablePartition(x.followee, partitions));
    assert.equal(new Set(changed.map((x, i) => `${parts[i]}:${x.r.seq}`)).size, changed.length);
    const {
      rows: [matched],
    } = await f.db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM unnest($1::int[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::bigint[]) AS a(part, seq, follower, followee, state, version)
         JOIN relation_event e USING (part, seq, follower, followee, state, version)`,
      [
        parts,
        changed.map((x) => x.r.seq),
        changed.map((x) => x.follower),
        changed.map((x) => x.followee),
        changed.map((x) => x.r.state),
        changed.map((x) => x.r.version),
      ],
    );
    assert.equal(matched!.n, changed.length);
    assert.equal(
      await scalar(f, "SELECT count(*) AS n FROM relation_event"),
      changed.length,
      "one event per CHANGED, none for NOOP or REJECTED",
    );
    const audit = await auditRelations(f.db.pool);
    t.diagnostic(`note audit: ${JSON.stringify(audit)}`);
    assert.ok(relationAuditClean(audit), "gapless per partition, versions agree with the truth, legal transitions");
    await f.projector.drain();
    assert.equal(formatDiff(await projectionDiff(f.db.pool)), "0,0,0");
  });
}

test("30-H on a batch: a batch of follows parked at follow.afterLock holds its pairs' row locks, a block of one of them waits (pg_locks), and after the follow commits the block removes it", async (t) => {
  const f = await relationsFixture(1, 100);
  const followLocked = await SqlHook.arm(f.db.pool, "follow.afterLock");
  t.after(async () => {
    await followLocked.release();
    await f.close();
  });
  const following = batch(f.db.pool, 1, [
    { op: "follow", a: acct(70), b: acct(71) },
    { op: "follow", a: acct(72), b: acct(73) },
  ]);
  const parked = await followLocked.parked();
  assert.deepEqual([parked.context.follower, parked.context.followee], [acct(70), acct(71)]);
  const blocking = f.rel.block(acct(71), acct(70));
  const wait = await waitForAnyLockWait(f.db.pool);
  t.diagnostic(`note block pid=${wait.pid} waits: locktype=${wait.locktype}, the batch is pid ${parked.pid}`);
  assert.notEqual(wait.pid, parked.pid);
  assert.equal(wait.locktype, "transactionid", "the block waits for the batch's row lock");
  await followLocked.release();
  const rows = await following;
  const blocked = await blocking;
  assert.deepEqual(rows.map(show), [
    "CHANGED ACTIVE v1 seq1 (REMOVED->ACTIVE)",
    "CHANGED ACTIVE v1 seq2 (REMOVED->ACTIVE)",
  ]);
  assert.equal(formatRelationResult(blocked), "CHANGED(REMOVED,v2,seq3)");
  const {
    rows: [pair],
  } = await f.db.pool.query<{ state: string }>("SELECT state FROM relation WHERE follower = $1 AND followee = $2", [
    acct(70),
    acct(71),
  ]);
  assert.equal(pair!.state, "REMOVED");
  assert.ok(relationAuditClean(await auditRelations(f.db.pool)));
});
