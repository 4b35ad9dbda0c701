import { loadConfig } from "../../config.ts";
import { pruneDedupKeys, type PruneReport } from "../../db/retention.ts";
import { openDatabase } from "../../runtime/database.ts";

export function formatPruneReport(report: PruneReport): string {
  if (!report.pruned) return "prune skipped: a like rebuild is running (it needs the keys above its snapshot); try again when it has finished\n";
  return `pruned ${report.processedEventRows} processed_event and ${report.projSeenRows} proj_seen key(s) at or below the watermarks\n`;
}

/** `social-ledger prune`: pruneDedupKeys once; exit code 0 also when skipped (nothing is wrong, a rebuild is running). */
export async function prune(opts: { json?: boolean }): Promise<number> {
  const config = loadConfig();
  const database = await openDatabase(config, { poolSize: 2, applicationName: "social-ledger-prune" });
  try {
    const report = await pruneDedupKeys(database.pool);
    process.stdout.write(opts.json ? `${JSON.stringify(report)}\n` : formatPruneReport(report));
    return 0;
  } finally {
    await database.close();
  }
}
