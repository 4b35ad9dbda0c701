import { createHash } from "node:crypto";
import { Hooks } from "../hooks.ts";
import { clusterBaseKey, clusterBucketKey, clusterBucketLogKey, counterKey, counterLogKey } from "./count-keys.ts";
import type { RedisClient } from "./redis-connection.ts";

/**
 * The Redis side of the counts, in one of two layouts (docs/cache.md):
 *
 * Key names are count-keys.ts's (no target can name another target's key).
 * One node: one hash per counter, `sl:v2:cnt:<kind>:<target>`:
 *   base      the reconciler-owned count of every event with seq <= w<part>
 *   w<part>   that boundary, per partition of the kind's outbox
 *   b<i>      hot-path-owned live delta, bucket i = hash(actor) % N (hot keys: N fields, one node)
 *   at        when base was last installed (ms since epoch), for the age a read reports
 * and a log hash `sl:v2:log:<kind>:<target>` with one field `<part>:<seq>` per increment applied since the last
 * install, so an install knows exactly which live increments its new base absorbs.
 *
 * Redis Cluster: the buckets are separate keys with hash tags of their own, so one hot target's
 * buckets spread over the masters, and a script only ever touches one bucket's keys (one slot):
 *   sl:v2:cnt:{<kind>:<target>}       base, w<part>, at
 *   sl:v2:bkt:{<kind>:<target>#<i>}   d (bucket i's live delta, cumulative), w<part>
 *   sl:v2:log:{<kind>:<target>#<i>}   as above, for the increments of bucket i
 * An install first freezes every bucket at the boundary (one script per bucket: increments at
 * or below it are refused from then on, and what the bucket holds for them, `settled`, is fixed),
 * then sets base = truth - sum(settled). Nothing is subtracted from a bucket, so a read between
 * the two steps shows what it showed before, and no increment can be lost between them.
 */
/*
 * Every script reads its numbers through int(): a field that is not an integer (written by
 * something else than this layer, or a key of another shape) is refused with an error reply
 * starting with COUNT_MALFORMED and naming the key and field, instead of a Lua error on nil
 * halfway through. The callers catch it per target (MalformedCounterError).
 */
const INT_LUA = `
local function malformed(key, field, value)
  error({err = 'COUNT_MALFORMED ' .. key .. ' field ' .. tostring(field) .. ' holds ' .. tostring(value)})
end
local function int(key, field, value)
  if value == false or value == nil then return 0 end
  local n = tonumber(value)
  if n == nil or n ~= math.floor(n) then malformed(key, field, value) end
  return n
end
local function hint(key, field) return int(key, field, redis.call('HGET', key, field)) end
`;

const INCREMENT_LUA = `${INT_LUA}
local part, seq, bucket, delta, event = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), ARGV[5]
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSETNX', KEYS[2], event, delta)
  redis.call('EXPIRE', KEYS[2], 600)
  return 0
end
if seq <= hint(KEYS[1], 'w' .. part) then return 0 end
hint(KEYS[1], bucket)
if redis.call('HSETNX', KEYS[2], event, delta) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], bucket, delta)
return 1`;

/*
 * Shared by the one-node install and the cluster's bucket freeze (KEYS[1] the counter or bucket,
 * KEYS[2] its log; the bounds of partition 0, 1, ... from ARGV[boundsAt] on): skip with status 3
 * when a newer boundary was installed already, else drop the logged increments at or below the
 * bounds (the new base absorbs them) and sum the ones above into `above`.
 */
function settleLogLua(boundsAt: number, checkBounds = true): string {
  return `${
    checkBounds
      ? `if exists then
  for p = ${boundsAt}, #ARGV do
    if hint(KEYS[1], 'w' .. (p - ${boundsAt})) > tonumber(ARGV[p]) then return {3, 0} end
  end
end
`
      : ""
  }local above, absorbed = 0, {}
local log = redis.call('HGETALL', KEYS[2])
for i = 1, #log, 2 do
  local field = log[i]
  local part, seq = string.match(field, '^(%d+):(%d+)$')
  if part == nil then malformed(KEYS[2], field, log[i + 1]) end
  local delta = int(KEYS[2], field, log[i + 1])
  local bound = tonumber(ARGV[${boundsAt} + tonumber(part)])
  if bound ~= nil and tonumber(seq) <= bound then absorbed[#absorbed + 1] = field else above = above + delta end
end
-- Only after every entry was read as well-formed: a refused script writes nothing. In slices:
-- unpack() is bounded by Lua's C stack.
for i = 1, #absorbed, 1000 do redis.call('HDEL', KEYS[2], unpack(absorbed, i, math.min(i + 999, #absorbed))) end
redis.call('PERSIST', KEYS[2])
`;
}

/*
 * ARGV: truth, now, buckets, onlyExisting, bound of partition 0, 1, ...
 * Returns {status, displayedSettled}: status 0 installed over an existing counter, 1 created,
 * 2 skipped (counter absent and onlyExisting), 3 skipped (an install with a newer boundary won).
 * displayedSettled = what the counter showed for the events <= bound just before: base + live
 * minus the logged increments above the bound. truth - displayedSettled is the drift.
 */
const INSTALL_LUA = `${INT_LUA}
local truth, now, n, onlyExisting = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
local exists = redis.call('EXISTS', KEYS[1]) == 1
if not exists and onlyExisting then return {2, 0} end
local displayed = 0
if exists then
  -- One HMGET of base, the buckets and the boundaries (a script's cost is its calls).
  local fields = {'base'}
  for i = 0, n - 1 do fields[#fields + 1] = 'b' .. i end
  for p = 5, #ARGV do fields[#fields + 1] = 'w' .. (p - 5) end
  local values = redis.call('HMGET', KEYS[1], unpack(fields))
  for i = 1, n + 1 do displayed = displayed + int(KEYS[1], fields[i], values[i]) end
  for p = 5, #ARGV do
    if int(KEYS[1], fields[n + p - 3], values[n + p - 3]) > tonumber(ARGV[p]) then return {3, 0} end
  end
end
${settleLogLua(5, false)}displayed = displayed - above
if n > 1 then
  local stale = {}
  for i = 1, n - 1 do stale[i] = 'b' .. i end
  redis.call('HDEL', KEYS[1], unpack(stale))
end
local set = {'base', truth, 'at', now, 'b0', above}
for p = 5, #ARGV do set[#set + 1] = 'w' .. (p - 5); set[#set + 1] = ARGV[p] end
redis.call('HSET', KEYS[1], unpack(set))
if exists then return {0, displayed} end
return {1, 0}`;

/*
 * Cluster layout, one bucket: KEYS bucket, its log; ARGV: onlyExisting, bound of partition 0, 1, ...
 * Returns {status, settled}: status 0 frozen, 1 created, 2 skipped (absent and onlyExisting),
 * 3 skipped (a newer boundary froze it first). settled = what the bucket holds for the events
 * <= bound: d minus the logged increments above the bound. A bucket created here takes the
 * logged increments above the bound (applied while it was absent) as its d, and settles 0.
 */
const FREEZE_BUCKET_LUA = `${INT_LUA}
local onlyExisting = ARGV[1] == '1'
local exists = redis.call('EXISTS', KEYS[1]) == 1
if not exists and onlyExisting then return {2, 0} end
local settled = 0
if exists then settled = hint(KEYS[1], 'd') end
${settleLogLua(2)}if exists then
  settled = settled - above
else
  redis.call('HSET', KEYS[1], 'd', above)
end
for p = 2, #ARGV do redis.call('HSET', KEYS[1], 'w' .. (p - 2), ARGV[p]) end
if exists then return {0, settled} end
return {1, 0}`;

/*
 * Cluster layout, the base: KEYS base; ARGV: truth, sum of the buckets' settled, now,
 * onlyExisting, bound of partition 0, 1, ... Returns {status, displayedSettled} as INSTALL_LUA.
 */
const INSTALL_BASE_LUA = `${INT_LUA}
local truth, settled, now, onlyExisting = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4] == '1'
local exists = redis.call('EXISTS', KEYS[1]) == 1
if not exists and onlyExisting then return {2, 0} end
local displayed = 0
if exists then
  for p = 5, #ARGV do
    if hint(KEYS[1], 'w' .. (p - 5)) > tonumber(ARGV[p]) then return {3, 0} end
  end
  displayed = hint(KEYS[1], 'base') + settled
end
redis.call('HSET', KEYS[1], 'base', truth - settled, 'at', now)
for p = 5, #ARGV do redis.call('HSET', KEYS[1], 'w' .. (p - 5), ARGV[p]) end
if exists then return {0, displayed} end
return {1, 0}`;

export interface CachedCount {
  count: number;
  /** When the counter's base was last installed (a reconciliation or a backfill), ms since epoch. */
  reconciledAt: number;
}

export type InstallOutcome =
  { status: "installed"; displayedSettled: number } | { status: "created" | "absent" | "superseded" };

const OUTCOMES = ["installed", "created", "absent", "superseded"] as const;

/** Install scripts in flight at once per batch (installBatch says why not all of them). */
export const PIPELINE_DEPTH = 50;

const INSTALL_SHA = createHash("sha1").update(INSTALL_LUA, "utf8").digest("hex");

/** An install script's {status, displayed} reply. */
function installOutcome([status, displayed]: [number, number]): InstallOutcome {
  return status === 0
    ? { status: "installed", displayedSettled: displayed }
    : { status: OUTCOMES[status]! as "created" | "absent" | "superseded" };
}

/** A field as read: absent is 0, anything but an integer is a malformed counter (never summed into a count as NaN). */
function integerField(kind: string, target: string, field: string, value: string | null | undefined): number {
  if (value === null || value === undefined) return 0;
  if (!/^-?\d+$/.test(value))
    throw new MalformedCounterError(kind, target, `field ${field} holds ${JSON.stringify(value)}`);
  return Number(value);
}

/** A count script refused a counter whose fields are not what this layer writes (COUNT_MALFORMED). */
export class MalformedCounterError extends Error {
  readonly code = "COUNT_MALFORMED";
  constructor(
    readonly kind: string,
    readonly target: string,
    reply: string,
  ) {
    // Redis appends where the script failed (" script: <sha>, on @user_script:<line>."): not the reader's business.
    super(
      `the Redis counter of ${kind} ${JSON.stringify(target)} is malformed: ${reply.replace(/^COUNT_MALFORMED /, "").replace(/ script: \w+, on @user_script:\d+\.$/, "")}`,
    );
    this.name = "MalformedCounterError";
  }
}

/**
 * Hook point "cache.afterFreeze" (cluster layout only): every bucket of a counter is frozen at
 * the boundary and its base is not installed yet.
 */
export class CountStore {
  private readonly hooks: Hooks;

  constructor(
    readonly redis: RedisClient,
    readonly buckets: number,
    options: { hooks?: Hooks } = {},
  ) {
    this.hooks = options.hooks ?? new Hooks();
  }

  /** The counter's hash on one node; on a cluster the key of its base. */
  counterKey(kind: string, target: string): string {
    return this.redis.topology === "cluster" ? clusterBaseKey(kind, target) : counterKey(kind, target);
  }

  /** One node: the counter's log of applied increments. */
  logKey(kind: string, target: string): string {
    return counterLogKey(kind, target);
  }

  /** Cluster layout: bucket i's own key, with a hash tag of its own (no tag shared with the other buckets). */
  bucketKey(kind: string, target: string, bucket: number): string {
    return clusterBucketKey(kind, target, bucket);
  }

  /** Cluster layout: bucket i's log, in bucket i's slot. */
  bucketLogKey(kind: string, target: string, bucket: number): string {
    return clusterBucketLogKey(kind, target, bucket);
  }

  /**
   * Deletes the counter and its logs (a cache entry that cannot be repaired in place): the next
   * read backfills it from the facts. The base goes first, so no read sums stale buckets meanwhile.
   */
  async drop(kind: string, target: string): Promise<void> {
    if (this.redis.topology !== "cluster") {
      await this.redis.sendCommand(["DEL", counterKey(kind, target), counterLogKey(kind, target)]);
      return;
    }
    await this.redis.sendCommand(["DEL", clusterBaseKey(kind, target)]);
    await Promise.all(
      Array.from({ length: this.buckets }, (_, i) =>
        this.redis.sendCommand(["DEL", clusterBucketKey(kind, target, i), clusterBucketLogKey(kind, target, i)]),
      ),
    );
  }

  /** A script's COUNT_MALFORMED refusal as a typed error; any other failure as it came. */
  private script<T>(kind: string, target: string, args: readonly string[]): Promise<T> {
    return this.redis.sendCommand<T>(args).catch((err: unknown) => {
      if (err instanceof Error && err.message.startsWith("COUNT_MALFORMED"))
        throw new MalformedCounterError(kind, target, err.message);
      throw err;
    });
  }

  bucketOf(actor: string): number {
    return createHash("md5").update(actor, "utf8").digest().readUInt32BE(0) % this.buckets;
  }

  /** undefined when the counter is absent (on a cluster: its base or any bucket is). */
  read(kind: string, target: string): Promise<CachedCount | undefined> {
    return this.redis.topology === "cluster" ? this.readSplit(kind, target) : this.readHash(kind, target);
  }

  /** Applies one event's delta once (idempotent per part:seq); false when skipped. */
  async increment(
    kind: string,
    target: string,
    part: number,
    seq: number,
    actor: string,
    delta: number,
  ): Promise<boolean> {
    const bucket = this.bucketOf(actor);
    const [key, log, field] =
      this.redis.topology === "cluster"
        ? [clusterBucketKey(kind, target, bucket), clusterBucketLogKey(kind, target, bucket), "d"]
        : [counterKey(kind, target), counterLogKey(kind, target), `b${bucket}`];
    const applied = await this.script<number>(kind, target, [
      "EVAL",
      INCREMENT_LUA,
      "2",
      key,
      log,
      String(part),
      String(seq),
      field,
      String(delta),
      `${part}:${seq}`,
    ]);
    return applied === 1;
  }

  /**
   * install() for a batch of targets at one boundary, one outcome per entry in their order: a
   * target whose install failed has its error there, and the others are installed. The scripts
   * are pipelined: on one node a slice of PIPELINE_DEPTH of them is sent in the same tick (one
   * write, one round trip) by its SHA (EVALSHA: the script's body is not sent per target; a node
   * that does not know it yet answers NOSCRIPT and those targets are sent again with the body);
   * on a cluster a slice's freezes go together, then its bases: one round trip per node and step.
   * Slices, not the whole batch at once: every command races the client's 200 ms deadline from
   * the moment it is issued, and the last reply of a deep pipeline waits for the client to
   * handle every reply before it (about 0.1-0.4 ms each on a loaded machine), so 500 at once
   * missed the deadline in the bench and opened the breaker.
   */
  async installBatch(
    kind: string,
    entries: readonly { target: string; truth: number }[],
    bound: readonly number[],
    onlyExisting: boolean,
  ): Promise<PromiseSettledResult<InstallOutcome>[]> {
    const out: PromiseSettledResult<InstallOutcome>[] = [];
    for (let i = 0; i < entries.length; i += PIPELINE_DEPTH) {
      out.push(...(await this.installSlice(kind, entries.slice(i, i + PIPELINE_DEPTH), bound, onlyExisting)));
    }
    return out;
  }

  private installSlice(
    kind: string,
    entries: readonly { target: string; truth: number }[],
    bound: readonly number[],
    onlyExisting: boolean,
  ): Promise<PromiseSettledResult<InstallOutcome>[]> {
    if (this.redis.topology === "cluster") {
      return Promise.allSettled(entries.map((e) => this.installSplit(kind, e.target, e.truth, bound, onlyExisting)));
    }
    const now = String(Date.now());
    const tail = [String(this.buckets), onlyExisting ? "1" : "0", ...bound.map(String)];
    const argsOf = (e: { target: string; truth: number }) => [
      "2",
      counterKey(kind, e.target),
      counterLogKey(kind, e.target),
      String(e.truth),
      now,
      ...tail,
    ];
    return Promise.allSettled(
      entries.map(async (e) => {
        const reply = await this.script<[number, number]>(kind, e.target, ["EVALSHA", INSTALL_SHA, ...argsOf(e)]).catch(
          (err: unknown) => {
            if (err instanceof Error && err.message.startsWith("NOSCRIPT"))
              return this.script<[number, number]>(kind, e.target, ["EVAL", INSTALL_LUA, ...argsOf(e)]);
            throw err;
          },
        );
        return installOutcome(reply);
      }),
    );
  }

  /** Installs truth as base for the events <= bound, keeping the live increments above it. */
  install(
    kind: string,
    target: string,
    truth: number,
    bound: readonly number[],
    onlyExisting: boolean,
  ): Promise<InstallOutcome> {
    return this.redis.topology === "cluster"
      ? this.installSplit(kind, target, truth, bound, onlyExisting)
      : this.installHash(kind, target, truth, bound, onlyExisting);
  }

  /** base and every bucket in one HMGET: one round trip. */
  private async readHash(kind: string, target: string): Promise<CachedCount | undefined> {
    const fields = ["base", "at", ...Array.from({ length: this.buckets }, (_, i) => `b${i}`)];
    const values = await this.redis.sendCommand<(string | null)[]>(["HMGET", this.counterKey(kind, target), ...fields]);
    if (values[0] === null || values[0] === undefined) return undefined;
    const numbers = values.map((v, i) => integerField(kind, target, fields[i]!, v));
    let count = 0;
    for (let i = 0; i < numbers.length; i++) if (i !== 1) count += numbers[i]!;
    return { count, reconciledAt: numbers[1]! };
  }

  /** The base and the N buckets, issued together: one pipelined round trip per node that holds any of them. */
  private async readSplit(kind: string, target: string): Promise<CachedCount | undefined> {
    const [base, ...deltas] = await Promise.all([
      this.redis.sendCommand<(string | null)[]>(["HMGET", this.counterKey(kind, target), "base", "at"]),
      ...Array.from({ length: this.buckets }, (_, i) =>
        this.redis.sendCommand<string | null>(["HGET", this.bucketKey(kind, target, i), "d"]),
      ),
    ]);
    // A bucket missing next to a base (its node lost it) would hide its whole delta: absent, so backfilled.
    if (base![0] === null || base![0] === undefined || deltas.some((d) => d === null || d === undefined))
      return undefined;
    const count = deltas.reduce(
      (sum, d, i) => sum + integerField(kind, target, `#${i} d`, d),
      integerField(kind, target, "base", base![0]),
    );
    return { count, reconciledAt: integerField(kind, target, "at", base![1]) };
  }

  private async installHash(
    kind: string,
    target: string,
    truth: number,
    bound: readonly number[],
    onlyExisting: boolean,
  ): Promise<InstallOutcome> {
    const [status, displayed] = await this.script<[number, number]>(kind, target, [
      "EVAL",
      INSTALL_LUA,
      "2",
      counterKey(kind, target),
      counterLogKey(kind, target),
      String(truth),
      String(Date.now()),
      String(this.buckets),
      onlyExisting ? "1" : "0",
      ...bound.map(String),
    ]);
    return installOutcome([status, displayed]);
  }

  /*
   * Freeze every bucket, then install the base. Correct without atomicity across slots because a
   * frozen bucket refuses the increments <= bound and its settled part never changes afterwards;
   * a concurrent install with a newer boundary makes this one superseded at whichever step it
   * meets it (w never decreases), and an older one is refused the same way.
   */
  private async installSplit(
    kind: string,
    target: string,
    truth: number,
    bound: readonly number[],
    onlyExisting: boolean,
  ): Promise<InstallOutcome> {
    const frozen = await Promise.all(
      Array.from({ length: this.buckets }, (_, i) => {
        return this.script<[number, number]>(kind, target, [
          "EVAL",
          FREEZE_BUCKET_LUA,
          "2",
          clusterBucketKey(kind, target, i),
          clusterBucketLogKey(kind, target, i),
          onlyExisting ? "1" : "0",
          ...bound.map(String),
        ]);
      }),
    );
    if (frozen.some(([status]) => status === 3)) return { status: "superseded" };
    await this.hooks.at("cache.afterFreeze", { kind, target });
    const settled = frozen.reduce((sum, [, s]) => sum + Number(s), 0);
    const [status, displayed] = await this.script<[number, number]>(kind, target, [
      "EVAL",
      INSTALL_BASE_LUA,
      "1",
      clusterBaseKey(kind, target),
      String(truth),
      String(settled),
      String(Date.now()),
      onlyExisting ? "1" : "0",
      ...bound.map(String),
    ]);
    return installOutcome([status, displayed]);
  }
}
