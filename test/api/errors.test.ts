import { test } from "node:test";
import assert from "node:assert/strict";
import { assertError, createAccounts, ok, startApi, type ApiResponse, type LikeOutcome } from "./harness.ts";

test("api every error code: each error is exactly {error: {code, message}} with its status (401, 403, 404, 405, 409, 400, 413, 415)", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "bob"]);
  await createAccounts(admin, ["priv"], { private: true });
  ok(await admin.put("/v1/items/item-1"));
  const alice = await h.as("alice");
  ok(await alice.put("/v1/accounts/me/blocks/bob"));
  const json = { "content-type": "application/json" };

  const seen = new Map<string, number>();
  const expect = (res: ApiResponse, status: number, code: string, context: string) => {
    assertError(res, status, code, context);
    seen.set(code, status);
  };

  expect(await h.request("GET", "/v1/items/item-1/likes/me"), 401, "UNAUTHENTICATED", "no token");
  expect(await alice.get("/v1/admin/status"), 403, "FORBIDDEN", "not an admin");
  expect(await alice.put("/v1/items/no-such-item/likes/me"), 404, "ITEM_NOT_FOUND", "missing item");
  expect(await alice.get("/v1/posts/no-such-post"), 404, "POST_NOT_FOUND", "missing post");
  expect(await alice.put("/v1/accounts/me/following/ghost"), 404, "ACCOUNT_NOT_FOUND", "unknown account");
  expect(
    await admin.post("/v1/admin/rebuild", { items: ["item-1", "ghost-item"] }),
    404,
    "ITEM_NOT_FOUND",
    "rebuild of an unknown item",
  );
  expect(await alice.put("/v1/accounts/me/following/alice"), 409, "SELF_FOLLOW", "self-follow");
  expect(await alice.put("/v1/accounts/me/blocks/alice"), 409, "SELF_BLOCK", "self-block");
  expect(await alice.put("/v1/accounts/me/following/bob"), 409, "BLOCKED", "following someone you block");
  expect(await alice.post("/v1/accounts/me/follow-requests/bob/approve"), 409, "NOT_PENDING", "nothing pending");

  // Unknown routes and methods.
  for (const [method, path] of [
    ["GET", "/nope"],
    ["GET", "/v1"],
    ["GET", "/v2/items/item-1/likes/me"],
    ["GET", "/v1/items/item-1/likes/me/extra"],
  ] as const) {
    expect(await h.request(method, path, { token: alice.token }), 404, "NOT_FOUND", `${method} ${path}`);
  }
  // A path that exists under other methods: 405 with Allow (docs/api.md).
  for (const [method, path] of [
    ["POST", "/v1/items/item-1"],
    ["PATCH", "/v1/items/item-1/likes/me"],
  ] as const) {
    expect(await h.request(method, path, { token: alice.token }), 405, "METHOD_NOT_ALLOWED", `${method} ${path}`);
  }

  // Invalid input at the edge: ids, query strings, bodies.
  const invalid: [string, () => Promise<ApiResponse>][] = [
    ["an id with a space", () => alice.put("/v1/items/bad%20id/likes/me")],
    ["an id starting with a dot", () => alice.get("/v1/items/.hidden/likes/me")],
    ["an id of 129 characters", () => alice.get(`/v1/items/${"a".repeat(129)}/like-count`)],
    ["an id of 300 characters", () => alice.get(`/v1/items/${"a".repeat(300)}/like-count`)],
    ["a malformed percent-escape in the path", () => alice.get("/v1/items/%E0%A4%A/likes/me")],
    ["limit=0", () => alice.get("/v1/items/item-1/likes?limit=0")],
    ["limit=x", () => alice.get("/v1/items/item-1/likes?limit=x")],
    ["a cursor we never issued", () => alice.get("/v1/items/item-1/likes?cursor=not-a-cursor")],
    [
      "a forged cursor with an impossible date",
      () =>
        alice.get(
          `/v1/items/item-1/likes?cursor=${Buffer.from(JSON.stringify(["2024-02-30T00:00:00.000000Z", "x"])).toString("base64url")}`,
        ),
    ],
    [
      "a forged cursor with a bad id",
      () =>
        admin.get(
          `/v1/accounts/bob/followers?cursor=${Buffer.from(JSON.stringify(["2024-01-01T00:00:00.000000Z", "bad id"])).toString("base64url")}`,
        ),
    ],
    ["allowedLag=-1", () => alice.get("/v1/items/item-1/like-count?allowedLag=-1")],
    [
      "invalid JSON",
      () => h.request("POST", "/v1/posts", { token: alice.token, headers: json, raw: '{"visibility": "PUBLIC",' }),
    ],
    ["an empty JSON body", () => h.request("POST", "/v1/posts", { token: alice.token, headers: json, raw: "" })],
    ["a JSON string instead of an object", () => alice.post("/v1/posts", "hello")],
    ["a JSON array instead of an object", () => alice.post("/v1/posts", [{ visibility: "PUBLIC", body: "x" }])],
    ["a JSON null body", () => alice.post("/v1/posts", null)],
    ["no body", () => alice.post("/v1/posts")],
    ["a missing property", () => alice.post("/v1/posts", { body: "x" })],
    ["an unknown visibility", () => alice.post("/v1/posts", { visibility: "FRIENDS", body: "x" })],
    ["a wrong type (object for string)", () => alice.post("/v1/posts", { visibility: "PUBLIC", body: { text: "x" } })],
    ["a wrong type (array for string)", () => alice.post("/v1/posts", { visibility: ["PUBLIC", "SELF"], body: "x" })],
    ["a wrong type (string for boolean)", () => alice.put("/v1/accounts/alice", { private: "yes" })],
    ["an extra property", () => alice.post("/v1/posts", { visibility: "PUBLIC", body: "x", author: "bob" })],
    ["an extra property on an account", () => alice.put("/v1/accounts/alice", { private: false, admin: true })],
    [
      "a post body over 10000 characters",
      () => alice.post("/v1/posts", { visibility: "PUBLIC", body: "x".repeat(10_001) }),
    ],
    ["a rebuild item that is not an id", () => admin.post("/v1/admin/rebuild", { items: ["bad id"] })],
    [
      "rebuild items that are not an array of ids",
      () => admin.post("/v1/admin/rebuild", { items: [{ id: "item-1" }] }),
    ],
    ["the reserved account id me", () => admin.put("/v1/accounts/me", { private: false })],
    [
      "__proto__ in a JSON body",
      () =>
        h.request("PUT", "/v1/accounts/alice", {
          token: alice.token,
          headers: json,
          raw: '{"__proto__": {"private": true}}',
        }),
    ],
  ];
  for (const [context, send] of invalid) expect(await send(), 400, "INVALID_INPUT", context);

  // A body over the 64 KiB limit is 413; without a token the request is refused (401) before its body is read.
  const big = { visibility: "PUBLIC", body: "x".repeat(65 * 1024) };
  expect(await alice.post("/v1/posts", big), 413, "PAYLOAD_TOO_LARGE", "65 KiB post");
  expect(
    await alice.put("/v1/accounts/alice", { private: false, pad: "x".repeat(70_000) }),
    413,
    "PAYLOAD_TOO_LARGE",
    "70 KB account",
  );
  expect(await h.request("POST", "/v1/posts", { json: big }), 401, "UNAUTHENTICATED", "65 KiB without a token");
  expect(
    await h.request("POST", "/v1/posts", {
      token: alice.token,
      headers: { "content-type": "application/xml" },
      raw: "<post/>",
    }),
    415,
    "UNSUPPORTED_MEDIA_TYPE",
    "XML",
  );

  // Nothing of the above was written.
  const { rows } = await h.db.pool.query<{ posts: number; likes: number; private: boolean }>(
    "SELECT (SELECT count(*) FROM post)::int AS posts, (SELECT count(*) FROM like_fact)::int AS likes, (SELECT private FROM account WHERE account_id = 'alice') AS private",
  );
  assert.deepEqual(rows[0], { posts: 0, likes: 0, private: false });

  // Ids are valid up to 128 characters, and the router accepts all of them.
  const longId = `item-${"a".repeat(123)}`;
  assert.equal(longId.length, 128);
  assert.deepEqual(ok(await admin.put(`/v1/items/${longId}`)), { id: longId });
  assert.equal(ok(await alice.put<LikeOutcome>(`/v1/items/${longId}/likes/me`)).outcome, "CHANGED");
  for (const id of ["ns:item@1.x_y-z", `a${":".repeat(127)}`]) {
    assert.deepEqual(ok(await admin.put(`/v1/items/${encodeURIComponent(id)}`)), { id }, "a percent-encoded id");
    assert.deepEqual(ok(await alice.get(`/v1/items/${encodeURIComponent(id)}/likes/me`)), { liked: false, version: 0 });
  }

  t.diagnostic(`note codes seen: ${[...seen].map(([c, s]) => `${c}=${s}`).join(" ")}`);
  assert.deepEqual([...seen.keys()].sort(), [
    "ACCOUNT_NOT_FOUND",
    "BLOCKED",
    "FORBIDDEN",
    "INVALID_INPUT",
    "ITEM_NOT_FOUND",
    "METHOD_NOT_ALLOWED",
    "NOT_FOUND",
    "NOT_PENDING",
    "PAYLOAD_TOO_LARGE",
    "POST_NOT_FOUND",
    "SELF_BLOCK",
    "SELF_FOLLOW",
    "UNAUTHENTICATED",
    "UNSUPPORTED_MEDIA_TYPE",
  ]);
});

test("api rate limit: the 6th write of one user in a minute (any write route) is 429 RATE_LIMITED with Retry-After and X-RateLimit-*, writes nothing, and leaves other users and reads alone", async (t) => {
  const h = await startApi({ writesPerMinute: 5 });
  t.after(() => h.close());
  // Set up through the library: account setup and PUT /v1/items are writes of the admin's budget too.
  for (const id of ["alice", "bob", "carol"]) await h.ledger.relations.upsertAccount(id, {});
  for (const item of ["item-1", "item-2", "item-3"]) await h.ledger.likes.createItem(item);
  const alice = await h.as("alice");
  const bob = await h.as("bob");

  // Five writes of different kinds: one budget per user, not one per route.
  const writes = [
    () => alice.put("/v1/items/item-1/likes/me"),
    () => alice.delete("/v1/items/item-1/likes/me"),
    () => alice.put("/v1/accounts/me/following/bob"),
    () => alice.post("/v1/posts", { visibility: "PUBLIC", body: "hi" }),
    () => alice.put("/v1/accounts/me/blocks/carol"),
  ];
  for (const [i, write] of writes.entries()) {
    const res = await write();
    assert.ok(res.status === 200 || res.status === 201, `write ${i + 1}: ${res.status} ${res.text}`);
    assert.equal(res.headers.get("x-ratelimit-limit"), "5", `write ${i + 1}`);
    assert.equal(res.headers.get("x-ratelimit-remaining"), String(4 - i), `write ${i + 1}`);
  }
  const limited = await alice.put("/v1/items/item-2/likes/me");
  assertError(limited, 429, "RATE_LIMITED", "the 6th write");
  const retryAfter = Number(limited.headers.get("retry-after"));
  t.diagnostic(
    `note 429 headers: retry-after=${limited.headers.get("retry-after")} x-ratelimit-limit=${limited.headers.get("x-ratelimit-limit")} x-ratelimit-remaining=${limited.headers.get("x-ratelimit-remaining")} x-ratelimit-reset=${limited.headers.get("x-ratelimit-reset")}`,
  );
  assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60, `Retry-After ${retryAfter}`);
  assert.equal(limited.headers.get("x-ratelimit-limit"), "5");
  assert.equal(limited.headers.get("x-ratelimit-remaining"), "0");
  assert.ok(limited.headers.get("x-request-id"), "a 429 still carries the request id");
  for (const again of [
    () => alice.post("/v1/posts", { visibility: "PUBLIC", body: "again" }),
    () => alice.delete("/v1/accounts/me/following/bob"),
  ]) {
    assertError(await again(), 429, "RATE_LIMITED", "every write route shares the budget");
  }

  // The refused writes wrote nothing; reads are not limited.
  assert.deepEqual(ok(await alice.get("/v1/items/item-2/likes/me")), { liked: false, version: 0 });
  const { rows } = await h.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM post WHERE author = 'alice'");
  assert.equal(rows[0]!.n, 1);
  for (let i = 0; i < 10; i++) assert.equal((await alice.get("/v1/items/item-1/like-count")).status, 200);

  // Another user has a budget of their own.
  const other = ok(await bob.put<LikeOutcome>("/v1/items/item-2/likes/me"));
  assert.equal(other.outcome, "CHANGED");
  const bobHeaders = await bob.put("/v1/items/item-3/likes/me");
  assert.equal(bobHeaders.headers.get("x-ratelimit-remaining"), "3");
  // Without a token a write is 401, not a spent budget.
  assertError(await h.request("PUT", "/v1/items/item-2/likes/me"), 401, "UNAUTHENTICATED");
});
