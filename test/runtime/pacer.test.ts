/**
 * The background jobs' pacing (src/workers/pacer.ts), on durations given to it: a batch's size
 * settles where a batch takes the budget (with a fixed cost per batch F and a cost per row c:
 * (budget − F) / c), at most ×2 or ÷2 per batch and within [minSize, maxSize]; a batch that found
 * fewer rows than it asked for teaches nothing; without a budget the size is fixed; the rest
 * after a batch keeps the job busy `duty` of the time, capped. The database-backed checks are in
 * test/erasure/pacing.test.ts.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { MAX_REST_MS, Pacer, UNPACED } from "../../src/workers/pacer.ts";
import { InvalidInputError } from "../../src/errors.ts";

/** Batches of a job whose batch of n rows takes fixed + perRow × n ms; the sizes it was given. */
function simulate(pacer: Pacer, fixed: number, perRow: number, batches: number): number[] {
  const sizes: number[] = [];
  for (let i = 0; i < batches; i++) {
    const size = pacer.size("k");
    sizes.push(size);
    pacer.record("k", size, fixed + perRow * size, true);
  }
  return sizes;
}

test("pacer: the size settles where a batch takes the budget, moving by at most x2 per batch", () => {
  const sizes = simulate(new Pacer({ budgetMs: 10, duty: 1 }, 10_000, 10, 64), 2, 0.01, 30);
  // (10 - 2) / 0.01 = 800 rows
  assert.ok(Math.abs(sizes.at(-1)! - 800) <= 2, `settled at ${sizes.at(-1)}`);
  assert.deepEqual(sizes.slice(0, 4), [64, 128, 256, 512]);
  for (let i = 1; i < sizes.length; i++) assert.ok(sizes[i]! <= 2 * sizes[i - 1]! && sizes[i]! >= sizes[i - 1]! / 2);
});

test("pacer: bounded: a fixed cost above the budget goes down to minSize, a free batch up to maxSize, never past either", () => {
  const slow = simulate(new Pacer({ budgetMs: 10, duty: 1 }, 500, 20, 64), 100, 0.01, 10);
  assert.deepEqual(slow.slice(0, 3), [64, 32, 20]);
  assert.equal(slow.at(-1), 20);
  const fast = simulate(new Pacer({ budgetMs: 10, duty: 1 }, 500, 20, 64), 0, 0.0001, 10);
  assert.deepEqual(fast.slice(0, 5), [64, 128, 256, 500, 500]);
});

test("pacer: a short batch (the end of a phase) teaches nothing; kinds are paced apart; no budget means maxSize always", () => {
  const p = new Pacer({ budgetMs: 10, duty: 1 }, 500, 20, 64);
  p.record("a", 64, 1_000, false);
  assert.equal(p.size("a"), 64);
  p.record("a", 64, 1_000, true);
  assert.equal(p.size("a"), 32);
  assert.equal(p.size("b"), 64);
  const fixed = new Pacer(UNPACED, 500, 20);
  fixed.record("a", 500, 10_000, true);
  assert.equal(fixed.size("a"), 500);
});

test("pacer: the rest keeps the job busy `duty` of the time, capped at MAX_REST_MS; bad settings are refused", () => {
  assert.equal(new Pacer({ budgetMs: 10, duty: 0.5 }, 500).restMs(12), 12);
  assert.equal(new Pacer({ budgetMs: 10, duty: 0.25 }, 500).restMs(10), 30);
  assert.equal(new Pacer({ budgetMs: 10, duty: 1 }, 500).restMs(50), 0);
  assert.equal(new Pacer({ budgetMs: 10, duty: 0.1 }, 500).restMs(5_000), MAX_REST_MS);
  for (const bad of [
    { budgetMs: -1, duty: 0.5 },
    { budgetMs: 10, duty: 0 },
    { budgetMs: 10, duty: 1.5 },
    { budgetMs: Number.NaN, duty: 0.5 },
  ]) {
    assert.throws(() => new Pacer(bad, 500), InvalidInputError, JSON.stringify(bad));
  }
});
