import { test } from "node:test";
import assert from "node:assert/strict";
import { assertError, ok, startApi } from "./harness.ts";

test("api JSON bodies are not coerced: a number is not a boolean or a string (query strings still are)", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const alice = await h.as("alice");
  assertError(await alice.put("/v1/accounts/alice", { private: 1 }), 400, "INVALID_INPUT", "private: 1");
  assertError(await alice.put("/v1/accounts/alice", { private: "true" }), 400, "INVALID_INPUT", "private: 'true'");
  ok(await alice.put("/v1/accounts/alice", { private: false }));
  assertError(await alice.post("/v1/posts", { visibility: "PUBLIC", body: 123 }), 400, "INVALID_INPUT", "body: 123");
  const { rows } = await h.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM post");
  assert.equal(rows[0]!.n, 0, "nothing was stored");
  // Query strings are text by nature: "16" is the integer 16.
  const admin = await h.as("root", { admin: true });
  ok(await admin.put("/v1/items/item-1"));
  ok(await alice.get("/v1/items/item-1/like-count?allowedLag=16"));
});

test("api the bearer scheme is case-insensitive; health, metrics and docs ignore the Authorization header", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const token = await h.token("alice");
  const admin = await h.as("root", { admin: true });
  ok(await admin.put("/v1/items/item-1"));
  ok(await h.request("GET", "/v1/items/item-1/likes/me", { headers: { authorization: `bearer ${token}` } }));
  for (const path of ["/healthz", "/readyz", "/metrics", "/openapi.json"]) {
    const res = await h.request("GET", path, { headers: { authorization: "Bearer not-a-token" } });
    assert.equal(res.status, 200, path);
  }
  assertError(
    await h.request("GET", "/v1/items/item-1/likes/me", { headers: { authorization: "Bearer not-a-token" } }),
    401,
    "UNAUTHENTICATED",
  );
});

test("api the OpenAPI document marks the two optional bodies as optional, and they are", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const doc = ok(
    await h.request<{ paths: Record<string, Record<string, { requestBody?: { required?: boolean } }>> }>(
      "GET",
      "/openapi.json",
    ),
  );
  assert.equal(doc.paths["/v1/accounts/{id}"]!.put!.requestBody!.required, false);
  assert.equal(doc.paths["/v1/admin/rebuild"]!.post!.requestBody!.required, false);
  assert.equal(doc.paths["/v1/posts"]!.post!.requestBody!.required, true);
  const admin = await h.as("root", { admin: true });
  ok(await admin.put("/v1/accounts/carol"));
  ok(await admin.post("/v1/admin/rebuild"));
});
