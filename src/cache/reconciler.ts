import type { Pool } from "../db/pool.ts";
import { InvalidInputError } from "../errors.ts";
import { Hooks } from "../hooks.ts";
import { DEFAULT_PACING, Pacer, rest, type PacingOptions } from "../workers/pacer.ts";
import type { CacheMetrics } from "./cache-metrics.ts";
import { cursorKey, reconciledKey } from "./count-keys.ts";
import { PIPELINE_DEPTH, type CountStore, type InstallOutcome } from "./count-store.ts";
import type { CounterKind } from "./counter-kinds.ts";
import { reasonOf, type FailureSink } from "./layer-failures.ts";

export interface DriftRecord {
  target: string;
  truth: number;
  displayed: number;
  drift: number;
}

/** A target whose reconciliation failed; the others went on. */
export interface FailedTarget {
  target: string;
  reason: string;
  /** The counter was deleted (its next read backfills it from the facts); false: it could not be, and the run's boundary stays. */
  dropped: boolean;
}

export interface ReconcileReport {
  kind: string;
  visited: number;
  installed: number;
  drifted: DriftRecord[];
  failed: FailedTarget[];
}

/** Installs a batch's truths at one boundary: one outcome per entry, in order (a failure is that entry's alone). */
export type BatchInstall = (
  store: CountStore,
  kind: string,
  entries: readonly { target: string; truth: number }[],
  bound: readonly number[],
) => Promise<PromiseSettledResult<InstallOutcome>[]>;

/** The reconciler's install: CountStore.installBatch, over counters that exist (a run creates none). */
export const installBatch: BatchInstall = (store, kind, entries, bound) =>
  store.installBatch(kind, entries, bound, true);

/** The default (and largest) batch: one truth statement and ten pipelined slices of installs. */
export const DEFAULT_RECONCILE_BATCH = 500;
/**
 * The smallest paced batch: one pipelined slice of installs. Below it a batch still costs a truth
 * statement and a round trip, so a smaller one would only lower the throughput.
 */
export const MIN_PACED_RECONCILE_BATCH = PIPELINE_DEPTH;

export interface ReconcilerOptions {
  hooks?: Hooks;
  /** How a batch is installed (default installBatch); the bench passes the one-target-at-a-time path to compare. */
  install?: BatchInstall;
  metrics?: CacheMetrics;
  /** The most targets per batch (default 500); pacing sizes batches below it (at least MIN_PACED_RECONCILE_BATCH). */
  batchSize?: number;
  /** LEDGER_BACKGROUND_BATCH_MS / LEDGER_BACKGROUND_DUTY (default DEFAULT_PACING); UNPACED: batches of `batchSize` back to back. */
  pacing?: PacingOptions;
  /** Drifted counters in one run above which the alert metric goes to 1 and a line is logged. */
  alertThreshold?: number;
  onAlert?: (report: ReconcileReport) => void;
  /** Every failure of a run: one target's (step install), or the whole run's (step reconcile). */
  failures?: FailureSink;
}

/**
 * Seed 003's reconciliation with an exact boundary. The changed targets are those with an event
 * between the boundary of the last run and the present (both outbox positions, kept in Redis with
 * the counters they describe), so a run costs what changed, not how many targets exist. The
 * boundary per partition is the lower of the outbox position and the feeder's cursor: committed
 * and past the hot path. Per batch one statement reads the truth over exactly the events <= it
 * (the facts minus the committed events above it; a named statement, planned once per
 * connection), and one pipelined round trip installs it (installBatch). The install script puts
 * the truth in base and keeps only the logged live increments above the boundary, atomically,
 * so increments racing with the run are never lost. Drift (truth minus what the counter showed
 * for the same events) is measured before the repair and recorded in count_drift_history.
 *
 * A target whose install fails (a counter the script refuses as malformed, a Redis error) does
 * not stop the run: it is reported, and its counter dropped so its next read backfills it from
 * the facts. If even the drop fails, the run does not advance its stored boundary, so the next
 * run visits the target again. A failure of the run itself is reported and thrown.
 *
 * Batches are paced like the other background jobs (src/workers/pacer.ts, docs/erasure.md
 * "Pacing"): each is sized to the pacing's time budget from the last full batch (truth read plus
 * install), at most `batchSize`, and the run rests after each in proportion to its duration, so
 * live reads and writes get the CPU, PostgreSQL and Redis in between. Pacing changes only how the
 * changed targets are cut, never the boundary: every batch reads and installs at the one boundary
 * the run fixed at its start.
 *
 * Hook points: "reconcile.beforeInstall" {kind, targets} (after the truth is read, before it is
 * installed); "reconcile.betweenBatches" {kind, size, ms, restMs} (after a batch that is not the
 * last, before the rest the pacing asks for).
 */
export class Reconciler {
  readonly pacer: Pacer;

  constructor(
    private readonly pool: Pool,
    private readonly store: CountStore,
    private readonly options: ReconcilerOptions = {},
  ) {
    const batchSize = options.batchSize ?? DEFAULT_RECONCILE_BATCH;
    if (!Number.isSafeInteger(batchSize) || batchSize < 1)
      throw new InvalidInputError("batchSize", `must be a positive integer, got ${batchSize}`);
    this.pacer = new Pacer(options.pacing ?? DEFAULT_PACING, batchSize, Math.min(batchSize, MIN_PACED_RECONCILE_BATCH));
  }

  async reconcile(kind: CounterKind): Promise<ReconcileReport> {
    try {
      const report = await this.run(kind);
      this.options.failures?.succeeded(kind.name, "reconcile");
      return report;
    } catch (err) {
      this.options.failures?.failed({ kind: kind.name, step: "reconcile", error: err });
      throw err;
    }
  }

  private async run(kind: CounterKind): Promise<ReconcileReport> {
    const redis = this.store.redis;
    const hooks = this.options.hooks ?? new Hooks();
    const { rows: positions } = await this.pool.query<{ part: number; last: number }>(kind.positionsSql);
    const previous = await redis.hGetAll(reconciledKey(kind.name));
    const cursor = await redis.hGetAll(cursorKey(kind.name));
    const parts = positions.map((p) => p.part);
    // Settled = committed and past the hot path: an event the feeder has not reached yet is not
    // drift, so the boundary is the lower of the outbox position and the feeder's cursor.
    const bound = positions.map((p) => Math.min(p.last, Number(cursor[String(p.part)] ?? p.last)));
    const { rows: changed } = await this.pool.query<{ target: string }>(kind.changedSql, [
      parts,
      parts.map((p) => Number(previous[String(p)] ?? 0)),
      bound,
    ]);
    const report: ReconcileReport = { kind: kind.name, visited: changed.length, installed: 0, drifted: [], failed: [] };
    const install = this.options.install ?? installBatch;
    const truthStatement = { name: `reconcile-truth-${kind.name}`, text: kind.truthSql };
    for (let i = 0; i < changed.length;) {
      const size = this.pacer.size(kind.name);
      const targets = changed.slice(i, i + size).map((r) => r.target);
      i += targets.length;
      const t0 = performance.now();
      const { rows } = await this.pool.query<{ target: string; n: number; bound: string[] }>({
        ...truthStatement,
        values: [targets, bound],
      });
      const readMs = performance.now() - t0;
      await hooks.at("reconcile.beforeInstall", { kind: kind.name, targets });
      const t1 = performance.now();
      // One statement gave every row the same boundary (its snapshot's), so the batch installs at rows[0]'s.
      const batchBound = rows[0]?.bound.map(Number) ?? [];
      const outcomes =
        rows.length === 0
          ? []
          : await install(
              this.store,
              kind.name,
              rows.map((r) => ({ target: r.target, truth: r.n })),
              batchBound,
            );
      const failed = rows.flatMap((row, j) =>
        outcomes[j]!.status === "rejected"
          ? [{ target: row.target, error: (outcomes[j] as PromiseRejectedResult).reason }]
          : [],
      );
      report.failed.push(...(await Promise.all(failed.map((f) => this.dropFailed(kind.name, f.target, f.error)))));
      // The batch's own work (a test parked at the hook point is not its cost).
      const ms = readMs + performance.now() - t1;
      rows.forEach((row, j) => {
        const outcome = outcomes[j]!;
        if (outcome.status !== "fulfilled" || outcome.value.status !== "installed") return;
        report.installed++;
        const drift = row.n - outcome.value.displayedSettled;
        if (drift !== 0)
          report.drifted.push({ target: row.target, truth: row.n, displayed: outcome.value.displayedSettled, drift });
      });
      // A short batch (the last) says nothing about what a full one costs.
      this.pacer.record(kind.name, size, ms, targets.length === size);
      if (i >= changed.length) break;
      const restMs = this.pacer.restMs(ms);
      await hooks.at("reconcile.betweenBatches", { kind: kind.name, size: targets.length, ms, restMs });
      // Unpaced, the next batch still waits for the event loop, so reads are not starved by a large run.
      await (restMs > 0 ? rest(restMs) : new Promise((resolve) => setImmediate(resolve)));
    }
    if (report.failed.every((f) => f.dropped)) {
      await redis.hSet(
        reconciledKey(kind.name),
        Object.fromEntries(parts.map((p, i) => [String(p), String(bound[i])])),
      );
    }
    await recordDrift(this.pool, kind.name, "reconcile", report.drifted);
    this.options.metrics?.reconciledTargets.inc({ kind: kind.name }, report.installed);
    const alerting = report.drifted.length > (this.options.alertThreshold ?? 0);
    this.options.metrics?.driftAlert.set({ kind: kind.name }, alerting ? 1 : 0);
    if (alerting) this.options.onAlert?.(report);
    return report;
  }

  private async dropFailed(kind: string, target: string, err: unknown): Promise<FailedTarget> {
    const dropped = await this.store.drop(kind, target).then(
      () => true,
      () => false,
    );
    this.options.failures?.failed({ kind, step: "install", target, error: err, dropped });
    return { target, reason: reasonOf(err), dropped };
  }
}

/** The database rebuild's drift in the same figures (count_drift_history, hence the histogram), whichever process ran it. */
export function recordRebuildDrift(
  pool: Pool,
  drifted: readonly { itemId: string; oldN: number; newN: number }[],
): Promise<void> {
  return recordCounterRebuildDrift(
    pool,
    "likes",
    drifted.map((d) => ({ key: d.itemId, oldN: d.oldN, newN: d.newN })),
  );
}

/** The same for any counter's rebuild (CounterRebuild reports its drifted keys). */
export function recordCounterRebuildDrift(
  pool: Pool,
  kind: string,
  drifted: readonly { key: string; oldN: number; newN: number }[],
): Promise<void> {
  return recordDrift(
    pool,
    kind,
    "rebuild",
    drifted.map((d) => ({ target: d.key, truth: d.newN, displayed: d.oldN, drift: d.newN - d.oldN })),
  );
}

/**
 * Records drifts in count_drift_history, the shared record: the ledger_count_drift histogram of
 * every serving process is rebuilt from it at scrape (cache-metrics.ts), so a drift found by a
 * CLI process reaches the service's /metrics too.
 */
export async function recordDrift(
  pool: Pool,
  kind: string,
  origin: string,
  drifted: readonly DriftRecord[],
): Promise<void> {
  if (drifted.length === 0) return;
  await pool.query(
    `INSERT INTO count_drift_history (kind, origin, target, truth, displayed)
     SELECT $1, $2, t.target, t.truth, t.displayed FROM unnest($3::text[], $4::bigint[], $5::bigint[]) AS t(target, truth, displayed)`,
    [kind, origin, drifted.map((d) => d.target), drifted.map((d) => d.truth), drifted.map((d) => d.displayed)],
  );
}
