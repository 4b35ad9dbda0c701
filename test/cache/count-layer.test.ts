import { test } from "node:test";
import assert from "node:assert/strict";
import { Gate, Hooks } from "../../src/hooks.ts";
import { LikeService } from "../../src/likes/like-service.ts";
import { RelationService } from "../../src/relations/relation-service.ts";
import { CountStore } from "../../src/cache/count-store.ts";
import { counterLogKey } from "../../src/cache/count-keys.ts";
import { CountFeeder } from "../../src/cache/count-feeder.ts";
import { CountReader } from "../../src/cache/count-reader.ts";
import { Reconciler } from "../../src/cache/reconciler.ts";
import { FOLLOWER_COUNTS, LIKE_COUNTS } from "../../src/cache/counter-kinds.ts";
import { connectRedis, type RedisClient } from "../../src/cache/redis-connection.ts";
import { naiveRecountAndOverwrite } from "./negative-controls.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";
import { pollUntil } from "../../support/poll.ts";
import { ParkFirst } from "../support/park-first.ts";
import { TestRedis } from "../../support/redis-server.ts";

interface Lab {
  db: TestDatabase;
  redis: RedisClient;
  server: TestRedis;
  hooks: Hooks;
  likes: LikeService;
  store: CountStore;
  feeder: CountFeeder;
  reader: CountReader;
  reconciler: Reconciler;
}

async function lab(t: { after: (fn: () => Promise<void>) => void }, partitions = 2): Promise<Lab> {
  const db = await createTestDatabase({ partitions });
  const server = await TestRedis.start();
  const redis = await connectRedis(server.url);
  t.after(async () => {
    await redis.close().catch(() => {});
    await server.kill();
    await db.close();
  });
  const hooks = new Hooks();
  const likes = await LikeService.open(db.pool);
  const store = new CountStore(redis, 8);
  const feeder = new CountFeeder(db.pool, store, LIKE_COUNTS, { hooks });
  await feeder.pollOnce(); // sets the cursor at the present
  return {
    db,
    redis,
    server,
    hooks,
    likes,
    store,
    feeder,
    reader: new CountReader(db.pool, store, { localTtlMs: 0 }),
    reconciler: new Reconciler(db.pool, store, { hooks }),
  };
}

async function facts(db: TestDatabase, item: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    "SELECT count(*)::bigint AS n FROM like_fact WHERE item_id = $1 AND liked",
    [item],
  );
  return rows[0]!.n;
}

async function likeMany(likes: LikeService, item: string, from: number, to: number): Promise<void> {
  for (let u = from; u < to; u++) await likes.like(`user-${u}`, item);
}

/** Likes by users who never liked `item`: every one is asserted CHANGED, so each is an event and a live increment. */
async function likeNew(likes: LikeService, item: string, from: number, to: number): Promise<void> {
  for (let u = from; u < to; u++)
    assert.equal((await likes.like(`user-${u}`, item)).outcome, "CHANGED", `user-${u} had not liked ${item}`);
}

test("like counts are served from Redis: a miss backfills from the facts, increments follow the commits", async (t) => {
  const { db, likes, feeder, reader } = await lab(t);
  await likes.createItem("item-a");
  await likeMany(likes, "item-a", 0, 10);
  const first = await reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 });
  assert.deepEqual([first.source, first.count], ["cache", 10]);
  await likeMany(likes, "item-a", 10, 15);
  await likes.unlike("user-0", "item-a");
  await feeder.pollOnce();
  const after = await reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 });
  assert.deepEqual([after.source, after.count], ["cache", await facts(db, "item-a")]);
  assert.equal(after.count, 14);
  const exact = await reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0, exact: true });
  assert.equal(exact.source, "database");
});

test("follower counts are served from Redis and follow follows and unfollows", async (t) => {
  const { db, store, reader } = await lab(t);
  const relations = await RelationService.open(db.pool);
  for (const a of ["alice", "bob", "carol", "dave"]) await relations.upsertAccount(a);
  const feeder = new CountFeeder(db.pool, store, FOLLOWER_COUNTS);
  await feeder.pollOnce();
  await relations.follow("bob", "alice");
  assert.deepEqual(await reader.read(FOLLOWER_COUNTS, "alice", { allowedLag: 0 }).then((r) => [r.source, r.count]), [
    "cache",
    1,
  ]);
  await relations.follow("carol", "alice");
  await relations.follow("dave", "alice");
  await relations.unfollow("bob", "alice");
  await feeder.pollOnce();
  assert.equal((await reader.read(FOLLOWER_COUNTS, "alice", { allowedLag: 0 })).count, 2);
});

test("an increment lost after the commit is an undercount the reconciliation finds (+1) and repairs; a replayed one an overcount (-1)", async (t) => {
  const { db, redis, hooks, likes, store, feeder, reader, reconciler } = await lab(t);
  await likes.createItem("item-a");
  await likes.createItem("item-b");
  await reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 });
  await reader.read(LIKE_COUNTS, "item-b", { allowedLag: 0 });
  await likeMany(likes, "item-a", 0, 5);
  await likeMany(likes, "item-b", 0, 5);
  hooks.on("cache.beforeIncrement", (c) => {
    if (c.target === "item-a" && c.actor === "user-3") c.drop = true;
  });
  hooks.on("cache.afterIncrement", async (c) => {
    // A blind replay of the same increment (what an offline queue would do after a reconnect).
    if (c.target === "item-b" && c.actor === "user-2")
      await redis.sendCommand(["HINCRBY", store.counterKey("likes", "item-b"), `b${store.bucketOf("user-2")}`, "1"]);
  });
  await feeder.pollOnce();
  assert.equal((await reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 })).count, 4);
  assert.equal((await reader.read(LIKE_COUNTS, "item-b", { allowedLag: 0 })).count, 6);
  const report = await reconciler.reconcile(LIKE_COUNTS);
  const drift = Object.fromEntries(report.drifted.map((d) => [d.target, d.drift]));
  assert.deepEqual(drift, { "item-a": 1, "item-b": -1 });
  assert.equal((await reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 })).count, await facts(db, "item-a"));
  assert.equal((await reader.read(LIKE_COUNTS, "item-b", { allowedLag: 0 })).count, await facts(db, "item-b"));
  const { rows } = await db.pool.query(
    "SELECT target, drift::int AS drift FROM count_drift_history WHERE kind = 'likes' ORDER BY target",
  );
  assert.deepEqual(rows, [
    { target: "item-a", drift: 1 },
    { target: "item-b", drift: -1 },
  ]);
  const again = await reconciler.reconcile(LIKE_COUNTS);
  assert.deepEqual([again.visited, again.drifted.length], [0, 0], "a second run visits only what changed since");
});

/**
 * Runs a repair, and while it is parked between its recount and its install, 20 likes by users
 * `racingFrom`.. who had not liked item-a commit and are fed: real changes in the live buckets.
 */
async function repairRacingWriters(
  l: Lab,
  racingFrom: number,
  repair: () => Promise<unknown>,
): Promise<{ shown: number; truth: number }> {
  const gate = new Gate("reconcile.beforeInstall");
  const off = l.hooks.on("reconcile.beforeInstall", gate.handler);
  const running = repair();
  await gate.waitArrived();
  await likeNew(l.likes, "item-a", racingFrom, racingFrom + 20);
  await l.feeder.pollOnce();
  gate.release();
  await running;
  off();
  return {
    shown: (await l.reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 })).count,
    truth: await facts(l.db, "item-a"),
  };
}

test("negative control: the naive recount-and-overwrite loses the increments made during it; the split counter loses none", async (t) => {
  const l = await lab(t);
  await l.likes.createItem("item-a");
  await l.reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 });
  await likeMany(l.likes, "item-a", 0, 10);
  await l.feeder.pollOnce();
  const naive = await repairRacingWriters(l, 100, () =>
    naiveRecountAndOverwrite(l.db.pool, l.store, LIKE_COUNTS, "item-a", l.hooks),
  );
  assert.equal(naive.truth - naive.shown, 20, `naive overwrite lost ${naive.truth - naive.shown} increments`);
  t.diagnostic(`naive recount-and-overwrite lost ${naive.truth - naive.shown} of 20 concurrent increments`);
  await l.reconciler.reconcile(LIKE_COUNTS); // repairs what the naive run lost
  await likeMany(l.likes, "item-a", 200, 202); // a change, so the next run visits item-a
  await l.feeder.pollOnce();
  const split = await repairRacingWriters(l, 300, () => l.reconciler.reconcile(LIKE_COUNTS));
  assert.equal(split.shown, split.truth, "the split reconciliation lost nothing");
  assert.equal(split.truth, 10 + 20 + 2 + 20, "the 20 likes racing the split run were new likes");
});

test("a reconciliation racing live likes loses none: likes fed between its truth read and its install stay in the live buckets", async (t) => {
  const l = await lab(t);
  await l.likes.createItem("item-a");
  await l.reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 });
  await likeNew(l.likes, "item-a", 0, 10);
  await l.feeder.pollOnce();
  const gate = new Gate("reconcile.beforeInstall");
  l.hooks.on("reconcile.beforeInstall", gate.handler);
  const running = l.reconciler.reconcile(LIKE_COUNTS);
  await gate.waitArrived();
  await likeNew(l.likes, "item-a", 10, 30);
  await l.feeder.pollOnce();
  const key = l.store.counterKey("likes", "item-a");
  const logged = await l.redis.sendCommand<string[]>(["HKEYS", counterLogKey("likes", "item-a")]);
  assert.equal(logged.length, 30, "the 20 racing likes are logged next to the 10 the run's truth counts");
  gate.release();
  const report = await running;
  assert.deepEqual(report.drifted, [], "nothing was lost or doubled before the run");
  assert.equal(
    (await l.redis.sendCommand<string[]>(["HKEYS", counterLogKey("likes", "item-a")])).length,
    20,
    "the install absorbed the 10 at or below its boundary and kept the 20 above",
  );
  const [base, ...buckets] = await l.redis.sendCommand<(string | null)[]>([
    "HMGET",
    key,
    "base",
    ...Array.from({ length: 8 }, (_, i) => `b${i}`),
  ]);
  assert.deepEqual(
    [Number(base), buckets.reduce((sum, b) => sum + Number(b ?? 0), 0)],
    [10, 20],
    "base = the run's truth, the live buckets = the racing likes",
  );
  assert.equal((await l.reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 })).count, 30);
  assert.equal(await facts(l.db, "item-a"), 30);
  const next = await l.reconciler.reconcile(LIKE_COUNTS);
  assert.deepEqual(
    [next.visited, next.drifted.length],
    [1, 0],
    "the next run folds the racing likes into the base without drift",
  );
  assert.equal((await l.reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 })).count, 30);
});

test("a reconciliation running whole while a feeder pass is parked mid-way keeps the increments that pass already applied", async (t) => {
  const l = await lab(t);
  await l.likes.createItem("item-a");
  await l.reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 });
  await likeNew(l.likes, "item-a", 0, 10);
  await l.feeder.pollOnce();
  await likeNew(l.likes, "item-a", 10, 30);
  // The pass applies 10 of the 20 new likes, then parks before the 11th; its cursor is written
  // only when the pass ends, so the run's boundary is below all 20.
  const parked = new ParkFirst("cache.beforeIncrement");
  let seen = 0;
  l.hooks.on("cache.beforeIncrement", async (c) => {
    if (++seen === 11) parked.arm();
    await parked.handler(c);
  });
  const feeding = l.feeder.pollOnce();
  await parked.parked();
  assert.equal((await l.reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 })).count, 20);
  const report = await l.reconciler.reconcile(LIKE_COUNTS);
  assert.deepEqual([report.installed, report.drifted.length], [1, 0]);
  assert.equal(
    (await l.reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 })).count,
    20,
    "the 10 increments above the boundary survive the install",
  );
  parked.release();
  assert.equal(await feeding, 20);
  assert.equal((await l.reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 })).count, await facts(l.db, "item-a"));
  assert.equal(await facts(l.db, "item-a"), 30);
});

/**
 * A backfill parked between its truth read and its install (cache.beforeBackfill) while new
 * likes and an unlike commit and are fed to the absent counter (they wait in its log), and more
 * commit that are fed only after the install. Increments fed before the truth read are logged at
 * or below its boundary and absorbed; those fed in the window are above it and kept.
 */
test("a backfill racing fed increments ends equal to the facts: increments logged before its truth read are absorbed, those fed between its truth read and its install kept", async (t) => {
  const l = await lab(t);
  const reader = new CountReader(l.db.pool, l.store, { localTtlMs: 0, hooks: l.hooks });
  await l.likes.createItem("item-b");
  await likeNew(l.likes, "item-b", 0, 6);
  await l.feeder.pollOnce();
  const key = l.store.counterKey("likes", "item-b");
  assert.deepEqual(
    [
      await l.redis.sendCommand<number>(["EXISTS", key]),
      await l.redis.sendCommand<number>(["HLEN", counterLogKey("likes", "item-b")]),
    ],
    [0, 6],
    "the counter is absent; the fed increments wait in its log",
  );
  const gate = new Gate("cache.beforeBackfill");
  l.hooks.on("cache.beforeBackfill", gate.handler);
  const reading = reader.read(LIKE_COUNTS, "item-b", { allowedLag: 0 });
  assert.equal((await gate.waitArrived()).truth, 6);
  await likeNew(l.likes, "item-b", 6, 26);
  assert.equal((await l.likes.unlike("user-0", "item-b")).outcome, "CHANGED");
  await l.feeder.pollOnce();
  await likeNew(l.likes, "item-b", 26, 30); // committed in the window, fed after the install
  gate.release();
  const first = await reading;
  assert.deepEqual(
    [first.source, first.count],
    ["cache", 6 + 20 - 1],
    "the truth read plus the 21 events fed in the window",
  );
  await l.feeder.pollOnce();
  const settled = await reader.read(LIKE_COUNTS, "item-b", { allowedLag: 0 });
  assert.equal(settled.count, await facts(l.db, "item-b"));
  assert.equal(settled.count, 29);
  const report = await l.reconciler.reconcile(LIKE_COUNTS);
  assert.deepEqual(report.drifted, [], "the reconciliation finds nothing to repair");
});

test("a backfill racing a feeder pass held since before its truth read: the held increments are refused after the install, since the truth has them", async (t) => {
  const l = await lab(t);
  await l.likes.createItem("item-b");
  await likeNew(l.likes, "item-b", 0, 6);
  const parked = new ParkFirst("cache.beforeIncrement");
  l.hooks.on("cache.beforeIncrement", parked.handler);
  parked.arm();
  const feeding = l.feeder.pollOnce();
  await parked.parked();
  const first = await l.reader.read(LIKE_COUNTS, "item-b", { allowedLag: 0 });
  assert.deepEqual([first.source, first.count], ["cache", 6], "backfilled from the facts");
  parked.release();
  assert.equal(await feeding, 6);
  assert.equal(
    (await l.reader.read(LIKE_COUNTS, "item-b", { allowedLag: 0 })).count,
    6,
    "the 6 late increments are at or below the installed boundary: refused",
  );
  await likeNew(l.likes, "item-b", 6, 9);
  await l.feeder.pollOnce();
  assert.equal((await l.reader.read(LIKE_COUNTS, "item-b", { allowedLag: 0 })).count, await facts(l.db, "item-b"));
  assert.equal(await facts(l.db, "item-b"), 9);
});

test("two feeders over one Redis (two serve processes) feed the same events: each increment applies once, and the count equals the facts", async (t) => {
  const l = await lab(t);
  await l.likes.createItem("item-f");
  await l.reader.read(LIKE_COUNTS, "item-f", { allowedLag: 0 });
  await likeNew(l.likes, "item-f", 0, 10);
  // Feeder A applies the first increment and parks before writing its cursor; feeder B, another
  // process's, reads the same cursor and feeds all 10, then A goes on with the other 9.
  const parked = new ParkFirst("cache.afterIncrement");
  l.hooks.on("cache.afterIncrement", parked.handler);
  parked.arm();
  const feedingA = l.feeder.pollOnce();
  await parked.parked();
  const feederB = new CountFeeder(l.db.pool, l.store, LIKE_COUNTS);
  assert.equal(await feederB.pollOnce(), 10, "B saw all 10 events above the shared cursor");
  assert.equal((await l.reader.read(LIKE_COUNTS, "item-f", { allowedLag: 0 })).count, 10);
  parked.release();
  assert.equal(await feedingA, 10);
  assert.equal((await l.reader.read(LIKE_COUNTS, "item-f", { allowedLag: 0 })).count, await facts(l.db, "item-f"));
  assert.equal(await facts(l.db, "item-f"), 10);
});

test("an increment that fails leaves the feeder's cursor below it: the next pass applies it, and the ones before it are not applied again", async (t) => {
  const l = await lab(t);
  await l.likes.createItem("item-f");
  await l.reader.read(LIKE_COUNTS, "item-f", { allowedLag: 0 });
  await likeNew(l.likes, "item-f", 0, 5);
  await l.feeder.pollOnce();
  await likeNew(l.likes, "item-f", 5, 10);
  // The third increment of the pass meets a log key of the wrong type: Redis refuses the script (WRONGTYPE).
  const log = counterLogKey("likes", "item-f");
  let seen = 0;
  let saved: Record<string, string> = {};
  l.hooks.on("cache.beforeIncrement", async () => {
    if (++seen !== 3) return;
    saved = await l.redis.hGetAll(log);
    await l.redis.sendCommand(["DEL", log]);
    await l.redis.sendCommand(["SET", log, "not a hash"]);
  });
  await assert.rejects(l.feeder.pollOnce(), /WRONGTYPE/);
  assert.equal(
    (await l.reader.read(LIKE_COUNTS, "item-f", { allowedLag: 0 })).count,
    7,
    "two of the five were applied",
  );
  await l.redis.sendCommand(["DEL", log]);
  await l.redis.sendCommand(["HSET", log, ...Object.entries(saved).flat()]);
  assert.equal(await l.feeder.pollOnce(), 3, "the next pass starts at the failed event");
  assert.equal((await l.reader.read(LIKE_COUNTS, "item-f", { allowedLag: 0 })).count, await facts(l.db, "item-f"));
  assert.equal(await facts(l.db, "item-f"), 10);
});

test("FLUSHALL and a Redis killed and restarted empty: reads fall back, then backfill; after one reconciliation counts equal the facts", async (t) => {
  const l = await lab(t);
  await l.likes.createItem("item-a");
  await likeMany(l.likes, "item-a", 0, 5);
  assert.equal((await l.reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 })).source, "cache");
  await l.redis.flushAll();
  await likeMany(l.likes, "item-a", 5, 8);
  await l.feeder.pollOnce(); // the cursor was flushed too: it restarts at the present
  assert.deepEqual(await l.reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 }).then((r) => [r.source, r.count]), [
    "cache",
    8,
  ]);

  await l.server.kill();
  await likeMany(l.likes, "item-a", 8, 12); // writes are unaffected
  const down = await l.reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 });
  assert.equal(down.source, "database");
  await assert.rejects(l.feeder.pollOnce());
  await l.server.restart();
  await pollUntil(
    "the client reconnects",
    async () => l.redis.isReady,
    (ready) => ready,
    15_000,
    20,
  );
  await l.feeder.pollOnce();
  await likeMany(l.likes, "item-a", 12, 14);
  await l.feeder.pollOnce();
  const back = await l.reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 });
  assert.equal(back.source, "cache");
  await l.reconciler.reconcile(LIKE_COUNTS);
  assert.equal((await l.reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 })).count, await facts(l.db, "item-a"));
});

test("events committed but not yet through the feeder are not drift: the boundary is the lower of the outbox position and the feeder's cursor", async (t) => {
  const { db, likes, feeder, reader, reconciler } = await lab(t);
  await likes.createItem("item-a");
  await reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 });
  await likeMany(likes, "item-a", 0, 5);
  await feeder.pollOnce();
  await likeMany(likes, "item-a", 5, 9); // committed, not fed
  const report = await reconciler.reconcile(LIKE_COUNTS);
  assert.deepEqual(report.drifted, [], "the unfed events are above the boundary, not drift");
  assert.equal((await reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 })).count, 5);
  await feeder.pollOnce();
  assert.equal((await reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 })).count, await facts(db, "item-a"));
  const next = await reconciler.reconcile(LIKE_COUNTS);
  assert.deepEqual(
    [next.visited, next.drifted.length],
    [1, 0],
    "the next run takes the fed events into the base, without drift",
  );
});

test("follower counters: a lost increment is +1 drift repaired by the reconciliation; unfed follows and unfollows are not drift", async (t) => {
  const { db, hooks, store, reader } = await lab(t);
  const relations = await RelationService.open(db.pool);
  for (const a of ["alice", "bob", "carol", "dave", "erin"]) await relations.upsertAccount(a);
  const feeder = new CountFeeder(db.pool, store, FOLLOWER_COUNTS, { hooks });
  const reconciler = new Reconciler(db.pool, store, { hooks });
  await feeder.pollOnce();
  await reader.read(FOLLOWER_COUNTS, "alice", { allowedLag: 0 });
  hooks.on("cache.beforeIncrement", (c) => {
    if (c.actor === "carol") c.drop = true;
  });
  await relations.follow("bob", "alice");
  await relations.follow("carol", "alice");
  await feeder.pollOnce();
  await relations.follow("dave", "alice"); // committed, not fed
  await relations.unfollow("bob", "alice");
  const report = await reconciler.reconcile(FOLLOWER_COUNTS);
  assert.deepEqual(
    report.drifted.map((d) => [d.target, d.drift]),
    [["alice", 1]],
  );
  await feeder.pollOnce();
  const truth = (
    await db.pool.query<{ n: number }>(
      "SELECT count(*)::bigint AS n FROM relation WHERE followee = 'alice' AND state = 'ACTIVE'",
    )
  ).rows[0]!.n;
  assert.equal((await reader.read(FOLLOWER_COUNTS, "alice", { allowedLag: 0 })).count, truth);
  assert.equal(truth, 2);
});
