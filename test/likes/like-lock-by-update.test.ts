/**
 * like_set_batch locks a fact row with the UPDATE that changes it, no separate
 * SELECT ... FOR UPDATE. A like/unlike race on one pair through batches, with a batch parked at
 * like.beforeCommit holding the pair's row:
 *   - a write the committed state already satisfies (NOOP) is answered at once, from the
 *     committed row, without waiting for the parked write and without a lock;
 *   - a write that would change the row waits for the parked transaction (pg_locks: a tuple lock
 *     on like_fact granted, the parked transaction's id awaited), and is then decided on the
 *     row's newest committed version: one write (the one-UPDATE path) and a pair written twice in
 *     one batch (the read-decide-UPDATE-if-unchanged path).
 * Negative controls, the same checks on broken variants of the function: the row locked first
 * (the pre-024 shape: the NOOP waits), and a decision on the unlocked read written by an UPDATE
 * without its re-checked condition (a lost update: a version written twice).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Pool, PoolClient } from "../../src/db/pool.ts";
import { writeSide, writeSideClean } from "../../src/likes/like-audit.ts";
import { replaceFunctionText } from "../support/function-mutant.ts";
import { waitForLockWait } from "../support/pg-locks.ts";
import { IS_HOOK_WAIT, SqlHook } from "../support/sql-hooks.ts";
import { likesFixture, user, type LikesFixture } from "./fixture.ts";

const USER = user(1);
const ITEM = "item-lab-01";
const DEADLINE_MS = 15_000;

interface BatchRow {
  outcome: string;
  liked: boolean;
  version: string;
}

const BATCH_SQL =
  "SELECT outcome, liked, version FROM like_set_batch($1::text[], $2::text[], $3::boolean[], $4::integer[], $5::boolean[]) ORDER BY ord";

/** One batch of writes of the pair (P = 1: partition 0), as LikeService sends it. */
function sendBatch(db: Pool | PoolClient, wants: readonly boolean[]): Promise<BatchRow[]> {
  return db
    .query<BatchRow>(BATCH_SQL, [
      wants.map(() => USER),
      wants.map(() => ITEM),
      wants,
      wants.map(() => 0),
      wants.map(() => false),
    ])
    .then((r) => r.rows);
}

const show = (rows: readonly BatchRow[]) => rows.map((r) => `${r.outcome} liked=${r.liked} v${r.version}`);

async function pidOf(client: PoolClient): Promise<number> {
  return (await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;
}

/**
 * Runs a batch on its own connection and reports whether it finished, or first showed a lock
 * wait in pg_locks (the test's hook wait excluded). Either way the batch is left to finish.
 */
async function finishesWithoutWaiting(
  pool: Pool,
  client: PoolClient,
  wants: readonly boolean[],
): Promise<{ waited: boolean; run: Promise<BatchRow[]> }> {
  const pid = await pidOf(client);
  let settled = false;
  const run = sendBatch(client, wants);
  run.then(
    () => (settled = true),
    () => (settled = true),
  );
  const deadline = Date.now() + DEADLINE_MS;
  while (!settled) {
    const { rows } = await pool.query(
      `SELECT 1 FROM pg_locks l WHERE l.pid = $1 AND NOT l.granted AND NOT ${IS_HOOK_WAIT}`,
      [pid],
    );
    if (rows.length > 0) return { waited: true, run };
    if (Date.now() > deadline) throw new Error("the batch neither finished nor waited");
    await new Promise((resolve) => setImmediate(resolve));
  }
  return { waited: false, run };
}

/**
 * The race, from the pair unliked at v2. Returns what differs from the right answers (empty:
 * right). Round 1: A (like) parked; C (unlike) must be a NOOP at once; B (like) must wait for A on
 * the fact row and answer NOOP v3. Round 2: A2 (unlike) parked; B2 (like, unlike) must wait and
 * answer CHANGED v5, CHANGED v6. Then the pair's events are versions 1..6, once each, alternating.
 */
async function raceProblems(f: LikesFixture): Promise<string[]> {
  const problems: string[] = [];
  const pool = f.db.pool;
  await sendBatch(pool, [true]);
  await sendBatch(pool, [false]);
  const clients = [await pool.connect(), await pool.connect()];
  const [c1, c2] = clients as [PoolClient, PoolClient];
  try {
    for (const round of [1, 2]) {
      const parkedWant = round === 1;
      const gate = await SqlHook.arm(pool, "like.beforeCommit");
      let parkedRun: Promise<BatchRow[]> | undefined;
      try {
        parkedRun = sendBatch(pool, [parkedWant]);
        const { pid: parkedPid } = await gate.parked();
        if (round === 1) {
          const noop = await finishesWithoutWaiting(pool, c1, [false]);
          if (noop.waited) {
            // The rest of the race assumes the like is still parked: stop here.
            problems.push("round 1: the NOOP unlike waited for the parked like");
            await gate.release();
            await noop.run;
            return problems;
          }
          const rows = await noop.run;
          if (show(rows).join() !== "NOOP liked=false v2")
            problems.push(
              `round 1: the unlike answered ${show(rows).join()} while the like was parked (want NOOP liked=false v2)`,
            );
        }
        const waiterPid = await pidOf(c2);
        const waiting = sendBatch(c2, round === 1 ? [true] : [true, false]);
        waiting.catch(() => undefined);
        const wait = await waitForLockWait(pool, () => waiterPid).catch(() => undefined);
        const { rows: holds } = await pool.query<{ locktype: string; relation: string | null; holder: number | null }>(
          `SELECT l.locktype, l.relation::regclass::text AS relation,
                  (SELECT h.pid FROM pg_locks h WHERE h.locktype = 'transactionid' AND h.granted AND h.transactionid = l.transactionid) AS holder
             FROM pg_locks l WHERE l.pid = $1 AND l.locktype IN ('tuple', 'transactionid') AND (l.locktype = 'tuple' OR NOT l.granted)`,
          [waiterPid],
        );
        const tuple = holds.find((h) => h.locktype === "tuple");
        const awaited = holds.find((h) => h.locktype === "transactionid");
        if (wait === undefined) problems.push(`round ${round}: the changing batch did not wait`);
        else if (tuple?.relation !== "like_fact" || awaited?.holder !== parkedPid)
          problems.push(
            `round ${round}: the changing batch waits on ${JSON.stringify(holds)}, not on the parked transaction for the fact row`,
          );
        await gate.release();
        const parked = await parkedRun;
        const want1 = round === 1 ? "CHANGED liked=true v3" : "CHANGED liked=false v4";
        if (show(parked).join() !== want1)
          problems.push(`round ${round}: the parked batch answered ${show(parked).join()}`);
        try {
          const rows = await waiting;
          const want = round === 1 ? "NOOP liked=true v3" : "CHANGED liked=true v5,CHANGED liked=false v6";
          if (show(rows).join() !== want)
            problems.push(`round ${round}: the waiting batch answered ${show(rows).join()} (want ${want})`);
        } catch (err) {
          problems.push(`round ${round}: the waiting batch failed: ${(err as Error).message}`);
        }
      } finally {
        await gate.release();
        await parkedRun?.catch(() => undefined);
      }
    }
  } finally {
    for (const c of clients) c.release();
  }
  const { rows: events } = await pool.query<{ version: string; delta: number }>(
    "SELECT version, delta FROM like_outbox WHERE user_id = $1 AND item_id = $2 ORDER BY seq",
    [USER, ITEM],
  );
  const history = events.map((e) => `v${e.version}${e.delta > 0 ? "+" : "-"}`).join(" ");
  if (history !== "v1+ v2- v3+ v4- v5+ v6-")
    problems.push(`the pair's events are ${history} (want v1+ v2- v3+ v4- v5+ v6-)`);
  if (!writeSideClean(await writeSide(pool))) problems.push("the write-side audit is not clean");
  return problems;
}

test("P=1 like/unlike race on one pair through batches: a NOOP is answered at once from the committed row; a change waits on the fact row (pg_locks) and is decided on its newest version", async (t) => {
  const f = await likesFixture(1);
  t.after(() => f.close());
  assert.deepEqual(await raceProblems(f), []);
});

test("negative control: the row locked first (SELECT ... FOR UPDATE, the pre-024 shape): the NOOP waits for the parked like, which the check sees", async (t) => {
  const f = await likesFixture(1);
  t.after(() => f.close());
  await replaceFunctionText(f.db.pool, "like_set_batch(text[], text[], boolean[], integer[], boolean[])", [
    ["IF cardinality(v_pair.ords) = 1 THEN", "IF false THEN"],
    [
      "FROM like_fact f WHERE f.user_id = v_pair.user_id AND f.item_id = v_pair.item_id;",
      "FROM like_fact f WHERE f.user_id = v_pair.user_id AND f.item_id = v_pair.item_id FOR UPDATE;",
    ],
  ]);
  const problems = await raceProblems(f);
  t.diagnostic(`note control: ${problems.join("; ")}`);
  assert.ok(problems.includes("round 1: the NOOP unlike waited for the parked like"));
});

test("negative control: decided on the row read without a lock and written by an UPDATE that does not re-check it (a lost update): the waiting batches write a version twice, which the check sees", async (t) => {
  const f = await likesFixture(1);
  t.after(() => f.close());
  await replaceFunctionText(f.db.pool, "like_set_batch(text[], text[], boolean[], integer[], boolean[])", [
    ["IF cardinality(v_pair.ords) = 1 THEN", "IF false THEN"],
    ["AND f.liked = cur_liked AND f.version = cur_version", ""],
  ]);
  const problems = await raceProblems(f);
  t.diagnostic(`note control: ${problems.join("; ")}`);
  assert.ok(
    problems.some((p) => p.startsWith("round 1: the waiting batch failed")),
    "round 1 writes version 3 twice",
  );
  assert.ok(
    problems.some((p) => p.startsWith("round 2: the waiting batch failed")),
    "round 2 writes version 4 twice",
  );
});
