import { loadConfig } from "../../config.ts";
import { createWorkers, openLedger } from "../../ledger.ts";
import { openDatabase } from "../../runtime/database.ts";
import { describeDatabase } from "../banner.ts";
import { runUntilSignal } from "../../runtime/signals.ts";
import { UsageError } from "../args.ts";
import { errorFields, jsonLog } from "../log.ts";

/**
 * `social-ledger worker`: the two consumer loops over the given partitions, no HTTP. The state
 * is in the database (watermarks, dedup keys), so any number of these may run, and a killed
 * one loses nothing. One JSON line per batch that handled events; SIGINT/SIGTERM lets the
 * current batches commit, closes the pool (and an embedded cluster this process started), exits 0.
 */
export async function worker(opts: { partitions?: number[]; batchSize: number }): Promise<number> {
  const config = loadConfig();
  const log = jsonLog({ pid: process.pid, component: "worker" });
  const database = await openDatabase(config, { poolSize: 4, applicationName: "social-ledger-worker", log });
  let ledger;
  try {
    ledger = await openLedger(database.pool);
    const outside = opts.partitions?.filter((p) => p >= ledger!.partitions) ?? [];
    if (outside.length > 0) {
      throw new UsageError(
        `--partitions: ${outside.join(",")} not in this database, which has ${ledger.partitions} partition(s) (0..${ledger.partitions - 1})`,
      );
    }
  } catch (err) {
    await database.close();
    throw err;
  }
  const partitions = opts.partitions ?? Array.from({ length: ledger.partitions }, (_, p) => p);
  const totals = { like_count: { applied: 0, covered: 0, dup: 0 }, follower_projection: { applied: 0, stale: 0, dup: 0 } };
  const workers = createWorkers(ledger, {
    partitions,
    batchSize: opts.batchSize,
    // One line when a loop starts failing and one when it recovers, not one per attempt.
    onFailing: (err, worker) => log("warn", "consumer pass failed; retrying with backoff", { worker, ...errorFields(err) }),
    onRecovered: (worker, outage) => log("info", "consumer resumed", { worker, ...outage }),
    onLikes: (s) => {
      if (s.applied + s.covered + s.dup === 0) return;
      totals.like_count.applied += s.applied;
      totals.like_count.covered += s.covered;
      totals.like_count.dup += s.dup;
      log("info", "batch", { consumer: "like_count", applied: s.applied, covered: s.covered, dup: s.dup });
    },
    onRelations: (v) => {
      if (v.applied + v.stale + v.dup === 0) return;
      totals.follower_projection.applied += v.applied;
      totals.follower_projection.stale += v.stale;
      totals.follower_projection.dup += v.dup;
      log("info", "batch", { consumer: "follower_projection", applied: v.applied, stale: v.stale, dup: v.dup });
    },
  });
  for (const w of workers) w.start();
  log("info", "started", {
    partitions, of: ledger.partitions, batchSize: opts.batchSize,
    database: describeDatabase(config, database),
  });
  await runUntilSignal(
    async () => {
      await Promise.all(workers.map((w) => w.stop()));
      log("info", "totals", totals);
      await database.close();
    },
    (line, level = "info") => log(level, line),
    { fatal: database.fatal },
  );
  return 0; // not reached: runUntilSignal exits the process
}
