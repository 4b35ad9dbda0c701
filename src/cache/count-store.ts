import { createHash } from "node:crypto";
import type { RedisClient } from "./redis-connection.ts";

/**
 * The Redis side of the counts. One hash per counter, `sl:cnt:<kind>:<target>`:
 *   base      the reconciler-owned count of every event with seq <= w<part>
 *   w<part>   that boundary, per partition of the kind's outbox
 *   b<i>      hot-path-owned live delta, bucket i = hash(actor) % N (hot keys: N fields, one node)
 *   at        when base was last installed (ms since epoch), for the age a read reports
 * and a log hash `…:log` with one field `<part>:<seq>` per increment applied since the last
 * install, so an install knows exactly which live increments its new base absorbs.
 */
const INCREMENT_LUA = `
local part, seq, bucket, delta, event = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), ARGV[5]
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSETNX', KEYS[2], event, delta)
  redis.call('EXPIRE', KEYS[2], 600)
  return 0
end
local w = tonumber(redis.call('HGET', KEYS[1], 'w' .. part) or '0')
if seq <= w then return 0 end
if redis.call('HSETNX', KEYS[2], event, delta) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], bucket, delta)
return 1`;

/*
 * ARGV: truth, now, buckets, onlyExisting, bound of partition 0, 1, ...
 * Returns {status, displayedSettled}: status 0 installed over an existing counter, 1 created,
 * 2 skipped (counter absent and onlyExisting), 3 skipped (an install with a newer boundary won).
 * displayedSettled = what the counter showed for the events <= bound just before: base + live
 * minus the logged increments above the bound. truth - displayedSettled is the drift.
 */
const INSTALL_LUA = `
local truth, now, n, onlyExisting = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
local exists = redis.call('EXISTS', KEYS[1]) == 1
if not exists and onlyExisting then return {2, 0} end
if exists then
  for p = 5, #ARGV do
    local w = tonumber(redis.call('HGET', KEYS[1], 'w' .. (p - 5)) or '0')
    if w > tonumber(ARGV[p]) then return {3, 0} end
  end
end
local above = 0
local log = redis.call('HGETALL', KEYS[2])
for i = 1, #log, 2 do
  local field = log[i]
  local sep = string.find(field, ':', 1, true)
  local bound = tonumber(ARGV[5 + tonumber(string.sub(field, 1, sep - 1))])
  if bound ~= nil and tonumber(string.sub(field, sep + 1)) <= bound then
    redis.call('HDEL', KEYS[2], field)
  else
    above = above + tonumber(log[i + 1])
  end
end
redis.call('PERSIST', KEYS[2])
local displayed = 0
if exists then
  displayed = tonumber(redis.call('HGET', KEYS[1], 'base') or '0')
  for i = 0, n - 1 do displayed = displayed + tonumber(redis.call('HGET', KEYS[1], 'b' .. i) or '0') end
  displayed = displayed - above
end
for i = 1, n - 1 do redis.call('HDEL', KEYS[1], 'b' .. i) end
redis.call('HSET', KEYS[1], 'base', truth, 'at', now, 'b0', above)
for p = 5, #ARGV do redis.call('HSET', KEYS[1], 'w' .. (p - 5), ARGV[p]) end
if exists then return {0, displayed} end
return {1, 0}`;

export interface CachedCount {
  count: number;
  /** When the counter's base was last installed (a reconciliation or a backfill), ms since epoch. */
  reconciledAt: number;
}

export type InstallOutcome =
  | { status: "installed"; displayedSettled: number }
  | { status: "created" | "absent" | "superseded" };

export class CountStore {
  constructor(readonly redis: RedisClient, readonly buckets: number) {}

  counterKey(kind: string, target: string): string {
    return `sl:cnt:${kind}:${target}`;
  }

  bucketOf(actor: string): number {
    return createHash("md5").update(actor, "utf8").digest().readUInt32BE(0) % this.buckets;
  }

  /** base and every bucket in one HMGET: one round trip; undefined when the counter is absent. */
  async read(kind: string, target: string): Promise<CachedCount | undefined> {
    const fields = ["base", "at", ...Array.from({ length: this.buckets }, (_, i) => `b${i}`)];
    const values = await this.redis.sendCommand<(string | null)[]>(["HMGET", this.counterKey(kind, target), ...fields]);
    if (values[0] === null || values[0] === undefined) return undefined;
    let count = 0;
    for (let i = 0; i < values.length; i++) if (i !== 1) count += Number(values[i] ?? 0);
    return { count, reconciledAt: Number(values[1] ?? 0) };
  }

  /** Applies one event's delta once (idempotent per part:seq); false when skipped. */
  async increment(kind: string, target: string, part: number, seq: number, actor: string, delta: number): Promise<boolean> {
    const key = this.counterKey(kind, target);
    const applied = await this.redis.sendCommand<number>([
      "EVAL", INCREMENT_LUA, "2", key, `${key}:log`, String(part), String(seq), `b${this.bucketOf(actor)}`, String(delta), `${part}:${seq}`,
    ]);
    return applied === 1;
  }

  /** Installs truth as base for the events <= bound, keeping the live increments above it. */
  async install(kind: string, target: string, truth: number, bound: readonly number[], onlyExisting: boolean): Promise<InstallOutcome> {
    const key = this.counterKey(kind, target);
    const [status, displayed] = await this.redis.sendCommand<[number, number]>([
      "EVAL", INSTALL_LUA, "2", key, `${key}:log`, String(truth), String(Date.now()), String(this.buckets), onlyExisting ? "1" : "0",
      ...bound.map(String),
    ]);
    if (status === 0) return { status: "installed", displayedSettled: displayed };
    return { status: status === 1 ? "created" : status === 2 ? "absent" : "superseded" };
  }
}
