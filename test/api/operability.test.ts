import { test } from "node:test";
import assert from "node:assert/strict";
import { loadMigrations } from "../../src/db/migrate.ts";
import { waitForAnyLockWait } from "../support/pg-locks.ts";
import { assertError, createAccounts, ok, startApi, type LikeOutcome } from "./harness.ts";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

test("api operability: x-request-id is echoed when valid and generated otherwise, on successes and on every kind of error; /healthz and /readyz answer; /readyz is 503 NOT_READY when migrations are behind", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const alice = await h.as("alice");

  const given = await h.request("GET", "/healthz", { headers: { "x-request-id": "trace-42.a_b" } });
  assert.equal(given.headers.get("x-request-id"), "trace-42.a_b");
  assert.deepEqual(ok(given), { status: "ok" });
  const generated = [await h.request("GET", "/healthz"), await h.request("GET", "/healthz")].map(
    (r) => r.headers.get("x-request-id") ?? "",
  );
  for (const id of generated) assert.match(id, UUID);
  assert.notEqual(generated[0], generated[1], "a fresh id per request");
  for (const bad of ["has space", "x".repeat(65), "semi;colon", "slash/inside", 'quote"', ""]) {
    const res = await h.request("GET", "/healthz", { headers: { "x-request-id": bad } });
    assert.match(res.headers.get("x-request-id") ?? "", UUID, `an unusable id (${JSON.stringify(bad)}) is replaced`);
  }
  const errorResponses: [string, Promise<{ status: number; headers: Headers }>][] = [
    ["req-401", h.request("GET", "/v1/items/x/likes/me", { headers: { "x-request-id": "req-401" } })],
    ["req-403", alice.get("/v1/admin/status", { headers: { "x-request-id": "req-403" } })],
    ["req-404", alice.get("/nope", { headers: { "x-request-id": "req-404" } })],
    ["req-400", alice.get("/v1/items/bad%20id/likes/me", { headers: { "x-request-id": "req-400" } })],
    ["req-400-url", alice.get("/v1/items/%E0%A4%A/likes/me", { headers: { "x-request-id": "req-400-url" } })],
    [
      "req-413",
      alice.post(
        "/v1/posts",
        { visibility: "PUBLIC", body: "x".repeat(70_000) },
        { headers: { "x-request-id": "req-413" } },
      ),
    ],
  ];
  for (const [id, pending] of errorResponses) {
    const res = await pending;
    assert.ok(res.status >= 400, id);
    assert.equal(res.headers.get("x-request-id"), id, `${id}: ${res.status}`);
  }

  assert.deepEqual(ok(await h.request("GET", "/readyz")), {
    status: "ready",
    migrations: (await loadMigrations()).length,
    counts: "off",
  });
  await h.db.pool.query("DELETE FROM ledger_migration WHERE id = (SELECT max(id) FROM ledger_migration)");
  assertError(await h.request("GET", "/readyz"), 503, "NOT_READY");
  assert.equal((await h.request("GET", "/healthz")).status, 200, "liveness does not depend on the database");
});

test("api operability P=4: /metrics counts requests by route and status, outcomes CHANGED/NOOP/REJECTED per operation, and lag per view and partition", async (t) => {
  const h = await startApi({ partitions: 4 });
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "bob"]);
  ok(await admin.put("/v1/items/item-1"));
  const alice = await h.as("alice");
  ok(await alice.put("/v1/items/item-1/likes/me"));
  ok(await alice.put("/v1/items/item-1/likes/me"));
  ok(await alice.put("/v1/accounts/me/following/bob"));
  assertError(await alice.put("/v1/accounts/me/following/alice"), 409, "SELF_FOLLOW");
  assertError(await alice.put("/v1/items/no-such-item/likes/me"), 404, "ITEM_NOT_FOUND");

  await h.app.metrics.refresh(); // the figures from the database are read on a timer, not by the scrape
  const res = await h.request("GET", "/metrics");
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /^text\/plain/);
  const lines = res.text.split("\n");
  const value = (series: string) => {
    const line = lines.find((l) => l.startsWith(`${series} `));
    assert.ok(line, `${series} in /metrics`);
    return Number(line.slice(series.length + 1));
  };
  assert.equal(value('http_requests_total{method="PUT",route="/v1/items/:id/likes/me",status="200"}'), 2);
  assert.equal(value('http_requests_total{method="PUT",route="/v1/items/:id/likes/me",status="404"}'), 1);
  assert.equal(value('http_requests_total{method="PUT",route="/v1/accounts/me/following/:id",status="409"}'), 1);
  assert.equal(value('ledger_operation_outcomes_total{operation="like",outcome="CHANGED"}'), 1);
  assert.equal(value('ledger_operation_outcomes_total{operation="like",outcome="NOOP"}'), 1);
  assert.equal(value('ledger_operation_outcomes_total{operation="follow",outcome="CHANGED"}'), 1);
  assert.equal(value('ledger_operation_outcomes_total{operation="follow",outcome="REJECTED"}'), 1);
  let likeLag = 0;
  let relationLag = 0;
  for (let part = 0; part < 4; part++) {
    likeLag += value(`ledger_lag_events{view="like_count",partition="${part}"}`);
    relationLag += value(`ledger_lag_events{view="follower_projection",partition="${part}"}`);
    value(`ledger_watermark{view="like_count",partition="${part}"}`);
  }
  assert.deepEqual(
    { likeLag, relationLag },
    { likeLag: 1, relationLag: 1 },
    "one like and one follow not yet consumed",
  );
  assert.equal(value("ledger_scrape_database_up"), 1);

  await h.drain();
  await h.app.metrics.refresh();
  const drained = (await h.request("GET", "/metrics")).text;
  assert.doesNotMatch(drained, /^ledger_lag_events\{[^}]*\} [1-9]/m, "no lag after a drain");
  assert.match(
    drained,
    /^http_requests_total\{method="GET",route="\/metrics",status="200"\} 1$/m,
    "the first scrape is counted",
  );
});

test("api operability: /openapi.json is an OpenAPI 3 document listing every route of the API table with its 200/201 and error responses; /docs serves HTML", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  interface Operation {
    responses?: Record<
      string,
      { content?: Record<string, { schema?: { $ref?: string } }>; headers?: Record<string, unknown> }
    >;
    security?: unknown[];
  }
  interface Doc {
    openapi: string;
    info: { title: string };
    paths: Record<string, Record<string, Operation>>;
    components: { schemas: Record<string, { title?: string; properties?: Record<string, unknown> }> };
  }
  const res = await h.request<Doc>("GET", "/openapi.json");
  const doc = ok(res);
  assert.match(doc.openapi, /^3\./);
  assert.equal(doc.info.title, "social-ledger");

  const table: [string, string, number, number[]][] = [
    ["put", "/v1/accounts/{id}", 200, [400, 401, 403, 503]],
    ["get", "/v1/accounts/{id}", 200, [400, 401, 404, 429, 503]],
    ["put", "/v1/items/{id}", 200, [400, 401, 403, 503]],
    ["put", "/v1/items/{id}/likes/me", 200, [400, 401, 404, 429, 503]],
    ["delete", "/v1/items/{id}/likes/me", 200, [400, 401, 404, 429, 503]],
    ["get", "/v1/items/{id}/likes/me", 200, [401, 404, 429, 503]],
    ["get", "/v1/items/{id}/like-count", 200, [400, 401, 404, 429, 503]],
    ["get", "/v1/items/{id}/likes", 200, [400, 401, 404, 429, 503]],
    ["get", "/v1/accounts/me/likes", 200, [400, 401, 429, 503]],
    ["put", "/v1/accounts/me/following/{id}", 200, [401, 404, 409, 429, 503]],
    ["delete", "/v1/accounts/me/following/{id}", 200, [401, 404, 429, 503]],
    ["post", "/v1/accounts/me/follow-requests/{id}/approve", 200, [401, 404, 409, 429, 503]],
    ["post", "/v1/accounts/me/follow-requests/{id}/reject", 200, [401, 404, 409, 429, 503]],
    ["put", "/v1/accounts/me/blocks/{id}", 200, [401, 404, 409, 429, 503]],
    ["delete", "/v1/accounts/me/blocks/{id}", 200, [401, 404, 429, 503]],
    ["get", "/v1/accounts/me/follow-requests", 200, [400, 401, 429, 503]],
    ["get", "/v1/accounts/me/blocks", 200, [400, 401, 429, 503]],
    ["get", "/v1/accounts/{id}/followers", 200, [400, 401, 403, 404, 429, 503]],
    ["get", "/v1/accounts/{id}/following", 200, [400, 401, 403, 404, 429, 503]],
    ["get", "/v1/accounts/{id}/follower-count", 200, [400, 401, 403, 404, 429, 503]],
    ["get", "/v1/accounts/me/relationships/{id}", 200, [401, 404, 429, 503]],
    ["get", "/v1/accounts/me/relationships", 200, [400, 401, 429, 503]],
    ["get", "/v1/accounts/{id}/posts", 200, [400, 401, 404, 429, 503]],
    ["get", "/v1/timelines/home", 200, [400, 401, 429, 503]],
    ["post", "/v1/posts", 201, [400, 401, 429, 503]],
    ["get", "/v1/posts/{id}", 200, [400, 401, 404, 429, 503]],
    ["delete", "/v1/posts/{id}", 200, [400, 401, 403, 404, 429, 503]],
    ["post", "/v1/posts/{id}/comments", 201, [400, 401, 404, 409, 429, 503]],
    ["get", "/v1/posts/{id}/comments", 200, [400, 401, 404, 503]],
    ["get", "/v1/comments/{id}/replies", 200, [400, 401, 404, 503]],
    ["get", "/v1/comments/{id}", 200, [400, 401, 404, 429, 503]],
    ["patch", "/v1/comments/{id}", 200, [400, 401, 403, 404, 409, 429, 503]],
    ["delete", "/v1/comments/{id}", 200, [400, 401, 403, 404, 429, 503]],
    ["get", "/v1/posts/{id}/comment-count", 200, [400, 401, 404, 503]],
    ["get", "/v1/notifications", 200, [400, 401, 429, 503]],
    ["get", "/v1/notifications/unread-count", 200, [401, 429, 503]],
    ["post", "/v1/notifications/read", 200, [400, 401, 429, 503]],
    ["get", "/v1/admin/status", 200, [401, 403, 503]],
    ["get", "/v1/admin/audit", 200, [401, 403, 503]],
    ["post", "/v1/admin/rebuild", 200, [400, 401, 403, 503]],
    ["post", "/v1/admin/comment-counts/rebuild", 200, [400, 401, 403, 503]],
    ["post", "/v1/admin/notifications/rebuild", 200, [400, 401, 403, 409, 503]],
    ["get", "/v1/admin/dashboard", 200, [400, 401, 403, 503]],
    ["delete", "/v1/accounts/{id}", 200, [400, 401, 403, 404, 429, 503]],
    ["get", "/v1/accounts/{id}/erasure", 200, [400, 401, 403, 404, 429, 503]],
    ["post", "/v1/admin/webhooks", 201, [400, 401, 403, 429, 503]],
    ["get", "/v1/admin/webhooks", 200, [401, 403, 429, 503]],
    ["get", "/v1/admin/webhooks/{id}", 200, [400, 401, 403, 404, 429, 503]],
    ["patch", "/v1/admin/webhooks/{id}", 200, [400, 401, 403, 404, 429, 503]],
    ["delete", "/v1/admin/webhooks/{id}", 200, [400, 401, 403, 404, 429, 503]],
    ["post", "/v1/admin/webhooks/{id}/pause", 200, [400, 401, 403, 404, 429, 503]],
    ["post", "/v1/admin/webhooks/{id}/resume", 200, [400, 401, 403, 404, 429, 503]],
    ["post", "/v1/admin/webhooks/{id}/rotate-secret", 200, [400, 401, 403, 404, 429, 503]],
    ["post", "/v1/admin/webhooks/{id}/replay", 200, [400, 401, 403, 404, 409, 429, 503]],
    ["get", "/healthz", 200, []],
    ["get", "/readyz", 200, [503]],
    ["get", "/metrics", 200, []],
  ];
  const errorSchema = Object.entries(doc.components.schemas).find(([, s]) => s.title === "LedgerError");
  assert.ok(errorSchema, "the error schema is a component");
  assert.deepEqual(Object.keys(errorSchema[1].properties ?? {}), ["error"]);
  const problems: string[] = [];
  for (const [method, path, success, errors] of table) {
    const op = doc.paths[path]?.[method];
    if (!op) {
      problems.push(`${method.toUpperCase()} ${path}: missing`);
      continue;
    }
    const responses = op.responses ?? {};
    if (!responses[success]) problems.push(`${method.toUpperCase()} ${path}: no ${success} response`);
    for (const status of errors) {
      const ref = responses[status]?.content?.["application/json"]?.schema?.$ref;
      if (ref !== `#/components/schemas/${errorSchema[0]}`)
        problems.push(`${method.toUpperCase()} ${path}: no ${status} error response`);
    }
    if (path.startsWith("/v1/") && !op.security) problems.push(`${method.toUpperCase()} ${path}: no security`);
  }
  assert.deepEqual(problems, []);
  // The home timeline's second success: 206 while an absent reader's inbox is installed, the same page schema with Retry-After.
  const home = doc.paths["/v1/timelines/home"]!.get!.responses ?? {};
  assert.ok(home["206"]?.content?.["application/json"]?.schema, "GET /v1/timelines/home documents its 206");
  assert.deepEqual(home["206"]?.content, home["200"]?.content, "the 206 page has the 200 page's schema");
  assert.ok(Object.keys(home["206"]?.headers ?? {}).includes("Retry-After"), "the 206 carries Retry-After");
  const listed = Object.entries(doc.paths)
    .flatMap(([p, ops]) => Object.keys(ops).map((m) => `${m} ${p}`))
    .filter((r) => r.includes("/v1/"));
  assert.deepEqual(
    listed.sort(),
    table
      .filter(([, p]) => p.startsWith("/v1/"))
      .map(([m, p]) => `${m} ${p}`)
      .sort(),
    "exactly the routes of the table",
  );
  t.diagnostic(`note ${Object.keys(doc.paths).length} paths documented`);

  const docs = await h.request("GET", "/docs");
  assert.equal(docs.status, 200);
  assert.match(docs.headers.get("content-type") ?? "", /^text\/html/);
  assert.match(docs.text, /<html/i);
  const slash = await h.request("GET", "/docs/");
  assert.equal(slash.status, 200);
  assert.match(slash.headers.get("content-type") ?? "", /^text\/html/);
});

test("api shutdown: close() with a like in flight (held on a row lock) lets it finish with 200, then returns at once instead of waiting out keep-alive", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  ok(await admin.put("/v1/items/item-1"));
  const alice = await h.as("alice");
  ok(await alice.get("/v1/items/item-1/likes/me"), 200, "a keep-alive connection is open");

  const blocker = await h.db.pool.connect();
  try {
    await blocker.query("BEGIN");
    await blocker.query(
      "INSERT INTO like_fact (user_id, item_id, liked, version) VALUES ('alice', 'item-1', false, 0)",
    );
    const inFlight = alice.put<LikeOutcome>("/v1/items/item-1/likes/me");
    await waitForAnyLockWait(h.db.pool);
    const closing = h.app.close();
    await blocker.query("ROLLBACK");
    const res = await inFlight;
    assert.equal(ok(res).outcome, "CHANGED", "the in-flight request finished");
    assert.equal(res.headers.get("connection"), "close", "and told the client the connection ends");
    const started = Date.now();
    await closing;
    const ms = Date.now() - started;
    t.diagnostic(`note close() returned ${ms} ms after the in-flight response`);
    assert.ok(ms < 5_000, `close() took ${ms} ms after the last response (keepAliveTimeout is 72 s)`);
  } finally {
    blocker.release();
  }
  const { rows } = await h.db.pool.query<{ liked: boolean }>(
    "SELECT liked FROM like_fact WHERE user_id = 'alice' AND item_id = 'item-1'",
  );
  assert.deepEqual(rows, [{ liked: true }], "the acknowledged like is in the facts");
});
