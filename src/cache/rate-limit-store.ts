import { createRequire } from "node:module";
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
  continueExceeding?: boolean;
  exponentialBackoff?: boolean;
  cache?: number;
}

/** The plugin's own in-process store (what it uses without a store option), for the time Redis does not answer. */
interface InProcessStore {
  incr(key: string, callback: Callback, timeWindow: number, max: number): void;
  read(key: string, callback: Callback, timeWindow: number, max: number): void;
}
const LocalStore = createRequire(import.meta.url)("@fastify/rate-limit/store/LocalStore.js") as new (
  continueExceeding?: boolean,
  exponentialBackoff?: boolean,
  cache?: number,
) => InProcessStore;

/**
 * A @fastify/rate-limit store in the Redis of the count layer (node-redis; the plugin's own
 * Redis store needs ioredis), so several API processes share one budget per user (seed 004:
 * idempotency and anti-abuse are separate mechanisms). While Redis does not answer (down, hung
 * past the 200 ms deadline, not connected yet) a request is counted in this process's memory
 * instead, by the plugin's own in-process store: each process then enforces the budget alone,
 * so a user gets at most one budget per process, never an unlimited one (the plugin's
 * skipOnError would let every request through). It never reports an error to the plugin.
 */
export function redisRateLimitStore(redis: RedisClient) {
  return class RedisRateLimitStore {
    private readonly prefix: string;
    private readonly local: InProcessStore;

    constructor(params?: ChildParams, budget = "default") {
      this.prefix = `ledger:rate:${budget}:`;
      this.local = new LocalStore(params?.continueExceeding, params?.exponentialBackoff, params?.cache);
    }

    incr(key: string, callback: Callback, timeWindow: number, max: number): void {
      this.run(INCR_LUA, key, [String(timeWindow)], callback, () => this.local.incr(key, callback, timeWindow, max));
    }

    read(key: string, callback: Callback, timeWindow: number, max: number): void {
      this.run(READ_LUA, key, [], callback, () => this.local.read(key, callback, timeWindow, max));
    }

    child(params: object): RedisRateLimitStore {
      return new RedisRateLimitStore(params as ChildParams, (params as ChildParams).ledgerBudget ?? "default");
    }

    private run(script: string, key: string, args: string[], callback: Callback, inProcess: () => void): void {
      redis
        .sendCommand<[number, number]>(["EVAL", script, "1", this.prefix + key, ...args])
        .then(([current, ttl]) => callback(null, { current, ttl }), inProcess);
    }
  };
}
