/**
 * A network partition between the service and its PostgreSQL: packets dropped, no reset. serve
 * runs inside a network namespace (test/support/netns.ts) and reaches PostgreSQL over one veth
 * pair (the backend link); the load reaches serve over another (the front link). Taking the
 * backend link down on the host's side drops every packet both ways, the way a dead host or a
 * cut cable does: no RST, no ICMP, connections just go silent. Under the partition every request
 * is answered, 200 or 503 with Retry-After, within the documented bound (docs/service.md,
 * "Faults"); after the link comes back the same process serves again and nothing acknowledged
 * is lost. The negative control turns the deadlines and keepalive off: a request then waits
 * past the bound (until TCP's own retransmission limit, about 15 minutes).
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { rm } from "node:fs/promises";
import path from "node:path";
import { EmbeddedCluster, clusterTempDir, freePort } from "../../src/db/embedded-cluster.ts";
import { signToken } from "../../src/api/auth.ts";
import { TestRedis } from "../../support/redis-server.ts";
import { LineChild } from "../support/line-child.ts";
import { startClusterOnLink } from "../support/cluster-on-link.ts";
import { NetworkNamespace, type Link } from "../support/netns.ts";
import { BIN, REPO_ROOT, childEnv, httpClient } from "./cli-child.ts";
import { LikeLoad, LOAD_SERVICE_ENV, verifyLikesKept } from "./like-load.ts";

const LISTENING = /^social-ledger listening on (http:\/\/\S+)$/;
const CLIENTS = 8;
const ITEMS = 16;
const LOAD_BEFORE_FAULT = 100;
/** Short deadlines so the test is quick; the bound scales with them (docs/service.md). */
const CONNECT_TIMEOUT_MS = 1_500;
const QUERY_TIMEOUT_MS = 2_000;
/** The documented bound of a request while PostgreSQL cannot be reached: a checkout plus two statement deadlines. */
const BOUND_MS = CONNECT_TIMEOUT_MS + 2 * QUERY_TIMEOUT_MS;
/** Scheduling on a loaded 2-core machine. */
const SLACK_MS = 1_500;

interface Partitioned {
  ns: NetworkNamespace;
  backend: Link;
  /** The link to Redis, when the test asked for one. */
  redisLink?: Link;
  cluster: EmbeddedCluster;
  /** The superuser's URL as the namespace reaches it (over the backend link). */
  url: string;
  secret: string;
  env: NodeJS.ProcessEnv;
  serve: LineChild;
  address: string;
}

async function partitioned(
  t: TestContext,
  deadlines: Record<string, string>,
  options: { redis?: boolean } = {},
): Promise<Partitioned> {
  const root = await clusterTempDir("ledger-partition-");
  const ns = NetworkNamespace.create();
  const children: LineChild[] = [];
  const owned: { cluster?: EmbeddedCluster; redis?: TestRedis } = {};
  t.after(async () => {
    for (const child of children) if (child.alive()) await child.stop("SIGKILL");
    ns.remove();
    await owned.cluster?.stop();
    await owned.redis?.kill();
    await rm(root, { recursive: true, force: true });
  });
  const backend = ns.addLink();
  const front = ns.addLink();
  const redisLink = options.redis ? ns.addLink() : undefined;
  if (redisLink)
    owned.redis = await TestRedis.start(["--bind", "127.0.0.1", redisLink.here.address, "--protected-mode", "no"]);
  const { cluster, url } = await startClusterOnLink(path.join(root, "pgdata"), backend);
  owned.cluster = cluster;
  const secret = randomBytes(32).toString("hex");
  const port = await freePort();
  const env = childEnv({
    DATABASE_URL: url,
    LEDGER_DATA_DIR: path.join(root, "data"),
    LEDGER_JWT_SECRET: secret,
    HOST: front.there.address,
    PORT: String(port),
    LOG_LEVEL: "info",
    LEDGER_AUDIT_EVERY_MS: "0",
    ...LOAD_SERVICE_ENV,
    ...(redisLink ? { REDIS_URL: `redis://${redisLink.here.address}:${owned.redis!.port}` } : {}),
    ...deadlines,
  });
  const serve = new LineChild("serve (in the namespace)", [BIN, "serve"], { cwd: REPO_ROOT, env, wrapper: ns.exec });
  children.push(serve);
  const address = LISTENING.exec(await serve.waitFor(LISTENING, 90_000))![1]!;
  return { ns, backend, redisLink, cluster, url, secret, env, serve, address };
}

/** ledger_database_refusals_total{reason} from serve's /metrics. */
async function refusals(address: string): Promise<Record<string, number>> {
  const text = await (await fetch(new URL("/metrics", address))).text();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^ledger_database_refusals_total\{reason="(\w+)"\} (\d+)/gm)) out[m[1]!] = Number(m[2]);
  return out;
}

test(
  "PostgreSQL partitioned away (packets dropped, no reset) under HTTP load: every request answers within the bound (200 or 503 with Retry-After), the same process serves again after the link returns, nothing acknowledged lost",
  { timeout: 240_000 },
  async (t) => {
    const p = await partitioned(t, {
      LEDGER_PG_CONNECT_TIMEOUT_MS: String(CONNECT_TIMEOUT_MS),
      LEDGER_PG_QUERY_TIMEOUT_MS: String(QUERY_TIMEOUT_MS),
      LEDGER_PG_KEEPALIVE_MS: "1000",
    });
    const call = httpClient(p.address);
    const load = await LikeLoad.prepare(p.address, p.secret, { clients: CLIENTS, items: ITEMS });
    load.start();
    await load.until("load running", (f) => f.acknowledged >= LOAD_BEFORE_FAULT);
    const before = load.figures.slowestMs;
    load.figures.slowestMs = 0;
    p.ns.cut(p.backend);
    // Every client waits out at least one deadline, then keeps retrying on 503s.
    const during = await load
      .until("every client saw the partition", (f) => f.unavailable >= 3 * CLIENTS, 120_000)
      .catch((err: unknown) => {
        const errors = p.serve.lines.filter((l) => /"level":50/.test(l)).slice(0, 3);
        throw new Error(`${(err as Error).message}\nserve's errors:\n${errors.join("\n")}`);
      });
    const ready = await call<{ error: { code: string } }>("GET", "/readyz");
    const byReason = await refusals(p.address);
    const slowest = load.figures.slowestMs;
    p.ns.restore(p.backend);
    const after = await load.until("service resumed", (f) => f.acknowledgedAfterOutage >= LOAD_BEFORE_FAULT, 120_000);
    await load.stop();
    t.diagnostic(
      `note slowest request before the cut ${before.toFixed(0)} ms, under the partition ${slowest.toFixed(0)} ms (bound ${BOUND_MS} ms + ${SLACK_MS} ms slack); 503 during=${during.unavailable}; refusals by reason ${JSON.stringify(byReason)}; acknowledged after=${after.acknowledgedAfterOutage}`,
    );
    assert.deepEqual(after.unexpected, [], "nothing but 200 and 503 DATABASE_UNAVAILABLE with Retry-After");
    assert.ok(slowest <= BOUND_MS + SLACK_MS, `a request took ${slowest.toFixed(0)} ms under the partition`);
    assert.equal(ready.status, 503);
    assert.ok((byReason.deadline ?? 0) + (byReason.connection_lost ?? 0) > 0, "the refusals are counted with why");
    assert.ok(
      p.serve.lines.some((l) => /"msg":"database unavailable"/.test(l)),
      "a log line says the database is unavailable",
    );
    assert.ok(p.serve.alive(), "node was not restarted");
    assert.equal((await call("GET", "/readyz")).status, 200);
    await verifyLikesKept(t, load, {
      adminUrl: p.cluster.connectionString(),
      address: p.address,
      secret: p.secret,
      env: p.env,
    });
  },
);

test(
  "negative control: with the deadlines and keepalive off (LEDGER_PG_*_MS=0), a request under the partition waits past the bound",
  { timeout: 240_000 },
  async (t) => {
    const p = await partitioned(t, {
      LEDGER_PG_CONNECT_TIMEOUT_MS: "0",
      LEDGER_PG_QUERY_TIMEOUT_MS: "0",
      LEDGER_PG_KEEPALIVE_MS: "0",
    });
    const admin = await signToken(new TextEncoder().encode(p.secret), "root", { admin: true });
    const call = httpClient(p.address);
    assert.equal((await call("PUT", "/v1/items/neg-item", admin)).status, 200);
    const user = await signToken(new TextEncoder().encode(p.secret), "neg-user");
    p.ns.cut(p.backend);
    const started = performance.now();
    const pending = call("PUT", "/v1/items/neg-item/likes/me", user);
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      pending.then((res) => `answered ${res.status}`),
      new Promise<string>((resolve) => (timer = setTimeout(resolve, BOUND_MS + SLACK_MS, "still waiting"))),
    ]);
    clearTimeout(timer);
    t.diagnostic(`note without deadlines, after ${(performance.now() - started).toFixed(0)} ms: ${outcome}`);
    assert.equal(outcome, "still waiting", "the request waited past the bound");
    // The link returns: TCP's retransmissions get through, and the request is answered at last.
    p.ns.restore(p.backend);
    const res = await pending;
    t.diagnostic(
      `note answered ${res.status} after ${(performance.now() - started).toFixed(0)} ms, once the link returned`,
    );
  },
);

test(
  "Redis partitioned away (packets dropped, no reset) under HTTP load: likes go on, count reads fall back to PostgreSQL within the bound, the counts catch up after the link returns",
  { timeout: 240_000 },
  async (t) => {
    const p = await partitioned(t, { LEDGER_REDIS_KEEPALIVE_MS: "1000" }, { redis: true });
    const call = httpClient(p.address);
    const reader = await signToken(new TextEncoder().encode(p.secret), "reader");
    const load = await LikeLoad.prepare(p.address, p.secret, { clients: CLIENTS, items: ITEMS });
    load.start();
    await load.until("load running", (f) => f.acknowledged >= LOAD_BEFORE_FAULT);
    const redisUp = async () =>
      /^ledger_redis_up (\d)/m.exec(await (await fetch(new URL("/metrics", p.address))).text())?.[1];
    assert.equal(await redisUp(), "1", "counts come from Redis before the cut");
    p.ns.cut(p.redisLink!);
    load.figures.slowestMs = 0;
    const acknowledgedAtCut = load.figures.acknowledged;
    let slowestRead = 0;
    const readStatuses = new Set<number>();
    for (let i = 0; i < 20; i++) {
      const started = performance.now();
      const res = await call("GET", `/v1/items/load-item-${i % ITEMS}/like-count`, reader);
      slowestRead = Math.max(slowestRead, performance.now() - started);
      readStatuses.add(res.status);
    }
    const during = await load.until("likes go on", (f) => f.acknowledged >= acknowledgedAtCut + LOAD_BEFORE_FAULT);
    const slowestWrite = during.slowestMs;
    const upDuring = await redisUp();
    p.ns.restore(p.redisLink!);
    await load.stop();
    t.diagnostic(
      `note under the Redis partition: slowest count read ${slowestRead.toFixed(0)} ms, slowest like ${slowestWrite.toFixed(0)} ms; read statuses ${[...readStatuses].join(",")}; ledger_redis_up during ${upDuring}`,
    );
    assert.deepEqual(during.unexpected, []);
    assert.equal(upDuring, "0", "the missed deadlines mark Redis down");
    assert.deepEqual([...readStatuses], [200], "count reads are answered (from PostgreSQL)");
    assert.ok(slowestRead <= BOUND_MS + SLACK_MS, `a count read took ${slowestRead.toFixed(0)} ms`);
    assert.ok(slowestWrite <= BOUND_MS + SLACK_MS, `a like took ${slowestWrite.toFixed(0)} ms`);
    await verifyLikesKept(t, load, {
      adminUrl: p.cluster.connectionString(),
      address: p.address,
      secret: p.secret,
      env: p.env,
    });
  },
);
