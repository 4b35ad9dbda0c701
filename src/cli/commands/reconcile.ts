import { openCountLayer } from "../../cache/count-layer.ts";
import type { ReconcileReport } from "../../cache/reconciler.ts";
import { loadConfig } from "../../config.ts";
import { openDatabase } from "../../runtime/database.ts";

export function formatReconcileReports(reports: readonly ReconcileReport[]): string {
  return reports.map((r) => {
    const lines = [`${r.kind}: ${r.visited} changed counter(s) visited, ${r.installed} reconciled, ${r.drifted.length} drifted`];
    for (const d of r.drifted.slice(0, 50)) lines.push(`  ${d.target}: showed ${d.displayed}, facts ${d.truth} (drift ${d.drift > 0 ? "+" : ""}${d.drift})`);
    return lines.join("\n");
  }).join("\n") + "\n";
}

/** `social-ledger reconcile`: one reconciliation of every counter kind; exit 2 without REDIS_URL. */
export async function reconcileCommand(opts: { json?: boolean }): Promise<number> {
  const config = loadConfig();
  if (!config.redisUrl) {
    process.stderr.write("reconcile: REDIS_URL is not set; without Redis counts come from PostgreSQL and there is nothing to reconcile (see `social-ledger rebuild`)\n");
    return 2;
  }
  const database = await openDatabase(config, { poolSize: 4, applicationName: "social-ledger-reconcile" });
  try {
    const counts = await openCountLayer(database.pool, { redisUrl: config.redisUrl, allowEviction: config.redisAllowEviction, buckets: config.countBuckets });
    try {
      const reports = await counts.reconcile();
      process.stdout.write(opts.json ? `${JSON.stringify(reports, null, 2)}\n` : formatReconcileReports(reports));
      return 0;
    } finally {
      await counts.close();
    }
  } finally {
    await database.close();
  }
}
