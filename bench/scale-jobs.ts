/**
 * The scale bench's background jobs, each run once under the live traffic of scale-live.ts: the
 * snapshot rebuild of the hot item (N/10 likes), the full audit, the periodic (incremental) audit the
 * service runs, reconciliation of K changed Redis counters, and a prune. Each calls the job's public function, so a batched, incremental or paced
 * version of it is measured by the same code.
 */
import { fullAudit } from "../src/api/routes/admin.ts";
import { incrementalAudit, type PeriodicAuditReport } from "../src/audit/incremental-audit.ts";
import type { ReconcileReport } from "../src/cache/reconciler.ts";
import type { Ledger } from "../src/ledger.ts";
import type { RebuildReport } from "../src/likes/like-rebuild.ts";
import { pruneRetained, type RetentionReport } from "../src/retention/retention.ts";
import type { ReconcileBench } from "./scale-reconcile.ts";
import type { LiveLoad, UnderJob } from "./scale-live.ts";
import type { Population } from "./scale-generate.ts";

export interface JobFigures {
  rebuild: UnderJob<RebuildReport>;
  audit: UnderJob<Awaited<ReturnType<typeof fullAudit>>>;
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

export async function jobFigures(ledger: Ledger, pop: Population, live: LiveLoad, reconcile: ReconcileBench, changed: readonly number[]): Promise<JobFigures> {
  const rebuild = await live.under(() => ledger.likeRebuild.rebuild({ items: [pop.hotItem] }));
  const runs: JobFigures["reconcile"] = [];
  await reconcile.prepare(pop, Math.max(...changed));
  for (const k of changed) {
    await reconcile.change(k);
    runs.push({ changed: k, run: await live.under(() => reconcile.reconcile()) });
  }
  await settle(ledger);
  const audit = await live.under(() => fullAudit(ledger));
  await incrementalAudit(ledger.pool);
  await settle(ledger);
  const periodicAudit = await live.under(() => incrementalAudit(ledger.pool));
  await settle(ledger);
  const prune = await live.under(() => pruneRetained(ledger.pool, { keepLast: 0, keepSeconds: 0 }));
  return { rebuild, audit, periodicAudit, reconcile: runs, prune };
}
