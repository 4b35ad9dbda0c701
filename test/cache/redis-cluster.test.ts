import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { Gate, Hooks } from "../../src/hooks.ts";
import { LikeService } from "../../src/likes/like-service.ts";
import { CountStore } from "../../src/cache/count-store.ts";
import { CountFeeder } from "../../src/cache/count-feeder.ts";
import { CountReader } from "../../src/cache/count-reader.ts";
import { Reconciler } from "../../src/cache/reconciler.ts";
import { LIKE_COUNTS } from "../../src/cache/counter-kinds.ts";
import {
  connectRedis,
  parseClusterUrl,
  RedisUrlError,
  routingKey,
  type RedisClient,
} from "../../src/cache/redis-connection.ts";
import { naiveRecountAndOverwrite } from "./negative-controls.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";
import { TestRedisCluster } from "../../support/redis-cluster.ts";
import { ParkFirst } from "../support/park-first.ts";

// One cluster (3 masters, 3 replicas) for the store tests of this file; each test flushes it.
// The failover tests (test/cache/redis-cluster-failover.test.ts) start their own.
let cluster: TestRedisCluster;
before(async () => {
  cluster = await TestRedisCluster.start();
});
after(async () => {
  await cluster?.stop();
});

interface Lab {
  db: TestDatabase;
  redis: RedisClient;
  hooks: Hooks;
  likes: LikeService;
  store: CountStore;
  feeder: CountFeeder;
  reader: CountReader;
  reconciler: Reconciler;
}

async function lab(t: { after: (fn: () => Promise<void>) => void }): Promise<Lab> {
  const db = await createTestDatabase({ partitions: 2 });
  const redis = await connectRedis(cluster.url);
  t.after(async () => {
    await redis.close().catch(() => {});
    await db.close();
  });
  assert.equal(redis.topology, "cluster");
  await redis.flushAll();
  const hooks = new Hooks();
  const likes = await LikeService.open(db.pool);
  const store = new CountStore(redis, 16, { hooks });
  const feeder = new CountFeeder(db.pool, store, LIKE_COUNTS, { hooks });
  await feeder.pollOnce(); // sets the cursor at the present
  return {
    db,
    redis,
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

/** The sum of the live deltas `d` of a counter's buckets, read from the cluster. */
async function bucketSum(store: CountStore, target: string): Promise<number> {
  const deltas = await Promise.all(
    Array.from({ length: store.buckets }, (_, i) =>
      store.redis.sendCommand<string | null>(["HGET", store.bucketKey("likes", target, i), "d"]),
    ),
  );
  return deltas.reduce((sum, d) => sum + Number(d ?? 0), 0);
}

/** The masters that store at least one key matching `pattern` (SCAN on each node: what it really holds). */
async function holders(pattern: string): Promise<number[]> {
  const out: number[] = [];
  for (const port of await cluster.masterPorts()) if ((await cluster.keysOn(port, pattern)).length > 0) out.push(port);
  return out;
}

test("on a Redis Cluster the buckets of one hot item are keys on at least two masters, and a read sums them", async (t) => {
  const { db, likes, store, feeder, reader } = await lab(t);
  await likes.createItem("item-hot");
  await likeMany(likes, "item-hot", 0, 10);
  assert.deepEqual(await reader.read(LIKE_COUNTS, "item-hot", { allowedLag: 0 }).then((r) => [r.source, r.count]), [
    "cache",
    10,
  ]);
  await likeMany(likes, "item-hot", 10, 80);
  await likes.unlike("user-3", "item-hot");
  await feeder.pollOnce();
  const read = await reader.read(LIKE_COUNTS, "item-hot", { allowedLag: 0 });
  assert.deepEqual([read.source, read.count], ["cache", await facts(db, "item-hot")]);
  assert.equal(read.count, 79);

  const bucketHolders = await holders("sl:v2:bkt:{likes:item-hot#*");
  t.diagnostic(
    `16 buckets of item-hot on masters ${bucketHolders.join(", ")} of ${(await cluster.masterPorts()).join(", ")}`,
  );
  assert.ok(bucketHolders.length >= 2, `buckets on ${bucketHolders.length} master(s)`);
  const used = new Set(
    await Promise.all(
      Array.from({ length: 16 }, (_, i) =>
        cluster.cli(bucketHolders[0]!, "CLUSTER", "KEYSLOT", store.bucketKey("likes", "item-hot", i)),
      ),
    ),
  );
  assert.ok(used.size > 1, "every bucket key has a slot of its own hash tag");

  // Negative control of the measure: keys that share one hash tag (what the single-node hash
  // amounts to on a cluster) are all found on one master, so the check above can fail.
  for (let i = 0; i < 16; i++) await store.redis.sendCommand(["SET", `sl:shared:{likes:item-hot}#${i}`, "1"]);
  assert.equal((await holders("sl:shared:{likes:item-hot}#*")).length, 1);
});

test("on a cluster a lost increment is +1 drift and a replayed one -1; one reconciliation repairs both; a second visits nothing", async (t) => {
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
      await redis.sendCommand(["HINCRBY", store.bucketKey("likes", "item-b", store.bucketOf("user-2")), "d", "1"]);
  });
  await feeder.pollOnce();
  assert.equal((await reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 })).count, 4);
  assert.equal((await reader.read(LIKE_COUNTS, "item-b", { allowedLag: 0 })).count, 6);
  const report = await reconciler.reconcile(LIKE_COUNTS);
  assert.deepEqual(Object.fromEntries(report.drifted.map((d) => [d.target, d.drift])), { "item-a": 1, "item-b": -1 });
  assert.equal((await reader.read(LIKE_COUNTS, "item-a", { allowedLag: 0 })).count, await facts(db, "item-a"));
  assert.equal((await reader.read(LIKE_COUNTS, "item-b", { allowedLag: 0 })).count, await facts(db, "item-b"));
  const again = await reconciler.reconcile(LIKE_COUNTS);
  assert.deepEqual([again.visited, again.drifted.length], [0, 0]);
});

test("a bucket lost by its node (the base still there) is noticed by the read and backfilled: no count silently shrinks", async (t) => {
  const { db, likes, store, feeder, reader } = await lab(t);
  await likes.createItem("item-c");
  await reader.read(LIKE_COUNTS, "item-c", { allowedLag: 0 });
  await likeMany(likes, "item-c", 0, 30);
  await feeder.pollOnce();
  const lost = store.bucketOf("user-0");
  await store.redis.sendCommand([
    "DEL",
    store.bucketKey("likes", "item-c", lost),
    store.bucketLogKey("likes", "item-c", lost),
  ]);
  assert.equal(await store.read("likes", "item-c"), undefined, "a missing bucket makes the counter absent");
  assert.deepEqual(await reader.read(LIKE_COUNTS, "item-c", { allowedLag: 0 }).then((r) => [r.source, r.count]), [
    "cache",
    await facts(db, "item-c"),
  ]);
});

/**
 * A repair parked at `point` while 20 likes by users `racingFrom`.. who had not liked item-r
 * commit and are fed (real changes in the live buckets); what the counter shows in the gap and afterwards.
 */
async function repairRacingWriters(
  l: Lab,
  point: string,
  racingFrom: number,
  repair: () => Promise<unknown>,
): Promise<{ inGap: number; shownInGap: number; shown: number; truth: number }> {
  const gate = new Gate(point);
  const off = l.hooks.on(point, gate.handler);
  const running = repair();
  await gate.waitArrived();
  await likeNew(l.likes, "item-r", racingFrom, racingFrom + 20);
  await l.feeder.pollOnce();
  const shownInGap = (await l.reader.read(LIKE_COUNTS, "item-r", { allowedLag: 0 })).count;
  const inGap = await facts(l.db, "item-r");
  gate.release();
  await running;
  off();
  return {
    inGap,
    shownInGap,
    shown: (await l.reader.read(LIKE_COUNTS, "item-r", { allowedLag: 0 })).count,
    truth: await facts(l.db, "item-r"),
  };
}

test("negative control on a cluster: the naive recount-and-overwrite loses increments made during it; the per-bucket freeze then base install loses none, and reads in between are exact", async (t) => {
  const l = await lab(t);
  await l.likes.createItem("item-r");
  await l.reader.read(LIKE_COUNTS, "item-r", { allowedLag: 0 });
  await likeMany(l.likes, "item-r", 0, 10);
  await l.feeder.pollOnce();
  const naive = await repairRacingWriters(l, "reconcile.beforeInstall", 100, () =>
    naiveRecountAndOverwrite(l.db.pool, l.store, LIKE_COUNTS, "item-r", l.hooks),
  );
  assert.equal(naive.truth - naive.shown, 20, `naive overwrite lost ${naive.truth - naive.shown} increments`);
  await l.reconciler.reconcile(LIKE_COUNTS); // repairs what the naive run lost
  await likeMany(l.likes, "item-r", 200, 202); // a change, so the next run visits item-r
  await l.feeder.pollOnce();
  // Parked after every bucket is frozen and before the base is installed: the widest gap of the split install.
  const split = await repairRacingWriters(l, "cache.afterFreeze", 300, () => l.reconciler.reconcile(LIKE_COUNTS));
  assert.equal(split.shownInGap, split.inGap, "between the freezes and the base install a read is exact");
  assert.equal(split.shown, split.truth, "the split reconciliation lost nothing");
  assert.equal(split.truth, 10 + 20 + 2 + 20, "the 20 likes racing the split run were new likes");
});

test("on a cluster a reconciliation racing live likes loses none: likes fed between its truth read and its freezes are the buckets' part above the boundary", async (t) => {
  const l = await lab(t);
  await l.likes.createItem("item-r");
  await l.reader.read(LIKE_COUNTS, "item-r", { allowedLag: 0 });
  await likeNew(l.likes, "item-r", 0, 10);
  await l.feeder.pollOnce();
  // Parked before the freezes: the 20 racing likes are logged above the boundary when the buckets
  // are frozen, so each bucket's settled part must leave them out.
  const raced = await repairRacingWriters(l, "reconcile.beforeInstall", 10, () => l.reconciler.reconcile(LIKE_COUNTS));
  assert.deepEqual([raced.shownInGap, raced.inGap], [30, 30]);
  assert.deepEqual([raced.shown, raced.truth], [30, 30], "the racing likes stay counted after the run");
  const base = Number(
    await l.redis.sendCommand<string | null>(["HGET", l.store.counterKey("likes", "item-r"), "base"]),
  );
  assert.deepEqual(
    [base, await bucketSum(l.store, "item-r")],
    [0, 30],
    "base = truth (10) - settled (10); the buckets keep their cumulative 30",
  );
  const next = await l.reconciler.reconcile(LIKE_COUNTS);
  assert.deepEqual([next.visited, next.drifted.length], [1, 0], "the next run folds the racing likes in without drift");
  assert.equal((await l.reader.read(LIKE_COUNTS, "item-r", { allowedLag: 0 })).count, 30);
});

test("on a cluster a reconciliation running whole while a feeder pass is parked mid-way keeps the increments that pass already applied", async (t) => {
  const l = await lab(t);
  await l.likes.createItem("item-r");
  await l.reader.read(LIKE_COUNTS, "item-r", { allowedLag: 0 });
  await likeNew(l.likes, "item-r", 0, 10);
  await l.feeder.pollOnce();
  await likeNew(l.likes, "item-r", 10, 30);
  // The pass applies 10 of the 20 new likes and parks before the 11th; its cursor is written only
  // when the pass ends, so the run's boundary is below all 20 and the 10 applied are logged above it.
  const parked = new ParkFirst("cache.beforeIncrement");
  let seen = 0;
  l.hooks.on("cache.beforeIncrement", async (c) => {
    if (++seen === 11) parked.arm();
    await parked.handler(c);
  });
  const feeding = l.feeder.pollOnce();
  await parked.parked();
  assert.equal((await l.reader.read(LIKE_COUNTS, "item-r", { allowedLag: 0 })).count, 20);
  const report = await l.reconciler.reconcile(LIKE_COUNTS);
  assert.deepEqual([report.installed, report.drifted.length], [1, 0]);
  assert.equal(
    (await l.reader.read(LIKE_COUNTS, "item-r", { allowedLag: 0 })).count,
    20,
    "the 10 increments above the boundary survive the install",
  );
  parked.release();
  assert.equal(await feeding, 20);
  assert.equal((await l.reader.read(LIKE_COUNTS, "item-r", { allowedLag: 0 })).count, await facts(l.db, "item-r"));
  assert.equal(await facts(l.db, "item-r"), 30);
});

test("on a cluster a backfill racing fed increments ends equal to the facts: each bucket absorbs what it logged before the truth read and keeps what was fed after it", async (t) => {
  const l = await lab(t);
  const reader = new CountReader(l.db.pool, l.store, { localTtlMs: 0, hooks: l.hooks });
  await l.likes.createItem("item-b");
  await likeNew(l.likes, "item-b", 0, 6);
  await l.feeder.pollOnce(); // absent: the increments wait in their buckets' logs
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
  assert.equal(
    await bucketSum(l.store, "item-b"),
    20 - 1,
    "the buckets created by the install hold exactly the window's increments",
  );
  await l.feeder.pollOnce();
  assert.equal((await reader.read(LIKE_COUNTS, "item-b", { allowedLag: 0 })).count, await facts(l.db, "item-b"));
  assert.equal(await facts(l.db, "item-b"), 29);
  assert.deepEqual((await l.reconciler.reconcile(LIKE_COUNTS)).drifted, []);
});

test("REDIS_URL for a cluster: seed nodes, credentials and TLS are read; a URL without nodes or with a bad port is a typed error; EVAL routes by its first key", () => {
  assert.equal(parseClusterUrl("redis://127.0.0.1:6390"), undefined, "a plain URL is one node");
  assert.deepEqual(parseClusterUrl("rediss+cluster://app:s%40cret@10.0.0.1:7000,10.0.0.2"), {
    tls: true,
    username: "app",
    password: "s@cret",
    nodes: [
      { host: "10.0.0.1", port: 7000 },
      { host: "10.0.0.2", port: 6379 },
    ],
  });
  assert.throws(
    () => parseClusterUrl("redis+cluster://"),
    (err: unknown) => err instanceof RedisUrlError && /at least one host:port/.test(err.message),
  );
  assert.throws(
    () => parseClusterUrl("redis+cluster://h:70000"),
    (err: unknown) => err instanceof RedisUrlError && err.code === "REDIS_URL_INVALID",
  );
  assert.equal(routingKey(["EVAL", "return 1", "2", "k1", "k2", "a"]), "k1");
  assert.equal(routingKey(["HGET", "k", "f"]), "k");
});
