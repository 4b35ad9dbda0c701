import { test } from "node:test";
import assert from "node:assert/strict";
import { SignJWT } from "jose";
import {
  assertError,
  createAccounts,
  ok,
  startApi,
  type ApiResponse,
  type LikeOutcome,
  type PostJson,
  type PostRead,
  type RelationOutcome,
} from "./harness.ts";

/** Every way we could think of to ask for PROJECTION_ONLY (or anything not offered) through the query string. */
const SMUGGLED_QUERIES = [
  "consistency=projection_only",
  "consistency=PROJECTION_ONLY",
  "consistency=Projection_Only",
  "consistency=projection",
  "consistency=projection-only",
  "consistency=projectionOnly",
  "consistency=%70rojection%5Fonly",
  "consistency=projection_only%00",
  "consistency=content_token%00projection_only",
  "consistency=content_token%20",
  "consistency=%20content_token",
  "consistency=CONTENT_TOKEN",
  "consistency=TRUTH",
  "consistency=",
  "consistency",
  "consistency=0",
  "consistency=3",
  "consistency=true",
  "consistency=null",
  "consistency=toString",
  "consistency=__proto__",
  "consistency=constructor",
  "consistency=hasOwnProperty",
  "consistency[]=projection_only",
  "consistency[0]=projection_only",
  "consistency[mode]=PROJECTION_ONLY",
  "consistency.mode=PROJECTION_ONLY",
  "consistency=truth&consistency=projection_only",
  "consistency=projection_only&consistency=content_token",
  "consistency=content_token&consistency=content_token",
  "consistency=content_token,projection_only",
  "consistency=content_token;projection_only",
  "consistency=content_token&mode=PROJECTION_ONLY",
  "mode=PROJECTION_ONLY",
  "mode=projection_only",
  "readMode=PROJECTION_ONLY",
  "read_mode=PROJECTION_ONLY",
  "source=projection",
  "Consistency=projection_only",
  "CONSISTENCY=projection_only",
  "__proto__[consistency]=projection_only",
  "constructor[prototype][consistency]=projection_only",
];

/** Headers a client might hope the server reads a mode from. */
const SMUGGLED_HEADERS: Record<string, string>[] = [
  { "x-consistency": "projection_only" },
  { consistency: "PROJECTION_ONLY" },
  { "x-read-mode": "PROJECTION_ONLY" },
  { prefer: "consistency=projection_only" },
  { "x-http-method-override": "PUT" },
];

for (const partitions of [1, 4]) {
  test(`api P=${partitions} new-enemy case 30-K: content_token/fresh_token/truth through GET /v1/posts/{id}, and no request parameter reaches PROJECTION_ONLY`, async (t) => {
    const h = await startApi({ partitions });
    t.after(() => h.close());
    const admin = await h.as("admin-1", { admin: true });
    await createAccounts(admin, ["author"], { private: true });
    await createAccounts(admin, ["reader"]);
    const author = await h.as("author");
    const reader = await h.as("reader");

    assert.equal(ok(await reader.put<RelationOutcome>("/v1/accounts/me/following/author")).state, "PENDING");
    assert.equal(
      ok(await author.post<RelationOutcome>("/v1/accounts/me/follow-requests/reader/approve")).state,
      "ACTIVE",
    );
    const p1 = ok(
      await author.post<PostJson>("/v1/posts", { visibility: "FOLLOWERS", body: "P1: before the block" }),
      201,
    );
    assert.deepEqual(Object.keys(p1).sort(), ["aclToken", "author", "body", "createdAt", "id", "visibility"]);
    assert.deepEqual(
      { author: p1.author, visibility: p1.visibility, body: p1.body },
      { author: "author", visibility: "FOLLOWERS", body: "P1: before the block" },
    );
    await h.ledger.projector.drain();
    // Before the block the follower reads P1 in every offered mode.
    assert.equal(ok(await reader.get<PostRead>(`/v1/posts/${p1.id}?consistency=fresh_token`)).decidedBy, "projection");
    assert.equal(ok(await reader.get<PostRead>(`/v1/posts/${p1.id}?consistency=truth`)).decidedBy, "truth");

    const block = ok(await author.put<RelationOutcome>("/v1/accounts/me/blocks/reader"));
    assert.equal(block.outcome, "CHANGED");
    const p2 = ok(
      await author.post<PostJson>("/v1/posts", { visibility: "FOLLOWERS", body: "P2: after the block" }),
      201,
    );
    t.diagnostic(
      `note block seq=${block.seq} P1 token=${p1.aclToken} P2 token=${p2.aclToken} (projector not run since the block)`,
    );
    assert.equal(p2.aclToken, block.seq, "P2's token includes the block");
    const { rows } = await h.db.pool.query<{ applied_upto: number }>(
      "SELECT w.applied_upto FROM post p JOIN proj_watermark w USING (part) WHERE p.post_id = $1",
      [p2.id],
    );
    const watermark = rows[0]!.applied_upto;
    assert.ok(watermark >= p1.aclToken && watermark < p2.aclToken, `watermark ${watermark} between the tokens`);

    const missing = await reader.get("/v1/posts/00000000-0000-4000-8000-000000000000");
    assertError(missing, 404, "POST_NOT_FOUND");
    const read = async (id: string, query: string) => reader.get<PostRead>(`/v1/posts/${id}${query}`);
    const cell = (res: ApiResponse<PostRead>) =>
      res.status === 200 ? `200/${res.body.decidedBy}` : String(res.status);
    const table: Record<string, string> = {};
    for (const [mode, query] of [
      ["content_token", "?consistency=content_token"],
      ["fresh_token", "?consistency=fresh_token"],
      ["truth", "?consistency=truth"],
      ["default", ""],
    ] as const) {
      const r1 = await read(p1.id, query);
      const r2 = await read(p2.id, query);
      table[mode] = `P1=${cell(r1)} P2=${cell(r2)}`;
      for (const r of [r1, r2])
        if (r.status !== 200)
          assert.equal(r.text, missing.text, `${mode}: a denied post looks exactly like a missing one`);
    }
    for (const [mode, row] of Object.entries(table)) t.diagnostic(`note ${mode.padEnd(13)} ${row}`);
    assert.deepEqual(table, {
      content_token: "P1=200/projection P2=404",
      fresh_token: "P1=404 P2=404",
      truth: "P1=404 P2=404",
      default: "P1=200/projection P2=404",
    });
    const p1Read = ok(await read(p1.id, ""));
    assert.deepEqual(p1Read.post, p1, "the post as created");

    // Nothing a reader can put in the request selects PROJECTION_ONLY: a 400, or the content_token answer.
    const outcomes: Record<string, number> = {};
    for (const query of SMUGGLED_QUERIES) {
      const res = await read(p2.id, `?${query}`);
      outcomes[res.status] = (outcomes[res.status] ?? 0) + 1;
      assert.notEqual(res.status, 200, `?${query} read P2: ${res.text}`);
      if (res.status === 400) assertError(res, 400, "INVALID_INPUT", query);
      else assert.equal(res.text, missing.text, `?${query}: ${res.status} ${res.text}`);
    }
    for (const headers of SMUGGLED_HEADERS) {
      for (const query of ["", "?consistency=content_token"]) {
        const res = await reader.get(`/v1/posts/${p2.id}${query}`, { headers });
        assert.equal(res.text, missing.text, `${JSON.stringify(headers)}${query}: ${res.status} ${res.text}`);
      }
    }
    // Not in the path either, nor in the token.
    for (const path of [
      `/v1/posts/${p2.id};consistency=projection_only`,
      `/v1/posts/${p2.id}/projection_only`,
      `/v1/posts/${p2.id}%3Fconsistency%3Dprojection_only`,
    ]) {
      const res = await reader.get(path);
      assert.ok(res.status === 400 || res.status === 404, `${path}: ${res.status} ${res.text}`);
    }
    const claims = await new SignJWT({ consistency: "projection_only", mode: "PROJECTION_ONLY", role: "admin" })
      .setProtectedHeader({ alg: "HS256" })
      .setSubject("reader")
      .setIssuer("social-ledger")
      .setIssuedAt()
      .setExpirationTime("1h")
      .sign(h.secret);
    assert.equal(
      (await h.request("GET", `/v1/posts/${p2.id}`, { token: claims })).text,
      missing.text,
      "even an admin token with mode claims",
    );
    t.diagnostic(`note ${SMUGGLED_QUERIES.length} smuggled queries: ${JSON.stringify(outcomes)}`);

    // Liking follows the truth: the blocked reader may like neither post, and learns nothing.
    const likeMissing = await reader.put("/v1/items/no-such-item/likes/me");
    assertError(likeMissing, 404, "ITEM_NOT_FOUND");
    for (const p of [p1, p2]) {
      for (const res of [
        await reader.put(`/v1/items/${p.id}/likes/me`),
        await reader.delete(`/v1/items/${p.id}/likes/me`),
      ]) {
        assert.equal(res.status, 404);
        assert.equal(res.text, likeMissing.text, "liking a post you may not read is refused like a missing item");
      }
      assertError(await reader.get(`/v1/items/${p.id}/likes/me`), 404, "ITEM_NOT_FOUND");
      assertError(await reader.get(`/v1/items/${p.id}/like-count`), 404, "ITEM_NOT_FOUND");
      assertError(await reader.get(`/v1/items/${p.id}/likes`), 404, "ITEM_NOT_FOUND");
    }
    assert.equal(ok(await author.get<PostRead>(`/v1/posts/${p2.id}?consistency=truth`)).decidedBy, "author");
    assert.equal(
      ok(await author.put<LikeOutcome>(`/v1/items/${p2.id}/likes/me`)).outcome,
      "CHANGED",
      "the author likes P2",
    );

    // Once the projector has applied the block, content_token denies P1 from the projection too.
    await h.ledger.projector.drain();
    assertError(await read(p1.id, ""), 404, "POST_NOT_FOUND");
    assertError(await read(p1.id, "?consistency=content_token"), 404, "POST_NOT_FOUND");
  });
}

test("api P=1 post visibility: a non-follower's 404 is byte-identical to a missing post's; PUBLIC is readable by strangers until a block; SELF is the author's; likes follow the same rule", async (t) => {
  const h = await startApi({ partitions: 1 });
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["author", "follower", "stranger"]);
  const author = await h.as("author");
  const follower = await h.as("follower");
  const stranger = await h.as("stranger");
  assert.equal(ok(await follower.put<RelationOutcome>("/v1/accounts/me/following/author")).state, "ACTIVE");
  await h.ledger.projector.drain();
  const followers = ok(
    await author.post<PostJson>("/v1/posts", { visibility: "FOLLOWERS", body: "for followers" }),
    201,
  );
  const pub = ok(await author.post<PostJson>("/v1/posts", { visibility: "PUBLIC", body: "for everyone" }), 201);
  const self = ok(await author.post<PostJson>("/v1/posts", { visibility: "SELF", body: "for me" }), 201);

  const missingPost = await stranger.get("/v1/posts/00000000-0000-4000-8000-000000000000");
  assertError(missingPost, 404, "POST_NOT_FOUND");
  assert.equal((await stranger.get("/v1/posts/no-such-post")).text, missingPost.text);
  const missingItem = await stranger.put("/v1/items/no-such-item/likes/me");
  assertError(missingItem, 404, "ITEM_NOT_FOUND");

  const denied = async (who: typeof stranger, id: string, context: string, likedBefore = false) => {
    for (const query of ["", "?consistency=content_token", "?consistency=fresh_token", "?consistency=truth"]) {
      const res = await who.get(`/v1/posts/${id}${query}`);
      assert.equal(res.status, 404, `${context}${query}`);
      assert.equal(res.text, missingPost.text, `${context}${query}: never leak existence`);
      assert.equal(res.headers.get("content-length"), missingPost.headers.get("content-length"));
    }
    // A like given before the block may still be taken back; after that, and
    // for everyone who had none, an unlike is refused like a missing item.
    if (likedBefore)
      assert.equal(
        ok(await who.delete<LikeOutcome>(`/v1/items/${id}/likes/me`)).outcome,
        "CHANGED",
        `${context}: retracting its own like`,
      );
    for (const res of [await who.put(`/v1/items/${id}/likes/me`), await who.delete(`/v1/items/${id}/likes/me`)]) {
      assert.equal(res.status, 404, `${context} like`);
      assert.equal(res.text, missingItem.text, `${context}: liking is refused like a missing item`);
    }
    for (const path of ["likes/me", "like-count", "likes"])
      assertError(await who.get(`/v1/items/${id}/${path}`), 404, "ITEM_NOT_FOUND", `${context} ${path}`);
  };

  await denied(stranger, followers.id, "a stranger on a FOLLOWERS post");
  await denied(follower, self.id, "a follower on a SELF post");
  assert.equal(ok(await author.get<PostRead>(`/v1/posts/${self.id}`)).decidedBy, "author");
  assert.equal(ok(await follower.get<PostRead>(`/v1/posts/${followers.id}`)).decidedBy, "projection");
  assert.equal(ok(await follower.put<LikeOutcome>(`/v1/items/${followers.id}/likes/me`)).outcome, "CHANGED");

  for (const query of ["", "?consistency=content_token", "?consistency=fresh_token", "?consistency=truth"]) {
    const r = ok(await stranger.get<PostRead>(`/v1/posts/${pub.id}${query}`));
    assert.equal(r.decidedBy, "public-block-check", query);
    assert.equal(r.post.body, "for everyone");
  }
  assert.equal(
    ok(await stranger.put<LikeOutcome>(`/v1/items/${pub.id}/likes/me`)).outcome,
    "CHANGED",
    "a stranger likes a PUBLIC post",
  );

  assert.equal(ok(await author.put<RelationOutcome>("/v1/accounts/me/blocks/stranger")).outcome, "CHANGED");
  await denied(stranger, pub.id, "a blocked stranger on a PUBLIC post", true);
  // The block is symmetric for reading: the author cannot read a post of the person they blocked either.
  const strangersPost = ok(await stranger.post<PostJson>("/v1/posts", { visibility: "PUBLIC", body: "mine" }), 201);
  assert.equal((await author.get(`/v1/posts/${strangersPost.id}`)).text, missingPost.text);
  assert.equal(ok(await author.delete<RelationOutcome>("/v1/accounts/me/blocks/stranger")).outcome, "CHANGED");
  assert.equal(
    ok(await stranger.get<PostRead>(`/v1/posts/${pub.id}`)).decidedBy,
    "public-block-check",
    "readable again after the unblock",
  );
});
