import { countLayerRetentionCap } from "../../cache/retention-cap.ts";
import { connectRedis, type RedisClient } from "../../cache/redis-connection.ts";
import { loadConfig } from "../../config.ts";
import { RETENTION_TABLES, type RetentionCap } from "../../db/retention-boundary.ts";
import { pruneRetained, type RetentionReport } from "../../retention/retention.ts";
import { openDatabase } from "../../runtime/database.ts";

const SKIP_REASON = {
  REBUILD_RUNNING:
    "a rebuild is running (it needs the events and keys above its snapshot); try again when it has finished",
  CAP_UNAVAILABLE: "a transport's position could not be read (is Redis up?); its outbox is kept",
} as const;

export function formatRetentionReport(report: RetentionReport): string {
  return (
    report.kinds
      .map((k) => {
        const head = `${k.kind}: pruned ${k.keyRows} dedup key(s) at or below the watermarks and ${k.outboxRows} outbox event(s)`;
        const parts = k.partitions.map(
          (b) =>
            `  part ${b.part}: floor ${b.floor} -> ${b.boundary} (last ${b.last}` +
            `${RETENTION_TABLES[b.kind].watermark === null ? "" : `, watermark ${b.watermark}`}` +
            `${b.held !== null ? `, held ${b.held}` : ""}${b.capped !== null ? `, capped ${b.capped}` : ""})`,
        );
        return [k.skipped ? `${head}; outbox skipped: ${SKIP_REASON[k.skipped]}` : head, ...parts].join("\n");
      })
      .join("\n") + "\n"
  );
}

/**
 * `social-ledger prune`: pruneRetained once, with the margin of the options or the environment,
 * capped by the Redis count layer when REDIS_URL is set. Exit code 0 also when a kind was skipped
 * (nothing is wrong: a rebuild is running, or Redis is down and its outboxes are kept).
 */
export async function prune(opts: { json?: boolean; keepLast?: number; keepSeconds?: number }): Promise<number> {
  const config = loadConfig();
  const database = await openDatabase(config, { poolSize: 2, applicationName: "social-ledger-prune" });
  let redis: RedisClient | undefined;
  try {
    const caps: RetentionCap[] = [];
    if (config.redisUrl) {
      redis = await connectRedis(config.redisUrl, { allowEviction: true }).catch(() => undefined);
      const connected = redis;
      caps.push(
        connected
          ? countLayerRetentionCap(connected)
          : async (kind) => {
              // Only the likes' and the relations' outboxes are read by the count layer.
              if (kind !== "likes" && kind !== "relations") return undefined;
              throw new Error("Redis is unreachable");
            },
      );
    }
    const report = await pruneRetained(database.pool, {
      keepLast: opts.keepLast ?? config.retention.keepLast,
      keepSeconds: opts.keepSeconds ?? config.retention.keepSeconds,
      caps,
    });
    process.stdout.write(opts.json ? `${JSON.stringify(report)}\n` : formatRetentionReport(report));
    return 0;
  } finally {
    await redis?.close().catch(() => {});
    await database.close();
  }
}
