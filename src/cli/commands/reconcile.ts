import { CountLayerRunError, openCountLayer } from "../../cache/count-layer.ts";
import { EvictingRedisError, RedisUnreachableError } from "../../cache/redis-connection.ts";
import type { ReconcileReport } from "../../cache/reconciler.ts";
import { loadConfig } from "../../config.ts";
import { openDatabase } from "../../runtime/database.ts";

/** How long `reconcile` waits for Redis before it gives up (exit 1). */
const REDIS_WAIT_MS = 5000;

export function formatReconcileReports(reports: readonly ReconcileReport[]): string {
  return (
    reports
      .map((r) => {
        const lines = [
          `${r.kind}: ${r.visited} changed counter(s) visited, ${r.installed} reconciled, ${r.drifted.length} drifted` +
            (r.failed.length > 0 ? `, ${r.failed.length} failed` : ""),
        ];
        for (const d of r.drifted.slice(0, 50))
          lines.push(
            `  ${d.target}: showed ${d.displayed}, facts ${d.truth} (drift ${d.drift > 0 ? "+" : ""}${d.drift})`,
          );
        for (const f of r.failed.slice(0, 50))
          lines.push(
            `  ${f.target}: failed (${f.reason}); ${f.dropped ? "counter dropped, backfilled from the facts at its next read" : "could not be dropped either; visited again next run"}`,
          );
        return lines.join("\n");
      })
      .join("\n") + "\n"
  );
}

/**
 * `social-ledger reconcile`: one reconciliation of every counter kind; exit 2 without REDIS_URL,
 * exit 1 when Redis does not answer within 5 s (it never waits longer) or any kind or target failed.
 */
export async function reconcileCommand(opts: { json?: boolean }): Promise<number> {
  const config = loadConfig();
  if (!config.redisUrl) {
    process.stderr.write(
      "social-ledger reconcile: REDIS_URL is not set; without Redis counts come from PostgreSQL and there is nothing to reconcile (see `social-ledger rebuild`)\n",
    );
    return 2;
  }
  const database = await openDatabase(config, { poolSize: 4, applicationName: "social-ledger-reconcile" });
  try {
    const counts = await openCountLayer(database.pool, {
      redisUrl: config.redisUrl,
      allowEviction: config.redisAllowEviction,
      buckets: config.countBuckets,
      pacing: config.pacing,
      requireRedis: true,
      startWaitMs: REDIS_WAIT_MS,
    }).catch((err: unknown) => {
      if (err instanceof RedisUnreachableError || err instanceof EvictingRedisError) return err;
      throw err;
    });
    if (counts instanceof Error) {
      process.stderr.write(`social-ledger reconcile: ${counts.message}; nothing was reconciled\n`);
      return 1;
    }
    try {
      const outcome = await counts.reconcile().catch((err: unknown) => {
        if (err instanceof CountLayerRunError) return err;
        throw err;
      });
      const reports = outcome instanceof CountLayerRunError ? outcome.reports : outcome;
      process.stdout.write(opts.json ? `${JSON.stringify(reports, null, 2)}\n` : formatReconcileReports(reports));
      if (outcome instanceof CountLayerRunError) process.stderr.write(`social-ledger reconcile: ${outcome.message}\n`);
      const failedTargets = reports.reduce((n, r) => n + r.failed.length, 0);
      if (failedTargets > 0)
        process.stderr.write(
          `social-ledger reconcile: ${failedTargets} counter(s) failed to reconcile (listed above)\n`,
        );
      return outcome instanceof CountLayerRunError || failedTargets > 0 ? 1 : 0;
    } finally {
      await counts.close();
    }
  } finally {
    await database.close();
  }
}
