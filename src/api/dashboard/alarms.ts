import {
  VIEWS,
  type ConsumerLoopState,
  type DashboardStatus,
  type LastAudit,
  type PartitionAlarm,
  type Sample,
} from "./types.ts";

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
 * slower than the writers). One reason per view and rule (a stuck consumer stalls all its
 * partitions at once); `partitions` names each one, so the page colours those and not every
 * partition with lag (a lag of 1 under load is normal).
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
  const partitions: PartitionAlarm[] = [];
  if (input.audit && !input.audit.clean) {
    reasons.push(`audit found violations at ${new Date(input.audit.at).toISOString()}`);
  }
  const newest = samples.at(-1);
  if (newest && newest.views === null)
    reasons.push(`the database did not answer at ${new Date(newest.t).toISOString()}`);

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
      const stalled: { part: number; at: number; lag: number }[] = [];
      const growing: { part: number; from: number; lag: number }[] = [];
      const count = window[0]!.views![view].lag.length;
      for (let part = 0; part < count; part++) {
        const lag = window.map((s) => s.views![view].lag[part] ?? 0);
        const applied = window.map((s) => s.views![view].appliedUpto[part] ?? 0);
        if (!lag.every((n) => n > 0)) continue;
        if (applied.every((w) => w === applied[0])) stalled.push({ part, at: applied[0]!, lag: lag.at(-1)! });
        else if (lag.every((n, i) => i === 0 || n > lag[i - 1]!))
          growing.push({ part, from: lag[0]!, lag: lag.at(-1)! });
      }
      // One sentence per view and rule: a stuck consumer of a view usually stalls all its partitions at once.
      if (stalled.length === 1) {
        const [{ part, at, lag }] = stalled as [(typeof stalled)[number]];
        reasons.push(`${view} partition ${part}: watermark stalled at ${at} for ${seconds} s with lag ${lag}`);
      } else if (stalled.length > 1) {
        reasons.push(
          `${view} partitions ${partList(stalled)}: watermarks stalled for ${seconds} s with lag ${spread(stalled.map((p) => p.lag))}`,
        );
      }
      if (growing.length === 1) {
        const [{ part, from, lag }] = growing as [(typeof growing)[number]];
        reasons.push(`${view} partition ${part}: lag grew from ${from} to ${lag} over ${seconds} s`);
      } else if (growing.length > 1) {
        reasons.push(
          `${view} partitions ${partList(growing)}: lag grew at every sample over ${seconds} s, now ${spread(growing.map((p) => p.lag))}`,
        );
      }
      partitions.push(...stalled.map(({ part }) => ({ view, part, rule: "stalled" as const })));
      partitions.push(...growing.map(({ part }) => ({ view, part, rule: "growing" as const })));
    }
  }

  for (const loop of input.consumers) {
    if (loop.failedInARow >= thresholds.consumerFailures) {
      reasons.push(`consumer ${loop.name} failed ${loop.failedInARow} passes in a row`);
    }
  }
  return { state: reasons.length > 0 ? "alarm" : "ok", reasons, partitions };
}

/** Partition numbers (ascending) with runs written as ranges: "0-3, 7, 9-15". */
function partList(partitions: readonly { part: number }[]): string {
  const runs: string[] = [];
  let first = partitions[0]!.part;
  let last = first;
  for (const { part } of [...partitions.slice(1), { part: Number.NaN }]) {
    if (part === last + 1) {
      last = part;
      continue;
    }
    runs.push(first === last ? String(first) : `${first}-${last}`);
    first = part;
    last = part;
  }
  return runs.join(", ");
}

/** "3" or "2 to 9". */
function spread(values: readonly number[]): string {
  const min = Math.min(...values);
  const max = Math.max(...values);
  return min === max ? String(min) : `${min} to ${max}`;
}
