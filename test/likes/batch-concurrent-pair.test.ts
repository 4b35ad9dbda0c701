/**
 * Two like batches that write the same pair at once never both change it from one version (a
 * lost update): the first batch is parked at like.beforeCommit with the pair's row written and
 * locked, the second runs into that lock (pg_locks: it waits for the parked transaction), and
 * once the first commits the second decides again from the committed row and answers NOOP. One
 * event, one version step. Three ways a batch reaches the pair, each with its own guard in
 * like_set_batch: an existing pair written twice in the batch (read, decide, UPDATE conditional
 * on the version read), an existing pair written once (UPDATE conditional on the state), and a
 * new pair (INSERT ... ON CONFLICT DO NOTHING, then decide again). The controls remove each guard
 * in this test's database: the second batch then answers CHANGED too (a second change from
 * the same version fails on like_outbox's unique (user, item, version), its event's version
 * being the first batch's; a change from the newer state is a second event).
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import type { PoolClient } from "../../src/db/pool.ts";
import { writeSide, writeSideClean } from "../../src/likes/like-audit.ts";
import { replaceFunctionText } from "../support/function-mutant.ts";
import { waitForLockWait } from "../support/pg-locks.ts";
import { SqlHook } from "../support/sql-hooks.ts";
import { count, likesFixture, user } from "./fixture.ts";

const SIGNATURE = "like_set_batch(text[],text[],boolean[],integer[],boolean[])";
const PAIR = { user: user(1), item: "item-lab-01" };

interface Shape {
  name: string;
  /** The pair's history before the race (each true a like, false an unlike), through like_set. */
  history: boolean[];
  /** How many times each batch writes the pair (a like each time); the other rows like other pairs. */
  pairWrites: number;
  /** The first batch's answers for the pair, then what the second must answer. */
  first: string[];
  second: string[];
  /** The guard's text in like_set_batch and what the control puts in its place. */
  guard: [string, string];
}

const SHAPES: Shape[] = [
  {
    name: "an existing unliked pair written twice in each batch",
    history: [true, false],
    pairWrites: 2,
    first: ["CHANGED true v3", "NOOP true v3"],
    second: ["NOOP true v3", "NOOP true v3"],
    guard: ["           AND f.liked = cur_liked AND f.version = cur_version;", ";"],
  },
  {
    name: "an existing unliked pair written once in each batch",
    history: [true, false],
    pairWrites: 1,
    first: ["CHANGED true v3"],
    second: ["NOOP true v3"],
    guard: ["AND f.item_id = v_pair.item_id AND f.liked <> p_wants[i]", "AND f.item_id = v_pair.item_id"],
  },
  {
    name: "a new pair written once in each batch",
    history: [],
    pairWrites: 1,
    first: ["CHANGED true v1"],
    second: ["NOOP true v1"],
    guard: ["      EXIT apply WHEN FOUND;\n", "      EXIT apply;\n"],
  },
];

interface Row {
  ord: number;
  outcome: string;
  liked: boolean;
  version: string;
}

const show = (r: Row) => `${r.outcome} ${r.liked} v${r.version}`;

/** A batch of `pairWrites` likes of PAIR and one like of another pair by `other` (so it is a batch of several writes). */
function batchArgs(pairWrites: number, other: string): unknown[] {
  const users = [...Array(pairWrites).fill(PAIR.user), other];
  const items = [...Array(pairWrites).fill(PAIR.item), "item-lab-02"];
  return [users, items, users.map(() => true), users.map(() => 0), users.map(() => false)];
}

const BATCH_SQL =
  "SELECT ord, outcome, liked, version FROM like_set_batch($1::text[], $2::text[], $3::boolean[], $4::integer[], $5::boolean[]) ORDER BY ord";

async function race(
  t: TestContext,
  shape: Shape,
  control: boolean,
): Promise<{ first: string[]; second: string[]; events: number }> {
  const f = await likesFixture(1);
  const client: PoolClient = await f.db.pool.connect();
  const armed: { hook?: SqlHook } = {};
  t.after(async () => {
    await armed.hook?.release();
    client.release();
    await f.close();
  });
  for (const want of shape.history)
    await (want ? f.likes.like(PAIR.user, PAIR.item) : f.likes.unlike(PAIR.user, PAIR.item));
  if (control) await replaceFunctionText(f.db.pool, SIGNATURE, [shape.guard]);
  // Armed only now: the history's writes pass the same point.
  const hook = await SqlHook.arm(f.db.pool, "like.beforeCommit");
  armed.hook = hook;
  const eventsBefore = await count(f.db, "SELECT count(*) AS n FROM like_outbox WHERE user_id = $1", [PAIR.user]);

  const first = f.db.pool.query<Row>(BATCH_SQL, batchArgs(shape.pairWrites, user(2)));
  first.catch(() => undefined);
  await hook.parked();
  const pid = (await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;
  const second = client.query<Row>(BATCH_SQL, batchArgs(shape.pairWrites, user(3)));
  second.catch(() => undefined);
  const wait = await waitForLockWait(f.db.pool, () => pid);
  t.diagnostic(
    `note ${shape.name}${control ? " (control)" : ""}: the second batch waits (${wait.locktype} ${wait.mode})`,
  );
  await hook.release();
  // A batch that fails answers its error: a second event of one version breaks like_outbox's unique (user, item, version).
  const answers = (q: Promise<{ rows: Row[] }>) =>
    q.then(
      (r) => r.rows.slice(0, shape.pairWrites).map(show),
      (err: { code?: string; constraint?: string }) => [`ERROR ${err.code} ${err.constraint}`],
    );
  const result = {
    first: await answers(first),
    second: await answers(second),
    events: (await count(f.db, "SELECT count(*) AS n FROM like_outbox WHERE user_id = $1", [PAIR.user])) - eventsBefore,
  };
  if (!control) assert.ok(writeSideClean(await writeSide(f.db.pool)), "the write side's audit");
  return result;
}

for (const shape of SHAPES) {
  test(`two batches racing on ${shape.name}: the one that waited decides again from the committed row (NOOP), one event`, async (t) => {
    const r = await race(t, shape, false);
    assert.deepEqual(r.first, shape.first);
    assert.deepEqual(
      r.second,
      shape.second,
      "the second batch must not answer CHANGED from the version the first one changed",
    );
    assert.equal(r.events, 1);
  });

  test(`negative control: without its guard, on ${shape.name} the waiting batch changes the pair again`, async (t) => {
    const r = await race(t, shape, true);
    t.diagnostic(`note control: first ${r.first.join(", ")}; second ${r.second.join(", ")}; events ${r.events}`);
    assert.ok(
      r.second[0]!.startsWith("CHANGED") || r.second[0] === "ERROR 23505 like_outbox_user_id_item_id_version_key",
      r.second[0],
    );
  });
}
