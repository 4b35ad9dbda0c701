import type { Config } from "../../config.ts";
import { openLedger, type Ledger } from "../../ledger.ts";
import { openDatabase, type Database } from "../../runtime/database.ts";
import { UsageError } from "../args.ts";
import type { cliLogger } from "../log.ts";

/**
 * What every `worker` (polling or `--transport nats`) starts with: the database and the ledger,
 * and the partitions it serves, which must exist in this database (a usage error otherwise, with
 * the database closed again).
 */
export async function openWorkerLedger(
  config: Config,
  opts: { partitions?: number[]; poolSize: number },
  log: ReturnType<typeof cliLogger>,
): Promise<{ database: Database; ledger: Ledger; partitions: number[] }> {
  const database = await openDatabase(config, {
    poolSize: opts.poolSize,
    applicationName: "social-ledger-worker",
    statementDeadline: true,
    log: (level, message, fields = {}) => log[level]({ database: fields }, message),
  });
  try {
    const ledger = await openLedger(database.pool, {
      feedMaxItems: config.feedMaxItems,
      feedHotFollowers: config.feedHotFollowers,
      feedAbsentMs: config.feedAbsentMs,
    });
    const outside = opts.partitions?.filter((p) => p >= ledger.partitions) ?? [];
    if (outside.length > 0) {
      throw new UsageError(
        `--partitions: ${outside.join(",")} not in this database, which has ${ledger.partitions} partition(s) (0..${ledger.partitions - 1})`,
      );
    }
    return { database, ledger, partitions: opts.partitions ?? Array.from({ length: ledger.partitions }, (_, p) => p) };
  } catch (err) {
    await database.close();
    throw err;
  }
}
