import type { FastifyBaseLogger } from "fastify";
import { pruneRetained, type RetentionOptions, type RetentionReport } from "../retention/retention.ts";
import type { Pool } from "../db/pool.ts";
import { PartitionWorker } from "../workers/partition-worker.ts";

/** One log line's worth of a prune: rows deleted per kind, and the kinds it left alone with why. */
export function summarizeRetention(report: RetentionReport): Record<string, unknown> {
  return Object.fromEntries(
    report.kinds.map((k) => [
      k.kind,
      { keys: k.keyRows, outbox: k.outboxRows, ...(k.skipped ? { skipped: k.skipped } : {}) },
    ]),
  );
}

/**
 * The service's periodic retention (docs/retention.md): `social-ledger prune` every `everyMs`, as a loop
 * like the consumers' (one line when it starts failing and one when it recovers). Safe under
 * live traffic: dedup keys at or below the watermarks and outbox events at or below the proven
 * boundary go (docs/retention.md), and a running rebuild makes it skip that kind.
 */
export function pruneJob(
  pool: Pool,
  everyMs: number,
  log: FastifyBaseLogger,
  options: RetentionOptions = {},
): PartitionWorker {
  let next = Date.now() + everyMs;
  return new PartitionWorker(
    "dedup-pruner",
    async () => {
      if (Date.now() < next) return 0;
      next = Date.now() + everyMs;
      const report = await pruneRetained(pool, options);
      if (report.kinds.some((k) => k.keyRows + k.outboxRows > 0 || k.skipped)) {
        log.info(
          { prune: summarizeRetention(report) },
          "pruned dedup keys and outbox events below the retention boundary",
        );
      }
      return 0;
    },
    {
      idleMs: Math.min(1_000, everyMs),
      onFailing: (err) => log.warn({ reason: (err as Error).message }, "retention prune failed; retrying with backoff"),
      onRecovered: () => log.info("retention prune resumed"),
    },
  );
}
