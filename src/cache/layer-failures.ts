/**
 * How the count layer reports a failure of its loops and reads: every one is counted in
 * ledger_count_layer_failures_total{kind, step} and logged, so that no failure (a Lua error aborting
 * a reconciliation, say) passes unseen.
 *
 * Steps: `feed` (a feeder pass of a kind), `reconcile` (a kind's reconciliation run),
 * `install` (one target's reconciliation), `increment` (one event's increment refused by a
 * malformed counter), `read` (a read that found a malformed counter). A failure naming a target
 * is logged every time; a failed pass is logged when a streak of failures starts and again when
 * the step works after it, with the count (a Redis outage fails every pass, and the state change
 * of the layer is logged separately), so the log stays readable while the metric counts each one.
 */
export type LayerStep = "feed" | "reconcile" | "install" | "increment" | "read";

export const LAYER_STEPS: readonly LayerStep[] = ["feed", "reconcile", "install", "increment", "read"];

export interface LayerFailure {
  kind: string;
  step: LayerStep;
  /** The counter's target, when one target failed (the others went on). */
  target?: string;
  error: unknown;
  /** Whether the counter was deleted so the next read backfills it from the facts. */
  dropped?: boolean;
}

export type LayerLog = (level: "info" | "warn" | "error", message: string, fields?: Record<string, unknown>) => void;

export interface FailureSink {
  failed(failure: LayerFailure): void;
  /** The step of the kind worked (a pass completed): ends a streak of failures. */
  succeeded(kind: string, step: LayerStep): void;
}

export const reasonOf = (err: unknown) => (err instanceof Error ? err.message : String(err));

/** Counts into `count` and logs through `log` (both late-bound by the caller). */
export function failureSink(count: (kind: string, step: LayerStep) => void, log: LayerLog): FailureSink {
  const streaks = new Map<string, number>();
  return {
    failed(f) {
      count(f.kind, f.step);
      const fields = {
        kind: f.kind,
        step: f.step,
        reason: reasonOf(f.error),
        ...(f.target !== undefined ? { target: f.target, dropped: f.dropped ?? false } : {}),
      };
      if (f.target !== undefined) {
        log(
          "warn",
          `count layer: ${f.step} of ${f.kind} target ${JSON.stringify(f.target)} failed${f.dropped ? "; counter dropped, the next read backfills it from the facts" : ""}`,
          fields,
        );
        return;
      }
      const key = `${f.kind}/${f.step}`;
      const inARow = (streaks.get(key) ?? 0) + 1;
      streaks.set(key, inARow);
      if (inARow === 1)
        log(
          "warn",
          `count layer: ${f.step} of ${f.kind} failed; retrying (every failure counts in ledger_count_layer_failures_total)`,
          fields,
        );
    },
    succeeded(kind, step) {
      const key = `${kind}/${step}`;
      const inARow = streaks.get(key);
      if (inARow === undefined) return;
      streaks.delete(key);
      log("info", `count layer: ${step} of ${kind} works again after ${inARow} failed attempt(s)`, {
        kind,
        step,
        failed: inARow,
      });
    },
  };
}
