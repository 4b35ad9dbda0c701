import { createClient } from "redis";

export type RedisClient = ReturnType<typeof createCountClient>;

/** Raised at start when Redis could evict count keys: a count must never silently shrink. */
export class EvictingRedisError extends Error {
  constructor(readonly policy: string) {
    super(`Redis maxmemory-policy is ${policy}: it may evict count keys and counts would silently shrink. ` +
      "Set maxmemory-policy to noeviction or a volatile-* policy, or start with LEDGER_REDIS_ALLOW_EVICTION=1 to accept it.");
    this.name = "EvictingRedisError";
  }
}

export interface RedisOptions {
  /** Per-command timeout; a read that takes longer falls back to PostgreSQL. */
  commandTimeoutMs?: number;
  connectTimeoutMs?: number;
  /** Start even when maxmemory-policy is allkeys-* (LEDGER_REDIS_ALLOW_EVICTION). */
  allowEviction?: boolean;
}

/**
 * The Redis client of the count layer. The offline queue is disabled: a command issued while
 * the connection is down fails at once instead of being replayed after reconnection, because a
 * replayed increment is a double count (the count scripts are idempotent per event, but a blind
 * replay must not be the mechanism). Reconnection retries in the background with a short capped
 * backoff; while it is down every read falls back to PostgreSQL.
 */
function createCountClient(url: string, options: RedisOptions) {
  return createClient({
    url,
    disableOfflineQueue: true,
    commandOptions: { timeout: options.commandTimeoutMs ?? 200 },
    socket: {
      connectTimeout: options.connectTimeoutMs ?? 1000,
      reconnectStrategy: (retries: number) => Math.min(50 * 2 ** Math.min(retries, 5), 1000),
    },
  });
}

export async function connectRedis(url: string, options: RedisOptions = {}): Promise<RedisClient> {
  const client = createCountClient(url, options);
  // Without a listener node-redis rethrows connection errors as unhandled; the state is
  // visible through client.isReady and the metrics.
  client.on("error", () => {});
  await client.connect();
  const policy = await maxmemoryPolicy(client);
  if (policy.startsWith("allkeys-") && !options.allowEviction) {
    await client.close().catch(() => {});
    throw new EvictingRedisError(policy);
  }
  return client;
}

export async function maxmemoryPolicy(client: RedisClient): Promise<string> {
  // RESP2 answers [name, value], RESP3 a map; node-redis hands the map over as an object or a Map.
  const reply = await client.sendCommand<unknown>(["CONFIG", "GET", "maxmemory-policy"]);
  const value = Array.isArray(reply) ? reply[1]
    : reply instanceof Map ? reply.get("maxmemory-policy")
      : (reply as Record<string, unknown>)["maxmemory-policy"];
  return String(value ?? "noeviction");
}

/** INFO stats' evicted_keys: keys Redis dropped under memory pressure since it started. */
export async function evictedKeys(client: RedisClient): Promise<number> {
  const info = await client.sendCommand<string>(["INFO", "stats"]);
  const match = /evicted_keys:(\d+)/.exec(info);
  return match ? Number(match[1]) : 0;
}
