import type { RetentionCap } from "../db/retention-boundary.ts";
import { cursorKey, reconciledKey } from "./count-keys.ts";
import type { RedisClient } from "./redis-connection.ts";

/** The count layer's name for each retention kind it reads (the others are not in Redis). */
const COUNT_KIND = {
  likes: "likes",
  relations: "followers",
  comments: undefined,
  posts: undefined,
  blocks: undefined,
  accounts: undefined,
} as const;

/**
 * The Redis count layer as a transport that caps retention (docs/retention.md): its feeder reads
 * the outbox above its cursor, and its reconciler reads the events between its last boundary and
 * the present (changedSql) and, for followers, each event's predecessor. So per partition the
 * prune stays at or below min(cursor, last reconciled boundary). A layer with a cursor that has
 * never reconciled caps at 0 until its first run (it will read from the beginning); a Redis that
 * holds neither key has never fed and caps nothing. Redis unreachable: the cap throws, and the
 * prune leaves those outboxes alone.
 */
export function countLayerRetentionCap(redis: RedisClient): RetentionCap {
  return async (kind) => {
    const name = COUNT_KIND[kind];
    if (name === undefined) return undefined;
    const cursor = await redis.hGetAll(cursorKey(name));
    const reconciled = await redis.hGetAll(reconciledKey(name));
    const parts = new Set([...Object.keys(cursor), ...Object.keys(reconciled)]);
    if (parts.size === 0) return undefined;
    const caps = new Map<number, number>();
    for (const p of parts) {
      caps.set(Number(p), Math.min(Number(cursor[p] ?? Infinity), Number(reconciled[p] ?? 0)));
    }
    return caps;
  };
}
