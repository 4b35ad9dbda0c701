import type { RedisClient } from "./redis-connection.ts";

/** One fixed window per key: INCR, the window starts at the first request; answers {current, ttl}. */
const INCR_LUA = `
local current = redis.call('INCR', KEYS[1])
if current == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]); ttl = tonumber(ARGV[1]) end
return {current, ttl}`;

const READ_LUA = `
local current = redis.call('GET', KEYS[1])
if not current then return {0, 0} end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then ttl = 0 end
return {tonumber(current), ttl}`;

type Callback = (err: Error | null, result?: { current: number; ttl: number }) => void;

/** What @fastify/rate-limit passes to child(): the limiter's merged options, with ours. */
interface ChildParams {
  /** Which budget this limiter counts (writes, reads): each has keys of its own. */
  ledgerBudget?: string;
}

/**
 * A @fastify/rate-limit store in the Redis of the count layer (node-redis; the plugin's own
 * Redis store needs ioredis), so several API processes share one budget per user (seed 004:
 * idempotency and anti-abuse are separate mechanisms). Registered with skipOnError: while Redis
 * does not answer, requests are not limited rather than refused, so writes are unaffected.
 */
export function redisRateLimitStore(redis: RedisClient) {
  return class RedisRateLimitStore {
    private readonly prefix: string;

    constructor(_params?: unknown, budget = "default") {
      this.prefix = `ledger:rate:${budget}:`;
    }

    incr(key: string, callback: Callback, timeWindow: number): void {
      this.run(INCR_LUA, key, [String(timeWindow)], callback);
    }

    read(key: string, callback: Callback): void {
      this.run(READ_LUA, key, [], callback);
    }

    child(params: object): RedisRateLimitStore {
      return new RedisRateLimitStore(undefined, (params as ChildParams).ledgerBudget ?? "default");
    }

    private run(script: string, key: string, args: string[], callback: Callback): void {
      redis.sendCommand<[number, number]>(["EVAL", script, "1", this.prefix + key, ...args]).then(
        ([current, ttl]) => callback(null, { current, ttl }),
        (err: unknown) => callback(err instanceof Error ? err : new Error(String(err))),
      );
    }
  };
}
