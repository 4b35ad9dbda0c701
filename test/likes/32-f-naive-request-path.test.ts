import { test } from "node:test";
import assert from "node:assert/strict";
import { setNaive } from "./negative-controls.ts";
import { readSide } from "../../src/likes/like-audit.ts";
import { stablePartition } from "../../src/partition.ts";
import { runWorkers, seededRandom } from "../support/concurrency.ts";
import { LAB_ITEMS, factCount, likesFixture, user } from "./fixture.ts";

/**
 * 32-F: the request path that adds or subtracts one without reading the fact drifts, while
 * the facts path (fact + outbox + consumer) stays exact under the same concurrent requests.
 */

const WORKERS = 8;
const USERS = 60;
const RESENT = 136;

interface Request {
  userId: string;
  itemId: string;
  want: boolean;
  /** A second copy sent right after the first, as a client retries after a lost response. */
  resent: boolean;
}

/**
 * 400 requests, 136 of them sent twice, over 8 workers. Each user's requests all go to one
 * worker (user k to worker k mod 8), so each (user, item) pair is owned by one worker: the
 * pair's requests run in plan order whatever the interleaving, and the truth and the naive
 * figure follow from the plan alone.
 */
function requests(): Request[][] {
  const random = seededRandom(3206);
  const base = Array.from({ length: 400 }, () => ({
    userNumber: 1 + Math.floor(random() * USERS),
    itemId: LAB_ITEMS[Math.floor(random() * LAB_ITEMS.length)]!,
    want: random() < 0.6,
  }));
  const resent = new Set<number>();
  while (resent.size < RESENT) resent.add(Math.floor(random() * base.length));
  const perWorker: Request[][] = Array.from({ length: WORKERS }, () => []);
  base.forEach(({ userNumber, itemId, want }, i) => {
    const queue = perWorker[userNumber % WORKERS]!;
    const request = { userId: user(userNumber), itemId, want };
    queue.push({ ...request, resent: false });
    if (resent.has(i)) queue.push({ ...request, resent: true });
  });
  return perWorker;
}

/** Per item: the truth (pairs whose last request is a like) and what the naive path must show (the sum of +/-1). */
function expected(plan: Request[][]): Map<string, { truth: number; naive: number }> {
  const lastWant = new Map<string, { itemId: string; want: boolean }>();
  const naive = new Map<string, number>(LAB_ITEMS.map((item) => [item, 0]));
  for (const r of plan.flat()) {
    lastWant.set(`${r.userId}/${r.itemId}`, { itemId: r.itemId, want: r.want });
    naive.set(r.itemId, naive.get(r.itemId)! + (r.want ? 1 : -1));
  }
  const truth = new Map<string, number>(LAB_ITEMS.map((item) => [item, 0]));
  for (const { itemId, want } of lastWant.values()) if (want) truth.set(itemId, truth.get(itemId)! + 1);
  return new Map(LAB_ITEMS.map((item) => [item, { truth: truth.get(item)!, naive: naive.get(item)! }]));
}

for (const partitions of [1, 4])
  test(`32-F P=${partitions} negative control: the request-path naive +/-1 drifts, the facts path stays exact`, async (t) => {
    const plan = requests();
    const want = expected(plan);
    const facts = await likesFixture(partitions);
    const naive = await likesFixture(partitions);
    t.after(async () => {
      await facts.close();
      await naive.close();
    });

    const outcomes = await runWorkers(WORKERS, async (w) => {
      const mine: { resent: boolean; outcome: string }[] = [];
      for (const r of plan[w]!) {
        const result = await (r.want ? facts.likes.like(r.userId, r.itemId) : facts.likes.unlike(r.userId, r.itemId));
        mine.push({ resent: r.resent, outcome: result.outcome });
      }
      return mine;
    });
    const resentNoop = outcomes.flat().filter((o) => o.resent && o.outcome === "NOOP").length;
    const otherNoop = outcomes.flat().filter((o) => !o.resent && o.outcome === "NOOP").length;
    await facts.consumer.drain();
    const side = await readSide(facts.db.pool);
    t.diagnostic(
      `note facts path: requests=${outcomes.flat().length} resent NOOP=${resentNoop} of ${RESENT} other NOOP=${otherNoop} count_mismatch_items=${side.countMismatchItems}`,
    );
    assert.equal(resentNoop, RESENT, "every resent copy is absorbed as NOOP");
    assert.equal(side.countMismatchItems, 0);
    for (const item of LAB_ITEMS)
      assert.equal(await factCount(facts.db, item), want.get(item)!.truth, `${item}: facts match the plan`);

    await runWorkers(WORKERS, async (w) => {
      for (const r of plan[w]!)
        await setNaive(naive.db.pool, stablePartition(r.userId, partitions), r.userId, r.itemId, r.want);
    });
    let drifted = 0;
    let sumAbs = 0;
    const lines: string[] = [];
    const observed = new Map<string, number>();
    for (const item of LAB_ITEMS) {
      const { rows } = await naive.db.pool.query<{ n: number }>(
        "SELECT coalesce(sum(n), 0)::int AS n FROM like_count WHERE item_id = $1",
        [item],
      );
      const naiveN = rows[0]!.n;
      const { truth } = want.get(item)!;
      observed.set(item, naiveN);
      if (naiveN !== truth) drifted++;
      sumAbs += Math.abs(naiveN - truth);
      lines.push(`note   ${item} naive=${naiveN} truth=${truth}`);
    }
    t.diagnostic(`note naive: items with drift=${drifted} of ${LAB_ITEMS.length}, sum |naive − truth|=${sumAbs}`);
    for (const line of lines) t.diagnostic(line);
    for (const item of LAB_ITEMS) {
      const { naive: figure, truth } = want.get(item)!;
      assert.equal(
        observed.get(item),
        figure,
        `${item}: the naive path shows the sum of +/-1 over its requests (${figure}), not the truth (${truth})`,
      );
    }
    // Where the plan's +/-1 happen to cancel (item-lab-04), the naive figure equals the truth by luck.
    assert.equal(drifted, LAB_ITEMS.filter((item) => want.get(item)!.naive !== want.get(item)!.truth).length);
    assert.ok(drifted >= 1, "the naive path must drift: this is what the facts path prevents");
  });
