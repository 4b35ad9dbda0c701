/**
 * Group commit of like writes (docs/write-path.md; like_set_batch; src/db/group-commit.ts):
 * every write of a batch is decided on its own, in arrival order (a missing item amid good
 * rows, a like then an unlike of one pair); concurrent batches over overlapping pairs keep each
 * partition's numbering gapless with one event per CHANGED and exact counts, without a deadlock
 * (through the service, and batches mixing partitions sent directly); and a batch parked at
 * like.beforeCommit holds its partition's sequence row, so a batch of that
 * partition waits for it while one of another partition does not. Negative control: a function
 * that gives every row of a batch the first row's outcome.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Pool } from "../../src/db/pool.ts";
import { transactionStats } from "../../src/db/transaction.ts";
import {
  formatReadSide,
  formatWriteSide,
  readSide,
  readSideClean,
  writeSide,
  writeSideClean,
} from "../../src/likes/like-audit.ts";
import { LikeService } from "../../src/likes/like-service.ts";
import { stablePartition } from "../../src/partition.ts";
import { runWorkers, seededRandom } from "../support/concurrency.ts";
import { replaceFunctionText } from "../support/function-mutant.ts";
import { openTransactions, waitForLockWait } from "../support/pg-locks.ts";
import { SqlHook } from "../support/sql-hooks.ts";
import { count, likesFixture, user, LAB_ITEMS } from "./fixture.ts";

interface Write {
  user: string;
  item: string;
  want: boolean;
  checked?: boolean;
}

interface BatchRow {
  ord: number;
  outcome: string;
  liked: boolean;
  version: number;
  seq: number;
  code: string | null;
}

/** One like_set_batch call, as LikeService sends it. */
async function batch(pool: Pool, partitions: number, writes: readonly Write[]): Promise<BatchRow[]> {
  const { rows } = await pool.query<BatchRow>(
    "SELECT ord, outcome, liked, version, seq, code FROM like_set_batch($1::text[], $2::text[], $3::boolean[], $4::integer[], $5::boolean[]) ORDER BY ord",
    [
      writes.map((w) => w.user),
      writes.map((w) => w.item),
      writes.map((w) => w.want),
      writes.map((w) => stablePartition(w.user, partitions)),
      writes.map((w) => w.checked ?? false),
    ],
  );
  return rows;
}

const show = (r: BatchRow) => `${r.outcome}${r.code ? `:${r.code}` : ""} liked=${r.liked} v${r.version} seq${r.seq}`;

/**
 * A batch mixing a missing item among good rows, and a like, an unlike and a like again of one
 * pair: what each row must answer, and what must be written. Returns what differs (empty: right).
 */
async function mixedBatchProblems(pool: Pool): Promise<string[]> {
  const rows = await batch(pool, 1, [
    { user: user(1), item: "item-lab-01", want: true },
    { user: user(2), item: "no-such-item", want: true },
    { user: user(3), item: "item-lab-02", want: true },
    { user: user(3), item: "item-lab-02", want: false },
    { user: user(3), item: "item-lab-02", want: true },
    { user: user(4), item: "item-lab-03", want: false },
    { user: user(2), item: "no-such-item", want: false },
  ]);
  const want = [
    "CHANGED liked=true v1 seq1",
    "REJECTED:ITEM_NOT_FOUND liked=false v0 seq0",
    "CHANGED liked=true v1 seq2",
    "CHANGED liked=false v2 seq3",
    "CHANGED liked=true v3 seq4",
    "NOOP liked=false v0 seq0",
    "REJECTED:ITEM_NOT_FOUND liked=false v0 seq0",
  ];
  const problems = rows
    .map((r, i) => (show(r) === want[i] ? "" : `row ${i + 1}: ${show(r)} instead of ${want[i]}`))
    .filter(Boolean);
  const { rows: events } = await pool.query<{ seq: number; user_id: string; delta: number; version: number }>(
    "SELECT seq, user_id, delta, version FROM like_outbox ORDER BY seq",
  );
  const shown = events.map((e) => `${e.seq}:${e.user_id}:${e.delta}:v${e.version}`).join(" ");
  const expected = `1:${user(1)}:1:v1 2:${user(3)}:1:v1 3:${user(3)}:-1:v2 4:${user(3)}:1:v3`;
  if (shown !== expected) problems.push(`outbox ${shown} instead of ${expected}`);
  const facts = await pool.query<{ user_id: string; liked: boolean; version: number }>(
    "SELECT user_id, liked, version FROM like_fact ORDER BY user_id, item_id",
  );
  const factsShown = facts.rows.map((f) => `${f.user_id}:${f.liked}:v${f.version}`).join(" ");
  // Neither the missing item nor the NOOP unlike of a never-liked pair writes a row.
  const factsExpected = `${user(1)}:true:v1 ${user(3)}:true:v3`;
  if (factsShown !== factsExpected) problems.push(`facts ${factsShown} instead of ${factsExpected}`);
  return problems;
}

test("one batch: a missing item amid good rows is REJECTED alone; a like, an unlike and a like of one pair apply in order (v1, v2, v3, three events); nothing else is written", async (t) => {
  const f = await likesFixture(1);
  t.after(() => f.close());
  const problems = await mixedBatchProblems(f.db.pool);
  assert.deepEqual(problems, []);
  assert.ok(writeSideClean(await writeSide(f.db.pool)));
});

test("negative control: a like_set_batch that answers every row with the first row's outcome is caught by the same check", async (t) => {
  const f = await likesFixture(1);
  t.after(() => f.close());
  await replaceFunctionText(f.db.pool, "like_set_batch(text[],text[],boolean[],integer[],boolean[])", [
    ["RETURN QUERY SELECT w.ord::integer, w.outcome,", "RETURN QUERY SELECT w.ord::integer, o_outcome[1],"],
  ]);
  const problems = await mixedBatchProblems(f.db.pool);
  t.diagnostic(`note mutant: ${problems.slice(0, 3).join("; ")}`);
  assert.ok(
    problems.some((p) => p.startsWith("row 2: CHANGED")),
    problems.join("; "),
  );
});

test("one batch of the API's writes: an item the user may not see is REJECTED, an unlike of one's own like on it is allowed once, then REJECTED", async (t) => {
  const f = await likesFixture(1);
  t.after(() => f.close());
  // HIDDEN: a public post whose author blocked the reader.
  await f.db.pool.query("INSERT INTO account (account_id) VALUES ('author'), ($1)", [user(5)]);
  await f.db.pool.query("INSERT INTO item (item_id, kind) VALUES ('post-1', 'post')");
  await f.db.pool.query(
    "INSERT INTO post (post_id, author, visibility, body, part, acl_token) VALUES ('post-1', 'author', 'PUBLIC', 'x', 0, 0)",
  );
  assert.equal((await f.likes.setLikedIfVisible(user(5), "post-1", true)).outcome, "CHANGED");
  await f.db.pool.query("INSERT INTO block (blocker, blocked) VALUES ('author', $1)", [user(5)]);
  const rows = await batch(f.db.pool, 1, [
    { user: user(5), item: "post-1", want: true, checked: true },
    { user: user(5), item: "post-1", want: false, checked: true },
    { user: user(5), item: "post-1", want: false, checked: true },
    { user: user(5), item: "post-1", want: true, checked: true },
  ]);
  assert.deepEqual(rows.map(show), [
    "REJECTED:ITEM_NOT_FOUND liked=false v0 seq0",
    "CHANGED liked=false v2 seq2",
    "REJECTED:ITEM_NOT_FOUND liked=false v0 seq0",
    "REJECTED:ITEM_NOT_FOUND liked=false v0 seq0",
  ]);
});

for (const partitions of [1, 4]) {
  test(`P=${partitions} 16 writers, overlapping pairs, batched: gapless seq per partition, one event per CHANGED, exact counts after the consumer, no deadlock`, async (t) => {
    const f = await likesFixture(partitions);
    t.after(() => f.close());
    const likes = await LikeService.open(f.db.pool, { batchMax: 16 });
    const retriesBefore = transactionStats.retries;
    const random = seededRandom(2200 + partitions);
    const plan = Array.from({ length: 16 }, () =>
      Array.from({ length: 40 }, () => ({
        u: user(1 + Math.floor(random() * 6)),
        item: LAB_ITEMS[Math.floor(random() * 3)]!,
        want: random() < 0.55,
      })),
    );
    const results = (
      await runWorkers(16, async (w) => {
        const mine = [];
        for (const p of plan[w]!)
          mine.push({ ...p, r: await (p.want ? likes.like(p.u, p.item) : likes.unlike(p.u, p.item)) });
        return mine;
      })
    ).flat();
    const stats = likes.batchStats()!;
    const changed = results.filter((x) => x.r.outcome === "CHANGED");
    t.diagnostic(
      `note ${results.length} writes in ${stats.batches} batches (largest ${stats.largest}); CHANGED=${changed.length}; retries=${transactionStats.retries - retriesBefore}`,
    );
    assert.ok(stats.largest > 1, "writes were committed together");
    assert.equal(transactionStats.retries - retriesBefore, 0, "no deadlock or serialization failure was retried");
    // Every CHANGED answer names its own event: (part, seq) unique, and the outbox row has its pair and version.
    assert.equal(new Set(changed.map((x) => `${x.r.part}:${x.r.seq}`)).size, changed.length);
    const {
      rows: [matched],
    } = await f.db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM unnest($1::int[], $2::bigint[], $3::text[], $4::text[], $5::bigint[], $6::int[]) AS a(part, seq, user_id, item_id, version, delta)
         JOIN like_outbox o USING (part, seq, user_id, item_id, version, delta)`,
      [
        changed.map((x) => x.r.part),
        changed.map((x) => x.r.seq),
        changed.map((x) => x.u),
        changed.map((x) => x.item),
        changed.map((x) => x.r.version),
        changed.map((x) => (x.want ? 1 : -1)),
      ],
    );
    assert.equal(matched!.n, changed.length);
    assert.equal(
      await count(f.db, "SELECT count(*) AS n FROM like_outbox"),
      changed.length,
      "one event per CHANGED, none for NOOP",
    );
    const ws = await writeSide(f.db.pool);
    t.diagnostic(`note write-side: ${formatWriteSide(ws)}`);
    assert.ok(writeSideClean(ws), "gapless per partition, versions and deltas agree with the facts");
    await f.consumer.drain();
    const rs = await readSide(f.db.pool);
    t.diagnostic(`note read-side: ${formatReadSide(rs)}`);
    assert.ok(readSideClean(rs));
    assert.equal(rs.countMismatchItems, 0, "counts equal facts");
  });
}

test("P=4 8 connections send like_set_batch directly, each batch mixing partitions and pairs in random order: no deadlock (no retry here), gapless per partition, one event per CHANGED", async (t) => {
  const f = await likesFixture(4);
  t.after(() => f.close());
  const random = seededRandom(2204);
  const plans = Array.from({ length: 8 }, () =>
    Array.from({ length: 25 }, () =>
      Array.from({ length: 6 }, () => ({
        user: user(1 + Math.floor(random() * 8)),
        item: LAB_ITEMS[Math.floor(random() * 3)]!,
        want: random() < 0.5,
      })),
    ),
  );
  const answers = (
    await runWorkers(8, async (w) => {
      const mine: BatchRow[] = [];
      for (const writes of plans[w]!) mine.push(...(await batch(f.db.pool, 4, writes)));
      return mine;
    })
  ).flat();
  const changed = answers.filter((r) => r.outcome === "CHANGED").length;
  t.diagnostic(`note ${answers.length} writes in ${8 * 25} batches of 6, CHANGED=${changed}`);
  assert.equal(await count(f.db, "SELECT count(*) AS n FROM like_outbox"), changed);
  assert.ok(writeSideClean(await writeSide(f.db.pool)));
});

test("P=4 a batch parked at like.beforeCommit holds its partition's sequence row: a batch of that partition waits for it (pg_locks), one of another partition commits; then the next numbers follow", async (t) => {
  const f = await likesFixture(4);
  const gate = await SqlHook.arm(f.db.pool, "like.beforeCommit");
  t.after(async () => {
    await gate.release();
    await f.close();
  });
  // Users of partition 0 and of another partition.
  const inPart = (p: number) =>
    Array.from({ length: 200 }, (_, i) => user(i + 1)).filter((u) => stablePartition(u, 4) === p);
  const [a1, a2, a3] = inPart(0);
  const [b1] = inPart(1);
  const parked = batch(f.db.pool, 4, [
    { user: a1!, item: "item-lab-01", want: true },
    { user: a2!, item: "item-lab-01", want: true },
  ]);
  const { pid, context } = await gate.parked();
  t.diagnostic(`note parked batch pid=${pid} context=${JSON.stringify(context)}`);
  assert.equal(context.events, 2);
  // Another partition is not held up: it commits while the first batch is parked.
  const other = await batch(f.db.pool, 4, [{ user: b1!, item: "item-lab-02", want: true }]);
  assert.deepEqual(other.map(show), ["CHANGED liked=true v1 seq1"]);
  // The same partition waits for the parked batch's row lock on like_seq.
  const client = await f.db.pool.connect();
  try {
    const waiterPid = (await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;
    const waiting = client.query<BatchRow>(
      "SELECT ord, outcome, liked, version, seq, code FROM like_set_batch($1::text[], $2::text[], $3::boolean[], $4::integer[], $5::boolean[])",
      [[a3!], ["item-lab-03"], [true], [0], [false]],
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
      await count(f.db, "SELECT count(*) AS n FROM like_outbox WHERE part = 0"),
      0,
      "nothing of the parked batch is visible",
    );
    await gate.release();
    const [first, next] = await Promise.all([parked, waiting]);
    assert.deepEqual(
      first.map((r) => r.seq),
      [1, 2],
    );
    assert.deepEqual(
      next.rows.map((r) => Number(r.seq)),
      [3],
    );
  } finally {
    client.release();
  }
  assert.ok(writeSideClean(await writeSide(f.db.pool)));
});

/**
 * One batcher for every partition: at P = 4 with one batch in flight, a write of partition 0 parks
 * at like.beforeCommit; writes of partitions 0, 2 and 1 arrive meanwhile and queue; when the
 * parked batch commits they go as one batch spanning three partitions, each numbered gapless in
 * its own partition.
 */
test("P=4 writes of partitions 0, 2 and 1 queued behind a parked batch go as one batch, numbered 2 in partition 0 and 1 in partitions 1 and 2", async (t) => {
  const f = await likesFixture(4);
  const gate = await SqlHook.arm(f.db.pool, "like.beforeCommit");
  t.after(async () => {
    await gate.release();
    await f.close();
  });
  const likes = await LikeService.open(f.db.pool, { batchMax: 16, batchesInFlight: 1 });
  const inPart = (p: number) =>
    Array.from({ length: 200 }, (_, i) => user(i + 1)).filter((u) => stablePartition(u, 4) === p);
  const [a1, a2] = inPart(0);
  const [b1] = inPart(1);
  const [c1] = inPart(2);
  const parked = likes.like(a1!, "item-lab-01");
  const { pid } = await gate.parked();
  const queued = Promise.all([
    likes.like(a2!, "item-lab-02"),
    likes.like(c1!, "item-lab-02"),
    likes.like(b1!, "item-lab-03"),
  ]);
  assert.equal(likes.batchStats().batches, 1, "the queued writes were not sent");
  const writers = (await openTransactions(f.db.pool)).filter((x) => x.xid !== null).map((x) => x.pid);
  assert.deepEqual(writers, [pid], "no other writing transaction is open");
  await gate.release();
  const first = await parked;
  const [a2r, c1r, b1r] = await queued;
  assert.deepEqual(
    [first, a2r, c1r, b1r].map((r) => `${r.outcome} p${r.part} seq${r.seq}`),
    ["CHANGED p0 seq1", "CHANGED p0 seq2", "CHANGED p2 seq1", "CHANGED p1 seq1"],
  );
  const s = likes.batchStats();
  assert.deepEqual([s.batches, s.largest], [2, 3], "the three queued writes of three partitions went as one batch");
  assert.ok(writeSideClean(await writeSide(f.db.pool)));
});
