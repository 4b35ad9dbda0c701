/**
 * The periodic audit checks a hot item by induction from its stored baseline
 * (audit_key_baseline; src/audit/key-baseline.ts) instead of recounting all its
 * likes at every run that touches it. With the threshold at 50 likes:
 *  - over runs with live likes and unlikes (and a run that does not touch it) the runs stay clean
 *    and the baseline equals a fresh count per partition at the cursor after each run (with
 *    induction off, recountAbove Infinity, the item is recounted and its baseline dropped);
 *  - a drift of its like_count is found by a run that audits it by induction; that run is held
 *    and stores no baseline;
 *  - O(change): the read and write side statements read a handful of like_fact and like_outbox
 *    rows for it, against all its 3,000 likes without induction (control: threshold off);
 *  - the weakening: a fact changed without an event is not seen by an induction run, but is by
 *    the rotating sample (a full recount, which then refreshes the baseline) and the full audit;
 *  - a stale baseline (its cursor moved on without it: the full-form fallback) is not used; used
 *    anyway (control), it gives a wrong verdict.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { fullAudit } from "../../src/api/routes/admin.ts";
import { incrementalAudit } from "../../src/audit/incremental-audit.ts";
import {
  LIKE_READ_SIDE_INCREMENTAL_SQL,
  LIKE_WRITE_SIDE_INCREMENTAL_SQL,
} from "../../src/audit/incremental-invariants.ts";
import { openLedger, type Ledger } from "../../src/ledger.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";
import { explainAnalyze, rowsReadVia } from "../support/explain.ts";

const PARTITIONS = 4;
const THRESHOLD = 50;
const options = { sample: 0, recountAbove: THRESHOLD };

/** The hot item with `likes` likes; `background` likes spread over 1,000 other items make like_fact large enough for the planner to read it by index, as at scale. */
async function world(t: { after: (fn: () => Promise<void>) => void }, likes: number, background = 0) {
  const db = await createTestDatabase({ partitions: PARTITIONS });
  t.after(() => db.close());
  const ledger = await openLedger(db.pool);
  for (const item of ["hot", "cold"]) await ledger.likes.createItem(item);
  // The hot item's history, written as like_set writes it (fact, event, sequence).
  await db.pool.query(
    "SELECT count(*) FROM generate_series(1, $1::int) i, LATERAL like_set('h-' || i, 'hot', true, ledger_partition('h-' || i, $2::int))",
    [likes, PARTITIONS],
  );
  if (background > 0) {
    await db.pool.query("INSERT INTO item (item_id, kind) SELECT 'b-' || i, 'plain' FROM generate_series(1, 1000) i");
    await db.pool.query(
      "SELECT count(*) FROM generate_series(1, $1::int) i, LATERAL like_set('g-' || (i / 1000), 'b-' || (i % 1000 + 1), true, ledger_partition('g-' || (i / 1000), $2::int))",
      [background, PARTITIONS],
    );
  }
  await ledger.likes.like("c-1", "cold");
  await drain(ledger);
  return { db, ledger };
}

async function drain(ledger: Ledger): Promise<void> {
  await ledger.likeConsumer.drain();
  await ledger.projector.drain();
  await ledger.notifications.drain();
}

/** The hot item's liked facts per partition, counted now (every partition, zeros included). */
async function freshCount(db: TestDatabase): Promise<number[]> {
  const { rows } = await db.pool.query<{ n: number }>(
    `SELECT count(f.user_id)::int AS n FROM generate_series(0, $1::int - 1) g(p)
       LEFT JOIN like_fact f ON f.item_id = 'hot' AND f.liked AND ledger_partition(f.user_id, $1::int) = g.p
      GROUP BY g.p ORDER BY g.p`,
    [PARTITIONS],
  );
  return rows.map((r) => r.n);
}

async function baseline(db: TestDatabase): Promise<{ truth: number[]; upto: number[] }> {
  const { rows } = await db.pool.query<{ truth: number; upto: number }>(
    "SELECT truth::int, upto::int FROM audit_key_baseline WHERE section = 'likes' AND key = 'hot' ORDER BY part",
  );
  return { truth: rows.map((r) => r.truth), upto: rows.map((r) => r.upto) };
}

async function cursor(db: TestDatabase): Promise<number[]> {
  return (
    await db.pool.query<{ u: number }>(
      "SELECT audited_upto::int AS u FROM audit_cursor WHERE section = 'likes' ORDER BY part",
    )
  ).rows.map((r) => r.u);
}

/** Cursors set (a first, full run), then a run that touches the hot item recounts it and stores its baseline. */
async function withBaseline(db: TestDatabase, ledger: Ledger): Promise<void> {
  assert.equal((await incrementalAudit(db.pool, options)).scope.likes.mode, "full");
  await ledger.likes.like("x-0", "hot");
  await drain(ledger);
  const run = await incrementalAudit(db.pool, options);
  assert.equal(run.clean, true, JSON.stringify(run.likes));
  assert.equal(run.scope.likes.inducted, 0, "no baseline yet: recounted");
  assert.deepEqual(await baseline(db), { truth: await freshCount(db), upto: await cursor(db) });
}

test("over runs with live likes and unlikes the hot item is audited by induction, the runs stay clean and its baseline is a fresh count at the cursor", async (t) => {
  const { db, ledger } = await world(t, 200);
  await withBaseline(db, ledger);
  for (let round = 1; round <= 5; round++) {
    if (round === 3) {
      // A run that does not touch the hot item: its baseline moves on with the cursor unchanged.
      await ledger.likes.like(`c-${round}`, "cold");
    } else {
      for (let i = 0; i < 6; i++) await ledger.likes.like(`r${round}-${i}`, "hot");
      for (let i = 1; i <= 3; i++) await ledger.likes.unlike(`h-${round * 10 + i}`, "hot");
      await ledger.likes.unlike(`r${round}-0`, "hot");
    }
    await drain(ledger);
    const run = await incrementalAudit(db.pool, options);
    assert.equal(run.clean, true, JSON.stringify(run.likes));
    assert.equal(run.scope.likes.inducted, round === 3 ? 0 : 1, `round ${round}`);
    assert.deepEqual(await baseline(db), { truth: await freshCount(db), upto: await cursor(db) }, `round ${round}`);
  }
  const full = await fullAudit(ledger);
  assert.equal(full.likes.readSide.exactViolations, 0);

  // Induction off (recountAbove Infinity): the touched hot item is recounted and its baseline dropped.
  await ledger.likes.like("off-1", "hot");
  await drain(ledger);
  const off = await incrementalAudit(db.pool, { sample: 0, recountAbove: Infinity });
  assert.equal(off.clean, true);
  assert.equal(off.scope.likes.inducted, 0);
  assert.deepEqual(await baseline(db), { truth: [], upto: [] });
});

test("a drift in the hot item's like_count is found by a run that audits it by induction; that run is held and stores no baseline", async (t) => {
  const { db, ledger } = await world(t, 200);
  await withBaseline(db, ledger);
  const stored = await baseline(db);
  await ledger.likes.like("d-1", "hot");
  await drain(ledger);
  await db.pool.query(
    "UPDATE like_count SET n = n + 3 WHERE item_id = 'hot' AND part = (SELECT min(part) FROM like_count WHERE item_id = 'hot')",
  );
  const run = await incrementalAudit(db.pool, options);
  assert.equal(run.scope.likes.inducted, 1);
  assert.equal(run.clean, false);
  assert.equal(run.likes.readSide.exactViolations, 1);
  assert.equal(run.likes.readSide.maxAbsErr, 3);
  assert.equal(run.scope.likes.held, true);
  assert.deepEqual(await baseline(db), stored, "held: the baseline stays at the cursor, with the truth it had there");
  assert.deepEqual(await cursor(db), stored.upto);

  // Held, the next run sees it again by induction from the same baseline; repaired, it is clean and the baseline moves on.
  assert.equal((await incrementalAudit(db.pool, options)).likes.readSide.exactViolations, 1);
  await db.pool.query(
    "UPDATE like_count SET n = n - 3 WHERE item_id = 'hot' AND part = (SELECT min(part) FROM like_count WHERE item_id = 'hot')",
  );
  const repaired = await incrementalAudit(db.pool, options);
  assert.equal(repaired.clean, true, JSON.stringify(repaired.likes));
  assert.equal(repaired.scope.likes.inducted, 1);
  assert.deepEqual(await baseline(db), { truth: await freshCount(db), upto: await cursor(db) });
});

test("O(change): with a valid baseline both like statements read the range's rows of the hot item, without induction (control) all its likes", async (t) => {
  const LIKES = 3000;
  const { db, ledger } = await world(t, LIKES, 10_000);
  await withBaseline(db, ledger);
  for (let i = 0; i < 3; i++) await ledger.likes.like(`o-${i}`, "hot");
  await drain(ledger);
  await db.pool.query("ANALYZE");
  const last = (await db.pool.query<{ part: number; last: number }>("SELECT part, last FROM like_seq ORDER BY part"))
    .rows;
  const range = [last.map((p) => p.part), await cursor(db), last.map((p) => p.last), []];
  const read: Record<string, number> = {};
  for (const [name, sql] of Object.entries({
    read: LIKE_READ_SIDE_INCREMENTAL_SQL,
    write: LIKE_WRITE_SIDE_INCREMENTAL_SQL,
  })) {
    for (const [mode, threshold] of [
      ["induction", THRESHOLD],
      ["recount", null],
    ] as const) {
      const plan = await explainAnalyze(db.pool, sql, [...range, threshold]);
      // Through the indexes an item's count and delta sum are read by (a small table's other scans aside, e.g. the pairs' facts).
      read[`${name} side ${mode}: like_fact`] = rowsReadVia(plan, "like_fact_likers");
      read[`${name} side ${mode}: like_outbox`] = rowsReadVia(plan, "like_outbox_item_seq");
    }
  }
  t.diagnostic(JSON.stringify(read));
  for (const side of ["read", "write"]) {
    assert.ok(
      read[`${side} side induction: like_fact`]! <= 10,
      `${side} side by induction read ${read[`${side} side induction: like_fact`]} like_fact rows for 3 new likes`,
    );
    assert.ok(
      read[`${side} side recount: like_fact`]! >= LIKES,
      `control: the recount reads all the hot item's likes (${read[`${side} side recount: like_fact`]})`,
    );
  }
  assert.ok(
    read["write side induction: like_outbox"]! <= 20,
    `the write side by induction read ${read["write side induction: like_outbox"]} outbox rows`,
  );
  assert.ok(read["write side recount: like_outbox"]! >= LIKES, "control: the recount sums all the hot item's events");
  // Same verdict either way (the store's columns aside).
  const verdict = async (threshold: number | null) => {
    const row = (await db.pool.query(LIKE_READ_SIDE_INCREMENTAL_SQL, [...range, threshold])).rows[0];
    for (const column of ["baselines", "dropped_baselines", "inducted_keys"]) delete row[column];
    return row;
  };
  assert.deepEqual(await verdict(THRESHOLD), await verdict(null));
  const run = await incrementalAudit(db.pool, options);
  assert.equal(run.clean, true);
  assert.equal(run.scope.likes.inducted, 1);
});

test("a fact changed without an event is not seen by an induction run; the sample's recount and the full audit see it, and the sample refreshes the baseline", async (t) => {
  const { db, ledger } = await world(t, 200);
  await withBaseline(db, ledger);
  // Corruption of the facts: a like undone by a direct UPDATE, no event.
  await db.pool.query("UPDATE like_fact SET liked = false WHERE item_id = 'hot' AND user_id = 'h-7'");
  await ledger.likes.like("w-1", "hot");
  await drain(ledger);
  const induction = await incrementalAudit(db.pool, options);
  assert.equal(induction.scope.likes.inducted, 1);
  assert.equal(induction.clean, true, "the weakening: nothing the run reads shows it");

  const full = await fullAudit(ledger);
  assert.equal(full.likes.readSide.exactViolations, 1);
  assert.equal(full.likes.writeSide.deltaSumMismatchItems, 1);

  await ledger.likes.like("w-2", "hot");
  await drain(ledger);
  const sampled = await incrementalAudit(db.pool, { ...options, sample: 10 });
  assert.ok(sampled.scope.likes.sampled >= 2, "the sample reaches the hot item");
  assert.equal(sampled.scope.likes.inducted, 0, "a sampled key is always recounted");
  assert.equal(sampled.clean, false);
  assert.equal(sampled.likes.readSide.exactViolations, 1);
  assert.equal(sampled.likes.writeSide.deltaSumMismatchItems, 1);

  // Repaired, the sample's recount is clean and stores the hot item's baseline afresh.
  await db.pool.query("UPDATE like_fact SET liked = true WHERE item_id = 'hot' AND user_id = 'h-7'");
  const refreshed = await incrementalAudit(db.pool, { ...options, sample: 10 });
  assert.equal(refreshed.clean, true, JSON.stringify(refreshed.likes));
  assert.deepEqual(await baseline(db), { truth: await freshCount(db), upto: await cursor(db) });
});

test("a stale baseline (the cursor moved on by the full-form fallback) is not used; forced into use (control) it gives a wrong verdict", async (t) => {
  const { db, ledger } = await world(t, 200);
  await withBaseline(db, ledger);
  const stored = await baseline(db);
  await ledger.likes.like("s-1", "hot");
  await drain(ledger);
  // As if a prune passed the cursor: the likes section runs its full form, its cursor moves to the present, the baseline does not.
  await db.pool.query(
    "INSERT INTO retention_floor (kind, part, pruned_upto) SELECT 'likes', part, last FROM like_seq ON CONFLICT (kind, part) DO UPDATE SET pruned_upto = EXCLUDED.pruned_upto",
  );
  const fallback = await incrementalAudit(db.pool, options);
  assert.equal(fallback.scope.likes.mode, "full");
  assert.deepEqual(await baseline(db), stored, "the full form stores no baseline");
  assert.notDeepEqual(await cursor(db), stored.upto);

  await ledger.likes.like("s-2", "hot");
  await drain(ledger);
  // Control: the stale truth (without s-1's like) moved to the cursor as if valid. Inside a transaction that is rolled back.
  const client = await db.pool.connect();
  try {
    await client.query("BEGIN");
    await client.query(
      "UPDATE audit_key_baseline b SET upto = c.audited_upto FROM audit_cursor c WHERE c.section = 'likes' AND c.part = b.part AND b.key = 'hot'",
    );
    const last = (await client.query<{ part: number; last: number }>("SELECT part, last FROM like_seq ORDER BY part"))
      .rows;
    const from = (
      await client.query<{ u: number }>(
        "SELECT audited_upto AS u FROM audit_cursor WHERE section = 'likes' ORDER BY part",
      )
    ).rows.map((r) => r.u);
    const forced = (
      await client.query(LIKE_READ_SIDE_INCREMENTAL_SQL, [
        last.map((p) => p.part),
        from,
        last.map((p) => p.last),
        [],
        THRESHOLD,
      ])
    ).rows[0];
    assert.equal(forced.inducted_keys, 1);
    assert.equal(
      Number(forced.exact_violations),
      1,
      "control: induction from a stale truth reports a drift that is not there",
    );
  } finally {
    await client.query("ROLLBACK");
    client.release();
  }

  const run = await incrementalAudit(db.pool, options);
  assert.equal(run.scope.likes.inducted, 0, "stale: recounted");
  assert.equal(run.clean, true, JSON.stringify(run.likes));
  assert.deepEqual(
    await baseline(db),
    { truth: await freshCount(db), upto: await cursor(db) },
    "rewritten by the recount",
  );
});
