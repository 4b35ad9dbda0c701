import { test } from "node:test";
import assert from "node:assert/strict";
import {
  assertError,
  createAccounts,
  ok,
  startApi,
  type Client,
  type FollowerPage,
  type LikerPage,
  type PostJson,
  type RelationOutcome,
} from "./harness.ts";

const PAGE = 7;

function name(prefix: string, i: number): string {
  return `${prefix}-${String(i).padStart(3, "0")}`;
}

/**
 * Pages through a list with limit 7, calling `between` after every page; returns the ids in
 * order and the number of pages. Asserts the cursor is opaque and absent on the last page only.
 */
async function pageThrough<T>(
  fetchPage: (cursor: string | undefined) => Promise<{ rows: T[]; nextCursor?: string }>,
  id: (row: T) => string,
  between: (page: number) => Promise<void>,
): Promise<{ ids: string[]; pages: number }> {
  const ids: string[] = [];
  let cursor: string | undefined;
  let pages = 0;
  for (;;) {
    const page = await fetchPage(cursor);
    pages++;
    assert.ok(page.rows.length <= PAGE);
    ids.push(...page.rows.map(id));
    if (page.nextCursor === undefined) break;
    assert.equal(page.rows.length, PAGE, "only the last page is short");
    assert.doesNotMatch(page.nextCursor, /[^A-Za-z0-9_-]/, "the cursor is opaque base64url");
    cursor = page.nextCursor;
    await between(pages);
    assert.ok(pages < 50, "paging terminates");
  }
  return { ids, pages };
}

function assertStable(context: string, expected: string[], got: string[], arrivals: Set<string>): void {
  assert.equal(new Set(got).size, got.length, `${context}: no duplicate`);
  assert.deepEqual(
    got.filter((id) => arrivals.has(id)),
    [],
    `${context}: rows newer than the first page never show up later`,
  );
  assert.deepEqual(got, expected, `${context}: every row older than the first page, once, in order`);
}

for (const partitions of [1, 4]) {
  test(`api P=${partitions} likers pagination: 40 likers paged by 7 while likes arrive (and one seen liker unlikes and likes again) between pages: no duplicate, no skip, newest first`, async (t) => {
    const h = await startApi({ partitions });
    t.after(() => h.close());
    const admin = await h.as("admin-1", { admin: true });
    ok(await admin.put("/v1/items/item-1"));
    const likers: Client[] = [];
    for (let i = 1; i <= 40; i++) likers.push(await h.as(name("liker", i)));
    for (const c of likers)
      assert.equal(ok(await c.put<{ outcome: string }>("/v1/items/item-1/likes/me")).outcome, "CHANGED");
    // Eleven likers share one timestamp, across a page boundary: the cursor's tiebreak is the id.
    await h.db.pool.query(
      `UPDATE like_fact SET changed_at = (SELECT changed_at FROM like_fact WHERE user_id = 'liker-020' AND item_id = 'item-1')
        WHERE item_id = 'item-1' AND user_id BETWEEN 'liker-015' AND 'liker-025'`,
    );

    const reader = await h.as("reader");
    const all = ok(await reader.get<LikerPage>("/v1/items/item-1/likes?limit=200"));
    assert.equal(all.nextCursor, undefined);
    const expected = all.likers.map((l) => l.userId);
    assert.equal(expected.length, 40);
    assert.deepEqual(expected.slice(0, 3), ["liker-040", "liker-039", "liker-038"], "newest first");
    const times = all.likers.map((l) => Date.parse(l.likedAt));
    assert.ok(
      times.every((ms, i) => i === 0 || ms <= times[i - 1]!),
      "likedAt does not increase down the list",
    );

    const arrivals = new Set<string>();
    let n = 0;
    const seen: string[] = [];
    const { ids, pages } = await pageThrough(
      async (cursor) => {
        const page = ok(
          await reader.get<LikerPage>(`/v1/items/item-1/likes?limit=${PAGE}${cursor ? `&cursor=${cursor}` : ""}`),
        );
        seen.push(...page.likers.map((l) => l.userId));
        return { rows: page.likers, ...(page.nextCursor ? { nextCursor: page.nextCursor } : {}) };
      },
      (l) => l.userId,
      async () => {
        for (let k = 0; k < 2; k++) {
          const c = await h.as(name("late", ++n));
          arrivals.add(c.id);
          assert.equal(ok(await c.put<{ outcome: string }>("/v1/items/item-1/likes/me")).outcome, "CHANGED");
        }
        // A liker already returned unlikes and likes again: now newer than the first page, so not repeated.
        const again = likers.find((c) => c.id === seen[0])!;
        ok(await again.delete("/v1/items/item-1/likes/me"));
        ok(await again.put("/v1/items/item-1/likes/me"));
      },
    );
    t.diagnostic(`note ${pages} pages of ${PAGE}, ${arrivals.size} likes arrived while paging`);
    assert.equal(pages, Math.ceil(40 / PAGE));
    assertStable("likers", expected, ids, arrivals);
    const after = ok(await reader.get<LikerPage>("/v1/items/item-1/likes?limit=200")).likers.map((l) => l.userId);
    assert.equal(after.length, 40 + arrivals.size, "the arrivals are listed afterwards, before the older likers");
    assert.deepEqual(after.slice(after.length - 30), expected.slice(10));
  });
}

test("api P=4 followers pagination: 40 followers paged by 7 while follows arrive and the projector runs between pages: no duplicate, no skip; a blocked reader gets 404 for followers and for the likers of a FOLLOWERS post", async (t) => {
  const h = await startApi({ partitions: 4 });
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  const fans = Array.from({ length: 40 }, (_, i) => name("fan", i + 1));
  const late = Array.from({ length: 20 }, (_, i) => name("late", i + 1));
  await createAccounts(admin, ["star", "reader", "enemy", ...fans, ...late]);
  for (const id of fans)
    assert.equal(ok(await (await h.as(id)).put<RelationOutcome>("/v1/accounts/me/following/star")).state, "ACTIVE");
  await h.ledger.projector.drain();
  // Ties on `since` across a page boundary.
  await h.db.pool.query(
    `UPDATE proj_follower SET since = (SELECT since FROM proj_follower WHERE followee = 'star' AND follower = 'fan-020')
      WHERE followee = 'star' AND follower BETWEEN 'fan-015' AND 'fan-025'`,
  );

  const reader = await h.as("reader");
  const all = ok(await reader.get<FollowerPage>("/v1/accounts/star/followers?limit=200"));
  const expected = all.followers.map((f) => f.accountId);
  assert.equal(expected.length, 40);
  assert.deepEqual(expected.slice(0, 2), ["fan-040", "fan-039"], "newest first");
  assert.deepEqual(ok(await reader.get("/v1/accounts/star/follower-count")), {
    count: 40,
    lag: 0,
    stale: false,
    source: "database",
  });

  const arrivals = new Set<string>();
  let n = 0;
  const { ids, pages } = await pageThrough(
    async (cursor) => {
      const page = ok(
        await reader.get<FollowerPage>(`/v1/accounts/star/followers?limit=${PAGE}${cursor ? `&cursor=${cursor}` : ""}`),
      );
      return { rows: page.followers, ...(page.nextCursor ? { nextCursor: page.nextCursor } : {}) };
    },
    (f) => f.accountId,
    async () => {
      for (let k = 0; k < 2; k++) {
        const id = late[n++]!;
        arrivals.add(id);
        assert.equal(ok(await (await h.as(id)).put<RelationOutcome>("/v1/accounts/me/following/star")).state, "ACTIVE");
      }
      await h.ledger.projector.drain();
    },
  );
  t.diagnostic(`note ${pages} pages of ${PAGE}, ${arrivals.size} follows arrived (and were projected) while paging`);
  assertStable("followers", expected, ids, arrivals);
  const after = ok(await reader.get<FollowerPage>("/v1/accounts/star/followers?limit=200")).followers.map(
    (f) => f.accountId,
  );
  assert.equal(after.length, 40 + arrivals.size);
  assert.deepEqual(ok(await reader.get("/v1/accounts/star/follower-count")), {
    count: 40 + arrivals.size,
    lag: 0,
    stale: false,
    source: "database",
  });

  // A blocked reader: the followers list and the likers of a FOLLOWERS post are 404, like missing ones.
  const star = await h.as("star");
  const post = ok(await star.post<PostJson>("/v1/posts", { visibility: "FOLLOWERS", body: "for fans" }), 201);
  for (const id of fans.slice(0, 3)) ok(await (await h.as(id)).put(`/v1/items/${post.id}/likes/me`));
  assert.equal(ok(await (await h.as("fan-001")).get<LikerPage>(`/v1/items/${post.id}/likes`)).likers.length, 3);
  const enemy = await h.as("enemy");
  assertError(await enemy.get(`/v1/items/${post.id}/likes`), 404, "ITEM_NOT_FOUND", "a stranger");
  assert.equal(ok(await enemy.put<RelationOutcome>("/v1/accounts/me/following/star")).state, "ACTIVE");
  await h.ledger.projector.drain();
  assert.equal(
    ok(await enemy.get<LikerPage>(`/v1/items/${post.id}/likes`)).likers.length,
    3,
    "a follower sees the likers",
  );
  ok(await star.put("/v1/accounts/me/blocks/enemy"));
  const missingItem = await enemy.get("/v1/items/no-such-item/likes");
  const missingAccount = await enemy.get("/v1/accounts/no-such-account/followers");
  const likersRes = await enemy.get(`/v1/items/${post.id}/likes`);
  assertError(likersRes, 404, "ITEM_NOT_FOUND");
  assert.equal(likersRes.text, missingItem.text, "the likers of a post you may not read look like a missing item's");
  const firstPage = ok(await reader.get<FollowerPage>(`/v1/accounts/star/followers?limit=${PAGE}`));
  for (const path of [
    "/v1/accounts/star/followers",
    `/v1/accounts/star/followers?limit=${PAGE}&cursor=${firstPage.nextCursor}`,
  ]) {
    const res = await enemy.get(path);
    assertError(res, 404, "ACCOUNT_NOT_FOUND");
    assert.equal(res.text, missingAccount.text, `${path}: the blocker's followers look like a missing account's`);
  }
  assertError(await enemy.get("/v1/accounts/star/follower-count"), 404, "ACCOUNT_NOT_FOUND");
});

test("api every list pages the same way: a limit above 200 is clamped (not a 400), unknown query parameters are ignored (and kept in Link), Link rel=next names the next page and is absent on the last", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  ok(await admin.put("/v1/items/item-1"));
  for (let i = 1; i <= 205; i++)
    assert.equal((await h.ledger.likes.like(name("liker", i), "item-1")).outcome, "CHANGED");
  const reader = await h.as("reader");

  const clamped = await reader.get<LikerPage>("/v1/items/item-1/likes?limit=1000");
  const page = ok(clamped);
  assert.equal(page.likers.length, 200, "limit=1000 is clamped to the maximum, 200");
  assert.equal(clamped.headers.get("link"), `</v1/items/item-1/likes?limit=200&cursor=${page.nextCursor}>; rel="next"`);
  const rest = await reader.get<LikerPage>(`/v1/items/item-1/likes?limit=1000&cursor=${page.nextCursor}`);
  assert.deepEqual(ok(rest).likers.length, 5);
  assert.equal(ok(rest).nextCursor, undefined);
  assert.equal(rest.headers.get("link"), null, "no Link on the last page");

  // A cache buster is ignored, and the next page keeps it.
  const busted = await reader.get<LikerPage>("/v1/items/item-1/likes?limit=3&_=1712345678");
  const first = ok(busted);
  assert.deepEqual(
    first.likers.map((l) => l.userId),
    ["liker-205", "liker-204", "liker-203"],
  );
  const link = /^<([^>]+)>; rel="next"$/.exec(busted.headers.get("link") ?? "");
  assert.ok(link, busted.headers.get("link") ?? "no Link");
  assert.equal(link[1], `/v1/items/item-1/likes?limit=3&_=1712345678&cursor=${first.nextCursor}`);
  assert.deepEqual(
    ok(await reader.get<LikerPage>(link[1]!)).likers.map((l) => l.userId),
    ["liker-202", "liker-201", "liker-200"],
    "following Link gives the next page",
  );
  ok(await reader.get("/v1/items/item-1/like-count?allowedLag=3&lag=3&foo=bar"), 200, "unknown parameters on any GET");
  assertError(
    await reader.get("/v1/items/item-1/likes?limit=0"),
    400,
    "INVALID_INPUT",
    "a limit below 1 is still wrong",
  );
});
