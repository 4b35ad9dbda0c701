import { VIEWS, type ConsumerLoopState, type DashboardStatus, type LastAudit, type Sample } from "./types.ts";

export interface AlarmThresholds {
  /** A partition whose lag stays above zero while its watermark stands still, or grows at every sample, for this long. */
  lagMs: number;
  /** A consumer loop whose passes failed this many times in a row. */
  consumerFailures: number;
}

/**
 * The dashboard's header: red with one reason per alarm, green otherwise. A pure function of
 * what the sampler holds, so the rules are tested without a clock or a database.
 *
 * Lag alone is no alarm (a burst of writes makes lag that the consumers work off); lag that
 * does not come down is. Over the samples covering the last `lagMs` (the window starts at the
 * newest sample at least `lagMs` old, so a younger history raises nothing), a partition whose
 * lag stayed above zero is "stalled" when its watermark never moved (a stuck or dead
 * consumer, wherever it runs) and "growing" when its lag rose at every step (a consumer
 * slower than the writers).
 */
export function evaluateStatus(input: {
  now: number;
  samples: readonly Sample[];
  consumers: readonly ConsumerLoopState[];
  audit: LastAudit | null;
  thresholds: AlarmThresholds;
}): DashboardStatus {
  const { samples, thresholds } = input;
  const reasons: string[] = [];
  if (input.audit && !input.audit.clean) {
    reasons.push(`audit found violations at ${new Date(input.audit.at).toISOString()}`);
  }
  const newest = samples.at(-1);
  if (newest && newest.views === null) reasons.push(`the database did not answer at ${new Date(newest.t).toISOString()}`);

  let start = -1;
  for (let i = samples.length - 1; i >= 0; i--) {
    if (samples[i]!.t <= input.now - thresholds.lagMs) {
      start = i;
      break;
    }
  }
  const window = start >= 0 ? samples.slice(start) : [];
  if (window.length >= 2 && window.every((s) => s.views !== null)) {
    const seconds = Math.round((window.at(-1)!.t - window[0]!.t) / 1000);
    for (const view of VIEWS) {
      const partitions = window[0]!.views![view].lag.length;
      for (let part = 0; part < partitions; part++) {
        const lag = window.map((s) => s.views![view].lag[part] ?? 0);
        const applied = window.map((s) => s.views![view].appliedUpto[part] ?? 0);
        if (!lag.every((n) => n > 0)) continue;
        const last = lag.at(-1)!;
        if (applied.every((w) => w === applied[0])) {
          reasons.push(`${view} partition ${part}: watermark stalled at ${applied[0]} for ${seconds} s with lag ${last}`);
        } else if (lag.every((n, i) => i === 0 || n > lag[i - 1]!)) {
          reasons.push(`${view} partition ${part}: lag grew from ${lag[0]} to ${last} over ${seconds} s`);
        }
      }
    }
  }

  for (const loop of input.consumers) {
    if (loop.failedInARow >= thresholds.consumerFailures) {
      reasons.push(`consumer ${loop.name} failed ${loop.failedInARow} passes in a row`);
    }
  }
  return { state: reasons.length > 0 ? "alarm" : "ok", reasons };
}
