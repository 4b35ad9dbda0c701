/**
 * docs/api.md, "What a blocked user learns": to a user it blocks, an account does not exist, and
 * that holds in the lists of other accounts and items too. Every list of accounts the API serves
 * (likers, followers, following, notification actors, comment authors) leaves out the accounts in a
 * block with the caller, either way, as the profile of such an account is 404 to them. Over real
 * HTTP. Positive controls: the list's owner, and a request without a token (public data), still see
 * everyone; an account in no block is listed to the caller. Pagination: the filter sits before the
 * page's LIMIT, so a page is full and has its Link rel=next whenever more visible rows are left.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  createAccounts,
  ok,
  startApi,
  type ApiHarness,
  type ApiResponse,
  type Client,
  type FollowerPage,
  type FollowingPage,
  type LikerPage,
} from "./harness.ts";

interface IdJson {
  id: string;
}

const likers = (res: ApiResponse<LikerPage>) =>
  ok(res)
    .likers.map((l) => l.userId)
    .sort();
const followers = (res: ApiResponse<FollowerPage>) =>
  ok(res)
    .followers.map((f) => f.accountId)
    .sort();
const following = (res: ApiResponse<FollowingPage>) =>
  ok(res)
    .following.map((f) => f.accountId)
    .sort();

test("api blocked lists: likers, followers, following, notification actors and comment authors leave out accounts in a block with the caller", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "bob", "carol", "dave", "erin"]);
  const [alice, bob, carol, dave, erin] = [
    await h.as("alice"),
    await h.as("bob"),
    await h.as("carol"),
    await h.as("dave"),
    await h.as("erin"),
  ];
  ok(await admin.put("/v1/items/item-1"));
  const bobsPost = ok(await bob.post<IdJson>("/v1/posts", { visibility: "PUBLIC", body: "bob's" }), 201);
  const carolsPost = ok(await carol.post<IdJson>("/v1/posts", { visibility: "PUBLIC", body: "carol's" }), 201);
  // alice, dave and erin like bob's post and the plain item, follow carol, are followed by her, and comment on her post.
  for (const who of [alice, dave, erin]) {
    ok(await who.put(`/v1/items/${bobsPost.id}/likes/me`));
    ok(await who.put("/v1/items/item-1/likes/me"));
    ok(await who.put("/v1/accounts/me/following/carol"));
    ok(await carol.put(`/v1/accounts/me/following/${who.id}`));
    ok(await who.post(`/v1/posts/${carolsPost.id}/comments`, { body: `${who.id} was here` }), 201);
  }
  ok(await bob.put("/v1/accounts/me/following/carol"));
  // alice blocks bob; bob blocks erin. dave is in no block.
  ok(await alice.put("/v1/accounts/me/blocks/bob"));
  ok(await bob.put("/v1/accounts/me/blocks/erin"));
  await h.drain();

  // The blocked user: alice (who blocks him) and erin (whom he blocks) are not listed anywhere.
  assert.deepEqual(likers(await bob.get(`/v1/items/${bobsPost.id}/likes`)), ["dave"], "likers of bob's own post");
  assert.deepEqual(likers(await bob.get("/v1/items/item-1/likes")), ["dave"], "likers of a plain item");
  assert.deepEqual(followers(await bob.get("/v1/accounts/carol/followers")), ["bob", "dave"], "carol's followers");
  assert.deepEqual(following(await bob.get("/v1/accounts/carol/following")), ["dave"], "whom carol follows");
  const notes = ok(
    await bob.get<{ groups: { type: string; sampleAccountIds: string[]; notificationsCount: number }[] }>(
      "/v1/notifications",
    ),
  ).groups;
  assert.deepEqual(
    notes.filter((g) => g.type === "like").flatMap((g) => g.sampleAccountIds),
    ["dave"],
    "notification actors",
  );
  const comments = ok(
    await bob.get<{ comments: { author: string }[] }>(`/v1/posts/${carolsPost.id}/comments`),
  ).comments;
  assert.deepEqual(comments.map((c) => c.author).sort(), ["dave"], "comment authors");

  // The blocker sees the same rule from her side: bob is not listed to alice.
  assert.deepEqual(
    followers(await alice.get("/v1/accounts/carol/followers")),
    ["alice", "dave", "erin"],
    "bob is left out for alice",
  );

  // Controls: the owner of the lists and a request without a token see everyone.
  assert.deepEqual(followers(await carol.get("/v1/accounts/carol/followers")), ["alice", "bob", "dave", "erin"]);
  assert.deepEqual(following(await carol.get("/v1/accounts/carol/following")), ["alice", "dave", "erin"]);
  assert.deepEqual(
    likers(await h.request<LikerPage>("GET", `/v1/items/${bobsPost.id}/likes`)),
    ["alice", "dave", "erin"],
    "public data without a token",
  );
  assert.deepEqual(likers(await carol.get("/v1/items/item-1/likes")), ["alice", "dave", "erin"]);
  assert.deepEqual(following(await h.request<FollowingPage>("GET", "/v1/accounts/carol/following")), [
    "alice",
    "dave",
    "erin",
  ]);

  // An unblock shows them again (nothing was removed from the lists themselves).
  ok(await alice.delete("/v1/accounts/me/blocks/bob"));
  assert.deepEqual(likers(await bob.get("/v1/items/item-1/likes")), ["alice", "dave"]);
  assert.deepEqual(following(await bob.get("/v1/accounts/carol/following")), ["alice", "dave"]);
});

/** Walks a list by its Link rel=next, `limit` per page; every page but the last must be full. */
async function walk(
  who: Client,
  path: string,
  limit: number,
  read: (res: ApiResponse<never>) => string[],
): Promise<{ ids: string[]; pages: number[] }> {
  const ids: string[] = [];
  const pages: number[] = [];
  let next: string | null = `${path}?limit=${limit}`;
  while (next) {
    const res: ApiResponse<never> = await who.get<never>(next);
    const page = read(res);
    ids.push(...page);
    pages.push(page.length);
    const link = res.headers.get("link");
    next = link ? /^<([^>]+)>; rel="next"$/.exec(link)![1]! : null;
    assert.ok(pages.length <= 20, "the walk ends");
  }
  return { ids, pages };
}

async function crowd(h: ApiHarness, admin: Client): Promise<{ viewer: Client; shown: string[]; blockers: string[] }> {
  const ids = Array.from({ length: 14 }, (_, i) => `fan-${String(i).padStart(2, "0")}`);
  await createAccounts(admin, ["viewer", "star", ...ids]);
  ok(await admin.put("/v1/items/hot"));
  const viewer = await h.as("viewer");
  // Interleaved in time: every other fan blocks the viewer, so most pages would hold some of them.
  const blockers = ids.filter((_, i) => i % 2 === 1 || i >= 10);
  for (const id of ids) {
    const fan = await h.as(id);
    ok(await fan.put("/v1/items/hot/likes/me"));
    ok(await fan.put("/v1/accounts/me/following/star"));
    ok(await (await h.as("star")).put(`/v1/accounts/me/following/${id}`));
  }
  for (const id of blockers) ok(await (await h.as(id)).put("/v1/accounts/me/blocks/viewer"));
  await h.drain();
  return { viewer, shown: ids.filter((id) => !blockers.includes(id)), blockers };
}

test("api blocked lists: pages stay full and linked while blockers are left out (likers, followers, following)", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  const { viewer, shown, blockers } = await crowd(h, admin);
  t.diagnostic(`note ${shown.length} accounts shown, ${blockers.length} blocking the viewer`);
  const lists: [string, (res: ApiResponse<never>) => string[]][] = [
    ["/v1/items/hot/likes", (res) => ok(res as ApiResponse<LikerPage>).likers.map((l) => l.userId)],
    ["/v1/accounts/star/followers", (res) => ok(res as ApiResponse<FollowerPage>).followers.map((f) => f.accountId)],
    ["/v1/accounts/star/following", (res) => ok(res as ApiResponse<FollowingPage>).following.map((f) => f.accountId)],
  ];
  for (const [path, read] of lists) {
    const { ids, pages } = await walk(viewer, path, 2, read);
    assert.deepEqual([...ids].sort(), shown, `${path}: each visible account once, no blocker`);
    assert.equal(new Set(ids).size, ids.length, `${path}: no repeats`);
    // 5 visible accounts at 2 a page: two full pages with a Link, then the last one without.
    assert.deepEqual(pages, [2, 2, 1], `${path}: full pages, got ${pages.join(", ")}`);
    // Control: without a token, the same walk lists every fan.
    const anonymous = { get: (p: string) => h.request("GET", p) } as unknown as Client;
    assert.equal(
      (await walk(anonymous, path, 2, read)).ids.length,
      shown.length + blockers.length,
      `${path}: everyone without a token`,
    );
  }
});
