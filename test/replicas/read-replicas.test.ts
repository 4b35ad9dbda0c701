/**
 * Reads on a real streaming replica, guarded by freshness tokens
 * (docs/read-replicas.md). The test starts its own primary, makes a hot standby of it from the
 * embedded binaries (support/standby.ts: pg_backup_start/stop around a copy of the data
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
import { canReadWithPermissionsOnReplica } from "./negative-controls.ts";
import { ReplicaMetrics } from "../../src/replicas/replica-metrics.ts";
import { ReplicaRouter, type ReplicaRouterOptions } from "../../src/replicas/replica-router.ts";
import { parseFreshnessToken, parseLsn, readFreshnessToken } from "../../src/replicas/wal-position.ts";
import { readLivePost } from "../../src/content/posts.ts";
import { TestStandby } from "../../support/standby.ts";

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
  call<T = Record<string, unknown>>(
    method: string,
    url: string,
    options?: { as?: string; admin?: boolean; json?: unknown; headers?: Record<string, string> },
  ): Promise<Reply<T>>;
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
    maxLagMs: HOLD_BACK_MS * 2,
    tokenWaitMs: 50,
    checkEveryMs: 60_000,
    onState: replicaMetrics.onState,
    onRoute: replicaMetrics.onRoute,
    ...options,
  });
  await router.checkNow();
  const app = await buildApp({ ledger, jwtSecret: secret, logger: false, metrics, replicas: router });
  await app.listen({ port: 0, host: "127.0.0.1" });
  const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  return {
    app,
    router,
    async call(method, url, o = {}) {
      const headers: Record<string, string> = { ...o.headers };
      if (o.as) headers.authorization = `Bearer ${await signToken(secret, o.as, { admin: o.admin ?? false })}`;
      if (o.json !== undefined) headers["content-type"] = "application/json";
      const res = await fetch(`${base}${url}`, {
        method,
        headers,
        body: o.json === undefined ? null : JSON.stringify(o.json),
      });
      const text = await res.text();
      return {
        status: res.status,
        body: (text ? JSON.parse(text) : undefined) as never,
        freshness: res.headers.get("x-ledger-freshness"),
        readFrom: res.headers.get("x-ledger-read-from"),
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

  const like = ok(
    await api.call<{ outcome: string; freshness: string }>("PUT", "/v1/items/rt-item/likes/me", { as: "alice" }),
  );
  assert.equal(like.body.outcome, "CHANGED");
  assert.ok(like.freshness, "the write answers its token in the header");
  assert.equal(like.body.freshness, like.freshness, "and in the body");
  await ledger.likeConsumer.drain();
  const token = like.freshness;
  // The contract names both: the write's `freshness` field and the routed read's `freshness` parameter.
  type Schema = { $ref?: string; properties?: Record<string, unknown> };
  const doc = (
    await api.call<{
      paths: Record<
        string,
        Record<
          string,
          {
            parameters?: { name: string; in: string }[];
            responses: Record<
              string,
              { headers?: Record<string, unknown>; content: Record<string, { schema: Schema }> }
            >;
          }
        >
      >;
      components: { schemas: Record<string, Schema> };
    }>("GET", "/openapi.json")
  ).body;
  const likeAnswer = doc.paths["/v1/items/{id}/likes/me"]!.put!.responses["200"]!;
  assert.ok(
    doc.components.schemas[likeAnswer.content["application/json"]!.schema.$ref!.split("/").at(-1)!]!.properties!
      .freshness,
  );
  assert.ok(likeAnswer.headers?.["x-ledger-freshness"]);
  assert.ok(
    doc.paths["/v1/items/{id}/like-count"]!.get!.parameters!.some((p) => p.name === "freshness" && p.in === "query"),
  );
  assert.ok(
    parseLsn(await standby.replayLsn()) < parseFreshnessToken(token).lsn,
    "the replica has not replayed the like",
  );

  // No token: the replica as it is (it has not replayed the like), with the bound of its own snapshot.
  const asIs = ok(
    await api.call<{ count: number; pendingForItem: number; lag: number }>("GET", "/v1/items/rt-item/like-count"),
  );
  assert.equal(asIs.readFrom, "replica-0");
  assert.equal(asIs.body.count, 0);
  const { rows: replicaTruth } = await replicaPool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM like_fact WHERE item_id = 'rt-item' AND liked",
  );
  assert.ok(
    Math.abs(asIs.body.count - replicaTruth[0]!.n) <= asIs.body.pendingForItem,
    "|count - truth| <= pendingForItem on the replica's snapshot",
  );

  // With the token (header, then query parameter): the replica has not replayed it within the wait, so the primary answers.
  for (const [how, request] of [
    [
      "header",
      () =>
        api.call<{ count: number }>("GET", "/v1/items/rt-item/like-count", {
          headers: { "x-ledger-freshness": token },
        }),
    ],
    [
      "query",
      () => api.call<{ count: number }>("GET", `/v1/items/rt-item/like-count?freshness=${encodeURIComponent(token)}`),
    ],
  ] as const) {
    const fresh = ok(await request());
    assert.equal(fresh.readFrom, "primary", how);
    assert.equal(fresh.body.count, 1, `${how}: a read with the token sees the like`);
  }
  const likers = ok(
    await api.call<{ likers: { userId: string }[] }>("GET", "/v1/items/rt-item/likes", {
      headers: { "x-ledger-freshness": token },
    }),
  );
  assert.deepEqual(
    likers.body.likers.map((l) => l.userId),
    ["alice"],
  );
  assert.equal(
    (await api.call("GET", "/v1/items/rt-item/like-count?freshness=banana")).status,
    400,
    "a malformed token (query) is bad input",
  );
  assert.equal(
    (await api.call("GET", "/v1/items/rt-item/like-count", { headers: { "x-ledger-freshness": "0/zz" } })).status,
    400,
    "a malformed token (header) is bad input",
  );

  // Negative control: the same read through routing that ignores the token is served stale by the replica.
  const ignoring = await startApi({ tokenCheck: "ignore" });
  t.after(() => ignoring.close());
  const stale = ok(
    await ignoring.call<{ count: number }>("GET", "/v1/items/rt-item/like-count", {
      headers: { "x-ledger-freshness": token },
    }),
  );
  assert.equal(stale.readFrom, "replica-0");
  assert.equal(stale.body.count, 0, "the negative control serves state older than the caller's own write");

  // Once the replica has replayed the token, the token read is served by the replica, with the like.
  await standby.setApplyDelay(0);
  await standby.catchUp();
  const replayed = ok(
    await api.call<{ count: number }>("GET", "/v1/items/rt-item/like-count", {
      headers: { "x-ledger-freshness": token },
    }),
  );
  assert.equal(replayed.readFrom, "replica-0");
  assert.equal(replayed.body.count, 1);
  t.diagnostic(
    `note token ${token}: held back -> primary count 1; ignoring the token -> replica count 0; replayed -> replica count 1`,
  );
});

test("a read whose token the replica has not replayed waits for it (bounded) and is served by the replica once it replays within the wait", async (t) => {
  let waiting!: () => void;
  const started = new Promise<void>((resolve) => (waiting = resolve));
  const api = await startApi({ tokenWaitMs: 30_000, onTokenWait: () => waiting() });
  t.after(() => api.close());
  ok(await api.call("PUT", "/v1/items/wait-item", { as: "root", admin: true }));
  await caughtUpThenHeldBack();
  const like = ok(await api.call("PUT", "/v1/items/wait-item/likes/me", { as: "gina" }));
  await ledger.likeConsumer.drain();
  const read = api.call<{ count: number }>("GET", "/v1/items/wait-item/like-count", {
    headers: { "x-ledger-freshness": like.freshness! },
  });
  await started; // the read found the replica behind its token and is polling it
  await standby.setApplyDelay(0);
  const served = ok(await read);
  assert.deepEqual([served.readFrom, served.body.count], ["replica-0", 1]);
});

test("a blocked reader never reads a post created after the block through a lagging replica: permission reads stay on the primary in every mode; permission reads on the replica (negative control) leak it", async (t) => {
  const api = await startApi();
  t.after(() => api.close());
  for (const id of ["bob", "mallory"])
    ok(await api.call("PUT", `/v1/accounts/${id}`, { as: "root", admin: true, json: { private: false } }));
  ok(await api.call("PUT", "/v1/accounts/me/following/bob", { as: "mallory" }));
  await ledger.projector.drain();
  await caughtUpThenHeldBack();

  const block = ok(
    await api.call<{ relationship: { blocking: boolean } }>("PUT", "/v1/accounts/me/blocks/mallory", { as: "bob" }),
  );
  assert.equal(block.body.relationship.blocking, true);
  const followersOnly = ok(
    await api.call<{ id: string }>("POST", "/v1/posts", {
      as: "bob",
      json: { visibility: "FOLLOWERS", body: "after the block" },
    }),
    201,
  );
  const publicPost = ok(
    await api.call<{ id: string }>("POST", "/v1/posts", {
      as: "bob",
      json: { visibility: "PUBLIC", body: "public, after the block" },
    }),
    201,
  );
  for (const write of [block, followersOnly, publicPost])
    assert.equal(
      (write.body as { freshness?: string }).freshness,
      write.freshness,
      "the token in the header and the body",
    );
  assert.ok(
    parseFreshnessToken(followersOnly.freshness!).lsn > parseFreshnessToken(block.freshness!).lsn,
    "the post committed after the block",
  );
  const { rows: onReplica } = await replicaPool.query<{ blocks: number; state: string }>(
    "SELECT (SELECT count(*)::int FROM block WHERE blocker = 'bob' AND blocked = 'mallory') AS blocks, (SELECT state FROM relation WHERE follower = 'mallory' AND followee = 'bob') AS state",
  );
  assert.deepEqual(
    onReplica[0],
    { blocks: 0, state: "ACTIVE" },
    "the replica has not replayed the block: there mallory still follows bob",
  );

  // Every way mallory can ask, with and without a token (even bob's), answers 404.
  const token = publicPost.freshness!;
  let denied = 0;
  for (const post of [followersOnly.body.id, publicPost.body.id]) {
    for (const consistency of ["content_token", "fresh_token", "truth"]) {
      for (const headers of [{}, { "x-ledger-freshness": token }] as Record<string, string>[]) {
        const read = await api.call("GET", `/v1/posts/${post}?consistency=${consistency}`, { as: "mallory", headers });
        assert.equal(read.status, 404, `post ${post} ${consistency} ${JSON.stringify(headers)}`);
        denied++;
      }
    }
    for (const suffix of ["like-count", "likes"]) {
      assert.equal((await api.call("GET", `/v1/items/${post}/${suffix}`, { as: "mallory" })).status, 404);
      denied++;
    }
  }
  // A reader in no block reads the PUBLIC post (the 404s above are the block, not a broken route).
  ok(await api.call("GET", `/v1/posts/${publicPost.body.id}`, { as: "carol" }));
  // An anonymous reader of the PUBLIC post is routed: without a token the lagging replica has no such post yet (lag, not a leak)...
  const anonymous = await api.call("GET", `/v1/posts/${publicPost.body.id}`);
  assert.deepEqual([anonymous.status, anonymous.readFrom], [404, "replica-0"]);
  // ...and with the token it is the primary that answers.
  const anonymousFresh = ok(
    await api.call("GET", `/v1/posts/${publicPost.body.id}`, { headers: { "x-ledger-freshness": token } }),
  );
  assert.equal(anonymousFresh.readFrom, "primary");

  // Negative control: canRead with its permission reads on the lagging replica lets mallory read the post created after the block.
  for (const mode of ["CONTENT_TOKEN", "FRESH_TOKEN", "TRUTH"] as const) {
    const leak = await canReadWithPermissionsOnReplica(
      primaryPool,
      replicaPool,
      "mallory",
      followersOnly.body.id,
      mode,
    );
    assert.equal(leak.allowed, true, `negative control ${mode}: ${JSON.stringify(leak)}`);
  }
  // A replica is a prefix of the primary's commit order: while it lacks the block it lacks the post too.
  assert.equal(await readLivePost(replicaPool, followersOnly.body.id), undefined);
  await standby.setApplyDelay(0);
  await standby.catchUp();
  // Replayed, the replica has both, and every permission read there now denies.
  for (const mode of ["CONTENT_TOKEN", "FRESH_TOKEN", "TRUTH"] as const) {
    assert.equal(
      (await canReadWithPermissionsOnReplica(primaryPool, replicaPool, "mallory", followersOnly.body.id, mode)).allowed,
      false,
      mode,
    );
  }
  t.diagnostic(
    `note block + FOLLOWERS/PUBLIC posts held back on the replica: ${denied} reads by mallory all 404; permission reads on the replica allowed her in 3/3 modes`,
  );
});

test("a replica that is down sends every routed read to the primary with no 5xx, and is used again once it is back", async (t) => {
  const api = await startApi({ maxLagMs: 60_000 });
  t.after(() => api.close());
  ok(await api.call("PUT", "/v1/items/down-item", { as: "root", admin: true }));
  ok(await api.call("PUT", "/v1/accounts/dora", { as: "root", admin: true, json: { private: false } }));
  const publicPost = ok(
    await api.call<{ id: string }>("POST", "/v1/posts", { as: "dora", json: { visibility: "PUBLIC", body: "hello" } }),
    201,
  );
  const like = ok(await api.call("PUT", "/v1/items/down-item/likes/me", { as: "erin" }));
  await standby.setApplyDelay(0);
  await standby.catchUp();
  await api.router.checkNow();
  const reads = [
    "/v1/items/down-item/like-count",
    "/v1/items/down-item/likes",
    "/v1/accounts/dora/followers",
    "/v1/accounts/dora/following",
    "/v1/accounts/dora/follower-count",
    `/v1/posts/${publicPost.body.id}`,
  ];
  for (const url of reads) assert.equal(ok(await api.call("GET", url)).readFrom, "replica-0", url);

  await standby.stop();
  // The router has not checked since: the first read finds the replica gone, and is answered by the primary.
  const statuses: number[] = [];
  const servers = new Set<string | null>();
  for (const url of reads) {
    for (const headers of [{}, { "x-ledger-freshness": like.freshness! }] as Record<string, string>[]) {
      const read = await api.call("GET", url, { headers });
      statuses.push(read.status);
      servers.add(read.readFrom);
    }
  }
  assert.deepEqual([...new Set(statuses)], [200]);
  assert.deepEqual([...servers], ["primary"]);
  await api.router.checkNow();
  const metrics = await (
    await fetch(`http://127.0.0.1:${(api.app.server.address() as AddressInfo).port}/metrics`)
  ).text();
  assert.match(metrics, /ledger_replica_up\{replica="replica-0"\} 0/);
  assert.match(metrics, /ledger_replica_reads_total\{server="primary",reason="replica-failed"\} 1/);

  await standby.start();
  await standby.catchUp();
  await api.router.checkNow();
  assert.equal(ok(await api.call("GET", reads[0]!)).readFrom, "replica-0");
  t.diagnostic(
    `note replica stopped: ${statuses.length} reads, all 200 from the primary; back: served by the replica again`,
  );
});

test("a replica lagging more than LEDGER_REPLICA_MAX_LAG_MS is skipped by reads without a token, and its lag is a metric", async (t) => {
  await standby.setApplyDelay(0);
  await standby.catchUp();
  const api = await startApi({ maxLagMs: 0 });
  t.after(() => api.close());
  assert.equal(api.router.state("replica-0")!.lagMs, 0, "caught up: no lag");
  ok(await api.call("PUT", "/v1/items/lag-item", { as: "root", admin: true }));
  assert.equal(
    ok(await api.call("GET", "/v1/items/lag-item/like-count")).readFrom,
    "replica-0",
    "within the threshold while it has replayed everything",
  );

  await standby.setApplyDelay(HOLD_BACK_MS);
  ok(await api.call("PUT", "/v1/items/lag-item/likes/me", { as: "frank" }));
  await api.router.checkNow();
  const state = api.router.state("replica-0")!;
  assert.ok(
    state.up && state.lagBytes! > 0 && state.lagMs! > 0,
    JSON.stringify(state, (_k, v: unknown) => (typeof v === "bigint" ? String(v) : v)),
  );
  const skipped = ok(await api.call<{ count: number }>("GET", "/v1/items/lag-item/like-count"));
  assert.equal(skipped.readFrom, "primary");
  assert.equal(
    skipped.body.count,
    0,
    "the like is not counted yet (no consumer ran): the primary's own lag, not the replica's",
  );
  const metrics = await (
    await fetch(`http://127.0.0.1:${(api.app.server.address() as AddressInfo).port}/metrics`)
  ).text();
  const lagBytes = Number(/ledger_replica_lag_bytes\{replica="replica-0"\} (\d+)/.exec(metrics)?.[1]);
  const lagSeconds = Number(/ledger_replica_lag_seconds\{replica="replica-0"\} ([\d.e-]+)/.exec(metrics)?.[1]);
  assert.ok(
    lagBytes > 0 && lagSeconds > 0,
    metrics
      .split("\n")
      .filter((l) => l.startsWith("ledger_replica"))
      .join("\n"),
  );
  assert.match(metrics, /ledger_replica_reads_total\{server="primary",reason="replicas-lagging"\} 1/);
  await standby.setApplyDelay(0);
  await standby.catchUp();
  t.diagnostic(`note held back: lag ${lagBytes} bytes, ${lagSeconds} s; skipped (primary); caught up: lag 0`);
});

test("a promoted replica is not a replica: after pg_promote() the router counts it as down and sends every read, with or without a token, to the primary", async (t) => {
  // A standby of its own: promoting the shared one would leave the other tests without a replica.
  const promoted = await TestStandby.fromPrimary(primary, { dataDir: path.join(root, "promoted"), name: "promoted" });
  const promotedPool = createPool({
    connectionString: promoted.connectionString(),
    max: 4,
    connectionTimeoutMs: 1_000,
  });
  t.after(async () => {
    await promotedPool.end().catch(() => undefined);
    await promoted.stop();
    await primaryPool.query("SELECT pg_drop_replication_slot('promoted')");
  });
  const router = new ReplicaRouter(primaryPool, [{ name: "replica-0", pool: promotedPool }], {
    maxLagMs: 60_000,
    tokenWaitMs: 50,
    checkEveryMs: 60_000,
  });
  t.after(() => router.stop());
  await ledger.likes.createItem("promote-item");
  const token = await readFreshnessToken(primaryPool);
  await promoted.catchUp();
  await router.checkNow();
  const itemsNamed = (pool: Pool) =>
    pool
      .query<{ n: number }>("SELECT count(*)::int AS n FROM item WHERE item_id = 'only-on-the-promoted'")
      .then((r) => r.rows[0]!.n);
  // Control: while it streams, the same router reads it, with and without the token.
  assert.equal(router.state("replica-0")!.up, true);
  assert.deepEqual(await router.read(undefined, itemsNamed).then((r) => [r.server, r.reason]), [
    "replica-0",
    "replica",
  ]);
  assert.deepEqual(await router.read(token, itemsNamed).then((r) => [r.server, r.reason]), [
    "replica-0",
    "token-replayed",
  ]);

  await promoted.promote();
  // It answers, its replay position is still there (pg_last_wal_replay_lsn() stays at the last
  // record recovery applied), and it takes writes the primary never had.
  await promotedPool.query("INSERT INTO item (item_id, kind) VALUES ('only-on-the-promoted', 'plain')");
  assert.equal(await itemsNamed(promotedPool), 1);
  await router.checkNow();
  const state = router.state("replica-0")!;
  assert.deepEqual([state.up, state.reason], [false, "not a standby (pg_is_in_recovery() is false)"]);
  for (const presented of [undefined, token]) {
    const read = await router.read(presented, itemsNamed);
    assert.deepEqual(
      [read.server, read.reason, read.value],
      ["primary", "replicas-down", 0],
      `token ${presented?.lsn}`,
    );
  }
  t.diagnostic(
    `note promoted standby: ${JSON.stringify(state, (_k, v: unknown) => (typeof v === "bigint" ? String(v) : v))}`,
  );
});
