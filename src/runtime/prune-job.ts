import type { FastifyBaseLogger } from "fastify";
import { pruneDedupKeys } from "../db/retention.ts";
import type { Pool } from "../db/pool.ts";
import { PartitionWorker } from "../workers/partition-worker.ts";

/**
 * The service's periodic retention (issue 8): `social-ledger prune` every `everyMs`, as a loop
 * like the consumers' (one line when it starts failing and one when it recovers). Safe under
 * live traffic: only dedup keys at or below the watermarks go, and a running rebuild makes it skip.
 */
export function pruneJob(pool: Pool, everyMs: number, log: FastifyBaseLogger): PartitionWorker {
  let next = Date.now() + everyMs;
  return new PartitionWorker("dedup-pruner", async () => {
    if (Date.now() < next) return 0;
    next = Date.now() + everyMs;
    const report = await pruneDedupKeys(pool);
    if (report.processedEventRows + report.projSeenRows > 0) log.info({ prune: report }, "pruned dedup keys below the watermarks");
    return 0;
  }, {
    idleMs: Math.min(1_000, everyMs),
    onFailing: (err) => log.warn({ reason: (err as Error).message }, "dedup-key prune failed; retrying with backoff"),
    onRecovered: () => log.info("dedup-key prune resumed"),
  });
}
