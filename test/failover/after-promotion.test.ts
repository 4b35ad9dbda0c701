/**
 * Two identities handed outside the database, after a real PostgreSQL promotion that lost a tail
 * (docs/failover.md): freshness tokens, and the Redis count layer on a real Redis Cluster.
 *
 * One promotion serves both: a primary, a streaming standby (support/standby.ts) and a Redis
 * Cluster of three masters with a replica each (support/redis-cluster.ts). Writes before the cut
 * reach the standby; then the standby's WAL receiver is stopped (primary_conninfo emptied) and a
 * tail is written on the primary alone: its freshness token is minted, and the count feeder carries
 * it into Redis. The old primary is stopped, the standby promoted (timeline 2), and a new standby
 * is made of the promoted one, streaming on timeline 2 past the lost token's WAL position.
 *
 * Redis is not promoted here: what a PostgreSQL promotion leaves in Redis is a layer fed from the
 * old primary, its stored timeline (hash sl:v2:timeline) 1 while the database writes 2, its cursor
 * past positions the new primary hands out again and its counters holding the lost tail. This rig
 * makes exactly that state with a real promotion; a Redis Cluster failover is a different event,
 * covered by test/cache/redis-cluster-failover.test.ts.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { rm } from "node:fs/promises";
import type { AddressInfo } from "node:net";
import path from "node:path";
import type { FastifyInstance } from "fastify";
import pg from "pg";
import { buildApp } from "../../src/api/app.ts";
import { signToken } from "../../src/api/auth.ts";
import { openCountLayer, type CountLayer } from "../../src/cache/count-layer.ts";
import { cursorKey, kindKeyPatterns, timelineKey } from "../../src/cache/count-keys.ts";
import { LIKE_COUNTS } from "../../src/cache/counter-kinds.ts";
import { EmbeddedCluster, clusterTempDir } from "../../src/db/embedded-cluster.ts";
import { initLedger } from "../../src/db/ledger-config.ts";
import { migrate } from "../../src/db/migrate.ts";
import { createPool, type Pool } from "../../src/db/pool.ts";
import { openLedger, type Ledger } from "../../src/ledger.ts";
import { ReplicaRouter } from "../../src/replicas/replica-router.ts";
import { parseFreshnessToken, parseLsn } from "../../src/replicas/wal-position.ts";
import { pollUntil } from "../../support/poll.ts";
import { TestRedisCluster } from "../../support/redis-cluster.ts";
import { TestStandby } from "../../support/standby.ts";
import { feederWithoutRealign } from "./negative-controls.ts";

const ITEMS = 6;
const secret = new Uint8Array(randomBytes(32));

interface Reply {
  status: number;
  body: Record<string, unknown>;
  freshness: string | null;
  readFrom: string | null;
  freshnessStatus: string | null;
}

interface Api {
  app: FastifyInstance;
  call(
    method: string,
    url: string,
    options?: { as?: string; admin?: boolean; headers?: Record<string, string> },
  ): Promise<Reply>;
}

async function startApi(ledger: Ledger, router: ReplicaRouter): Promise<Api> {
  await router.checkNow();
  const app = await buildApp({ ledger, jwtSecret: secret, logger: false, replicas: router });
  await app.listen({ port: 0, host: "127.0.0.1" });
  const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  return {
    app,
    async call(method, url, o = {}) {
      const headers: Record<string, string> = { ...o.headers };
      if (o.as) headers.authorization = `Bearer ${await signToken(secret, o.as, { admin: o.admin ?? false })}`;
      const res = await fetch(`${base}${url}`, { method, headers });
      const text = await res.text();
      return {
        status: res.status,
        body: (text ? JSON.parse(text) : undefined) as Record<string, unknown>,
        freshness: res.headers.get("x-ledger-freshness"),
        readFrom: res.headers.get("x-ledger-read-from"),
        freshnessStatus: res.headers.get("x-ledger-freshness-status"),
      };
    },
  };
}

async function superuser<T extends pg.QueryResultRow>(url: string, sql: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<T>(sql)).rows;
  } finally {
    await client.end();
  }
}

async function likeFacts(pool: Pool, item: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM like_fact WHERE item_id = $1 AND liked",
    [item],
  );
  return rows[0]!.n;
}

let root: string;
let oldPrimary: EmbeddedCluster;
let promoted: TestStandby;
let replica: TestStandby;
let redisCluster: TestRedisCluster;
let pool: Pool;
let replicaPool: Pool;
let ledger: Ledger;
/** The tokens minted before the promotion: of a write the standby received, and of one it never did. */
let survivedToken: string;
let lostToken: string;
/** The count layer's Redis keys as the old primary's feeder left them. */
let cursorBefore: Record<string, string>;

before(async () => {
  root = await clusterTempDir("ledger-after-promotion-");
  oldPrimary = await EmbeddedCluster.start({ dataDir: path.join(root, "primary") });
  const oldPool = createPool({ connectionString: oldPrimary.connectionString(), max: 6 });
  await migrate(oldPool);
  await initLedger(oldPool, { partitions: 2 });
  const oldLedger = await openLedger(oldPool);
  promoted = await TestStandby.fromPrimary(oldPrimary, { dataDir: path.join(root, "standby") });
  const standbyPool = createPool({ connectionString: promoted.connectionString(), max: 2, connectionTimeoutMs: 1_000 });
  redisCluster = await TestRedisCluster.start();
  const oldCounts = await openCountLayer(oldPool, { redisUrl: redisCluster.url, reconcileIntervalMs: 3_600_000 });
  const oldRouter = new ReplicaRouter(oldPool, [{ name: "replica-0", pool: standbyPool }], {
    maxLagMs: 60_000,
    tokenWaitMs: 50,
    checkEveryMs: 60_000,
  });
  const oldApi = await startApi(oldLedger, oldRouter);

  for (let i = 0; i < ITEMS; i++) await oldLedger.likes.createItem(`item${i}`);
  await oldCounts.feed(); // the feeder's cursor starts at the present
  for (let i = 0; i < ITEMS; i++) for (let u = 0; u < 3; u++) await oldLedger.likes.like(`before${u}`, `item${i}`);
  const survived = await oldApi.call("PUT", "/v1/items/item0/likes/me", { as: "survivor" });
  assert.equal(survived.status, 200, JSON.stringify(survived.body));
  survivedToken = survived.freshness!;
  await promoted.catchUp();

  // The standby stops receiving WAL: everything committed from here on exists on the old primary only.
  await superuser(promoted.connectionString(), "ALTER SYSTEM SET primary_conninfo = ''");
  await superuser(promoted.connectionString(), "SELECT pg_reload_conf()");
  await pollUntil(
    "the standby's WAL receiver stopped",
    () => superuser<{ n: number }>(promoted.connectionString(), "SELECT count(*)::int AS n FROM pg_stat_wal_receiver"),
    (rows) => rows[0]!.n === 0,
    30_000,
  );
  const lost = await oldApi.call("PUT", "/v1/items/item1/likes/me", { as: "lost-writer" });
  assert.equal(lost.status, 200, JSON.stringify(lost.body));
  lostToken = lost.freshness!;
  for (let i = 0; i < ITEMS; i++) for (let u = 0; u < 4; u++) await oldLedger.likes.like(`tail${u}`, `item${i}`);
  // The tail reaches Redis: fed, and every counter read (so every item has keys, in several slots).
  while ((await oldCounts.feed()) > 0);
  for (let i = 0; i < ITEMS; i++) await oldCounts.reader.read(LIKE_COUNTS, `item${i}`, { allowedLag: 1_000_000 });
  await oldCounts.feed();
  cursorBefore = { ...(await oldCounts.redis!.hGetAll(cursorKey("likes"))) };
  await oldApi.app.close();
  await oldRouter.stop();
  await oldCounts.close();
  await oldPool.end();
  await oldPrimary.stop();

  await promoted.promote();
  pool = createPool({ connectionString: promoted.connectionString(), max: 6 });
  ledger = await openLedger(pool);
  // The new primary hands the tail's positions out again, and writes WAL past the lost token's position.
  for (let u = 0; u < 2; u++) for (let i = 0; i < ITEMS; i++) await ledger.likes.like(`after${u}`, `item${i}`);
  const lostLsn = parseFreshnessToken(lostToken).lsn;
  for (let n = 0; ; n++) {
    const { rows } = await pool.query<{ lsn: string }>("SELECT pg_current_wal_lsn()::text AS lsn");
    if (parseLsn(rows[0]!.lsn) > lostLsn) break;
    await ledger.likes.like(`filler${n}`, "item5");
    await pool.query("SELECT pg_switch_wal()");
  }
  const promotedAsPrimary = {
    dataDir: promoted.dataDir,
    connectionString: (database?: string) => promoted.connectionString(database),
  } as unknown as EmbeddedCluster;
  replica = await TestStandby.fromPrimary(promotedAsPrimary, { dataDir: path.join(root, "replica"), name: "replica2" });
  await replica.catchUp();
  replicaPool = createPool({ connectionString: replica.connectionString(), max: 4, connectionTimeoutMs: 1_000 });
});

after(async () => {
  await replicaPool?.end().catch(() => undefined);
  await pool?.end().catch(() => undefined);
  await replica?.stop();
  await promoted?.stop();
  await oldPrimary?.stop().catch(() => undefined);
  await redisCluster?.stop();
  await rm(root, { recursive: true, force: true });
});

test("freshness tokens across a promotion: a token of a write the standby received is honoured by a replica of the new timeline, a token of a lost write is answered by the primary and reported lost, a future timeline is a 400; the unqualified comparison (negative control) accepts the lost token at a replica that lacks the write", async (t) => {
  const survived = parseFreshnessToken(survivedToken);
  const lost = parseFreshnessToken(lostToken);
  assert.deepEqual([survived.timeline, lost.timeline], [1, 1], "tokens minted on timeline 1");
  const history = (
    await pool.query<{ timeline: number; switched_at: string }>(
      "SELECT timeline, switched_at::text AS switched_at FROM ledger_timeline_history(ledger_timeline())",
    )
  ).rows;
  assert.equal(history.length, 1, JSON.stringify(history));
  const switchedAt = parseLsn(history[0]!.switched_at);
  assert.equal(history[0]!.timeline, 1);
  assert.ok(survived.lsn <= switchedAt && switchedAt < lost.lsn, "the history separates the two writes");
  assert.ok(parseLsn(await replica.replayLsn()) >= lost.lsn, "the replica has replayed past the lost token's position");
  assert.equal(await likeFacts(replicaPool, "item1"), await likeFacts(pool, "item1"));
  assert.equal(
    (await replicaPool.query("SELECT 1 FROM like_fact WHERE user_id = 'lost-writer' AND liked")).rows.length,
    0,
    "the lost write is on neither the new primary nor its replica",
  );

  // The like-count read answers the consumer's like_count (with its lag and pendingForItem), not the
  // facts, and no consumer has run here: apply every like event on the new primary, then let the
  // replica replay that, so a count equal to the facts shows which server answered with what.
  await ledger.likeConsumer.drain();
  await replica.catchUp();

  const router = new ReplicaRouter(pool, [{ name: "replica-0", pool: replicaPool }], {
    maxLagMs: 60_000,
    tokenWaitMs: 50,
    checkEveryMs: 60_000,
  });
  t.after(() => router.stop());
  const api = await startApi(ledger, router);
  t.after(() => api.app.close());

  const honoured = await api.call("GET", "/v1/items/item0/like-count", {
    headers: { "x-ledger-freshness": survivedToken },
  });
  assert.equal(honoured.status, 200, JSON.stringify(honoured.body));
  assert.deepEqual(
    [honoured.readFrom, honoured.freshnessStatus],
    ["replica-0", null],
    "a surviving token is honoured by the replica",
  );
  assert.equal(honoured.body.count, await likeFacts(pool, "item0"));

  for (const presented of [
    { headers: { "x-ledger-freshness": lostToken } },
    { query: `?freshness=${encodeURIComponent(lostToken)}` },
  ]) {
    const url = `/v1/items/item1/like-count${"query" in presented ? presented.query : ""}`;
    const read = await api.call("GET", url, "headers" in presented ? { headers: presented.headers } : {});
    assert.equal(read.status, 200, JSON.stringify(read.body));
    assert.deepEqual(
      [read.readFrom, read.freshnessStatus],
      ["primary", "lost"],
      "a lost token is answered by the primary and reported",
    );
    assert.equal(read.body.count, await likeFacts(pool, "item1"));
  }

  // A write of the new timeline answers a token of timeline 2, honoured once the replica replays it.
  const write = await api.call("PUT", "/v1/items/item2/likes/me", { as: "after-promotion" });
  assert.equal(write.status, 200, JSON.stringify(write.body));
  assert.equal(parseFreshnessToken(write.freshness!).timeline, 2);
  await ledger.likeConsumer.drain();
  await replica.catchUp();
  const fresh = await api.call("GET", "/v1/items/item2/like-count", {
    headers: { "x-ledger-freshness": write.freshness! },
  });
  assert.deepEqual([fresh.status, fresh.readFrom, fresh.freshnessStatus], [200, "replica-0", null]);
  assert.equal(fresh.body.count, await likeFacts(pool, "item2"));

  // A timeline this database has not reached, and a malformed token: typed 400s.
  for (const bad of ["3/0/1", "1/zz/1"]) {
    const read = await api.call("GET", "/v1/items/item1/like-count", { headers: { "x-ledger-freshness": bad } });
    assert.equal(read.status, 400, bad);
    assert.equal((read.body as { error?: { code?: string } }).error?.code, "INVALID_INPUT", JSON.stringify(read.body));
  }

  // Negative control: the position alone (the unqualified form) is satisfied by the replica, which does not hold the write.
  const unqualified = lostToken.slice(lostToken.indexOf("/") + 1);
  const stale = await api.call("GET", "/v1/items/item1/like-count", { headers: { "x-ledger-freshness": unqualified } });
  assert.deepEqual([stale.status, stale.readFrom, stale.freshnessStatus], [200, "replica-0", null]);
  t.diagnostic(
    `switch point ${history[0]!.switched_at}; survived token ${survivedToken}, lost token ${lostToken}, replica at ${await replica.replayLsn()}; ` +
      `the unqualified ${unqualified} was served by ${stale.readFrom} without the lost write`,
  );
});

/** Every key of the likes kind (counters, buckets, logs, the reconciled boundary) per master. */
async function likesKeysPerMaster(): Promise<Map<number, number>> {
  const out = new Map<number, number>();
  for (const port of await redisCluster.masterPorts()) {
    let n = 0;
    for (const pattern of kindKeyPatterns("likes")) n += (await redisCluster.keysOn(port, pattern)).length;
    out.set(port, n);
  }
  return out;
}

async function drift(counts: CountLayer): Promise<string[]> {
  const off: string[] = [];
  for (let i = 0; i < ITEMS; i++) {
    const answer = await counts.reader.read(LIKE_COUNTS, `item${i}`, { allowedLag: 1_000_000 });
    const truth = await likeFacts(pool, `item${i}`);
    if (answer.count !== truth) off.push(`item${i}: Redis ${answer.count} (${answer.source}), facts ${truth}`);
  }
  return off;
}

test("Redis Cluster after a promotion: the feeder without realignment (negative control) keeps stale counters; the realignment empties the kind on every master, restarts the cursor at the new primary's outbox end, and counts then equal the facts", async (t) => {
  // No local cache: drift() reads twice within its TTL, and the second reading must be Redis's, not the first one kept in memory.
  const counts = await openCountLayer(pool, {
    redisUrl: redisCluster.url,
    reconcileIntervalMs: 3_600_000,
    localTtlMs: 0,
  });
  t.after(() => counts.close());
  const redis = counts.redis!;
  assert.equal(await redis.sendCommand<string | null>(["HGET", timelineKey(), "likes"]), "1", "fed from timeline 1");
  const before = await likesKeysPerMaster();
  assert.ok(
    [...before.values()].filter((n) => n > 0).length >= 2,
    `the kind's keys on several masters: ${JSON.stringify([...before])}`,
  );
  const outboxEnd = async () =>
    Object.fromEntries(
      (await pool.query<{ part: number; last: string }>("SELECT part, last FROM like_seq")).rows.map((r) => [
        String(r.part),
        String(r.last),
      ]),
    );
  const end = await outboxEnd();
  assert.ok(
    Object.keys(end).some((p) => Number(cursorBefore[p]) > Number(end[p])),
    `the old feeder's cursor ${JSON.stringify(cursorBefore)} is past the new primary's end ${JSON.stringify(end)}`,
  );

  const restore = feederWithoutRealign();
  let stale: string[];
  try {
    await counts.feed();
    stale = await drift(counts);
  } finally {
    restore();
  }
  assert.ok(stale.length > 0, "without realignment Redis still counts the lost tail");

  await counts.feed();
  const afterRealign = await likesKeysPerMaster();
  assert.deepEqual(
    [...afterRealign.values()].filter((n) => n > 0),
    [],
    `no key of the kind left on any master: ${JSON.stringify([...afterRealign])}`,
  );
  assert.equal(await redis.sendCommand<string | null>(["HGET", timelineKey(), "likes"]), "2");
  assert.deepEqual(
    { ...(await redis.hGetAll(cursorKey("likes"))) },
    await outboxEnd(),
    "the cursor restarts at the outbox's end",
  );
  assert.deepEqual(await drift(counts), [], "every count equals the facts after realignment");

  // And it goes on: new writes are fed as increments onto the backfilled counters.
  for (let i = 0; i < ITEMS; i++) await ledger.likes.like("after-realign", `item${i}`);
  while ((await counts.feed()) > 0);
  assert.deepEqual(await drift(counts), []);
  for (let i = 0; i < ITEMS; i++)
    assert.equal(
      (await counts.reader.read(LIKE_COUNTS, `item${i}`, { allowedLag: 0 })).source,
      "cache",
      `item${i} read from Redis`,
    );
  t.diagnostic(`stale without realignment: ${stale.join(", ")}; keys per master before ${JSON.stringify([...before])}`);
});
