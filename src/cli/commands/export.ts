import { loadConfig } from "../../config.ts";
import { exportFacts } from "../../portability/export.ts";
import { openDatabase } from "../../runtime/database.ts";

/** `social-ledger export [--account ID]`: every fact (or one account's) on stdout in the import's format, streamed page by page. */
export async function exportCommand(opts: { account?: string }): Promise<number> {
  const config = loadConfig();
  const database = await openDatabase(config, { poolSize: 2, applicationName: "social-ledger-export" });
  try {
    await exportFacts(database.pool, process.stdout, opts.account === undefined ? {} : { account: opts.account });
    return 0;
  } finally {
    await database.close();
  }
}
