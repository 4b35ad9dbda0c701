import { test } from "node:test";
import assert from "node:assert/strict";
import { assertError, createAccounts, ok, startApi, type PostJson } from "./harness.ts";

/**
 * The comment routes follow the API's conventions (public reads without a
 * token, limit clamped, Link), and every route is rate limited, says so in its headers and
 * declares its 429.
 */

interface CommentPage {
  comments: { id: string; body: string | null; author: string | null }[];
  nextCursor?: string;
}

test("comment reads: comments, replies and the comment count of a PUBLIC post need no token; FOLLOWERS, SELF and deleted posts stay 404 without one", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin", { admin: true });
  await createAccounts(admin, ["alice", "bob", "carol"]);
  const [alice, bob, carol] = await Promise.all(["alice", "bob", "carol"].map((id) => h.as(id)));
  const pub = ok<PostJson>(await alice!.post("/v1/posts", { visibility: "PUBLIC", body: "for all" }), 201);
  const friends = ok<PostJson>(await alice!.post("/v1/posts", { visibility: "FOLLOWERS", body: "for friends" }), 201);
  const self = ok<PostJson>(await alice!.post("/v1/posts", { visibility: "SELF", body: "for me" }), 201);
  ok(await bob!.put("/v1/accounts/me/following/alice"));
  await h.drain();
  const onPublic = ok<{ id: string }>(await bob!.post(`/v1/posts/${pub.id}/comments`, { body: "hello" }), 201);
  ok(await carol!.post(`/v1/posts/${pub.id}/comments`, { body: "re", parentId: onPublic.id }), 201);
  const onFriends = ok<{ id: string }>(await bob!.post(`/v1/posts/${friends.id}/comments`, { body: "hi friend" }), 201);
  const onSelf = ok<{ id: string }>(await alice!.post(`/v1/posts/${self.id}/comments`, { body: "note" }), 201);
  await h.drain();

  const anonymous = <T = unknown>(path: string) => h.request<T>("GET", path);
  assert.deepEqual(
    ok(await anonymous<CommentPage>(`/v1/posts/${pub.id}/comments`)).comments.map((c) => c.body),
    ["hello"],
  );
  assert.deepEqual(
    ok(await anonymous<CommentPage>(`/v1/comments/${onPublic.id}/replies`)).comments.map((c) => c.body),
    ["re"],
  );
  assert.equal(ok(await anonymous<{ count: number }>(`/v1/posts/${pub.id}/comment-count`)).count, 2);
  // As the post itself: GET /v1/posts/{id} without a token reads PUBLIC posts only.
  ok(await anonymous(`/v1/posts/${pub.id}`));
  for (const post of [friends, self]) {
    assertError(await anonymous(`/v1/posts/${post.id}`), 404, "POST_NOT_FOUND", `${post.visibility} post`);
    assertError(await anonymous(`/v1/posts/${post.id}/comments`), 404, "POST_NOT_FOUND", `${post.visibility} comments`);
    assertError(
      await anonymous(`/v1/posts/${post.id}/comment-count`),
      404,
      "POST_NOT_FOUND",
      `${post.visibility} count`,
    );
  }
  for (const c of [onFriends, onSelf])
    assertError(await anonymous(`/v1/comments/${c.id}/replies`), 404, "COMMENT_NOT_FOUND");
  assertError(await anonymous("/v1/comments/no-such-comment/replies"), 404, "COMMENT_NOT_FOUND");
  // The follow still opens the FOLLOWERS post to its follower, with a token; a non-follower's token does not.
  assert.equal(ok<CommentPage>(await bob!.get(`/v1/posts/${friends.id}/comments`)).comments.length, 1);
  assertError(await carol!.get(`/v1/posts/${friends.id}/comments`), 404, "POST_NOT_FOUND");
  // A token that is sent must be valid, as on every optional route.
  assertError(await h.request("GET", `/v1/posts/${pub.id}/comments`, { token: "not-a-token" }), 401, "UNAUTHENTICATED");
  // A deleted PUBLIC post is gone for a client without a token too.
  ok(await alice!.delete(`/v1/posts/${pub.id}`));
  assertError(await anonymous(`/v1/posts/${pub.id}/comments`), 404, "POST_NOT_FOUND");
  assertError(await anonymous(`/v1/posts/${pub.id}/comment-count`), 404, "POST_NOT_FOUND");
  assertError(await anonymous(`/v1/comments/${onPublic.id}/replies`), 404, "COMMENT_NOT_FOUND");
});

test("comment lists: a limit above 200 is clamped like every list, and the next page is named in Link rel=next on comments and replies", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin", { admin: true });
  await createAccounts(admin, ["alice", "bob"]);
  const [alice, bob] = await Promise.all(["alice", "bob"].map((id) => h.as(id)));
  const post = ok<PostJson>(await alice!.post("/v1/posts", { visibility: "PUBLIC", body: "thread" }), 201);
  const top: string[] = [];
  for (let i = 0; i < 3; i++)
    top.push(ok<{ id: string }>(await bob!.post(`/v1/posts/${post.id}/comments`, { body: `c${i}` }), 201).id);
  for (let i = 0; i < 3; i++)
    ok(await bob!.post(`/v1/posts/${post.id}/comments`, { body: `r${i}`, parentId: top[0] }), 201);

  for (const path of [`/v1/posts/${post.id}/comments`, `/v1/comments/${top[0]}/replies`]) {
    const clamped = await bob!.get<CommentPage>(`${path}?limit=500`);
    assert.equal(ok(clamped, 200, `${path} limit=500`).comments.length, 3);
    assertError(await bob!.get(`${path}?limit=0`), 400, "INVALID_INPUT", "0 is still refused");
    // Two pages of two: the first names the second in Link (the clamped limit, the cursor, the other parameters kept).
    const first = await h.request<CommentPage>("GET", `${path}?limit=2&cb=1`);
    const page1 = ok(first);
    const link = first.headers.get("link") ?? "";
    const target = /^<([^>]+)>; rel="next"$/.exec(link)?.[1];
    assert.ok(target, `${path}: Link ${JSON.stringify(link)}`);
    const next = new URL(target, h.baseUrl);
    assert.equal(next.pathname, path);
    assert.deepEqual(
      [next.searchParams.get("limit"), next.searchParams.get("cursor"), next.searchParams.get("cb")],
      ["2", page1.nextCursor, "1"],
    );
    const second = await h.request<CommentPage>("GET", target);
    const page2 = ok(second);
    assert.equal(page2.comments.length, 1);
    assert.equal(second.headers.get("link"), null, "the last page has no Link");
    assert.equal(new Set([...page1.comments, ...page2.comments].map((c) => c.id)).size, 3);
    const big = await bob!.get(`${path}?limit=500`);
    assert.equal(big.headers.get("link"), null);
  }
});

interface OpenApiOperation {
  tags?: string[];
  requestBody?: unknown;
  responses: Record<string, unknown>;
}

test("rate limits: every operation of the OpenAPI document (but the health probes) sends X-RateLimit-* and declares 429", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin", { admin: true });
  await createAccounts(admin, ["admin", "bob"]);
  ok(await admin.put("/v1/items/item-1"));
  const post = ok<PostJson>(await admin.post("/v1/posts", { visibility: "PUBLIC", body: "p" }), 201);
  const comment = ok<{ id: string }>(await admin.post(`/v1/posts/${post.id}/comments`, { body: "c" }), 201);
  const doc = ok<{ paths: Record<string, Record<string, OpenApiOperation>> }>(await h.request("GET", "/openapi.json"));
  const bodies: Record<string, unknown> = {
    "post /v1/posts": { visibility: "PUBLIC", body: "walk" },
    "post /v1/posts/{id}/comments": { body: "walk" },
    "patch /v1/comments/{id}": { body: "walked" },
  };
  const idFor = (path: string) =>
    path.startsWith("/v1/posts/")
      ? post.id
      : path.startsWith("/v1/comments/")
        ? comment.id
        : path.startsWith("/v1/items/")
          ? "item-1"
          : "bob";
  let walked = 0;
  const missing: string[] = [];
  for (const [path, operations] of Object.entries(doc.paths)) {
    for (const [method, operation] of Object.entries(operations)) {
      // Probes are never refused: a 429 on /healthz would make an orchestrator restart a healthy process.
      if (operation.tags?.includes("health")) continue;
      const where = `${method.toUpperCase()} ${path}`;
      if (!("429" in operation.responses)) missing.push(`${where}: no 429 in the document`);
      const url = path.replace("{id}", idFor(path)) + (path === "/v1/accounts/me/relationships" ? "?id=bob" : "");
      const json = bodies[`${method} ${path}`] ?? (operation.requestBody ? {} : undefined);
      const res = await h.request(method.toUpperCase(), url, {
        token: admin.token,
        ...(json === undefined ? {} : { json }),
      });
      assert.ok(res.status < 500 && res.status !== 401, `${where}: ${res.status} ${res.text}`);
      for (const header of ["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"]) {
        if (res.headers.get(header) === null) missing.push(`${where}: no ${header} (${res.status})`);
      }
      walked++;
    }
  }
  assert.ok(walked >= 35, `walked ${walked} operations`);
  assert.deepEqual(missing, []);
  // A client without a token is limited too (per IP), on the public routes.
  const anonymous = await h.request("GET", `/v1/posts/${post.id}/comments`);
  assert.notEqual(anonymous.headers.get("x-ratelimit-limit"), null);
});
