import path from "node:path";
import { InvalidInputError } from "./errors.ts";

/** The longest lifetime of a token `social-ledger token --ttl` mints, and the default of LEDGER_JWT_MAX_TTL_SECONDS: ten years. */
export const MAX_TOKEN_TTL_S = 10 * 365 * 24 * 3600;

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
  /** LEDGER_JWT_MAX_TTL_SECONDS: a token whose lifetime (exp - iat, or exp - now) is longer is refused. */
  jwtMaxTtlSeconds: number;
  /** LEDGER_METRICS_TOKEN: /metrics requires it as a bearer token (at least 16 characters); unset: /metrics is open. */
  metricsToken: string | undefined;
  /** LEDGER_METRICS_REFRESH_SECONDS: how often the figures /metrics shows from the database are read. */
  metricsRefreshSeconds: number;
  /** Writes per user per minute. */
  writesPerMinute: number;
  /** Reads per user (per IP without a token) per minute (LEDGER_READS_PER_MINUTE). */
  readsPerMinute: number;
  /** Origins allowed to call the API from a browser (LEDGER_CORS_ORIGINS, comma-separated, or *); none by default. */
  corsOrigins: string[];
  /** Restart attempts of a dead embedded PostgreSQL per 10 minutes (LEDGER_EMBEDDED_RESTARTS); 0: exit non-zero at once. */
  embeddedRestarts: number;
  /** The dashboard's header (docs/dashboard.md): alarm thresholds and how often the service audits itself. */
  dashboard: {
    /** LEDGER_ALARM_LAG_SECONDS: a partition's lag stalled or growing for this long. */
    lagAlarmSeconds: number;
    /** LEDGER_ALARM_CONSUMER_FAILURES: a consumer loop failing this many passes in a row. */
    consumerFailureAlarm: number;
    /** LEDGER_AUDIT_EVERY_SECONDS: the full audit's period; 0: only audits asked for through the API. */
    auditEverySeconds: number;
  };
  /** LEDGER_PRUNE_EVERY_SECONDS: how often serve prunes dedup keys below the watermarks; 0: never (social-ledger prune). */
  pruneEverySeconds: number;
  /** LEDGER_RETENTION_KEEP_EVENTS / LEDGER_RETENTION_KEEP_SECONDS: the retention margin (docs/retention.md). */
  retention: { keepLast: number; keepSeconds: number };
  /** REDIS_URL: counts from Redis (docs/cache.md); unset: from PostgreSQL. */
  redisUrl: string | undefined;
  /** LEDGER_REDIS_ALLOW_EVICTION=1: start even when Redis's maxmemory-policy is allkeys-*. */
  redisAllowEviction: boolean;
  /** LEDGER_COUNT_BUCKETS: live-delta buckets per counter (hot keys). */
  countBuckets: number;
  /** LEDGER_RECONCILE_INTERVAL_MS: time between reconciliations of the Redis counters. */
  reconcileIntervalMs: number;
  /** LEDGER_COUNT_LOCAL_TTL_MS: how long a count read from Redis stays in the process's memory; 0: not at all. */
  countLocalTtlMs: number;
  /** Streaming replicas for reads that may lag (docs/read-replicas.md). */
  replicas: {
    /** DATABASE_REPLICA_URLS, comma-separated; empty: every read on the primary. */
    urls: string[];
    /** LEDGER_REPLICA_MAX_LAG_MS: a replica lagging more is skipped by reads without a token. */
    maxLagMs: number;
    /** LEDGER_REPLICA_TOKEN_WAIT_MS: how long a read with a freshness token waits for a replica before reading the primary. */
    tokenWaitMs: number;
    /** LEDGER_REPLICA_CHECK_MS: how often each replica's lag is checked. */
    checkEveryMs: number;
  };
}

/** postgres:// URLs, comma-separated. */
function replicaUrls(raw: string | undefined): string[] {
  const urls = (raw ?? "").split(",").map((u) => u.trim()).filter((u) => u !== "");
  for (const url of urls) {
    if (!/^postgres(ql)?:\/\/\S+$/.test(url)) throw new InvalidInputError("DATABASE_REPLICA_URLS", "expected comma-separated postgres:// URLs");
  }
  return urls;
}

function integer(name: string, raw: string | undefined, fallback: number, min: number, max: number): number {
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new InvalidInputError(name, `must be an integer in ${min}..${max}, got ${JSON.stringify(raw)}`);
  }
  return value;
}

/** An on/off switch: 1/true/yes or 0/false/no (or unset); anything else is refused rather than read as "off". */
function flag(name: string, raw: string | undefined): boolean {
  if (raw === undefined || raw === "") return false;
  const value = raw.trim().toLowerCase();
  if (["1", "true", "yes"].includes(value)) return true;
  if (["0", "false", "no"].includes(value)) return false;
  throw new InvalidInputError(name, `expected 1 or 0, got ${JSON.stringify(raw)}`);
}

/** `*`, or origins such as `https://app.example.com` (scheme, host and port, no path). */
function corsOrigins(raw: string | undefined): string[] {
  const origins = (raw ?? "").split(",").map((o) => o.trim()).filter((o) => o !== "");
  for (const origin of origins) {
    if (origin !== "*" && !/^https?:\/\/[^/\s]+$/.test(origin)) {
      throw new InvalidInputError("LEDGER_CORS_ORIGINS", `expected * or origins such as https://app.example.com, got ${JSON.stringify(origin)}`);
    }
  }
  return origins;
}

/** A bearer token for /metrics: printable, no spaces, long enough not to be guessed. */
function metricsToken(raw: string | undefined): string | undefined {
  if (raw === undefined || raw === "") return undefined;
  if (!/^[\x21-\x7e]{16,}$/.test(raw)) throw new InvalidInputError("LEDGER_METRICS_TOKEN", "must be at least 16 printable characters without spaces");
  return raw;
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  return {
    databaseUrl: env.DATABASE_URL || undefined,
    dataDir: path.resolve(env.LEDGER_DATA_DIR || "./data"),
    port: integer("PORT", env.PORT, 8080, 1, 65535),
    partitions: env.LEDGER_PARTITIONS ? integer("LEDGER_PARTITIONS", env.LEDGER_PARTITIONS, 1, 1, 1024) : undefined,
    jwtSecret: env.LEDGER_JWT_SECRET || undefined,
    jwtMaxTtlSeconds: integer("LEDGER_JWT_MAX_TTL_SECONDS", env.LEDGER_JWT_MAX_TTL_SECONDS, MAX_TOKEN_TTL_S, 1, 100 * MAX_TOKEN_TTL_S),
    metricsToken: metricsToken(env.LEDGER_METRICS_TOKEN),
    metricsRefreshSeconds: integer("LEDGER_METRICS_REFRESH_SECONDS", env.LEDGER_METRICS_REFRESH_SECONDS, 10, 1, 3600),
    writesPerMinute: integer("LEDGER_WRITES_PER_MINUTE", env.LEDGER_WRITES_PER_MINUTE, 600, 1, 1_000_000),
    readsPerMinute: integer("LEDGER_READS_PER_MINUTE", env.LEDGER_READS_PER_MINUTE, 6000, 1, 10_000_000),
    corsOrigins: corsOrigins(env.LEDGER_CORS_ORIGINS),
    embeddedRestarts: integer("LEDGER_EMBEDDED_RESTARTS", env.LEDGER_EMBEDDED_RESTARTS, 5, 0, 1000),
    dashboard: {
      lagAlarmSeconds: integer("LEDGER_ALARM_LAG_SECONDS", env.LEDGER_ALARM_LAG_SECONDS, 60, 1, 86_400),
      consumerFailureAlarm: integer("LEDGER_ALARM_CONSUMER_FAILURES", env.LEDGER_ALARM_CONSUMER_FAILURES, 5, 1, 1_000_000),
      auditEverySeconds: integer("LEDGER_AUDIT_EVERY_SECONDS", env.LEDGER_AUDIT_EVERY_SECONDS, 300, 0, 86_400),
    },
    pruneEverySeconds: integer("LEDGER_PRUNE_EVERY_SECONDS", env.LEDGER_PRUNE_EVERY_SECONDS, 600, 0, 86_400),
    retention: {
      keepLast: integer("LEDGER_RETENTION_KEEP_EVENTS", env.LEDGER_RETENTION_KEEP_EVENTS, 10_000, 0, 1_000_000_000),
      keepSeconds: integer("LEDGER_RETENTION_KEEP_SECONDS", env.LEDGER_RETENTION_KEEP_SECONDS, 86_400, 0, 31_536_000),
    },
    redisUrl: env.REDIS_URL || undefined,
    redisAllowEviction: flag("LEDGER_REDIS_ALLOW_EVICTION", env.LEDGER_REDIS_ALLOW_EVICTION),
    countBuckets: integer("LEDGER_COUNT_BUCKETS", env.LEDGER_COUNT_BUCKETS, 16, 1, 1024),
    reconcileIntervalMs: integer("LEDGER_RECONCILE_INTERVAL_MS", env.LEDGER_RECONCILE_INTERVAL_MS, 60_000, 100, 86_400_000),
    replicas: {
      urls: replicaUrls(env.DATABASE_REPLICA_URLS),
      maxLagMs: integer("LEDGER_REPLICA_MAX_LAG_MS", env.LEDGER_REPLICA_MAX_LAG_MS, 5_000, 0, 86_400_000),
      tokenWaitMs: integer("LEDGER_REPLICA_TOKEN_WAIT_MS", env.LEDGER_REPLICA_TOKEN_WAIT_MS, 100, 0, 60_000),
      checkEveryMs: integer("LEDGER_REPLICA_CHECK_MS", env.LEDGER_REPLICA_CHECK_MS, 1_000, 50, 600_000),
    },
    countLocalTtlMs: integer("LEDGER_COUNT_LOCAL_TTL_MS", env.LEDGER_COUNT_LOCAL_TTL_MS, 250, 0, 60_000),
  };
}
