import { test } from "node:test";
import assert from "node:assert/strict";
import { setNaive } from "../../src/likes/negative-controls.ts";
import { readSide } from "../../src/likes/like-audit.ts";
import { stablePartition } from "../../src/partition.ts";
import { runWorkers, seededRandom } from "../support/concurrency.ts";
import { LAB_ITEMS, factCount, likesFixture, user } from "./fixture.ts";

interface Request {
  userId: string;
  itemId: string;
  want: boolean;
}

/** 400 requests over 8 workers; 136 of them are sent twice, as a client retries after a lost response. */
function requests(): Request[][] {
  const random = seededRandom(3206);
  const base: Request[] = Array.from({ length: 400 }, () => ({
    userId: user(1 + Math.floor(random() * 60)),
    itemId: LAB_ITEMS[Math.floor(random() * LAB_ITEMS.length)]!,
    want: random() < 0.6,
  }));
  const resent = new Set<number>();
  while (resent.size < 136) resent.add(Math.floor(random() * base.length));
  const perWorker: Request[][] = Array.from({ length: 8 }, () => []);
  base.forEach((r, i) => {
    const queue = perWorker[i % 8]!;
    queue.push(r);
    if (resent.has(i)) queue.push(r);
  });
  return perWorker;
}

for (const partitions of [1, 4]) test(`32-F P=${partitions} negative control: the request-path naive +/-1 drifts, the facts path stays exact`, async (t) => {
  const plan = requests();
  const facts = await likesFixture(partitions);
  const naive = await likesFixture(partitions);
  t.after(async () => {
    await facts.close();
    await naive.close();
  });

  const outcomes = await runWorkers(8, async (w) => {
    const mine = [];
    for (const r of plan[w]!) mine.push((await (r.want ? facts.likes.like(r.userId, r.itemId) : facts.likes.unlike(r.userId, r.itemId))).outcome);
    return mine;
  });
  const noop = outcomes.flat().filter((o) => o === "NOOP").length;
  await facts.consumer.drain();
  const side = await readSide(facts.db.pool);
  t.diagnostic(`note facts path: requests=${outcomes.flat().length} NOOP=${noop} count_mismatch_items=${side.countMismatchItems}`);
  assert.equal(side.countMismatchItems, 0);
  assert.ok(noop >= 136, "every resent request is absorbed as NOOP");

  await runWorkers(8, async (w) => {
    for (const r of plan[w]!) await setNaive(naive.db.pool, stablePartition(r.userId, partitions), r.userId, r.itemId, r.want);
  });
  let drifted = 0;
  let sumAbs = 0;
  const lines: string[] = [];
  for (const item of LAB_ITEMS) {
    const { rows } = await naive.db.pool.query<{ n: number }>("SELECT coalesce(sum(n), 0)::int AS n FROM like_count WHERE item_id = $1", [item]);
    const naiveN = rows[0]!.n;
    const truth = await factCount(facts.db, item);
    if (naiveN !== truth) drifted++;
    sumAbs += Math.abs(naiveN - truth);
    lines.push(`note   ${item} naive=${naiveN} facts=${truth}`);
  }
  t.diagnostic(`note naive: items with drift=${drifted} of ${LAB_ITEMS.length}, sum |naive − facts|=${sumAbs}`);
  for (const line of lines) t.diagnostic(line);
  assert.ok(drifted >= 1, "the naive path must drift: this is what the facts path prevents");
});
