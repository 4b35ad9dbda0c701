import type { Pool } from "./pool.ts";
import { InvalidInputError, PartitionConfigError } from "../errors.ts";
import { withTransaction } from "./transaction.ts";

export const MAX_PARTITIONS = 1024;

/** Tables with one row per partition, created by initLedger (fixed names, never user input). */
export const PARTITIONED_ROW_TABLES = [
  "like_seq",
  "counter_watermark",
  "event_seq",
  "proj_watermark",
  "comment_seq",
  "comment_watermark",
  "notification_like_watermark",
  "notification_relation_watermark",
  "notification_comment_watermark",
  "post_seq",
  "feed_post_watermark",
  "notification_post_watermark",
  "feed_relation_watermark",
] as const;

/**
 * Fixes the partition count P of a freshly migrated database and creates the per-partition
 * sequence and watermark rows. Calling it again with the same P is a no-op; with another P
 * it fails, because events already carry partition numbers computed from the old P.
 */
export async function initLedger(
  pool: Pool,
  options: { partitions?: number; partitionsOfNew?: number } = {},
): Promise<number> {
  const wanted = options.partitions;

  if (wanted !== undefined && (!Number.isInteger(wanted) || wanted < 1 || wanted > MAX_PARTITIONS)) {
    // A malformed argument is invalid input (raised before any statement), not a mismatch with the database.
    throw new InvalidInputError("partitions", `must be an integer in 1..${MAX_PARTITIONS}, got ${String(wanted)}`);
  }
  const ofNew = wanted ?? options.partitionsOfNew ?? 1;
  if (!Number.isInteger(ofNew) || ofNew < 1 || ofNew > MAX_PARTITIONS) {
    throw new InvalidInputError("partitionsOfNew", `must be an integer in 1..${MAX_PARTITIONS}, got ${String(ofNew)}`);
  }
  return withTransaction(pool, async (client) => {
    await client.query("INSERT INTO ledger_config (partitions) VALUES ($1) ON CONFLICT (singleton) DO NOTHING", [
      ofNew,
    ]);
    const { rows } = await client.query<{ partitions: number }>("SELECT partitions FROM ledger_config");
    const partitions = rows[0]!.partitions;
    if (wanted !== undefined && partitions !== wanted) {
      throw new PartitionConfigError(
        `this database was created with ${partitions} partition(s); it cannot be reopened with ${wanted}`,
      );
    }
    // Sequences before the watermarks that reference them.
    for (const table of PARTITIONED_ROW_TABLES) {
      await client.query(`INSERT INTO ${table} (part) SELECT generate_series(0, $1::int - 1) ON CONFLICT DO NOTHING`, [
        partitions,
      ]);
    }
    // These tables keep exactly P rows for life; without statistics the planner assumes a
    // couple of thousand, and plans the reads that join them (lag, pendingForItem) for that.
    for (const table of PARTITIONED_ROW_TABLES) await client.query(`ANALYZE ${table}`);
    return partitions;
  });
}

/** The partition count of an initialised database. */
export async function readPartitions(pool: Pool): Promise<number> {
  const { rows } = await pool.query<{ partitions: number }>("SELECT partitions FROM ledger_config");
  if (rows.length === 0) throw new PartitionConfigError("the ledger is not initialised: run initLedger first");
  return rows[0]!.partitions;
}
