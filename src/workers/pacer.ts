/**
 * How a background job (erasure, rebuild, prune, reconciliation) paces itself so that live writes
 * and reads keep their latency (docs/erasure.md "Pacing"): each batch is sized to a time budget
 * from the last batch's duration, and after each batch the job rests in proportion to that
 * duration, so it is busy at most `duty` of the time.
 */
import { InvalidInputError } from "../errors.ts";

export interface PacingOptions {
  /** Target duration of one batch in ms (its locks are held about that long); 0: fixed batches of `maxSize`. */
  budgetMs: number;
  /** Share of the wall-clock time the job may be busy, in (0, 1]; 1: batches back to back. */
  duty: number;
}

/** LEDGER_BACKGROUND_BATCH_MS and LEDGER_BACKGROUND_DUTY's defaults. */
export const DEFAULT_PACING: PacingOptions = { budgetMs: 10, duty: 0.5 };
/** The old behaviour: fixed batches, back to back (what the benches compare against). */
export const UNPACED: PacingOptions = { budgetMs: 0, duty: 1 };

/** No rest longer than this, however long a batch took (a stuck batch must not park the job for minutes). */
export const MAX_REST_MS = 1_000;
/** A batch grows or shrinks by at most this factor from one batch to the next. */
const MAX_STEP = 2;

export function validatePacing(p: PacingOptions): PacingOptions {
  if (!Number.isFinite(p.budgetMs) || p.budgetMs < 0 || p.budgetMs > 10_000) {
    throw new InvalidInputError("budgetMs", `must be between 0 and 10000 ms, got ${p.budgetMs}`);
  }
  if (!Number.isFinite(p.duty) || p.duty <= 0 || p.duty > 1)
    throw new InvalidInputError("duty", `must be in (0, 1], got ${p.duty}`);
  return p;
}

/**
 * The batch sizes of one job, one per kind of batch (an erasure's phases differ in cost per
 * fact), each between `minSize` and `maxSize`. With a budget, a kind starts at `startSize` and
 * after each full batch moves to size × budget / duration, at most ×2 or ÷2 per batch: with a
 * fixed cost F per batch and c per row, that settles at (budget − F) / c, or at minSize when F
 * alone exceeds the budget.
 */
export class Pacer {
  private readonly sizes = new Map<string, number>();
  readonly options: PacingOptions;

  constructor(
    options: PacingOptions,
    readonly maxSize: number,
    readonly minSize = 1,
    readonly startSize = Math.min(maxSize, 64),
  ) {
    this.options = validatePacing(options);
    if (!(minSize >= 1 && minSize <= maxSize))
      throw new InvalidInputError("minSize", `must be between 1 and ${maxSize}, got ${minSize}`);
  }

  /** The size of the next batch of this kind. */
  size(kind: string): number {
    if (this.options.budgetMs === 0) return this.maxSize;
    return this.sizes.get(kind) ?? Math.max(this.minSize, Math.min(this.maxSize, this.startSize));
  }

  /**
   * Records a batch of `size` rows asked for that took `ms`; `full` is false for a batch that
   * found fewer rows than it asked for (its duration says nothing about a full one's).
   */
  record(kind: string, size: number, ms: number, full: boolean): void {
    if (this.options.budgetMs === 0 || !full || size <= 0) return;
    const ideal = (size * this.options.budgetMs) / Math.max(ms, 0.01);
    const next = Math.round(Math.min(size * MAX_STEP, Math.max(size / MAX_STEP, ideal)));
    this.sizes.set(kind, Math.max(this.minSize, Math.min(this.maxSize, next)));
  }

  /** How long to rest after a batch that took `ms`: busy `duty` of the time, at most MAX_REST_MS. */
  restMs(ms: number): number {
    const { duty } = this.options;
    return duty >= 1 ? 0 : Math.min(MAX_REST_MS, (ms * (1 - duty)) / duty);
  }
}

/** A timer for the rest between two batches (production pacing; tests synchronise on hook points, not on this). */
export function rest(ms: number): Promise<void> {
  return ms <= 0 ? Promise.resolve() : new Promise((resolve) => setTimeout(resolve, ms));
}
