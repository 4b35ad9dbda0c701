/**
 * The soak's arithmetic (bench/soak.ts): the least-squares slope of a sampled series with its
 * standard error, whether that slope is within noise, the p99 ratio of the run's end to its start,
 * and the goals of issue 34 read from them. Pure functions: test/bench/soak-goals.test.ts.
 */

/** Issue 34's goal: the p99 at the end of the run at most this many times the first ten minutes'. */
export const P99_RATIO_GOAL = 1.2;

export interface Slope {
  /** Change per hour (least squares over the judged samples). */
  perHour: number;
  /** Standard error of perHour (NaN with fewer than 3 samples). */
  standardErrorPerHour: number;
  mean: number;
  /** The fitted change across the judged samples: perHour × their span. */
  fittedChange: number;
}

/** Least-squares slope of `values` over `minutes` (same length, at least 2 points). */
export function slope(minutes: readonly number[], values: readonly number[]): Slope {
  const n = values.length;
  if (n !== minutes.length || n < 2) throw new Error(`slope needs 2 or more paired points, got ${n}`);
  const mx = minutes.reduce((a, x) => a + x, 0) / n;
  const my = values.reduce((a, y) => a + y, 0) / n;
  let sxx = 0;
  let sxy = 0;
  for (let i = 0; i < n; i++) {
    sxx += (minutes[i]! - mx) ** 2;
    sxy += (minutes[i]! - mx) * (values[i]! - my);
  }
  if (sxx === 0) throw new Error("slope needs samples at two or more different times");
  const perMinute = sxy / sxx;
  let residuals = 0;
  for (let i = 0; i < n; i++) residuals += (values[i]! - (my + perMinute * (minutes[i]! - mx))) ** 2;
  const standardError = n > 2 ? Math.sqrt(residuals / (n - 2) / sxx) : Number.NaN;
  const span = minutes[n - 1]! - minutes[0]!;
  return {
    perHour: perMinute * 60,
    standardErrorPerHour: standardError * 60,
    mean: my,
    fittedChange: perMinute * span,
  };
}

/**
 * What a series' change may be and still count as flat: the larger of two standard errors of the
 * slope (the fitted change is not told apart from zero), a share of the series' mean (a drift too
 * small to matter: a garbage collector's sawtooth, a pool that opened one more connection) and an
 * absolute amount (a descriptor or two).
 */
export interface Tolerance {
  relative: number;
  absolute: number;
}

export interface FlatVerdict extends Slope {
  /** The change the tolerance allows across the judged span. */
  allowedChange: number;
  flat: boolean;
}

export function judgeFlat(minutes: readonly number[], values: readonly number[], tolerance: Tolerance): FlatVerdict {
  const s = slope(minutes, values);
  const span = minutes[minutes.length - 1]! - minutes[0]!;
  const statistical = Number.isNaN(s.standardErrorPerHour) ? 0 : (2 * s.standardErrorPerHour * span) / 60;
  const allowedChange = Math.max(statistical, tolerance.relative * Math.abs(s.mean), tolerance.absolute);
  return { ...s, allowedChange, flat: Math.abs(s.fittedChange) <= allowedChange };
}

/**
 * Which samples a slope is judged on: after the warm-up (caches filling, the JIT, pools opening),
 * a sixth of the run (the first 10 of 60 minutes), but at least the first sample and always
 * leaving three.
 */
export function judgedFrom(samples: number): number {
  return Math.max(0, Math.min(Math.max(1, Math.floor(samples / 6)), samples - 3));
}

/**
 * The sample windows the p99 ratio compares: the start (the first ten minutes, or the first third
 * of a shorter run) and the end (the last twelfth: 5 of 60 minutes; at least one sample).
 */
export function p99Windows(samples: number, sampleMinutes: number): { start: [number, number]; end: [number, number] } {
  const startCount = Math.max(1, Math.min(Math.round(10 / sampleMinutes), Math.floor(samples / 3)));
  const endCount = Math.max(1, Math.floor(samples / 12));
  return { start: [0, startCount], end: [samples - endCount, samples] };
}

/** Nearest-rank percentile of unsorted values (NaN when empty). */
export function p99Of(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length, Math.max(1, Math.ceil(0.99 * sorted.length))) - 1]!;
}

/**
 * Periodic audits a run of `minutes` must have seen at least: one per period, less the one a
 * run's start and end may cut. Fewer means audits failed (a deadline, an error) or never ran, and
 * the service's own check of itself went quiet: counted with the errors.
 */
export function periodicAuditsExpected(minutes: number, auditEveryMs: number): number {
  return Math.max(0, Math.floor((minutes * 60_000) / auditEveryMs) - 1);
}

/**
 * Outbox rows retention allows per kind: the newest `keepEvents` of each partition, what was
 * written in the last `keepMs` and the two prune periods a row may wait through, and the lag.
 */
export function outboxBound(options: {
  partitions: number;
  keepEvents: number;
  keepMs: number;
  pruneEveryMs: number;
  eventsPerSecond: number;
  lagEvents: number;
}): number {
  const recent = (options.eventsPerSecond * (options.keepMs + 2 * options.pruneEveryMs)) / 1000;
  return options.partitions * options.keepEvents + Math.ceil(recent) + options.lagEvents;
}

export interface GoalInput {
  /** Series name -> verdict, for the series that must be flat. */
  flat: Record<string, FlatVerdict>;
  p99Ratio: number;
  errors: number;
  auditClean: boolean;
  /** Largest outbox (and dedup) total after the warm-up, and what retention allows. */
  outboxMax: number;
  outboxBound: number;
}

export interface GoalResult {
  goal: string;
  met: boolean;
  detail: string;
}

export function evaluateGoals(input: GoalInput): GoalResult[] {
  const grown = Object.entries(input.flat).filter(([, v]) => !v.flat);
  return [
    {
      goal: "memory and descriptors flat",
      met: grown.length === 0,
      detail:
        grown.length === 0
          ? `${Object.keys(input.flat).length} series within noise`
          : `not flat: ${grown.map(([name, v]) => `${name} ${v.fittedChange.toFixed(1)} > ${v.allowedChange.toFixed(1)}`).join(", ")}`,
    },
    {
      goal: "outbox bounded by retention",
      met: input.outboxMax <= input.outboxBound,
      detail: `largest ${input.outboxMax} rows, retention allows ${input.outboxBound}`,
    },
    {
      goal: `p99 at the end <= ${P99_RATIO_GOAL}x the start`,
      met: input.p99Ratio <= P99_RATIO_GOAL,
      detail: `${input.p99Ratio.toFixed(2)}x`,
    },
    { goal: "zero errors", met: input.errors === 0, detail: `${input.errors} errors` },
    { goal: "audit clean", met: input.auditClean, detail: input.auditClean ? "clean" : "violations" },
  ];
}
