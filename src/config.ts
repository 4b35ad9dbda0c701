import path from "node:path";
import { InvalidInputError } from "./errors.ts";
import type { PacingOptions } from "./workers/pacer.ts";

/** The longest lifetime of a token `social-ledger token --ttl` mints, and the default of LEDGER_JWT_MAX_TTL_MS: ten years. */
export const MAX_TOKEN_TTL_S = 10 * 365 * 24 * 3600;

/** One environment variable the service reads: its default as the help and README show it, and what it does. */
export interface EnvironmentVariable {
  name: string;
  /** The value used when it is unset, as written in the help and the README ("unset": none). */
  shown: string;
  meaning: string;
  /**
   * A tuning knob: its default fits a deployment on any machine and changes only for a measured
   * reason. The help and the README list these apart, under "Advanced settings".
   */
  advanced?: true;
}

/**
 * Variables renamed so that every duration is in milliseconds (a name ends in _MS) and every rate is
 * per minute. The old name is still read, its value scaled to the new unit, with a warning on stderr;
 * the new name wins when both are set.
 */
export const RENAMED_VARIABLES: readonly { old: string; name: string; scale: number }[] = [
  "JWT_MAX_TTL",
  "JWKS_COOLDOWN",
  "JWKS_MAX_AGE",
  "METRICS_REFRESH",
  "PRUNE_EVERY",
  "RETENTION_KEEP",
  "ALARM_LAG",
  "AUDIT_EVERY",
  "NATS_DUPLICATE_WINDOW",
  "NATS_MAX_AGE",
  "WEBHOOK_MAX_BACKOFF",
  "WEBHOOK_ROTATION_GRACE",
].map((stem) => ({ old: `LEDGER_${stem}_SECONDS`, name: `LEDGER_${stem}_MS`, scale: 1000 }));

/**
 * The environment with each renamed variable under its current name (scaled), and one warning per
 * old name found. A value under an old name that is not a number is carried over as written, so the
 * current name's reader refuses it with its usual message.
 */
export function withRenamedVariables(env: NodeJS.ProcessEnv): { env: NodeJS.ProcessEnv; warnings: string[] } {
  const out = { ...env };
  const warnings: string[] = [];
  for (const { old, name, scale } of RENAMED_VARIABLES) {
    const raw = env[old];
    if (raw === undefined || raw === "") continue;
    delete out[old];
    if (env[name] !== undefined && env[name] !== "") {
      warnings.push(`${old} is ignored: ${name} is set (${old} was renamed ${name})`);
      continue;
    }
    const value = Number(raw);
    out[name] = raw.trim() !== "" && Number.isFinite(value) ? String(value * scale) : raw;
    warnings.push(`${old} was renamed ${name}: read as ${name}=${out[name]}; set ${name} instead`);
  }
  return { env: out, warnings };
}

/**
 * Every environment variable any command reads, with its real default: the one table that
 * `--help` prints and that a test compares with the README's tables and with the source's reads.
 */
export const ENVIRONMENT: readonly EnvironmentVariable[] = [
  { name: "DATABASE_URL", shown: "unset", meaning: "use this PostgreSQL instead of the embedded one" },
  {
    name: "LEDGER_PG_CONNECT_TIMEOUT_MS",
    shown: "5000",
    meaning: "longest wait for a pooled PostgreSQL connection, opening one included (then 503)",
    advanced: true,
  },
  {
    name: "LEDGER_PG_QUERY_TIMEOUT_MS",
    shown: "10000",
    meaning: "a statement unanswered this long fails (503) and its connection is destroyed; 0: no deadline",
    advanced: true,
  },
  {
    name: "LEDGER_PG_KEEPALIVE_MS",
    shown: "10000",
    meaning: "TCP keepalive on PostgreSQL connections: idle time before the first probe; 0: off",
    advanced: true,
  },
  {
    name: "LEDGER_PG_IDLE_MS",
    shown: "10000",
    meaning: "an idle pooled PostgreSQL connection is closed after this long",
    advanced: true,
  },
  {
    name: "PGOPTIONS",
    shown: "unset",
    meaning:
      "options sent to PostgreSQL at connection start (libpq's variable; `options` in the connection string take its place); every pool adds `-c client_connection_check_interval=1000`, so the server cancels a statement whose connection is gone",
    advanced: true,
  },
  {
    name: "LEDGER_DATA_DIR",
    shown: "./data",
    meaning: "embedded cluster, its port file and log, the JWT secret and the cluster's passwords",
  },
  { name: "PORT", shown: "8080", meaning: "HTTP port of serve (serve --port overrides it)" },
  {
    name: "HOST",
    shown: "127.0.0.1",
    meaning: "address serve listens on (0.0.0.0: every interface; serve --host overrides it)",
  },
  {
    name: "LOG_LEVEL",
    shown: "info",
    meaning: "trace, debug, info, warn, error, fatal or silent (anything else: exit 2)",
  },
  { name: "DEBUG", shown: "unset", meaning: "set: a failing command also prints its stack trace" },
  {
    name: "LEDGER_PARTITIONS",
    shown: "16",
    meaning: "partition count of a new database; an existing one keeps its own",
  },
  {
    name: "LEDGER_JWT_SECRET",
    shown: "generated",
    meaning: "HS256 secret (at least 32 bytes); default: generated once in the data directory",
  },
  {
    name: "LEDGER_JWT_MAX_TTL_MS",
    shown: String(MAX_TOKEN_TTL_S * 1000),
    meaning: "tokens valid for longer are refused (the longest token --ttl)",
  },
  {
    name: "LEDGER_JWKS_URL",
    shown: "unset",
    meaning: "take tokens from this identity provider's JWKS (RS256, ES256, EdDSA) instead of HS256",
  },
  { name: "LEDGER_JWT_ISSUER", shown: "unset", meaning: "with LEDGER_JWKS_URL (required): the provider's iss" },
  {
    name: "LEDGER_JWT_AUDIENCE",
    shown: "unset",
    meaning: "with LEDGER_JWKS_URL (required): the aud a token must carry (comma-separated: any of them)",
  },
  { name: "LEDGER_JWT_USER_CLAIM", shown: "sub", meaning: "with LEDGER_JWKS_URL: the claim that names the user" },
  {
    name: "LEDGER_JWT_ADMIN_CLAIM",
    shown: "role",
    meaning: "with LEDGER_JWKS_URL: the claim that makes an admin (a value or an array)",
  },
  {
    name: "LEDGER_JWT_ADMIN_VALUE",
    shown: "admin",
    meaning: "with LEDGER_JWKS_URL: the admin claim's value (or array element) of an admin",
  },
  {
    name: "LEDGER_JWT_TYPES",
    shown: "at+jwt",
    meaning:
      "with LEDGER_JWKS_URL: the header typ values a token may carry (comma-separated; JWT also takes tokens without typ, and refuses those with ID-token claims)",
  },
  {
    name: "LEDGER_JWKS_COOLDOWN_MS",
    shown: "30000",
    meaning: "an unknown kid (or a failed fetch) refetches the JWKS at most this often",
    advanced: true,
  },
  {
    name: "LEDGER_JWKS_MAX_AGE_MS",
    shown: "600000",
    meaning: "fetched keys are refreshed after this long (kept while the provider is down)",
    advanced: true,
  },
  {
    name: "LEDGER_METRICS_TOKEN",
    shown: "unset",
    meaning: "/metrics requires this bearer token (unset: open; or serve --metrics-port)",
  },
  {
    name: "LEDGER_METRICS_REFRESH_MS",
    shown: "10000",
    meaning: "how often the figures /metrics shows from the database are read",
    advanced: true,
  },
  { name: "LEDGER_WRITES_PER_MINUTE", shown: "600", meaning: "per-user write rate limit" },
  {
    name: "LEDGER_READS_PER_MINUTE",
    shown: "6000",
    meaning: "read rate limit per user (per client IP without a token)",
  },
  {
    name: "LEDGER_DOCS_PER_MINUTE",
    shown: "120",
    meaning: "requests for /openapi.json, /docs and /dashboard (and their files) per client IP",
  },
  {
    name: "LEDGER_AUTH_FAILURES_PER_MINUTE",
    shown: "300",
    meaning:
      "refused tokens (401) per client IP; over it: 429, and new tokens from it are not checked until the minute ends",
  },
  {
    name: "LEDGER_CORS_ORIGINS",
    shown: "unset",
    meaning: "origins a browser app may call the API from (comma-separated, or *)",
  },
  {
    name: "LEDGER_PRUNE_EVERY_MS",
    shown: "600000",
    meaning: "serve prunes dedup keys and outbox events this often; 0: never",
    advanced: true,
  },
  {
    name: "LEDGER_RETENTION_KEEP_EVENTS",
    shown: "10000",
    meaning: "retention margin: the newest events of each partition a prune keeps",
    advanced: true,
  },
  {
    name: "LEDGER_RETENTION_KEEP_MS",
    shown: "86400000",
    meaning: "retention margin: outbox events younger than this are kept",
    advanced: true,
  },
  {
    name: "LEDGER_WRITE_BATCH_MAX",
    shown: "64",
    meaning:
      "likes and unlikes, and follows, unfollows and decisions, committed together at most (group commit); 1: one transaction each",
    advanced: true,
  },
  {
    name: "LEDGER_ERASURE_BATCH_SIZE",
    shown: "500",
    meaning: "most facts an account erasure turns off per batch (one short transaction)",
    advanced: true,
  },
  {
    name: "LEDGER_FEED_MAX_ITEMS",
    shown: "800",
    meaning: "most posts a reader's home timeline inbox keeps; older ones are trimmed away (docs/feed.md)",
    advanced: true,
  },
  {
    name: "LEDGER_FEED_HOT_FOLLOWERS",
    shown: "10000",
    meaning:
      "an author with at least this many followers is not fanned out to inboxes but merged into home timelines at read time",
    advanced: true,
  },
  {
    name: "LEDGER_FEED_ABSENT_MS",
    shown: "604800000",
    meaning:
      "a reader who has not read the home timeline for this long (7 days) gets nothing from fan-out; the next read installs the inbox (docs/feed.md)",
    advanced: true,
  },
  {
    name: "LEDGER_FEED_RETURN_REBUILD_MS",
    shown: "2000",
    meaning:
      "how long a returning absent reader's read may spend installing the inbox; past it the page answers 206 with complete: false and Retry-After",
    advanced: true,
  },
  {
    name: "LEDGER_BACKGROUND_BATCH_MS",
    shown: "10",
    meaning:
      "background jobs (erasure, rebuild, prune, reconciliation) size each batch to take about this long; 0: fixed batches",
    advanced: true,
  },
  {
    name: "LEDGER_BACKGROUND_DUTY",
    shown: "0.5",
    meaning: "share of the time a background job may be busy: it rests after each batch (0.05 to 1; 1: back to back)",
    advanced: true,
  },
  {
    name: "LEDGER_EMBEDDED_RESTARTS",
    shown: "5",
    meaning: "restarts of a dead embedded PostgreSQL per 10 minutes; 0: exit 1 at once",
    advanced: true,
  },
  {
    name: "LEDGER_ALARM_LAG_MS",
    shown: "60000",
    meaning: "dashboard: a lag standing still or growing this long turns the header red",
    advanced: true,
  },
  {
    name: "LEDGER_ALARM_CONSUMER_FAILURES",
    shown: "5",
    meaning: "dashboard: a consumer failing this many passes in a row turns the header red",
    advanced: true,
  },
  {
    name: "LEDGER_DASHBOARD_HISTORY_MS",
    shown: "3600000",
    meaning:
      "how much history the dashboard's plots keep in the service's memory (a sample every 5 s, so its heap grows through the first such span and then stays flat)",
    advanced: true,
  },
  {
    name: "LEDGER_AUDIT_EVERY_MS",
    shown: "300000",
    meaning:
      "the service runs the periodic audit (what changed since its last run, plus a rotating sample; docs/counters.md) this often for the dashboard; 0: only when asked",
    advanced: true,
  },
  {
    name: "REDIS_URL",
    shown: "unset",
    meaning: "serve like, follower and comment counts from this Redis (redis+cluster:// for a cluster)",
  },
  {
    name: "LEDGER_REDIS_ALLOW_EVICTION",
    shown: "unset",
    meaning: "1: start even when Redis's maxmemory-policy is allkeys-*",
  },
  {
    name: "LEDGER_REDIS_COMMAND_TIMEOUT_MS",
    shown: "200",
    meaning: "a Redis command unanswered this long fails (reads fall back to PostgreSQL)",
    advanced: true,
  },
  {
    name: "LEDGER_REDIS_KEEPALIVE_MS",
    shown: "10000",
    meaning: "TCP keepalive on Redis connections: idle time before the first probe; 0: off",
    advanced: true,
  },
  {
    name: "LEDGER_COUNT_BUCKETS",
    shown: "16",
    meaning: "live-delta buckets per Redis counter (hot keys)",
    advanced: true,
  },
  {
    name: "LEDGER_RECONCILE_INTERVAL_MS",
    shown: "60000",
    meaning: "time between reconciliations of the Redis counters",
    advanced: true,
  },
  {
    name: "LEDGER_COUNT_LOCAL_TTL_MS",
    shown: "250",
    meaning: "how long a count read from Redis stays in the process's memory; 0: not at all",
    advanced: true,
  },
  { name: "NATS_URL", shown: "unset", meaning: "NATS servers (comma-separated) of relay / worker --transport nats" },
  { name: "LEDGER_NATS_STREAM", shown: "LEDGER", meaning: "JetStream stream name (dead letters in <name>_DLQ)" },
  {
    name: "LEDGER_NATS_PING_INTERVAL_MS",
    shown: "10000",
    meaning: "the NATS client pings the server this often; LEDGER_NATS_MAX_PINGS_OUT unanswered: reconnect",
    advanced: true,
  },
  {
    name: "LEDGER_NATS_MAX_PINGS_OUT",
    shown: "2",
    meaning: "unanswered pings before the NATS connection is dropped",
    advanced: true,
  },
  {
    name: "LEDGER_NATS_ACK_WAIT_MS",
    shown: "30000",
    meaning: "redelivery after this long without an ack",
    advanced: true,
  },
  {
    name: "LEDGER_NATS_MAX_DELIVER",
    shown: "10",
    meaning: "deliveries before a message goes to the dead-letter stream",
    advanced: true,
  },
  {
    name: "LEDGER_NATS_DUPLICATE_WINDOW_MS",
    shown: "120000",
    meaning: "the stream's duplicate window",
    advanced: true,
  },
  { name: "LEDGER_NATS_MAX_AGE_MS", shown: "604800000", meaning: "how long the stream keeps messages", advanced: true },
  {
    name: "LEDGER_GAP_CHECK_MS",
    shown: "5000",
    meaning: "a watermark standing still this long is filled from the outbox",
    advanced: true,
  },
  {
    name: "DATABASE_REPLICA_URLS",
    shown: "unset",
    meaning: "comma-separated postgres:// URLs of streaming replicas for reads that may lag",
  },
  {
    name: "LEDGER_REPLICA_MAX_LAG_MS",
    shown: "5000",
    meaning: "a replica lagging more is skipped by reads without a token",
    advanced: true,
  },
  {
    name: "LEDGER_REPLICA_TOKEN_WAIT_MS",
    shown: "100",
    meaning: "how long a read with a token waits for a replica before reading the primary",
    advanced: true,
  },
  {
    name: "LEDGER_REPLICA_CHECK_MS",
    shown: "1000",
    meaning: "how often each replica's lag is checked",
    advanced: true,
  },
  {
    name: "LEDGER_WEBHOOK_ALLOW_PRIVATE",
    shown: "unset",
    meaning: "1: webhooks may go to loopback and private addresses (development, tests)",
  },
  {
    name: "LEDGER_WEBHOOK_TIMEOUT_MS",
    shown: "10000",
    meaning: "a webhook attempt without a complete answer this long fails (connect: at most 5000)",
    advanced: true,
  },
  {
    name: "LEDGER_WEBHOOK_RETRY_BASE_MS",
    shown: "1000",
    meaning: "first webhook retry after about this long, doubling per failed attempt (with jitter)",
    advanced: true,
  },
  {
    name: "LEDGER_WEBHOOK_MAX_BACKOFF_MS",
    shown: "3600000",
    meaning: "longest wait between two attempts of a webhook",
    advanced: true,
  },
  {
    name: "LEDGER_WEBHOOK_FAILING_AFTER",
    shown: "5",
    meaning: "failed attempts of one event in a row that mark its endpoint failing",
    advanced: true,
  },
  {
    name: "LEDGER_WEBHOOK_ROTATION_GRACE_MS",
    shown: "86400000",
    meaning: "how long a rotated-out webhook secret still signs deliveries",
    advanced: true,
  },
  {
    name: "LEDGER_WEBHOOK_LOOPS",
    shown: "2",
    meaning: "webhook delivery loops of serve and webhook-worker; 0: serve delivers none",
    advanced: true,
  },
];

/** The default of a numeric variable, from ENVIRONMENT (so the loaders cannot disagree with the help). */
export function numericDefault(name: string): number {
  const value = Number(ENVIRONMENT.find((v) => v.name === name)?.shown);
  if (!Number.isFinite(value)) throw new Error(`ENVIRONMENT has no numeric default for ${name}`);
  return value;
}

/** LOG_LEVEL: pino's levels that the docs name; anything else is refused with a clear message. */
export const LOG_LEVELS = ["trace", "debug", "info", "warn", "error", "fatal", "silent"] as const;

export function logLevel(env: NodeJS.ProcessEnv = process.env): string {
  const raw = env.LOG_LEVEL;
  if (raw === undefined || raw === "") return "info";
  if (!(LOG_LEVELS as readonly string[]).includes(raw))
    throw new InvalidInputError("LOG_LEVEL", `expected one of ${LOG_LEVELS.join(", ")}, got ${JSON.stringify(raw)}`);
  return raw;
}

/** Runtime configuration, from the environment, with the embedded defaults. */
export interface Config {
  /** When set, use this PostgreSQL and start no embedded one. */
  databaseUrl: string | undefined;
  /** LOG_LEVEL, checked here so a misspelt level is refused before a command starts. */
  logLevel: string;
  dataDir: string;
  port: number;
  /** Partition count for a new database (LEDGER_PARTITIONS); an existing database keeps its own. */
  partitions: number | undefined;
  /** HS256 secret (LEDGER_JWT_SECRET); the embedded default keeps a generated one in the data directory. */
  jwtSecret: string | undefined;
  /** LEDGER_JWT_MAX_TTL_MS: a token whose lifetime (exp - iat, or exp - now) is longer is refused. */
  jwtMaxTtlSeconds: number;
  /** LEDGER_JWKS_URL and its companions: tokens of the product's identity provider; unset: HS256 with jwtSecret. */
  jwks: JwksConfig | undefined;
  /** LEDGER_METRICS_TOKEN: /metrics requires it as a bearer token (at least 16 characters); unset: /metrics is open. */
  metricsToken: string | undefined;
  /** LEDGER_METRICS_REFRESH_MS: how often the figures /metrics shows from the database are read. */
  metricsRefreshSeconds: number;
  /** Writes per user per minute. */
  writesPerMinute: number;
  /** Reads per user (per IP without a token) per minute (LEDGER_READS_PER_MINUTE). */
  readsPerMinute: number;
  /** LEDGER_DOCS_PER_MINUTE: requests for the documents (OpenAPI, docs UI, dashboard page and files) per client IP per minute. */
  documentsPerMinute: number;
  /** LEDGER_AUTH_FAILURES_PER_MINUTE: refused tokens (401) per client IP per minute. */
  authFailuresPerMinute: number;
  /** Origins allowed to call the API from a browser (LEDGER_CORS_ORIGINS, comma-separated, or *); none by default. */
  corsOrigins: string[];
  /** Restart attempts of a dead embedded PostgreSQL per 10 minutes (LEDGER_EMBEDDED_RESTARTS); 0: exit non-zero at once. */
  embeddedRestarts: number;
  /** The dashboard's header (docs/dashboard.md): alarm thresholds and how often the service audits itself. */
  dashboard: {
    /** LEDGER_ALARM_LAG_MS: a partition's lag stalled or growing for this long. */
    lagAlarmSeconds: number;
    /** LEDGER_ALARM_CONSUMER_FAILURES: a consumer loop failing this many passes in a row. */
    consumerFailureAlarm: number;
    /** LEDGER_AUDIT_EVERY_MS: the periodic (incremental) audit's period; 0: only audits asked for through the API. */
    auditEverySeconds: number;
    /** LEDGER_DASHBOARD_HISTORY_MS: the span of samples the dashboard keeps in memory. */
    historySeconds: number;
  };
  /** LEDGER_PRUNE_EVERY_MS: how often serve prunes dedup keys below the watermarks; 0: never (social-ledger prune). */
  pruneEverySeconds: number;
  /** LEDGER_WRITE_BATCH_MAX: most like (and follow/unfollow/decide) writes per group commit (docs/write-path.md, "One write path"); 1: each write a batch of one. */
  writeBatchMax: number;
  /** LEDGER_ERASURE_BATCH_SIZE: the most facts per batch of an account erasure (docs/erasure.md). */
  erasureBatchSize: number;
  /** LEDGER_FEED_MAX_ITEMS: the most posts a home timeline inbox keeps (docs/feed.md). */
  feedMaxItems: number;
  /** LEDGER_FEED_HOT_FOLLOWERS: the follower count from which an author's posts are merged at read time, not fanned out (docs/feed.md). */
  feedHotFollowers: number;
  /** LEDGER_FEED_ABSENT_MS: fan-out skips a reader who has not read the home timeline for this long (docs/feed.md). */
  feedAbsentMs: number;
  /** LEDGER_FEED_RETURN_REBUILD_MS: the bound of a returning reader's inbox install (docs/feed.md). */
  feedReturnRebuildMs: number;
  /** LEDGER_BACKGROUND_BATCH_MS / LEDGER_BACKGROUND_DUTY: the background jobs' pacing (src/workers/pacer.ts, docs/erasure.md). */
  pacing: PacingOptions;
  /** LEDGER_RETENTION_KEEP_EVENTS / LEDGER_RETENTION_KEEP_MS: the retention margin (docs/retention.md). */
  retention: { keepLast: number; keepSeconds: number };
  /** Bounded waits on the PostgreSQL connections (docs/service.md, "Faults"). */
  postgres: PostgresTimeouts;
  /** LEDGER_REDIS_COMMAND_TIMEOUT_MS: a Redis command's deadline. */
  redisCommandTimeoutMs: number;
  /** LEDGER_REDIS_KEEPALIVE_MS: TCP keepalive's idle time on Redis connections; 0: off. */
  redisKeepAliveMs: number;
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
  /** Webhook delivery (docs/webhooks.md). */
  webhooks: WebhookConfig;
}

export interface WebhookConfig {
  /** LEDGER_WEBHOOK_ALLOW_PRIVATE=1: loopback, private and link-local targets allowed. */
  allowPrivate: boolean;
  /** LEDGER_WEBHOOK_TIMEOUT_MS: an attempt's bound from its start to the end of the answer. */
  timeoutMs: number;
  /** LEDGER_WEBHOOK_RETRY_BASE_MS: the first retry's delay (doubling, with jitter). */
  retryBaseMs: number;
  /** LEDGER_WEBHOOK_MAX_BACKOFF_MS: the retry delay's ceiling. */
  maxBackoffSeconds: number;
  /** LEDGER_WEBHOOK_FAILING_AFTER: failed attempts in a row that mark an endpoint failing. */
  failingAfter: number;
  /** LEDGER_WEBHOOK_ROTATION_GRACE_MS: how long a rotated-out secret still signs. */
  rotationGraceSeconds: number;
  /** LEDGER_WEBHOOK_LOOPS: delivery loops per process (0: serve delivers none). */
  loops: number;
}

export function loadWebhookConfig(env: NodeJS.ProcessEnv = process.env): WebhookConfig {
  const n = (name: string, raw: string | undefined, min: number, max: number) =>
    integer(name, raw, numericDefault(name), min, max);
  return {
    allowPrivate: flag("LEDGER_WEBHOOK_ALLOW_PRIVATE", env.LEDGER_WEBHOOK_ALLOW_PRIVATE),
    timeoutMs: n("LEDGER_WEBHOOK_TIMEOUT_MS", env.LEDGER_WEBHOOK_TIMEOUT_MS, 100, 600_000),
    retryBaseMs: n("LEDGER_WEBHOOK_RETRY_BASE_MS", env.LEDGER_WEBHOOK_RETRY_BASE_MS, 1, 3_600_000),
    maxBackoffSeconds: wholeSeconds("LEDGER_WEBHOOK_MAX_BACKOFF_MS", env.LEDGER_WEBHOOK_MAX_BACKOFF_MS, 1, 604_800),
    failingAfter: n("LEDGER_WEBHOOK_FAILING_AFTER", env.LEDGER_WEBHOOK_FAILING_AFTER, 1, 1_000_000),
    rotationGraceSeconds: wholeSeconds(
      "LEDGER_WEBHOOK_ROTATION_GRACE_MS",
      env.LEDGER_WEBHOOK_ROTATION_GRACE_MS,
      0,
      31_536_000,
    ),
    loops: n("LEDGER_WEBHOOK_LOOPS", env.LEDGER_WEBHOOK_LOOPS, 0, 64),
  };
}

/** An identity provider (OIDC): its keys, the iss and aud its tokens must carry, and which claims name the user and make an admin. */
export interface JwksConfig {
  url: string;
  issuer: string;
  /** A token's aud must hold one of these. */
  audience: string[];
  userClaim: string;
  adminClaim: string;
  adminValue: string;
  /** A kid the cached set lacks, or a failed fetch, fetches again at most this often. */
  cooldownMs: number;
  /** Keys older than this are fetched again before use (the old ones stay usable while the provider does not answer). */
  cacheMaxAgeMs: number;
  /**
   * The header `typ` values a token may carry (LEDGER_JWT_TYPES), lower case without "application/";
   * "jwt" also stands for a token without typ. Absent: ["at+jwt"] (RFC 9068 access tokens only).
   */
  tokenTypes?: string[];
}

/** The default of LEDGER_JWT_TYPES: RFC 9068's type of JWT access tokens, which no ID token carries. */
export const DEFAULT_TOKEN_TYPES: readonly string[] = ["at+jwt"];

/** A `typ` as compared (RFC 7515, 4.1.9: case-insensitive, and "application/" may be left out). */
export function tokenType(typ: string): string {
  const lower = typ.toLowerCase();
  return lower.startsWith("application/") ? lower.slice("application/".length) : lower;
}

function tokenTypes(raw: string | undefined): string[] {
  if (raw === undefined || raw.trim() === "") return [...DEFAULT_TOKEN_TYPES];
  const types = raw
    .split(",")
    .map((t) => t.trim())
    .filter((t) => t !== "");
  const bad = types.find((t) => !/^[A-Za-z0-9!#$&^_.+-]+(\/[A-Za-z0-9!#$&^_.+-]+)?$/.test(t));
  if (bad !== undefined || types.length === 0) {
    throw new InvalidInputError(
      "LEDGER_JWT_TYPES",
      `expected comma-separated media types such as at+jwt,JWT, got ${JSON.stringify(raw)}`,
    );
  }
  return [...new Set(types.map(tokenType))];
}

const JWKS_ONLY = [
  "LEDGER_JWT_ISSUER",
  "LEDGER_JWT_AUDIENCE",
  "LEDGER_JWT_USER_CLAIM",
  "LEDGER_JWT_ADMIN_CLAIM",
  "LEDGER_JWT_ADMIN_VALUE",
  "LEDGER_JWT_TYPES",
  "LEDGER_JWKS_COOLDOWN_MS",
  "LEDGER_JWKS_MAX_AGE_MS",
] as const;

/** Loopback hosts, the only ones whose JWKS may come over plain http (a key set an attacker can rewrite in transit lets them mint any token). */
const LOOPBACK = new Set(["127.0.0.1", "localhost", "[::1]"]);

function jwksUrl(raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new InvalidInputError("LEDGER_JWKS_URL", `expected an https:// URL, got ${JSON.stringify(raw)}`);
  }
  if (url.protocol !== "https:" && !(url.protocol === "http:" && LOOPBACK.has(url.hostname))) {
    throw new InvalidInputError(
      "LEDGER_JWKS_URL",
      `must be https:// (http:// only on loopback), got ${JSON.stringify(raw)}`,
    );
  }
  return url.href;
}

/** A claim name: what the provider puts in the token (Auth0's `https://example.com/roles` included), no blanks. */
function claimName(name: string, raw: string | undefined, fallback: string): string {
  if (raw === undefined || raw === "") return fallback;
  if (!/^\S{1,256}$/.test(raw))
    throw new InvalidInputError(name, `expected a claim name without spaces, got ${JSON.stringify(raw)}`);
  return raw;
}

function required(name: string, raw: string | undefined): string {
  const value = raw?.trim() ?? "";
  if (value === "") throw new InvalidInputError(name, "is required when LEDGER_JWKS_URL is set");
  return value;
}

/**
 * The identity provider's settings. Each companion variable without LEDGER_JWKS_URL, and
 * LEDGER_JWT_SECRET with it, is refused: either setting would be silently ignored otherwise
 * (HS256 tokens are refused under a JWKS, and the embedded HS256 tokens are always `sub`/`role`).
 */
function jwksConfig(env: NodeJS.ProcessEnv): JwksConfig | undefined {
  if (env.LEDGER_JWKS_URL === undefined || env.LEDGER_JWKS_URL === "") {
    const stray = JWKS_ONLY.find((name) => env[name] !== undefined && env[name] !== "");
    if (stray)
      throw new InvalidInputError(
        stray,
        "applies only with LEDGER_JWKS_URL (tokens of an identity provider); unset it or set LEDGER_JWKS_URL",
      );
    return undefined;
  }
  if (env.LEDGER_JWT_SECRET)
    throw new InvalidInputError(
      "LEDGER_JWT_SECRET",
      "HS256 tokens are refused when LEDGER_JWKS_URL is set; unset one of the two",
    );
  const audience = (env.LEDGER_JWT_AUDIENCE ?? "")
    .split(",")
    .map((a) => a.trim())
    .filter((a) => a !== "");
  if (audience.length === 0)
    throw new InvalidInputError(
      "LEDGER_JWT_AUDIENCE",
      "is required when LEDGER_JWKS_URL is set (comma-separated: any of them)",
    );
  return {
    url: jwksUrl(env.LEDGER_JWKS_URL),
    issuer: required("LEDGER_JWT_ISSUER", env.LEDGER_JWT_ISSUER),
    audience,
    userClaim: claimName("LEDGER_JWT_USER_CLAIM", env.LEDGER_JWT_USER_CLAIM, "sub"),
    adminClaim: claimName("LEDGER_JWT_ADMIN_CLAIM", env.LEDGER_JWT_ADMIN_CLAIM, "role"),
    // Group names may hold spaces ("Ledger Admins"): taken as written.
    adminValue: env.LEDGER_JWT_ADMIN_VALUE || "admin",
    cooldownMs: integer(
      "LEDGER_JWKS_COOLDOWN_MS",
      env.LEDGER_JWKS_COOLDOWN_MS,
      numericDefault("LEDGER_JWKS_COOLDOWN_MS"),
      0,
      86_400 * 1000,
    ),
    cacheMaxAgeMs: integer(
      "LEDGER_JWKS_MAX_AGE_MS",
      env.LEDGER_JWKS_MAX_AGE_MS,
      numericDefault("LEDGER_JWKS_MAX_AGE_MS"),
      0,
      604_800 * 1000,
    ),
    tokenTypes: tokenTypes(env.LEDGER_JWT_TYPES),
  };
}

/** postgres:// URLs, comma-separated. */
function replicaUrls(raw: string | undefined): string[] {
  const urls = (raw ?? "")
    .split(",")
    .map((u) => u.trim())
    .filter((u) => u !== "");
  for (const url of urls) {
    if (!/^postgres(ql)?:\/\/\S+$/.test(url))
      throw new InvalidInputError("DATABASE_REPLICA_URLS", "expected comma-separated postgres:// URLs");
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

/**
 * A duration given in milliseconds that the service keeps in whole seconds (a token's lifetime,
 * JetStream's windows, timers): an integer number of ms in min..max seconds and a multiple of 1000,
 * returned in seconds. A value with a fraction of a second is refused, not rounded.
 */
export function wholeSeconds(name: string, raw: string | undefined, minSeconds: number, maxSeconds: number): number {
  const ms = integer(name, raw, numericDefault(name), minSeconds * 1000, maxSeconds * 1000);
  if (ms % 1000 !== 0)
    throw new InvalidInputError(name, `must be whole seconds (a multiple of 1000 ms), got ${JSON.stringify(raw)}`);
  return ms / 1000;
}

function fraction(name: string, raw: string | undefined, fallback: number, min: number, max: number): number {
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (raw.trim() === "" || !Number.isFinite(value) || value < min || value > max) {
    throw new InvalidInputError(name, `must be a number in ${min}..${max}, got ${JSON.stringify(raw)}`);
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
  const origins = (raw ?? "")
    .split(",")
    .map((o) => o.trim())
    .filter((o) => o !== "");
  for (const origin of origins) {
    if (origin !== "*" && !/^https?:\/\/[^/\s]+$/.test(origin)) {
      throw new InvalidInputError(
        "LEDGER_CORS_ORIGINS",
        `expected * or origins such as https://app.example.com, got ${JSON.stringify(origin)}`,
      );
    }
  }
  return origins;
}

/** A bearer token for /metrics: printable, no spaces, long enough not to be guessed. */
function metricsToken(raw: string | undefined): string | undefined {
  if (raw === undefined || raw === "") return undefined;
  if (!/^[\x21-\x7e]{16,}$/.test(raw))
    throw new InvalidInputError("LEDGER_METRICS_TOKEN", "must be at least 16 printable characters without spaces");
  return raw;
}

/** How long the service waits on PostgreSQL: every checkout and every statement has a deadline. */
export interface PostgresTimeouts {
  /** LEDGER_PG_CONNECT_TIMEOUT_MS: a checkout (opening a connection included); 0: none. */
  connectTimeoutMs: number;
  /** LEDGER_PG_QUERY_TIMEOUT_MS: a statement's deadline, after which its connection is destroyed; 0: none. */
  queryTimeoutMs: number;
  /** LEDGER_PG_KEEPALIVE_MS: TCP keepalive's idle time before the first probe; 0: off. */
  keepAliveMs: number;
  /** LEDGER_PG_IDLE_MS: an idle pooled connection is closed after this long. */
  idleMs: number;
}

export function postgresTimeouts(env: NodeJS.ProcessEnv = process.env): PostgresTimeouts {
  const ms = (name: string, min: number) => integer(name, env[name], numericDefault(name), min, 3_600_000);
  return {
    connectTimeoutMs: ms("LEDGER_PG_CONNECT_TIMEOUT_MS", 0),
    queryTimeoutMs: ms("LEDGER_PG_QUERY_TIMEOUT_MS", 0),
    keepAliveMs: ms("LEDGER_PG_KEEPALIVE_MS", 0),
    idleMs: ms("LEDGER_PG_IDLE_MS", 100),
  };
}

/**
 * Settings that are valid each on its own but work against each other, one sentence each; serve
 * logs them at start. A retention margin shorter than the audit period lets a prune pass the
 * periodic audit's cursors between two runs, and then every run is the audit's full form
 * (docs/retention.md, "The periodic audit"): an hour's soak spent two thirds of its time there.
 */
export function configWarnings(config: Config): string[] {
  const warnings: string[] = [];
  const { auditEverySeconds } = config.dashboard;
  const { keepSeconds, keepLast } = config.retention;
  if (auditEverySeconds > 0 && config.pruneEverySeconds > 0 && keepSeconds < auditEverySeconds)
    warnings.push(
      `LEDGER_RETENTION_KEEP_MS (${keepSeconds * 1000}) is shorter than LEDGER_AUDIT_EVERY_MS (${auditEverySeconds * 1000}): ` +
        `once a partition writes more than LEDGER_RETENTION_KEEP_EVENTS (${keepLast}) events between two periodic audits, ` +
        `the prune passes the audit's cursors and every periodic audit runs its full form; keep events at least one audit period`,
    );
  return warnings;
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  return {
    databaseUrl: env.DATABASE_URL || undefined,
    logLevel: logLevel(env),
    dataDir: path.resolve(env.LEDGER_DATA_DIR || "./data"),
    port: integer("PORT", env.PORT, numericDefault("PORT"), 1, 65535),
    partitions: env.LEDGER_PARTITIONS
      ? integer("LEDGER_PARTITIONS", env.LEDGER_PARTITIONS, numericDefault("LEDGER_PARTITIONS"), 1, 1024)
      : undefined,
    jwtSecret: env.LEDGER_JWT_SECRET || undefined,
    jwtMaxTtlSeconds: wholeSeconds("LEDGER_JWT_MAX_TTL_MS", env.LEDGER_JWT_MAX_TTL_MS, 1, 100 * MAX_TOKEN_TTL_S),
    jwks: jwksConfig(env),
    metricsToken: metricsToken(env.LEDGER_METRICS_TOKEN),
    metricsRefreshSeconds: wholeSeconds("LEDGER_METRICS_REFRESH_MS", env.LEDGER_METRICS_REFRESH_MS, 1, 3600),
    writesPerMinute: integer(
      "LEDGER_WRITES_PER_MINUTE",
      env.LEDGER_WRITES_PER_MINUTE,
      numericDefault("LEDGER_WRITES_PER_MINUTE"),
      1,
      1_000_000,
    ),
    readsPerMinute: integer(
      "LEDGER_READS_PER_MINUTE",
      env.LEDGER_READS_PER_MINUTE,
      numericDefault("LEDGER_READS_PER_MINUTE"),
      1,
      10_000_000,
    ),
    documentsPerMinute: integer(
      "LEDGER_DOCS_PER_MINUTE",
      env.LEDGER_DOCS_PER_MINUTE,
      numericDefault("LEDGER_DOCS_PER_MINUTE"),
      1,
      10_000_000,
    ),
    authFailuresPerMinute: integer(
      "LEDGER_AUTH_FAILURES_PER_MINUTE",
      env.LEDGER_AUTH_FAILURES_PER_MINUTE,
      numericDefault("LEDGER_AUTH_FAILURES_PER_MINUTE"),
      1,
      10_000_000,
    ),
    corsOrigins: corsOrigins(env.LEDGER_CORS_ORIGINS),
    embeddedRestarts: integer(
      "LEDGER_EMBEDDED_RESTARTS",
      env.LEDGER_EMBEDDED_RESTARTS,
      numericDefault("LEDGER_EMBEDDED_RESTARTS"),
      0,
      1000,
    ),
    dashboard: {
      lagAlarmSeconds: wholeSeconds("LEDGER_ALARM_LAG_MS", env.LEDGER_ALARM_LAG_MS, 1, 86_400),
      consumerFailureAlarm: integer(
        "LEDGER_ALARM_CONSUMER_FAILURES",
        env.LEDGER_ALARM_CONSUMER_FAILURES,
        numericDefault("LEDGER_ALARM_CONSUMER_FAILURES"),
        1,
        1_000_000,
      ),
      auditEverySeconds: wholeSeconds("LEDGER_AUDIT_EVERY_MS", env.LEDGER_AUDIT_EVERY_MS, 0, 86_400),
      historySeconds: wholeSeconds("LEDGER_DASHBOARD_HISTORY_MS", env.LEDGER_DASHBOARD_HISTORY_MS, 60, 86_400),
    },
    pruneEverySeconds: wholeSeconds("LEDGER_PRUNE_EVERY_MS", env.LEDGER_PRUNE_EVERY_MS, 0, 86_400),
    writeBatchMax: integer(
      "LEDGER_WRITE_BATCH_MAX",
      env.LEDGER_WRITE_BATCH_MAX,
      numericDefault("LEDGER_WRITE_BATCH_MAX"),
      1,
      10_000,
    ),
    erasureBatchSize: integer(
      "LEDGER_ERASURE_BATCH_SIZE",
      env.LEDGER_ERASURE_BATCH_SIZE,
      numericDefault("LEDGER_ERASURE_BATCH_SIZE"),
      1,
      10_000,
    ),
    feedMaxItems: integer(
      "LEDGER_FEED_MAX_ITEMS",
      env.LEDGER_FEED_MAX_ITEMS,
      numericDefault("LEDGER_FEED_MAX_ITEMS"),
      1,
      100_000,
    ),
    feedHotFollowers: integer(
      "LEDGER_FEED_HOT_FOLLOWERS",
      env.LEDGER_FEED_HOT_FOLLOWERS,
      numericDefault("LEDGER_FEED_HOT_FOLLOWERS"),
      1,
      1_000_000_000,
    ),
    feedAbsentMs: integer(
      "LEDGER_FEED_ABSENT_MS",
      env.LEDGER_FEED_ABSENT_MS,
      numericDefault("LEDGER_FEED_ABSENT_MS"),
      60_000,
      100 * 365 * 86_400_000,
    ),
    feedReturnRebuildMs: integer(
      "LEDGER_FEED_RETURN_REBUILD_MS",
      env.LEDGER_FEED_RETURN_REBUILD_MS,
      numericDefault("LEDGER_FEED_RETURN_REBUILD_MS"),
      10,
      600_000,
    ),
    pacing: {
      budgetMs: integer(
        "LEDGER_BACKGROUND_BATCH_MS",
        env.LEDGER_BACKGROUND_BATCH_MS,
        numericDefault("LEDGER_BACKGROUND_BATCH_MS"),
        0,
        10_000,
      ),
      duty: fraction(
        "LEDGER_BACKGROUND_DUTY",
        env.LEDGER_BACKGROUND_DUTY,
        numericDefault("LEDGER_BACKGROUND_DUTY"),
        0.05,
        1,
      ),
    },
    retention: {
      keepLast: integer(
        "LEDGER_RETENTION_KEEP_EVENTS",
        env.LEDGER_RETENTION_KEEP_EVENTS,
        numericDefault("LEDGER_RETENTION_KEEP_EVENTS"),
        0,
        1_000_000_000,
      ),
      keepSeconds: wholeSeconds("LEDGER_RETENTION_KEEP_MS", env.LEDGER_RETENTION_KEEP_MS, 0, 31_536_000),
    },
    postgres: postgresTimeouts(env),
    redisCommandTimeoutMs: integer(
      "LEDGER_REDIS_COMMAND_TIMEOUT_MS",
      env.LEDGER_REDIS_COMMAND_TIMEOUT_MS,
      numericDefault("LEDGER_REDIS_COMMAND_TIMEOUT_MS"),
      10,
      600_000,
    ),
    redisKeepAliveMs: integer(
      "LEDGER_REDIS_KEEPALIVE_MS",
      env.LEDGER_REDIS_KEEPALIVE_MS,
      numericDefault("LEDGER_REDIS_KEEPALIVE_MS"),
      0,
      3_600_000,
    ),
    redisUrl: env.REDIS_URL || undefined,
    redisAllowEviction: flag("LEDGER_REDIS_ALLOW_EVICTION", env.LEDGER_REDIS_ALLOW_EVICTION),
    countBuckets: integer(
      "LEDGER_COUNT_BUCKETS",
      env.LEDGER_COUNT_BUCKETS,
      numericDefault("LEDGER_COUNT_BUCKETS"),
      1,
      1024,
    ),
    reconcileIntervalMs: integer(
      "LEDGER_RECONCILE_INTERVAL_MS",
      env.LEDGER_RECONCILE_INTERVAL_MS,
      numericDefault("LEDGER_RECONCILE_INTERVAL_MS"),
      100,
      86_400_000,
    ),
    replicas: {
      urls: replicaUrls(env.DATABASE_REPLICA_URLS),
      maxLagMs: integer(
        "LEDGER_REPLICA_MAX_LAG_MS",
        env.LEDGER_REPLICA_MAX_LAG_MS,
        numericDefault("LEDGER_REPLICA_MAX_LAG_MS"),
        0,
        86_400_000,
      ),
      tokenWaitMs: integer(
        "LEDGER_REPLICA_TOKEN_WAIT_MS",
        env.LEDGER_REPLICA_TOKEN_WAIT_MS,
        numericDefault("LEDGER_REPLICA_TOKEN_WAIT_MS"),
        0,
        60_000,
      ),
      checkEveryMs: integer(
        "LEDGER_REPLICA_CHECK_MS",
        env.LEDGER_REPLICA_CHECK_MS,
        numericDefault("LEDGER_REPLICA_CHECK_MS"),
        50,
        600_000,
      ),
    },
    countLocalTtlMs: integer(
      "LEDGER_COUNT_LOCAL_TTL_MS",
      env.LEDGER_COUNT_LOCAL_TTL_MS,
      numericDefault("LEDGER_COUNT_LOCAL_TTL_MS"),
      0,
      60_000,
    ),
    webhooks: loadWebhookConfig(env),
  };
}
