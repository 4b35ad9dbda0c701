/**
 * The projector's one-statement batch (projectBatchVersioned) against the chapter's
 * event-by-event step (projectVersioned), on the same deliveries: every event's verdict and the
 * resulting projection must be identical. Batches are built to hold what makes a batch harder
 * than one event: several versions of one pair, in any order, the same seq twice, and events
 * already projected by an earlier batch. The negative control runs 30-G's naive step through the
 * same comparison and sees it differ.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { projectNaive } from "./negative-controls.ts";
import { projectVersioned, type RelationProjector } from "../../src/relations/projector.ts";
import { formatDiff, projectionDiff } from "../../src/relations/relation-audit.ts";
import type { RelationEvent } from "../../src/relations/types.ts";
import { seededRandom, shuffle } from "../support/concurrency.ts";
import { acct, allRelationEvents, relationsFixture, type RelationsFixture } from "./fixture.ts";

interface Outcome {
  verdicts: string[];
  projection: string;
}

async function projectionTables(f: RelationsFixture): Promise<string> {
  const { rows: followers } = await f.db.pool.query(
    "SELECT followee, follower, state, version, since FROM proj_follower ORDER BY followee, follower",
  );
  const { rows: counts } = await f.db.pool.query("SELECT followee, n FROM proj_count WHERE n <> 0 ORDER BY followee");
  const { rows: seen } = await f.db.pool.query("SELECT part, seq FROM proj_seen ORDER BY part, seq");
  const { rows: watermarks } = await f.db.pool.query("SELECT part, applied_upto FROM proj_watermark ORDER BY part");
  return JSON.stringify({ followers, counts, seen, watermarks });
}

async function reset(f: RelationsFixture): Promise<void> {
  await f.db.pool.query("TRUNCATE proj_follower, proj_count, proj_seen");
  await f.db.pool.query("UPDATE proj_watermark SET applied_upto = 0");
}

async function run(
  f: RelationsFixture,
  projector: RelationProjector,
  batches: readonly RelationEvent[][],
): Promise<Outcome> {
  await reset(f);
  const verdicts: string[] = [];
  for (const batch of batches) verdicts.push(...(await projector.applyBatch(batch)).verdicts);
  return { verdicts, projection: await projectionTables(f) };
}

/** Batches of one partition each: shuffled events, ~30 % redelivered, some copies inside the same batch. */
function batchesOf(events: readonly RelationEvent[], random: () => number): RelationEvent[][] {
  const batches: RelationEvent[][] = [];
  for (const part of new Set(events.map((e) => e.part))) {
    const mine = events.filter((e) => e.part === part);
    const deliveries = shuffle([...mine, ...mine.filter(() => random() < 0.3)], random);
    for (let i = 0; i < deliveries.length;) {
      const size = 1 + Math.floor(random() * 40);
      const batch = deliveries.slice(i, i + size);
      if (random() < 0.3) batch.push(batch[Math.floor(random() * batch.length)]!);
      batches.push(batch);
      i += size;
    }
  }
  return batches;
}

for (const partitions of [1, 4]) {
  test(`projector P=${partitions}: one statement per batch gives each event the verdict of the event-by-event step, and the same projection`, async (t) => {
    const f = await relationsFixture(partitions, 60, [7, 14, 21]);
    t.after(() => f.close());
    const random = seededRandom(8_2026 + partitions);
    // Few accounts, many changes per pair: batches hold several versions of the same pair.
    for (let i = 0; i < 500; i++) {
      const a = acct(1 + Math.floor(random() * 20));
      const b = acct(1 + ((Number(a.slice(5)) + Math.floor(random() * 19)) % 20));
      const r = random();
      if (r < 0.45) await f.rel.follow(a, b);
      else if (r < 0.8) await f.rel.unfollow(a, b);
      else if (r < 0.92) await f.rel.decide(b, a, random() < 0.7);
      else await f.rel.block(a, b);
    }
    const events = await allRelationEvents(f);
    const batches = batchesOf(events, random);
    const deliveries = batches.reduce((n, b) => n + b.length, 0);

    const stepwise = await run(f, f.projectorWith(projectVersioned), batches);
    const batched = await run(f, f.projector, batches);
    const count = (v: string) => batched.verdicts.filter((x) => x === v).length;
    t.diagnostic(
      `note ${events.length} events, ${deliveries} deliveries in ${batches.length} batches: applied=${count("applied")} stale=${count("stale")} dup=${count("dup")}`,
    );
    assert.ok(count("stale") > 0 && count("dup") > 0, "the deliveries exercise stale and dup verdicts");
    assert.deepEqual(batched.verdicts, stepwise.verdicts);
    assert.equal(batched.projection, stepwise.projection);
    assert.equal(formatDiff(await projectionDiff(f.db.pool)), "0,0,0");

    // Negative control: the comparison notices a step that gets verdicts or rows wrong.
    const naive = await run(f, f.projectorWith(projectNaive), batches);
    assert.notDeepEqual(naive.verdicts, stepwise.verdicts);
    assert.notEqual(naive.projection, stepwise.projection);
  });
}

test("projector P=1: with proj_seen pruned at the watermark, redelivered events are duplicates and the projection stays exact", async (t) => {
  const f = await relationsFixture(1, 20);
  t.after(() => f.close());
  for (let i = 1; i < 10; i++) await f.rel.follow(acct(i), acct(i + 1));
  for (let i = 1; i < 5; i++) await f.rel.unfollow(acct(i), acct(i + 1));
  await f.projector.drain();
  const { rows } = await f.db.pool.query<{ w: number }>("SELECT applied_upto AS w FROM proj_watermark WHERE part = 0");
  const watermark = rows[0]!.w;
  const pruned = (await f.db.pool.query("DELETE FROM proj_seen WHERE part = 0 AND seq <= $1", [watermark])).rowCount;
  const again = await f.projector.applyBatch(await f.projector.fetchRange(0, 1, watermark));
  t.diagnostic(
    `note pruned ${pruned} proj_seen keys at watermark ${watermark}; redelivered: applied=${again.applied} stale=${again.stale} dup=${again.dup}`,
  );
  assert.deepEqual([again.applied, again.stale, again.dup], [0, 0, watermark]);
  assert.equal(formatDiff(await projectionDiff(f.db.pool)), "0,0,0");
});
