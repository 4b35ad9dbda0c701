import path from "node:path";
import { InvalidInputError } from "./errors.ts";

/** Runtime configuration, from the environment, with the embedded defaults. */
export interface Config {
  /** When set, use this PostgreSQL and start no embedded one. */
  databaseUrl: string | undefined;
  dataDir: string;
  port: number;
  /** Partition count for a new database (LEDGER_PARTITIONS); an existing database keeps its own. */
  partitions: number | undefined;
  /** HS256 secret (LEDGER_JWT_SECRET); the embedded default keeps a generated one in the data directory. */
  jwtSecret: string | undefined;
  /** Writes per user per minute. */
  writesPerMinute: number;
  /** Restart attempts of a dead embedded PostgreSQL per 10 minutes (LEDGER_EMBEDDED_RESTARTS); 0: exit non-zero at once. */
  embeddedRestarts: number;
  /** REDIS_URL: counts from Redis (docs/cache.md); unset: from PostgreSQL. */
  redisUrl: string | undefined;
  /** LEDGER_REDIS_ALLOW_EVICTION=1: start even when Redis's maxmemory-policy is allkeys-*. */
  redisAllowEviction: boolean;
  /** LEDGER_COUNT_BUCKETS: live-delta buckets per counter (hot keys). */
  countBuckets: number;
  /** LEDGER_RECONCILE_INTERVAL_MS: time between reconciliations of the Redis counters. */
  reconcileIntervalMs: number;
}

function integer(name: string, raw: string | undefined, fallback: number, min: number, max: number): number {
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new InvalidInputError(name, `must be an integer in ${min}..${max}, got ${JSON.stringify(raw)}`);
  }
  return value;
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  return {
    databaseUrl: env.DATABASE_URL || undefined,
    dataDir: path.resolve(env.LEDGER_DATA_DIR || "./data"),
    port: integer("PORT", env.PORT, 8080, 1, 65535),
    partitions: env.LEDGER_PARTITIONS ? integer("LEDGER_PARTITIONS", env.LEDGER_PARTITIONS, 1, 1, 1024) : undefined,
    jwtSecret: env.LEDGER_JWT_SECRET || undefined,
    writesPerMinute: integer("LEDGER_WRITES_PER_MINUTE", env.LEDGER_WRITES_PER_MINUTE, 600, 1, 1_000_000),
    embeddedRestarts: integer("LEDGER_EMBEDDED_RESTARTS", env.LEDGER_EMBEDDED_RESTARTS, 5, 0, 1000),
    redisUrl: env.REDIS_URL || undefined,
    redisAllowEviction: env.LEDGER_REDIS_ALLOW_EVICTION === "1",
    countBuckets: integer("LEDGER_COUNT_BUCKETS", env.LEDGER_COUNT_BUCKETS, 16, 1, 1024),
    reconcileIntervalMs: integer("LEDGER_RECONCILE_INTERVAL_MS", env.LEDGER_RECONCILE_INTERVAL_MS, 60_000, 100, 86_400_000),
  };
}
