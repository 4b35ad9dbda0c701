/**
 * The in-process cache in front of Redis is single-flight. 200 concurrent reads of one
 * hot key that Redis does not hold yet make one backfill (one truth query) and two Redis reads;
 * negative control: without the local cache every concurrent miss backfills on its own.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { Hooks } from "../../src/hooks.ts";
import { LikeService } from "../../src/likes/like-service.ts";
import { CountStore } from "../../src/cache/count-store.ts";
import { CountReader } from "../../src/cache/count-reader.ts";
import { LIKE_COUNTS } from "../../src/cache/counter-kinds.ts";
import { connectRedis, type RedisClient } from "../../src/cache/redis-connection.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { TestRedis } from "../../support/redis-server.ts";

async function hmgetCalls(redis: RedisClient): Promise<number> {
  const match = /cmdstat_hmget:calls=(\d+)/.exec(await redis.sendCommand<string>(["INFO", "commandstats"]));
  return match ? Number(match[1]) : 0;
}

/** 200 concurrent reads of a hot key absent from Redis; the backfills (truth queries) and Redis reads they cost. */
async function burst(
  localTtlMs: number,
  t: { after: (fn: () => Promise<void>) => void },
): Promise<{ backfills: number; redisReads: number; counts: Set<string> }> {
  const db = await createTestDatabase({ partitions: 2 });
  const server = await TestRedis.start();
  const redis = await connectRedis(server.url);
  t.after(async () => {
    await redis.close().catch(() => {});
    await server.kill();
    await db.close();
  });
  const likes = await LikeService.open(db.pool);
  await likes.createItem("hot");
  for (let u = 0; u < 7; u++) await likes.like(`user-${u}`, "hot");
  const hooks = new Hooks();
  let backfills = 0;
  hooks.on("cache.beforeBackfill", () => {
    backfills++;
  });
  const reader = new CountReader(db.pool, new CountStore(redis, 16), { localTtlMs, hooks });
  const before = await hmgetCalls(redis);
  const answers = await Promise.all(
    Array.from({ length: 200 }, () => reader.read(LIKE_COUNTS, "hot", { allowedLag: 0 })),
  );
  return {
    backfills,
    redisReads: (await hmgetCalls(redis)) - before,
    counts: new Set(answers.map((a) => `${a.source} ${a.count}`)),
  };
}

test("a hot key's miss is single-flight: 200 concurrent reads, one backfill and two Redis reads; without the local cache each miss backfills (negative control)", async (t) => {
  const flight = await burst(5_000, t);
  assert.deepEqual([...flight.counts], ["cache 7"], "every reader got the one backfilled count");
  assert.equal(flight.backfills, 1, "one truth query for 200 readers");
  assert.equal(flight.redisReads, 2, "the miss and the read after the install");

  const alone = await burst(0, t);
  t.diagnostic(
    `note 200 concurrent readers of a missing hot key: ${flight.backfills} backfill with the local cache, ${alone.backfills} without (${alone.redisReads} Redis reads)`,
  );
  assert.ok(alone.backfills > 1, `without the local cache the concurrent misses backfill ${alone.backfills} times`);
});
