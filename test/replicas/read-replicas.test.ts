/**
 * Reads on a real streaming replica, guarded by freshness tokens (issue 14 part 2,
 * docs/read-replicas.md). The test starts its own primary, makes a hot standby of it from the
 * embedded binaries (test/support/standby.ts: pg_backup_start/stop around a copy of the data
 * directory, standby.signal, primary_conninfo) and holds the standby's replay back with
 * recovery_min_apply_delay, so "the replica lags" is a fact the test sets, not a race.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { rm } from "node:fs/promises";
import type { AddressInfo } from "node:net";
import path from "node:path";
import type { FastifyInstance } from "fastify";
import { buildApp } from "../../src/api/app.ts";
import { signToken } from "../../src/api/auth.ts";
import { LedgerMetrics } from "../../src/api/metrics.ts";
import { EmbeddedCluster, clusterTempDir } from "../../src/db/embedded-cluster.ts";
import { initLedger } from "../../src/db/ledger-config.ts";
import { migrate } from "../../src/db/migrate.ts";
import { createPool, type Pool } from "../../src/db/pool.ts";
import { openLedger, type Ledger } from "../../src/ledger.ts";
import { canReadWithPermissionsOnReplica } from "../../src/replicas/negative-controls.ts";
import { ReplicaMetrics } from "../../src/replicas/replica-metrics.ts";
import { ReplicaRouter, type ReplicaRouterOptions } from "../../src/replicas/replica-router.ts";
import { parseLsn } from "../../src/replicas/wal-position.ts";
import { readLivePost } from "../../src/relations/posts.ts";
import { TestStandby } from "../support/standby.ts";

/** Long enough that nothing committed after it is replayed while a test looks. */
const HOLD_BACK_MS = 3_600_000;

interface Reply<T = Record<string, unknown>> {
  status: number;
  body: T;
  freshness: string | null;
  readFrom: string | null;
}

interface Api {
  app: FastifyInstance;
  router: ReplicaRouter;
  call<T = Record<string, unknown>>(method: string, url: string, options?: { as?: string; admin?: boolean; json?: unknown; headers?: Record<string, string> }): Promise<Reply<T>>;
  close(): Promise<void>;
}

let root: string;
let primary: EmbeddedCluster;
let standby: TestStandby;
let primaryPool: Pool;
let replicaPool: Pool;
let ledger: Ledger;
const secret = new Uint8Array(randomBytes(32));

before(async () => {
  root = await clusterTempDir("ledger-replica-");
  primary = await EmbeddedCluster.start({ dataDir: path.join(root, "primary") });
  primaryPool = createPool({ connectionString: primary.connectionString(), max: 10 });
  await migrate(primaryPool);
  await initLedger(primaryPool, { partitions: 2 });
  ledger = await openLedger(primaryPool);
  standby = await TestStandby.fromPrimary(primary, { dataDir: path.join(root, "standby") });
  replicaPool = createPool({ connectionString: standby.connectionString(), max: 10, connectionTimeoutMs: 1_000 });
});

after(async () => {
  await replicaPool?.end().catch(() => undefined);
  await primaryPool?.end().catch(() => undefined);
  await standby?.stop();
  await primary?.stop();
  await rm(root, { recursive: true, force: true });
});

/** The API over the primary with the standby as its one replica. Checks run only when a test asks (checkNow). */
async function startApi(options: Partial<ReplicaRouterOptions> = {}): Promise<Api> {
  const metrics = new LedgerMetrics(primaryPool);
  const replicaMetrics = new ReplicaMetrics(metrics.registry);
  const router = new ReplicaRouter(primaryPool, [{ name: "replica-0", pool: replicaPool }], {
    maxLagMs: HOLD_BACK_MS * 2, tokenWaitMs: 50, checkEveryMs: 60_000, onState: replicaMetrics.onState, onRoute: replicaMetrics.onRoute, ...options,
  });
  await router.checkNow();
  const app = await buildApp({ ledger, jwtSecret: secret, logger: false, metrics, replicas: router });
  await app.listen({ port: 0, host: "127.0.0.1" });
  const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  return {
    app, router,
    async call(method, url, o = {}) {
      const headers: Record<string, string> = { ...o.headers };
      if (o.as) headers.authorization = `Bearer ${await signToken(secret, o.as, { admin: o.admin ?? false })}`;
      if (o.json !== undefined) headers["content-type"] = "application/json";
      const res = await fetch(`${base}${url}`, { method, headers, body: o.json === undefined ? null : JSON.stringify(o.json) });
      const text = await res.text();
      return {
        status: res.status, body: (text ? JSON.parse(text) : undefined) as never,
        freshness: res.headers.get("x-ledger-freshness"), readFrom: res.headers.get("x-ledger-read-from"),
      };
    },
    // The router's pools are the test's: closing the app leaves them open.
    close: () => app.close(),
  };
}

async function caughtUpThenHeldBack(): Promise<void> {
  await standby.setApplyDelay(0);
  await standby.catchUp();
  await standby.setApplyDelay(HOLD_BACK_MS);
}

function ok<T>(reply: Reply<T>, status = 200): Reply<T> {
  assert.equal(reply.status, status, JSON.stringify(reply.body));
  return reply;
}

test("a read with the write's freshness token never sees state older than the write; without a token it reads the lagging replica as it is (error bound in its own snapshot); ignoring the token (negative control) serves the stale count", async (t) => {
  const api = await startApi();
  t.after(() => api.close());
  ok(await api.call("PUT", "/v1/items/rt-item", { as: "root", admin: true }));
  await caughtUpThenHeldBack();

  const like = ok(await api.call<{ outcome: string; freshness: string }>("PUT", "/v1/items/rt-item/likes/me", { as: "alice" }));
  assert.equal(like.body.outcome, "CHANGED");
  assert.ok(like.freshness, "the write answers its token in the header");
  assert.equal(like.body.freshness, like.freshness, "and in the body");
  await ledger.likeConsumer.drain();
  const token = like.freshness;
  assert.ok(parseLsn(await standby.replayLsn()) < parseLsn(token), "the replica has not replayed the like");

  // No token: the replica as it is (it has not replayed the like), with the bound of its own snapshot.
  const asIs = ok(await api.call<{ count: number; pendingForItem: number; lag: number }>("GET", "/v1/items/rt-item/like-count"));
  assert.equal(asIs.readFrom, "replica-0");
  assert.equal(asIs.body.count, 0);
  const { rows: replicaTruth } = await replicaPool.query<{ n: number }>("SELECT count(*)::int AS n FROM like_fact WHERE item_id = 'rt-item' AND liked");
  assert.ok(Math.abs(asIs.body.count - replicaTruth[0]!.n) <= asIs.body.pendingForItem, "|count - truth| <= pendingForItem on the replica's snapshot");

  // With the token (header, then query parameter): the replica has not replayed it within the wait, so the primary answers.
  for (const [how, request] of [
    ["header", () => api.call<{ count: number }>("GET", "/v1/items/rt-item/like-count", { headers: { "x-ledger-freshness": token } })],
    ["query", () => api.call<{ count: number }>("GET", `/v1/items/rt-item/like-count?freshness=${encodeURIComponent(token)}`)],
  ] as const) {
    const fresh = ok(await request());
    assert.equal(fresh.readFrom, "primary", how);
    assert.equal(fresh.body.count, 1, `${how}: a read with the token sees the like`);
  }
  const likers = ok(await api.call<{ likers: { userId: string }[] }>("GET", "/v1/items/rt-item/likes", { headers: { "x-ledger-freshness": token } }));
  assert.deepEqual(likers.body.likers.map((l) => l.userId), ["alice"]);
  assert.equal((await api.call("GET", "/v1/items/rt-item/like-count?freshness=banana")).status, 400, "a malformed token (query) is bad input");
  assert.equal((await api.call("GET", "/v1/items/rt-item/like-count", { headers: { "x-ledger-freshness": "0/zz" } })).status, 400, "a malformed token (header) is bad input");

  // Negative control: the same read through routing that ignores the token is served stale by the replica.
  const ignoring = await startApi({ tokenCheck: "ignore" });
  t.after(() => ignoring.close());
  const stale = ok(await ignoring.call<{ count: number }>("GET", "/v1/items/rt-item/like-count", { headers: { "x-ledger-freshness": token } }));
  assert.equal(stale.readFrom, "replica-0");
  assert.equal(stale.body.count, 0, "the negative control serves state older than the caller's own write");

  // Once the replica has replayed the token, the token read is served by the replica, with the like.
  await standby.setApplyDelay(0);
  await standby.catchUp();
  const replayed = ok(await api.call<{ count: number }>("GET", "/v1/items/rt-item/like-count", { headers: { "x-ledger-freshness": token } }));
  assert.equal(replayed.readFrom, "replica-0");
  assert.equal(replayed.body.count, 1);
  t.diagnostic(`note token ${token}: held back -> primary count 1; ignoring the token -> replica count 0; replayed -> replica count 1`);
});
