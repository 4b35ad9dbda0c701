/**
 * A Redis that does not answer at start must not hold up `serve`; it once hung it forever without a
 * word (it never listened, and SIGTERM left owner.pid behind). Here serve is a real child process
 * on an embedded data directory with REDIS_URL pointing at a port nobody listens on: it listens,
 * logs the count layer `degraded`, answers a like count from PostgreSQL marked `degraded`, and
 * stops cleanly on SIGTERM (owner.pid removed). Started again, it connects in the background
 * once a redis-server appears on that port: it logs `up` and counts come from Redis.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import path from "node:path";
import { TestRedis } from "../../support/redis-server.ts";
import { httpClient, pollUntil, runCli } from "./cli-child.ts";
import { serveLab, type ServeLab } from "./serve-lab.ts";

const LISTENING = /^social-ledger listening on (http:\/\/\S+)$/;
const STATE_LINE = (state: string) => new RegExp(`"counts":\\{"state":"${state}"`);

/** A serve lab whose REDIS_URL names a port where no redis-server listens yet. */
async function lab(t: TestContext): Promise<ServeLab & { redis: TestRedis }> {
  const redis = await TestRedis.notStarted();
  t.after(() => redis.kill());
  return { ...(await serveLab(t, "ledger-redis-down-", { REDIS_URL: redis.url, LOG_LEVEL: "info" })), redis };
}

type CountBody = { count: number; source: string; degraded?: boolean };

test(
  "serve with REDIS_URL to a closed port listens, counts degraded from PostgreSQL, stops cleanly; later Redis on that port: 'up' logged, counts from Redis",
  { timeout: 240_000 },
  async (t) => {
    const { dataDir, env, redis, serve } = await lab(t);
    const [admin, alice] = await Promise.all([
      runCli(["token", "admin", "--admin", "--create-secret"], env),
      runCli(["token", "alice", "--create-secret"], env),
    ]);
    assert.equal(admin.code, 0, admin.stderr);
    const [adminToken, aliceToken] = [admin.stdout.trim(), alice.stdout.trim()];

    const first = serve("serve#1 (Redis down)");
    const address = LISTENING.exec(await first.waitFor(LISTENING, 120_000))![1]!;
    const degraded = JSON.parse(await first.waitFor(STATE_LINE("degraded"))) as { counts: { reason?: string } };
    t.diagnostic(`note degraded line: ${JSON.stringify(degraded.counts)}`);
    assert.match(degraded.counts.reason ?? "", /ECONNREFUSED/, "the log says why");
    const http = httpClient(address);
    assert.equal((await http("PUT", "/v1/items/item-1", adminToken)).status, 200);
    assert.equal((await http("PUT", "/v1/items/item-1/likes/me", aliceToken)).status, 200);
    const fallback = await pollUntil(
      "like count caught up from PostgreSQL",
      async () => (await http<CountBody & { stale: boolean }>("GET", "/v1/items/item-1/like-count?allowedLag=0")).body,
      (b) => !b.stale,
    );
    assert.deepEqual([fallback.source, fallback.count, fallback.degraded], ["database", 1, true]);
    assert.equal((await http<{ counts: string }>("GET", "/readyz")).body.counts, "degraded");
    const metrics = await fetch(new URL("/metrics", address)).then((r) => r.text());
    assert.match(
      metrics,
      /ledger_count_layer_failures_total\{kind="likes",step="feed"\} [1-9]/,
      "the feeder's failed passes are counted",
    );

    const stopped = await first.stop("SIGTERM");
    assert.deepEqual(stopped, { code: 0, signal: null }, first.failure("SIGTERM").message);
    assert.equal(existsSync(path.join(dataDir, "owner.pid")), false, "owner.pid removed");

    const second = serve("serve#2 (Redis comes up)");
    const address2 = LISTENING.exec(await second.waitFor(LISTENING, 60_000))![1]!;
    await second.waitFor(STATE_LINE("degraded"));
    await redis.restart();
    await second.waitFor(STATE_LINE("up"));
    const http2 = httpClient(address2);
    const cached = await pollUntil(
      "like count served from Redis",
      async () => (await http2<CountBody>("GET", "/v1/items/item-1/like-count")).body,
      (b) => b.source === "cache",
    );
    assert.equal(cached.count, 1);
    assert.equal(cached.degraded, undefined, "no degraded marker from the cache");
    assert.equal((await http2<{ counts: string }>("GET", "/readyz")).body.counts, "up");
    assert.deepEqual(await second.stop("SIGTERM"), { code: 0, signal: null });
    assert.equal(existsSync(path.join(dataDir, "owner.pid")), false);
  },
);
