import type { Pool } from "../db/pool.ts";
import { Hooks } from "../hooks.ts";
import type { CacheMetrics } from "./cache-metrics.ts";
import { cursorKey, kindKeyPatterns, timelineKey } from "./count-keys.ts";
import { currentTimeline } from "../transport/event-timeline.ts";
import { MalformedCounterError, type CountStore } from "./count-store.ts";
import type { CountEvent, CounterKind } from "./counter-kinds.ts";
import type { FailureSink } from "./layer-failures.ts";

/** Every key on one node matching one of ARGV's patterns, in one script: a failover's rare reset. */
const DROP_KEYS_LUA = `#!lua flags=allow-cross-slot-keys
local n = 0
for _, pattern in ipairs(ARGV) do
  local cursor = '0'
  repeat
    local r = redis.call('SCAN', cursor, 'MATCH', pattern, 'COUNT', 1000)
    cursor = r[1]
    for _, k in ipairs(r[2]) do redis.call('UNLINK', k); n = n + 1 end
  until cursor == '0'
end
return n`;

/**
 * The hot path of the count layer: after the database commit, each committed outbox event of a
 * kind becomes one idempotent increment in Redis. It tails the outbox (gapless, commit-ordered
 * per partition) from a cursor kept in Redis, so the write path itself never waits on Redis and
 * never fails because of it (docs/cache.md says why the increment is fed here and not from the
 * request). An increment that fails is counted and the cursor stays: the next pass retries it,
 * which is safe because the increment script applies an event at most once.
 *
 * A counter whose increment script refuses it as malformed (MalformedCounterError) is dropped, so
 * its next read backfills it from the facts (which hold this event), and the pass goes on: one
 * bad counter never holds up the cursor of the whole kind. Any other failure ends the pass.
 *
 * Hook points: "cache.beforeIncrement" (context.drop = true loses the increment, as a process
 * dying between the commit and the increment would) and "cache.afterIncrement".
 */
export class CountFeeder {
  constructor(
    private readonly pool: Pool,
    private readonly store: CountStore,
    private readonly kind: CounterKind,
    private readonly options: {
      hooks?: Hooks;
      metrics?: CacheMetrics;
      batchSize?: number;
      failures?: FailureSink;
      /** The layer was emptied because the database's timeline changed (a promotion). */
      onRealigned?: (change: { from: number; to: number; keys: number }) => void;
    } = {},
  ) {}

  /** One pass over every partition; returns the number of events handled. Throws when Redis is unreachable. */
  async pollOnce(): Promise<number> {
    try {
      const handled = await this.pass();
      this.options.failures?.succeeded(this.kind.name, "feed");
      return handled;
    } catch (err) {
      this.options.metrics?.updateFailures.inc({ kind: this.kind.name });
      this.options.failures?.failed({ kind: this.kind.name, step: "feed", error: err });
      throw err;
    }
  }

  private async pass(): Promise<number> {
    const redis = this.store.redis;
    const hooks = this.options.hooks ?? new Hooks();
    await this.realign();
    const stored = await redis.hGetAll(cursorKey(this.kind.name));
    const { rows: positions } = await this.pool.query<{ part: number; last: number }>(this.kind.positionsSql);
    if (Object.keys(stored).length === 0) {
      // No cursor: Redis is new or was flushed, so it holds no counters either; every counter
      // will be backfilled from the facts on its first read. Start at the present.
      await redis.hSet(
        cursorKey(this.kind.name),
        Object.fromEntries(positions.map((p) => [String(p.part), String(p.last)])),
      );
      return 0;
    }
    const parts = positions.map((p) => p.part);
    const cursors = parts.map((p) => Number(stored[String(p)] ?? 0));
    const { rows } = await this.pool.query<CountEvent>(this.kind.eventsSql, [
      parts,
      cursors,
      this.options.batchSize ?? 500,
    ]);
    const advanced = new Map<number, number>();
    try {
      for (const e of rows) {
        const seq = Number(e.seq);
        if (e.delta !== 0) {
          const context: Record<string, unknown> = { kind: this.kind.name, ...e, seq, drop: false };
          await hooks.at("cache.beforeIncrement", context);
          if (context.drop === true) {
            this.options.metrics?.updateFailures.inc({ kind: this.kind.name });
          } else {
            if (await this.incrementOrDrop(e, seq)) this.options.metrics?.updates.inc({ kind: this.kind.name });
            await hooks.at("cache.afterIncrement", context);
          }
        }
        advanced.set(e.part, seq);
      }
    } finally {
      if (advanced.size > 0) {
        await redis.hSet(
          cursorKey(this.kind.name),
          Object.fromEntries([...advanced].map(([p, s]) => [String(p), String(s)])),
        );
      }
    }
    return rows.length;
  }

  /**
   * A promotion (the database's timeline moved) may have lost events this kind's counters hold, and the
   * new primary hands their positions to other events, which the increment log would refuse as already
   * applied. So the kind starts over on the new primary: its cursor is set to the outbox's present
   * first, then every other key of the kind is removed, and each counter is backfilled from the facts
   * on its next read. In that order, no counter is ever present without the cursor below its boundary
   * (a backfill after the removal reads a boundary at or above that present). A Redis fed before the
   * timeline was recorded here is taken as fed from the present timeline.
   */
  private async realign(): Promise<void> {
    const redis = this.store.redis;
    const name = this.kind.name;
    const now = String(await currentTimeline(this.pool));
    const stored = await redis.sendCommand<string | null>(["HGET", timelineKey(), name]);
    if (stored === now) return;
    if (stored !== null) {
      const { rows: positions } = await this.pool.query<{ part: number; last: number }>(this.kind.positionsSql);
      await redis.hSet(cursorKey(name), Object.fromEntries(positions.map((p) => [String(p.part), String(p.last)])));
      const removed = await redis.onEveryNode<number>(["EVAL", DROP_KEYS_LUA, "0", ...kindKeyPatterns(name)]);
      this.options.onRealigned?.({ from: Number(stored), to: Number(now), keys: removed.reduce((a, b) => a + b, 0) });
    }
    await redis.hSet(timelineKey(), { [name]: now });
  }

  /** false when the counter was malformed and dropped instead (reported as a failure). */
  private async incrementOrDrop(e: CountEvent, seq: number): Promise<boolean> {
    try {
      await this.store.increment(this.kind.name, e.target, e.part, seq, e.actor, e.delta);
      return true;
    } catch (err) {
      if (!(err instanceof MalformedCounterError)) throw err;
      await this.store.drop(this.kind.name, e.target);
      this.options.failures?.failed({
        kind: this.kind.name,
        step: "increment",
        target: e.target,
        error: err,
        dropped: true,
      });
      return false;
    }
  }
}
