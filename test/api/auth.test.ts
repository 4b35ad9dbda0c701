import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { SignJWT } from "jose";
import { signToken } from "../../src/api/auth.ts";
import { assertError, createAccounts, ok, startApi } from "./harness.ts";

/**
 * Every route of the API table that reads the token, with ids that exist. `public` routes also
 * answer without a token (public data), but a token that is sent must be valid.
 */
function protectedRoutes(postId: string): [string, string, unknown?, "public"?][] {
  return [
    ["PUT", "/v1/accounts/alice", { private: false }],
    ["GET", "/v1/accounts/bob", undefined, "public"],
    ["PUT", "/v1/items/item-1"],
    ["PUT", "/v1/items/item-1/likes/me"],
    ["DELETE", "/v1/items/item-1/likes/me"],
    ["GET", "/v1/items/item-1/likes/me"],
    ["GET", "/v1/items/item-1/like-count?allowedLag=16", undefined, "public"],
    ["GET", "/v1/items/item-1/likes?limit=5", undefined, "public"],
    ["GET", "/v1/accounts/me/likes"],
    ["PUT", "/v1/accounts/me/following/bob"],
    ["DELETE", "/v1/accounts/me/following/bob"],
    ["GET", "/v1/accounts/me/follow-requests"],
    ["POST", "/v1/accounts/me/follow-requests/bob/approve"],
    ["POST", "/v1/accounts/me/follow-requests/bob/reject"],
    ["PUT", "/v1/accounts/me/blocks/bob"],
    ["DELETE", "/v1/accounts/me/blocks/bob"],
    ["GET", "/v1/accounts/me/blocks"],
    ["GET", "/v1/accounts/bob/followers", undefined, "public"],
    ["GET", "/v1/accounts/bob/following", undefined, "public"],
    ["GET", "/v1/accounts/bob/follower-count", undefined, "public"],
    ["GET", "/v1/accounts/me/relationships/bob"],
    ["GET", "/v1/accounts/me/relationships?id=bob"],
    ["POST", "/v1/posts", { visibility: "PUBLIC", body: "hi" }],
    ["GET", `/v1/posts/${postId}?consistency=truth`, undefined, "public"],
    ["DELETE", `/v1/posts/${postId}`],
    ["GET", "/v1/admin/status"],
    ["GET", "/v1/admin/audit"],
    ["POST", "/v1/admin/rebuild", {}],
  ];
}

function jwt(
  secret: Uint8Array,
  claims: Record<string, unknown>,
  options: { sub?: string; iss?: string; exp?: number | string; alg?: string } = {},
) {
  const token = new SignJWT(claims).setProtectedHeader({ alg: options.alg ?? "HS256" }).setIssuedAt();
  if (options.sub !== undefined) token.setSubject(options.sub);
  token.setIssuer(options.iss ?? "social-ledger");
  token.setExpirationTime(options.exp ?? "1h");
  return token.sign(secret);
}

const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");

test("api auth: no token, malformed header, wrong secret, expired, alg none, forged or foreign claims are 401 UNAUTHENTICATED on every protected route; nothing is written", async (t) => {
  // Hundreds of refusals from one address: far over the default refusal budget, which
  // test/api/address-limits.test.ts covers; here every one must be the 401 itself.
  const h = await startApi({ app: { authFailuresPerMinute: 1_000_000 } });
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "bob"]);
  ok(await admin.put("/v1/items/item-1"));
  const alice = await h.as("alice");
  const post = ok(await alice.post<{ id: string }>("/v1/posts", { visibility: "PUBLIC", body: "hello" }), 201);
  const valid = await h.token("alice", { admin: true });
  const [header, payload] = valid.split(".");
  const now = Math.floor(Date.now() / 1000);

  const bad: [string, Record<string, string>][] = [
    ["no Authorization header", {}],
    ["empty header", { authorization: "" }],
    ["scheme only", { authorization: "Bearer" }],
    ["scheme and a space", { authorization: "Bearer " }],
    ["Basic scheme", { authorization: `Basic ${Buffer.from("alice:pw").toString("base64")}` }],
    ["token without scheme", { authorization: valid }],
    ["two tokens", { authorization: `Bearer ${valid} ${valid}` }],
    ["not a JWT", { authorization: "Bearer not-a-jwt" }],
    ["two segments", { authorization: `Bearer ${header}.${payload}` }],
    ["garbage segments", { authorization: "Bearer aaa.bbb.ccc" }],
    [
      "wrong secret",
      { authorization: `Bearer ${await signToken(new Uint8Array(randomBytes(32)), "alice", { admin: true })}` },
    ],
    ["expired", { authorization: `Bearer ${await jwt(h.secret, {}, { sub: "alice", exp: now - 60 })}` }],
    [
      "alg none",
      {
        authorization: `Bearer ${b64({ alg: "none", typ: "JWT" })}.${b64({ sub: "alice", iss: "social-ledger", role: "admin", exp: now + 3600 })}.`,
      },
    ],
    [
      "alg none with the original signature",
      { authorization: `Bearer ${b64({ alg: "none" })}.${payload}.${valid.split(".")[2]}` },
    ],
    [
      "HS512 with the right secret",
      { authorization: `Bearer ${await jwt(h.secret, {}, { sub: "alice", alg: "HS512" })}` },
    ],
    [
      "HS384 with the right secret",
      { authorization: `Bearer ${await jwt(h.secret, {}, { sub: "alice", alg: "HS384" })}` },
    ],
    [
      "payload swapped (sub=admin-1, role admin)",
      {
        authorization: `Bearer ${header}.${b64({ sub: "admin-1", role: "admin", iss: "social-ledger", exp: now + 3600 })}.${valid.split(".")[2]}`,
      },
    ],
    ["another issuer", { authorization: `Bearer ${await jwt(h.secret, {}, { sub: "alice", iss: "someone-else" })}` }],
    ["no subject", { authorization: `Bearer ${await jwt(h.secret, { role: "admin" })}` }],
    ["a subject that is not an id", { authorization: `Bearer ${await jwt(h.secret, {}, { sub: "alice smith" })}` }],
    ["an empty subject", { authorization: `Bearer ${await jwt(h.secret, {}, { sub: "" })}` }],
  ];

  const routes = protectedRoutes(post.id);
  for (const [name, headers] of bad) {
    for (const [method, path, json, access] of routes) {
      const res = await h.request(method, path, { headers, ...(json === undefined ? {} : { json }) });
      if (access === "public" && headers.authorization === undefined) {
        assert.equal(res.status, 200, `${name}: ${method} ${path} is public data: ${res.text}`);
        continue;
      }
      assertError(res, 401, "UNAUTHENTICATED", `${name}: ${method} ${path}`);
    }
  }
  t.diagnostic(`note ${bad.length} bad credentials x ${routes.length} routes: all 401`);

  // Nothing was written by any of those requests.
  const { rows } = await h.db.pool.query<{
    likes: number;
    posts: number;
    relations: number;
    blocks: number;
    items: number;
  }>(
    `SELECT (SELECT count(*) FROM like_fact)::int AS likes, (SELECT count(*) FROM post)::int AS posts,
            (SELECT count(*) FROM relation)::int AS relations, (SELECT count(*) FROM block)::int AS blocks, (SELECT count(*) FROM item)::int AS items`,
  );
  assert.deepEqual(rows[0], { likes: 0, posts: 1, relations: 0, blocks: 0, items: 2 });

  // The valid token works, so the failures above are about the credentials.
  assert.equal((await h.request("GET", "/v1/admin/status", { token: valid })).status, 200);
  assert.equal(
    (
      await h.request("GET", "/v1/admin/status", {
        headers: { authorization: `Bearer ${await jwt(h.secret, { role: "admin" }, { sub: "admin-2" })}` },
      })
    ).status,
    200,
  );
});

test("api auth: a non-admin gets 403 FORBIDDEN on admin routes and PUT /v1/items, and acting for someone else is 403", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "bob"]);
  const alice = await h.as("alice");
  const bob = await h.as("bob");
  const notAdmin = await jwt(h.secret, { role: "Admin" }, { sub: "alice" });
  const roleList = await jwt(h.secret, { role: ["admin"] }, { sub: "alice" });
  const adminFlag = await jwt(h.secret, { admin: true }, { sub: "alice" });

  for (const token of [alice.token, notAdmin, roleList, adminFlag]) {
    assertError(await h.request("GET", "/v1/admin/status", { token }), 403, "FORBIDDEN");
    assertError(await h.request("GET", "/v1/admin/audit", { token }), 403, "FORBIDDEN");
    assertError(await h.request("POST", "/v1/admin/rebuild", { token, json: {} }), 403, "FORBIDDEN");
    assertError(await h.request("PUT", "/v1/items/item-x", { token }), 403, "FORBIDDEN");
    assertError(await h.request("PUT", "/v1/accounts/bob", { token, json: { private: true } }), 403, "FORBIDDEN");
  }
  assertError(await bob.put("/v1/accounts/alice", { private: true }), 403, "FORBIDDEN");
  assertError(await bob.put("/v1/accounts/alice"), 403, "FORBIDDEN", "403 before the body is looked at");
  assertError(await bob.put("/v1/accounts/admin-1", { private: false }), 403, "FORBIDDEN");
  const { rows } = await h.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM item");
  assert.equal(rows[0]!.n, 0, "no item was created by a non-admin");
  const priv = await h.db.pool.query<{ private: boolean }>("SELECT private FROM account WHERE account_id = 'alice'");
  assert.equal(priv.rows[0]!.private, false, "bob did not change alice's account");

  // The same requests succeed for the user itself and for an admin.
  assert.deepEqual(ok(await alice.put("/v1/accounts/alice", { private: true })), {
    id: "alice",
    private: true,
    hideCollections: false,
  });
  assert.deepEqual(ok(await admin.put("/v1/accounts/alice", { private: false })), {
    id: "alice",
    private: false,
    hideCollections: false,
  });
  assert.deepEqual(ok(await admin.put("/v1/items/item-x")), { id: "item-x" });
  assert.equal((await admin.get("/v1/admin/status")).status, 200);
  // "me" routes always act as the token's subject: there is no way to name another actor.
  assert.equal(ok(await bob.put<{ state: string }>("/v1/accounts/me/following/alice")).state, "ACTIVE");
  assert.deepEqual(ok(await alice.get("/v1/accounts/me/relationships/bob")), {
    following: false,
    requested: false,
    followedBy: true,
    requestedBy: false,
    blocking: false,
  });
});

test("api auth: a token signed with another secret (minted with another data directory) is 401 with a message that names the likely cause", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const foreign = await signToken(new Uint8Array(randomBytes(32)), "alice");
  const refused = assertError(
    await h.request("GET", "/v1/accounts/me/likes", { token: foreign }),
    401,
    "UNAUTHENTICATED",
  );
  assert.match(
    refused.error.message,
    /^invalid token: ERR_JWS_SIGNATURE_VERIFICATION_FAILED: the token was signed with another secret than this service's/,
  );
  assert.match(refused.error.message, /LEDGER_DATA_DIR/);
  // Other refusals keep their own message: an expired token of the right secret says nothing of secrets.
  const expired = await new SignJWT({})
    .setProtectedHeader({ alg: "HS256" })
    .setSubject("alice")
    .setIssuer("social-ledger")
    .setIssuedAt(1)
    .setExpirationTime(2)
    .sign(h.secret);
  assert.doesNotMatch(
    assertError(await h.request("GET", "/v1/accounts/me/likes", { token: expired }), 401, "UNAUTHENTICATED").error
      .message,
    /secret/,
  );
});
