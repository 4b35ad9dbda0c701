/**
 * GET /v1/accounts/{id}/posts: an author's posts as the caller may read them, newest first, each
 * decided when the page is read by the rule of GET /v1/posts/{id}; the list conventions (limit
 * clamped, body cursor and Link, a cursor stable under writes); counts and the caller's like.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { assertError, createAccounts, ok, startApi, type ApiHarness, type PostJson } from "./harness.ts";
import { replaceFunctionText } from "../support/function-mutant.ts";

interface EntryPage {
  posts: { post: PostJson; likeCount: number; commentCount: number; liked: boolean }[];
  nextCursor?: string;
}

const bodies = (page: EntryPage) => page.posts.map((e) => e.post.body);

async function postAs(client: { post: (p: string, j: unknown) => Promise<unknown> }, visibility: string, body: string) {
  return ok(
    (await client.post("/v1/posts", { visibility, body })) as Awaited<ReturnType<ApiHarness["request"]>>,
    201,
  ) as PostJson;
}

test("author posts: each reader sees what GET /v1/posts/{id} lets them read (author, follower, stranger, no token, pending, unfollowed, blocked either way), deleted never", async (t) => {
  const h = await startApi({ partitions: 4 });
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "bob", "carol", "dave", "erin", "fay", "gus"]);
  await createAccounts(admin, ["paula"], { private: true });
  const [alice, bob, carol, dave, erin, fay, gus, paula] = await Promise.all(
    ["alice", "bob", "carol", "dave", "erin", "fay", "gus", "paula"].map((id) => h.as(id)),
  );
  ok(await bob!.put("/v1/accounts/me/following/alice"));
  ok(await fay!.put("/v1/accounts/me/following/alice"));
  ok(await alice!.put("/v1/accounts/me/blocks/dave"));
  ok(await erin!.put("/v1/accounts/me/blocks/alice"));
  ok(await gus!.put("/v1/accounts/me/following/paula")); // a request: paula is private
  await postAs(alice!, "PUBLIC", "public 1");
  await postAs(alice!, "FOLLOWERS", "followers 1");
  await postAs(alice!, "SELF", "self 1");
  const doomed = await postAs(alice!, "PUBLIC", "deleted");
  await postAs(alice!, "PUBLIC", "public 2");
  ok(await alice!.delete(`/v1/posts/${doomed.id}`));
  await postAs(paula!, "FOLLOWERS", "paula's");
  // fay unfollows after the posts: she may no longer read the FOLLOWERS post (the projection drained: no revocation window).
  ok(await fay!.delete("/v1/accounts/me/following/alice"));
  await h.drain();

  const page = async (who: { get: (p: string) => Promise<unknown> } | null, path = "/v1/accounts/alice/posts") =>
    bodies(ok((who ? await who.get(path) : await h.request("GET", path)) as { status: number } as never) as EntryPage);
  const expected: [string, { get: (p: string) => Promise<unknown> } | null, string[]][] = [
    ["the author", alice!, ["public 2", "self 1", "followers 1", "public 1"]],
    ["an ACTIVE follower", bob!, ["public 2", "followers 1", "public 1"]],
    ["a stranger", carol!, ["public 2", "public 1"]],
    ["no token", null, ["public 2", "public 1"]],
    ["an unfollowed reader", fay!, ["public 2", "public 1"]],
  ];
  for (const [who, client, want] of expected) assert.deepEqual(await page(client), want, who);
  assert.deepEqual(await page(alice!, "/v1/accounts/me/posts"), expected[0]![2], "me is the caller");
  // Each post read alone agrees: what the list shows is readable, what it leaves out is a 404.
  const all = ok<EntryPage>(await alice!.get("/v1/accounts/alice/posts"));
  for (const e of all.posts) {
    const shown = (await page(carol!)).includes(e.post.body);
    assert.equal((await carol!.get(`/v1/posts/${e.post.id}`)).status, shown ? 200 : 404, e.post.body);
  }
  // Blocked either way, a missing account: the same 404 as the profile.
  assertError(await dave!.get("/v1/accounts/alice/posts"), 404, "ACCOUNT_NOT_FOUND", "blocked by the author");
  assertError(await erin!.get("/v1/accounts/alice/posts"), 404, "ACCOUNT_NOT_FOUND", "blocks the author");
  assertError(await alice!.get("/v1/accounts/dave/posts"), 404, "ACCOUNT_NOT_FOUND", "the author's own block");
  assertError(await bob!.get("/v1/accounts/nobody/posts"), 404, "ACCOUNT_NOT_FOUND", "missing");
  assertError(await h.request("GET", "/v1/accounts/me/posts"), 401, "UNAUTHENTICATED", "me without a token");
  // A pending request reads no FOLLOWERS post of a private account.
  assert.deepEqual(await page(gus!, "/v1/accounts/paula/posts"), [], "a pending request");
  assert.deepEqual(await page(paula!, "/v1/accounts/paula/posts"), ["paula's"], "the private author");

  // Negative control: the same reads through author_posts_page with its rule replaced by `true` leak.
  await replaceFunctionText(h.db.pool, "author_posts_page(text, text[], timestamptz, text, integer)", [
    ["AND CASE\n", "AND (true OR CASE\n"],
    ["       END\n       ORDER BY", "       END)\n       ORDER BY"],
  ]);
  assert.deepEqual(await page(carol!), ["public 2", "self 1", "followers 1", "public 1"], "the rule-less page leaks");
  assert.deepEqual(await page(fay!), ["public 2", "self 1", "followers 1", "public 1"], "to the unfollowed too");
});

test("author posts: newest first, limit clamped, cursor in the body and in Link, stable under writes; counts and the caller's like", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "bob", "carol"]);
  const [alice, bob, carol] = await Promise.all(["alice", "bob", "carol"].map((id) => h.as(id)));
  const ids: string[] = [];
  for (let i = 1; i <= 5; i++) ids.push((await postAs(alice!, "PUBLIC", `p${i}`)).id);

  const first = await bob!.get<EntryPage>("/v1/accounts/alice/posts?limit=2");
  const page1 = ok(first);
  assert.deepEqual(bodies(page1), ["p5", "p4"]);
  assert.equal(first.headers.get("link"), `</v1/accounts/alice/posts?limit=2&cursor=${page1.nextCursor}>; rel="next"`);
  // Writes between pages: a new post (before the cursor) and a deletion (after it) move nothing.
  await postAs(alice!, "PUBLIC", "p6");
  ok(await alice!.delete(`/v1/posts/${ids[0]}`));
  const second = await bob!.get<EntryPage>(`/v1/accounts/alice/posts?limit=2&cursor=${page1.nextCursor}`);
  assert.deepEqual(ok(second), { posts: second.body.posts }, "p1 was deleted: nothing follows p2, so no cursor");
  assert.deepEqual(bodies(second.body), ["p3", "p2"]);
  assert.equal(second.headers.get("link"), null);
  const clamped = ok<EntryPage>(await bob!.get("/v1/accounts/alice/posts?limit=5000"));
  assert.deepEqual(bodies(clamped), ["p6", "p5", "p4", "p3", "p2"], "a limit above 200 is clamped, not refused");
  assertError(await bob!.get("/v1/accounts/alice/posts?limit=0"), 400, "INVALID_INPUT", "limit 0");
  assertError(await bob!.get("/v1/accounts/alice/posts?cursor=nonsense"), 400, "INVALID_INPUT", "a foreign cursor");

  // Counts (derived: after the consumers drain) and the caller's like (facts: at once).
  ok(await bob!.put(`/v1/items/${ids[4]}/likes/me`));
  ok(await carol!.put(`/v1/items/${ids[4]}/likes/me`));
  ok(await carol!.post(`/v1/posts/${ids[4]}/comments`, { body: "nice" }), 201);
  const before = ok<EntryPage>(await bob!.get("/v1/accounts/alice/posts?limit=2")).posts[1]!;
  assert.deepEqual([before.post.body, before.liked], ["p5", true], "bob's like is a fact: shown before any drain");
  await h.drain();
  const entries = ok<EntryPage>(await bob!.get("/v1/accounts/alice/posts?limit=2")).posts;
  assert.deepEqual(
    entries.map((e) => [e.post.body, e.likeCount, e.commentCount, e.liked]),
    [
      ["p6", 0, 0, false],
      ["p5", 2, 1, true],
    ],
  );
  const anonymous = ok<EntryPage>(await h.request("GET", "/v1/accounts/alice/posts?limit=2")).posts[1]!;
  assert.deepEqual([anonymous.likeCount, anonymous.liked], [2, false]);
  // The entry's post is the post as GET /v1/posts/{id} shows it.
  const single = ok<{ post: PostJson }>(await bob!.get(`/v1/posts/${ids[4]}`)).post;
  assert.deepEqual(entries[1]!.post, single);
});
