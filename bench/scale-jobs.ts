/**
 * The scale bench's background jobs, each run once under the live traffic of scale-live.ts: the
 * snapshot rebuild of the hot item (N/10 likes), the full audit, the periodic (incremental) audit the
 * service runs, reconciliation of K changed Redis counters, and a prune. Each calls the job's public function, so a batched, incremental or paced
 * version of it is measured by the same code. Each step, timed or not, prints a progress line with
 * its duration, so a long run shows where its time goes.
 */
import { fullAudit } from "../src/api/routes/admin.ts";
import { incrementalAudit, type PeriodicAuditReport } from "../src/audit/incremental-audit.ts";
import type { ReconcileReport } from "../src/cache/reconciler.ts";
import type { Ledger } from "../src/ledger.ts";
import type { RebuildReport } from "../src/likes/like-rebuild.ts";
import { pruneRetained, type RetentionReport } from "../src/retention/retention.ts";
import type { ReconcileBench } from "./scale-reconcile.ts";
import type { LiveLoad, UnderJob } from "./scale-live.ts";
import type { Population } from "../support/scale-population.ts";

export interface JobFigures {
  rebuild: UnderJob<RebuildReport>;
  /** The full audit, on demand; absent with --skip-full-audit. */
  audit?: UnderJob<Awaited<ReturnType<typeof fullAudit>>>;
  /** The service's periodic audit, its cursors set by a first run: what changed since then (the live traffic's writes) plus its sample. */
  periodicAudit: UnderJob<PeriodicAuditReport>;
  reconcile: { changed: number; run: UnderJob<ReconcileReport> }[];
  prune: UnderJob<RetentionReport>;
}

/** Every event so far through the consumers: what the prune may remove, and the audit's projection diff. */
async function settle(ledger: Ledger): Promise<void> {
  await ledger.likeConsumer.drain(2000);
  await ledger.projector.drain(2000);
  await ledger.notifications.drain(2000);
}

/** Sections of audit_cursor and the sequence each follows (src/audit/incremental-audit.ts). */
const AUDIT_SECTIONS: [section: string, sequence: string][] = [
  ["likes", "like_seq"],
  ["relations", "event_seq"],
  ["comments", "comment_seq"],
  ["notifications.likes", "like_seq"],
  ["notifications.relations", "event_seq"],
  ["notifications.comments", "comment_seq"],
  ["webhooks", "webhook_block_seq"],
];

/**
 * With --skip-full-audit, right after generation: the periodic audit's cursors at the generated
 * positions, as a clean first (full) run would leave them. The generated state is clean by
 * test/bench/scale-population.test.ts (the full audit after generating); the bench's own events
 * are then all audited incrementally by the periodic audit's runs.
 */
export async function seedAuditCursors(ledger: Ledger): Promise<void> {
  for (const [section, sequence] of AUDIT_SECTIONS) {
    await ledger.pool.query(
      `INSERT INTO audit_cursor (section, part, audited_upto) SELECT $1, part, last FROM ${sequence}
       ON CONFLICT (section, part) DO UPDATE SET audited_upto = EXCLUDED.audited_upto`,
      [section],
    );
  }
}

/** Runs `step`, then prints its name and duration (indented under the size's progress). */
async function timed<T>(name: string, step: () => Promise<T>): Promise<T> {
  const t0 = performance.now();
  const result = await step();
  process.stdout.write(`  ${name}: ${((performance.now() - t0) / 1000).toFixed(1)} s\n`);
  return result;
}

export async function jobFigures(
  ledger: Ledger,
  pop: Population,
  live: LiveLoad,
  reconcile: ReconcileBench,
  changed: readonly number[],
  options: { fullAudit: boolean },
): Promise<JobFigures> {
  const rebuild = await timed("rebuild (idle window, then job)", () =>
    live.under(() => ledger.likeRebuild.rebuild({ items: [pop.hotItem] })),
  );
  const runs: JobFigures["reconcile"] = [];
  await timed("reconcile: install counters in Redis", () => reconcile.prepare(pop, Math.max(...changed)));
  for (const k of changed) {
    await timed(`reconcile: one like on each of ${k} counters`, () => reconcile.change(k));
    runs.push({
      changed: k,
      run: await timed(`reconcile ${k} (idle window, then job)`, () => live.under(() => reconcile.reconcile())),
    });
  }
  await timed("settle", () => settle(ledger));
  const audit = options.fullAudit
    ? await timed("full audit (idle window, then job)", () => live.under(() => fullAudit(ledger)))
    : undefined;
  await timed("periodic audit, first run (sets its cursors)", () => incrementalAudit(ledger.pool));
  await timed("settle", () => settle(ledger));
  const periodicAudit = await timed("periodic audit (idle window, then job)", () =>
    live.under(() => incrementalAudit(ledger.pool)),
  );
  await timed("settle", () => settle(ledger));
  const prune = await timed("prune (idle window, then job)", () =>
    live.under(() => pruneRetained(ledger.pool, { keepLast: 0, keepSeconds: 0 })),
  );
  return { rebuild, audit, periodicAudit, reconcile: runs, prune };
}
