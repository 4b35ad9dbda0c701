/**
 * The soak's arithmetic (support/soak-goals.ts): the least-squares slope and its standard error,
 * the flat judgement (a noisy flat series passes, a slow leak of the same noise does not), the
 * sample windows of the p99 ratio, the retention bound and the goals.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  evaluateGoals,
  judgeFlat,
  judgedFrom,
  outboxBound,
  periodicAuditsExpected,
  p99Of,
  p99Windows,
  slope,
} from "../../support/soak-goals.ts";

const minutes = Array.from({ length: 60 }, (_, i) => i + 1);
/** A deterministic sawtooth of ±3 around a level: a garbage collector's heap, roughly. */
const noise = (i: number) => ((i * 7) % 13) - 6;

test("slope: a straight line's slope per hour, zero standard error, and its change over the span", () => {
  const s = slope(
    minutes,
    minutes.map((m) => 100 + 0.5 * m),
  );
  assert.ok(Math.abs(s.perHour - 30) < 1e-9, `${s.perHour}`);
  assert.ok(Math.abs(s.standardErrorPerHour) < 1e-9);
  assert.ok(Math.abs(s.fittedChange - 0.5 * 59) < 1e-9);
  assert.ok(Math.abs(s.mean - (100 + 0.5 * 30.5)) < 1e-9);
  assert.throws(() => slope([1], [1]), /2 or more/);
  assert.throws(() => slope([1, 1], [1, 2]), /two or more different times/);
});

test("judgeFlat: noise around a level is flat; the same noise on a leak of 0.2 MB a minute is not", () => {
  const tolerance = { relative: 0.05, absolute: 2 };
  const flat = judgeFlat(
    minutes,
    minutes.map((_, i) => 200 + noise(i)),
    tolerance,
  );
  assert.equal(flat.flat, true, JSON.stringify(flat));
  // Negative control: 12 MB over the hour on a 200 MB process (6 %, above both the noise and the 5 %).
  const leak = judgeFlat(
    minutes,
    minutes.map((m, i) => 200 + 0.2 * m + noise(i)),
    tolerance,
  );
  assert.equal(leak.flat, false, JSON.stringify(leak));
  assert.ok(leak.fittedChange > leak.allowedChange);
  // Descriptors: a constant count is flat; one more each minute is not.
  assert.equal(
    judgeFlat(
      minutes,
      minutes.map(() => 40),
      tolerance,
    ).flat,
    true,
  );
  assert.equal(
    judgeFlat(
      minutes,
      minutes.map((m) => 40 + m),
      tolerance,
    ).flat,
    false,
  );
});

test("judgedFrom and p99Windows: a sixth of warm-up, the first ten minutes against the last twelfth", () => {
  assert.equal(judgedFrom(60), 10);
  assert.equal(judgedFrom(5), 1);
  assert.equal(judgedFrom(4), 1);
  assert.equal(judgedFrom(3), 0);
  assert.deepEqual(p99Windows(60, 1), { start: [0, 10], end: [55, 60] });
  // A trial run sampled every 10 s: its first third against its last sample.
  assert.deepEqual(p99Windows(6, 10 / 60), { start: [0, 2], end: [5, 6] });
  assert.deepEqual(p99Windows(30, 10 / 60), { start: [0, 10], end: [28, 30] });
});

test("p99Of: nearest rank of unsorted values", () => {
  const values = Array.from({ length: 200 }, (_, i) => 200 - i);
  assert.equal(p99Of(values), 198);
  assert.ok(Number.isNaN(p99Of([])));
});

test("outboxBound: the kept events per partition, the recent window and the lag", () => {
  assert.equal(
    outboxBound({
      partitions: 16,
      keepEvents: 100,
      keepMs: 30_000,
      pruneEveryMs: 20_000,
      eventsPerSecond: 10,
      lagEvents: 7,
    }),
    1600 + 700 + 7,
  );
});

test("evaluateGoals: every goal met, then each one failing on its own", () => {
  const flatSeries = {
    "serve rss MB": judgeFlat(
      minutes,
      minutes.map(() => 100),
      { relative: 0.05, absolute: 2 },
    ),
  };
  const good = { flat: flatSeries, p99Ratio: 1.1, errors: 0, auditClean: true, outboxMax: 10, outboxBound: 20 };
  assert.deepEqual(
    evaluateGoals(good).map((g) => g.met),
    [true, true, true, true, true],
  );
  const leak = judgeFlat(
    minutes,
    minutes.map((m) => 100 + m),
    { relative: 0.05, absolute: 2 },
  );
  const failing = [
    { ...good, flat: { ...flatSeries, "serve heap MB": leak } },
    { ...good, outboxMax: 21 },
    { ...good, p99Ratio: 1.21 },
    { ...good, errors: 1 },
    { ...good, auditClean: false },
  ];
  failing.forEach((input, k) => {
    const met = evaluateGoals(input).map((g) => g.met);
    assert.deepEqual(
      met,
      met.map((_, j) => j !== k),
      `case ${k}: only goal ${k} fails`,
    );
  });
  assert.match(evaluateGoals(failing[0]!)[0]!.detail, /serve heap MB/);
  assert.equal(evaluateGoals({ ...good, p99Ratio: Number.NaN })[2]!.met, false, "no latencies: not met");
});

test("periodic audits expected: one per period less one; none for a run shorter than two periods", () => {
  assert.equal(periodicAuditsExpected(60, 300_000), 11);
  assert.equal(periodicAuditsExpected(9, 300_000), 0);
  assert.equal(periodicAuditsExpected(10, 300_000), 1);
  assert.equal(periodicAuditsExpected(2, 30_000), 3);
});
