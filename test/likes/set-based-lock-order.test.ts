/**
 * Two overlapping set-based batches (migration 027) lock their fact rows in the global order
 * ((item_id, user_id) COLLATE "C"), whatever order their writes arrive in, so they cannot
 * deadlock; synchronised on the hook point and pg_locks only.
 *
 * One user, three existing pairs X < Y < Z (items item-lab-01..03), all unliked at v2, P = 1.
 *   1. A like of Y is parked at like.beforeCommit: it holds Y's row (and the sequence row).
 *   2. Batch A (like X, Y, Z, in that order) waits for the parked transaction on Y's row
 *      (pg_locks) having locked X (X's xmax is A's transaction id) and not Z.
 *   3. Batch B (like Z, Y, X: arrival order reversed) waits for A on X's row (pg_locks: the
 *      transactionid it awaits is A's), and has locked nothing: not Z, which comes later in
 *      the order although it arrived first.
 *   4. Released: both finish without an error (no deadlock), A answers CHANGED v3, NOOP v3
 *      (decided on Y's newest version, the parked like's), CHANGED v3; B answers NOOP v3 for
 *      all three; the outbox holds Y's, X's and Z's v3 events, gapless, audit clean.
 * Negative control: the same function locking a run's rows in arrival order (ORDER BY w.ord)
 * instead of the global order: B locks Z before it waits, A then waits for Z while B waits for
 * Y, and PostgreSQL's deadlock detector aborts one of them (40P01), which the checks see.
 *
 * A batch whose pairs alternate between existing rows and new pairs is written run by run in the
 * global order: with a first like of Y parked (its INSERT not committed), batch C (like X, Y, Z;
 * X and Z existing, Y new to it) waits for the parked transaction at Y (the INSERT's conflict
 * check) holding X and not Z; released, it answers CHANGED v3, NOOP v1 (Y liked meanwhile, decided
 * on the committed row as the loop does after its INSERT finds the row), CHANGED v3.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Pool, PoolClient } from "../../src/db/pool.ts";
import { writeSide, writeSideClean } from "../../src/likes/like-audit.ts";
import { replaceFunctionText } from "../support/function-mutant.ts";
import { waitForLockWait } from "../support/pg-locks.ts";
import { SqlHook } from "../support/sql-hooks.ts";
import { likesFixture, user, type LikesFixture } from "./fixture.ts";

const USER = user(1);
const [X, Y, Z] = ["item-lab-01", "item-lab-02", "item-lab-03"] as const;

const BATCH_SQL =
  "SELECT outcome, liked, version FROM like_set_batch($1::text[], $2::text[], $3::boolean[], $4::integer[], $5::boolean[]) ORDER BY ord";

function send(db: Pool | PoolClient, items: readonly string[], want: boolean): Promise<string[]> {
  return db
    .query<{ outcome: string; liked: boolean; version: string }>(BATCH_SQL, [items.map(() => USER), items, items.map(() => want), items.map(() => 0), items.map(() => false)])
    .then((r) => r.rows.map((row) => `${row.outcome} liked=${row.liked} v${row.version}`));
}

async function pidOf(client: PoolClient): Promise<number> {
  return (await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;
}

/** The pairs (of X, Y, Z) whose row is locked or written by the open transaction of backend `pid` now (its xid in the row's xmax). */
async function rowsHeldBy(pool: Pool, pid: number): Promise<string[]> {
  const { rows } = await pool.query<{ item_id: string }>(
    `SELECT f.item_id FROM like_fact f, pg_stat_activity a
      WHERE a.pid = $1 AND a.backend_xid IS NOT NULL AND f.user_id = $2 AND f.xmax::text = a.backend_xid::text
      ORDER BY f.item_id`,
    [pid, USER],
  );
  return rows.map((r) => r.item_id);
}

/** The pid holding the transaction id that backend `pid` waits for, if it waits for one. */
async function awaitedHolder(pool: Pool, pid: number): Promise<number | null> {
  const { rows } = await pool.query<{ holder: number | null }>(
    `SELECT (SELECT h.pid FROM pg_locks h WHERE h.locktype = 'transactionid' AND h.granted AND h.transactionid = l.transactionid) AS holder
       FROM pg_locks l WHERE l.pid = $1 AND l.locktype = 'transactionid' AND NOT l.granted`,
    [pid],
  );
  return rows[0]?.holder ?? null;
}

async function raceProblems(f: LikesFixture): Promise<string[]> {
  const problems: string[] = [];
  const pool = f.db.pool;
  await send(pool, [X, Y, Z], true);
  await send(pool, [X, Y, Z], false);
  const clients = [await pool.connect(), await pool.connect()];
  const [ca, cb] = clients as [PoolClient, PoolClient];
  const gate = await SqlHook.arm(pool, "like.beforeCommit");
  let parkedRun: Promise<string[]> | undefined;
  try {
    parkedRun = send(pool, [Y], true);
    const { pid: parkedPid } = await gate.parked();
    const [pidA, pidB] = [await pidOf(ca), await pidOf(cb)];
    const runA = send(ca, [X, Y, Z], true);
    runA.catch(() => undefined);
    await waitForLockWait(pool, () => pidA);
    if ((await awaitedHolder(pool, pidA)) !== parkedPid) problems.push("A does not wait for the parked transaction");
    const heldA = await rowsHeldBy(pool, pidA);
    if (heldA.join() !== X) problems.push(`while waiting for Y, A holds ${JSON.stringify(heldA)} (want only X)`);
    const runB = send(cb, [Z, Y, X], true);
    runB.catch(() => undefined);
    await waitForLockWait(pool, () => pidB);
    const holderB = await awaitedHolder(pool, pidB);
    const heldB = await rowsHeldBy(pool, pidB);
    if (holderB !== pidA) problems.push(`B waits for pid ${holderB}, not for A (${pidA})`);
    if (heldB.length > 0) problems.push(`while waiting, B holds ${JSON.stringify(heldB)} (want nothing: X comes first in the order)`);
    await gate.release();
    const parked = await parkedRun;
    if (parked.join() !== "CHANGED liked=true v3") problems.push(`the parked like answered ${parked.join()}`);
    const settled = await Promise.allSettled([runA, runB]);
    const [wantA, wantB] = ["CHANGED liked=true v3,NOOP liked=true v3,CHANGED liked=true v3", "NOOP liked=true v3,NOOP liked=true v3,NOOP liked=true v3"];
    for (const [name, result, want] of [["A", settled[0], wantA], ["B", settled[1], wantB]] as const) {
      if (result.status === "rejected") problems.push(`${name} failed: ${(result.reason as Error).message}`);
      else if (result.value.join() !== want) problems.push(`${name} answered ${result.value.join()} (want ${want})`);
    }
  } finally {
    await gate.release();
    await parkedRun?.catch(() => undefined);
    for (const c of clients) c.release();
  }
  const { rows: events } = await pool.query<{ item_id: string; version: string }>(
    "SELECT item_id, version FROM like_outbox WHERE version = 3 ORDER BY seq");
  const shown = events.map((e) => `${e.item_id}:v${e.version}`).join(" ");
  if (shown !== `${Y}:v3 ${X}:v3 ${Z}:v3`) problems.push(`the v3 events are ${shown} (want ${Y}:v3 ${X}:v3 ${Z}:v3)`);
  if (!writeSideClean(await writeSide(pool))) problems.push("the write-side audit is not clean");
  return problems;
}

test("P=1 two overlapping set-based batches, arrival orders reversed: each locks in the global order (B waits for A holding nothing), no deadlock, both answer from the newest rows", async (t) => {
  const f = await likesFixture(1);
  t.after(() => f.close());
  assert.deepEqual(await raceProblems(f), []);
});

test("negative control: rows locked in arrival order (ORDER BY w.ord): B holds Z while it waits, and the two batches deadlock, which the checks see", async (t) => {
  const f = await likesFixture(1);
  t.after(() => f.close());
  await replaceFunctionText(f.db.pool, "like_set_batch(text[], text[], boolean[], integer[], boolean[])", [
    ['ORDER BY f.item_id COLLATE "C", f.user_id COLLATE "C"', "ORDER BY w.ord"],
  ]);
  const problems = await raceProblems(f);
  t.diagnostic(`note control: ${problems.join("; ")}`);
  assert.ok(problems.some((p) => p.startsWith("while waiting, B holds")), "B holds a row out of order");
  assert.ok(problems.some((p) => /failed: deadlock detected/.test(p)), "the detector broke a deadlock");
});

test("P=1 a batch of existing and new pairs (X existing, Y new, Z existing) is written run by run in the global order: it waits at Y's INSERT for a parked first like holding X only, then answers Y NOOP from the committed row", async (t) => {
  const f = await likesFixture(1);
  t.after(() => f.close());
  const pool = f.db.pool;
  await send(pool, [X, Z], true);
  await send(pool, [X, Z], false);
  const client = await pool.connect();
  const gate = await SqlHook.arm(pool, "like.beforeCommit");
  let parkedRun: Promise<string[]> | undefined;
  try {
    parkedRun = send(pool, [Y], true);
    const { pid: parkedPid } = await gate.parked();
    const pidC = await pidOf(client);
    const runC = send(client, [X, Y, Z], true);
    runC.catch(() => undefined);
    await waitForLockWait(pool, () => pidC);
    assert.equal(await awaitedHolder(pool, pidC), parkedPid, "C waits for the parked first like of Y");
    assert.deepEqual(await rowsHeldBy(pool, pidC), [X], "while waiting at Y, C holds X and not Z");
    await gate.release();
    assert.deepEqual(await parkedRun, ["CHANGED liked=true v1"]);
    assert.deepEqual(await runC, ["CHANGED liked=true v3", "NOOP liked=true v1", "CHANGED liked=true v3"]);
  } finally {
    await gate.release();
    await parkedRun?.catch(() => undefined);
    client.release();
  }
  assert.ok(writeSideClean(await writeSide(pool)));
});
