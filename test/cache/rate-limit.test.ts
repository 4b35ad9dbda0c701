/**
 * With REDIS_URL, the per-user write budget lives in the count layer's Redis, so two API
 * processes share one budget (the likes seed: anti-abuse is its own mechanism). Without
 * Redis each process counts alone (the negative control). While Redis is down or hung, each
 * process counts in its own memory (with the plugin's skipOnError the limits would vanish), never a 5xx.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { TestRedis } from "../../support/redis-server.ts";
import { startApi, type ApiHarness } from "../api/harness.ts";

async function twoApis(redisUrl: string | undefined): Promise<[ApiHarness, ApiHarness]> {
  const options = { writesPerMinute: 3, ...(redisUrl ? { redisUrl } : {}) };
  return [await startApi(options), await startApi(options)];
}

async function likeAs(h: ApiHarness, user: string, item: string): Promise<number> {
  // Set up through the library: account setup and PUT /v1/items draw on the admin's write budget too.
  await h.ledger.relations.upsertAccount(user, {});
  await h.ledger.likes.createItem(item);
  return (await (await h.as(user)).put(`/v1/items/${item}/likes/me`)).status;
}

test("two API processes with one Redis share a user's write budget (3/min): the 4th write, on either process, is 429; reads keep their own budget", async (t) => {
  const redis = await TestRedis.start();
  t.after(() => redis.kill());
  const [a, b] = await twoApis(redis.url);
  t.after(async () => {
    await a.close();
    await b.close();
  });
  const statuses = [
    await likeAs(a, "alice", "i1"),
    await likeAs(a, "alice", "i2"),
    await likeAs(b, "alice", "i3"),
    await likeAs(b, "alice", "i4"),
  ];
  t.diagnostic(`note alice's writes over two processes: ${statuses.join(", ")}`);
  assert.deepEqual(statuses, [200, 200, 200, 429]);
  const read = await (await a.as("alice")).get("/v1/items/i1/like-count");
  assert.equal(read.status, 200, `reads have a budget of their own: ${read.text}`);
  assert.equal(await likeAs(b, "bob", "i5"), 200, "the budget is per user");
});

test("negative control: without Redis each API process counts alone, so the same four writes all pass", async (t) => {
  const [a, b] = await twoApis(undefined);
  t.after(async () => {
    await a.close();
    await b.close();
  });
  const statuses = [
    await likeAs(a, "alice", "i1"),
    await likeAs(a, "alice", "i2"),
    await likeAs(b, "alice", "i3"),
    await likeAs(b, "alice", "i4"),
  ];
  assert.deepEqual(statuses, [200, 200, 200, 200]);
});

/** alice's four writes of one like (a repeat is a NOOP, and still a write against her budget) after `outage`; setup goes through the library. */
async function fourWritesDuring(h: ApiHarness, outage: () => Promise<void>): Promise<number[]> {
  await h.ledger.relations.upsertAccount("alice", {});
  await h.ledger.likes.createItem("i1");
  const alice = await h.as("alice");
  await outage();
  const statuses: number[] = [];
  for (let i = 0; i < 4; i++) statuses.push((await alice.put("/v1/items/i1/likes/me")).status);
  return statuses;
}

test("Redis killed: the budget holds in this process (3/min: the 4th write is 429), no 5xx", async (t) => {
  const redis = await TestRedis.start();
  t.after(() => redis.kill());
  const a = await startApi({ writesPerMinute: 3, redisUrl: redis.url });
  t.after(() => a.close());
  const statuses = await fourWritesDuring(a, () => redis.kill());
  t.diagnostic(`note writes while Redis is down: ${statuses.join(", ")}`);
  assert.deepEqual(statuses, [200, 200, 200, 429]);
});

test("Redis hung (SIGSTOP): the budget holds in this process (3/min: the 4th write is 429), no 5xx", async (t) => {
  const redis = await TestRedis.start();
  t.after(() => redis.kill());
  const a = await startApi({ writesPerMinute: 3, redisUrl: redis.url });
  t.after(() => a.close());
  try {
    const statuses = await fourWritesDuring(a, async () => redis.pause());
    t.diagnostic(`note writes while Redis is hung: ${statuses.join(", ")}`);
    assert.deepEqual(statuses, [200, 200, 200, 429]);
  } finally {
    redis.resume();
  }
});
