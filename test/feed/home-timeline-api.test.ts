import { test } from "node:test";
import assert from "node:assert/strict";
import { assertError, createAccounts, ok, startApi } from "../api/harness.ts";

interface Entry {
  post: { id: string; author: string; visibility: string; body: string; aclToken: number; createdAt: string };
  likes: number;
  comments: number;
  likedByMe: boolean;
}
interface Page {
  entries: Entry[];
  lag: number;
  nextCursor?: string;
}

test("api home timeline: my followees' posts and mine, newest first, as GET /v1/posts/{id} shows them with counts and my like; pages by Link rel=next without repeat or skip while posts arrive; lag counts what is not applied yet; only with a token; a bad cursor is a 400", async (t) => {
  const h = await startApi({ partitions: 4 });
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["ann", "bob", "cat"]);
  const ann = await h.as("ann");
  const bob = await h.as("bob");
  const cat = await h.as("cat");
  ok(await ann.put("/v1/accounts/me/following/bob"));
  const ids: string[] = [];
  for (let i = 0; i < 5; i++)
    ids.push(ok(await bob.post<{ id: string }>("/v1/posts", { visibility: "FOLLOWERS", body: `bob ${i}` }), 201).id);
  ids.push(ok(await ann.post<{ id: string }>("/v1/posts", { visibility: "SELF", body: "mine" }), 201).id);
  ok(await cat.post("/v1/posts", { visibility: "PUBLIC", body: "not followed" }), 201);
  const before = ok(await ann.get<Page>("/v1/timelines/home"));
  assert.ok(before.lag >= 7, `the follow and six posts are pending: lag ${before.lag}`);
  await h.drain();
  ok(await ann.put(`/v1/items/${ids[4]}/likes/me`));
  ok(await bob.put(`/v1/items/${ids[4]}/likes/me`));
  ok(await ann.post(`/v1/posts/${ids[4]}/comments`, { body: "nice" }), 201);
  await h.drain();

  const first = await ann.get<Page>("/v1/timelines/home?limit=2");
  const page1 = ok(first);
  assert.equal(page1.lag, 0);
  assert.deepEqual(
    page1.entries.map((e) => e.post.id),
    [ids[5], ids[4]],
  );
  const liked = page1.entries[1]!;
  assert.deepEqual([liked.likes, liked.comments, liked.likedByMe], [2, 1, true]);
  const shown = ok(await ann.get<{ post: Entry["post"] }>(`/v1/posts/${ids[4]}`)).post;
  assert.deepEqual(liked.post, shown, "the entry's post is GET /v1/posts/{id}'s");
  const link = first.headers.get("link");
  assert.match(link ?? "", /^<\/v1\/timelines\/home\?limit=2&cursor=[^>]+>; rel="next"$/);

  // A post arriving while ann pages lands before her first page: the next pages neither repeat nor skip.
  ok(await bob.post("/v1/posts", { visibility: "PUBLIC", body: "late" }), 201);
  await h.drain();
  const seen = page1.entries.map((e) => e.post.id);
  let next = link!.slice(1, link!.indexOf(">"));
  for (;;) {
    const res = await ann.get<Page>(next);
    seen.push(...ok(res).entries.map((e) => e.post.id));
    const l = res.headers.get("link");
    if (!l) break;
    next = l.slice(1, l.indexOf(">"));
  }
  assert.deepEqual(seen, [ids[5], ...ids.slice(0, 5).reverse()]);

  assert.equal((await h.request("GET", "/v1/timelines/home")).status, 401);
  assertError(await ann.get("/v1/timelines/home?cursor=nope"), 400, "INVALID_INPUT");
  assertError(await ann.get("/v1/timelines/home?limit=0"), 400, "INVALID_INPUT");
  assert.equal(
    ok(await ann.get<Page>("/v1/timelines/home?limit=1000")).entries.length,
    7,
    "a limit above 200 is clamped",
  );
});
