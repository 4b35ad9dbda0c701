import { test } from "node:test";
import assert from "node:assert/strict";
import type { AddressInfo } from "node:net";
import { SignJWT } from "jose";
import { buildApp } from "../../src/api/app.ts";
import { signToken } from "../../src/api/auth.ts";
import { InvalidInputError } from "../../src/errors.ts";
import { assertError, createAccounts, ok, startApi } from "./harness.ts";

/** Who the caller is, and what the errors say about the accounts involved. */

test("api a token whose subject is 'me' is refused (401), and signToken refuses to mint one", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["bob"]);
  const me = await new SignJWT({})
    .setProtectedHeader({ alg: "HS256" })
    .setSubject("me")
    .setIssuer("social-ledger")
    .setIssuedAt()
    .setExpirationTime("1h")
    .sign(h.secret);
  for (const [method, path] of [
    ["GET", "/v1/accounts/me/relationships/bob"],
    ["PUT", "/v1/accounts/me/following/bob"],
    ["POST", "/v1/posts"],
  ] as const) {
    assertError(
      await h.request(method, path, {
        token: me,
        ...(method === "POST" ? { json: { visibility: "PUBLIC", body: "x" } } : {}),
      }),
      401,
      "UNAUTHENTICATED",
      `${method} ${path}`,
    );
  }
  await assert.rejects(() => signToken(h.secret, "me"), InvalidInputError);
  const { rows } = await h.db.pool.query<{ n: number }>(
    "SELECT (SELECT count(*) FROM relation) + (SELECT count(*) FROM post) AS n",
  );
  assert.equal(Number(rows[0]!.n), 0, "nothing was written for 'me'");
});

test("api an unknown account is named alone: the caller, who exists, is not in the message", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["dave"]);
  const dave = await h.as("dave");
  for (const [method, path] of [
    ["PUT", "/v1/accounts/me/following/ghost"],
    ["DELETE", "/v1/accounts/me/following/ghost"],
    ["PUT", "/v1/accounts/me/blocks/ghost"],
    ["DELETE", "/v1/accounts/me/blocks/ghost"],
    ["POST", "/v1/accounts/me/follow-requests/ghost/approve"],
    ["GET", "/v1/accounts/me/relationships/ghost"],
  ] as const) {
    const body = assertError(
      await h.request(method, path, { token: dave.token }),
      404,
      "ACCOUNT_NOT_FOUND",
      `${method} ${path}`,
    );
    assert.equal(body.error.message, "unknown account: ghost", `${method} ${path}`);
  }
  // A read by a caller without an account names the caller (a write would create it: docs/api.md, "Accounts").
  const ghost = await h.as("ghost");
  assert.equal(
    assertError(await ghost.get("/v1/accounts/me/relationships/dave"), 404, "ACCOUNT_NOT_FOUND").error.message,
    "unknown account: ghost",
  );
});

test("api an unauthenticated request is 401 before its input is looked at (400)", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  assertError(
    await h.request("PUT", "/v1/accounts/me", { json: { private: true } }),
    401,
    "UNAUTHENTICATED",
    "PUT /v1/accounts/me",
  );
  assertError(await h.request("PUT", "/v1/accounts/bad%20id", { json: {} }), 401, "UNAUTHENTICATED", "an invalid id");
  assertError(
    await h.request("POST", "/v1/posts", { json: { visibility: "NOPE" } }),
    401,
    "UNAUTHENTICATED",
    "an invalid body",
  );
  // With a token, the same requests are 400.
  const alice = await h.as("alice");
  assertError(await alice.put("/v1/accounts/me", { private: true }), 400, "INVALID_INPUT");
  assertError(await alice.post("/v1/posts", { visibility: "NOPE" }), 400, "INVALID_INPUT");
});

test("api tokens carry exp: one without it is refused, one the service mints has it", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "bob"]);
  const noExp = await new SignJWT({})
    .setProtectedHeader({ alg: "HS256" })
    .setSubject("alice")
    .setIssuer("social-ledger")
    .setIssuedAt()
    .sign(h.secret);
  assertError(
    await h.request("GET", "/v1/accounts/me/relationships/bob", { token: noExp }),
    401,
    "UNAUTHENTICATED",
    "no exp",
  );
  const minted = await signToken(h.secret, "alice");
  const claims = JSON.parse(Buffer.from(minted.split(".")[1]!, "base64url").toString("utf8")) as {
    exp?: number;
    iat?: number;
  };
  assert.equal(claims.exp! - claims.iat!, 30 * 24 * 3600, "the default lifetime is 30 days");
  ok(await h.request("GET", "/v1/accounts/me/relationships/bob", { token: minted }));
});

test("api the auth hook decides by the matched route's config, not by the URL prefix", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const app = await buildApp({ ledger: h.ledger, jwtSecret: h.secret, logger: false });
  // Two probes the URL-prefix rule gets wrong: an authenticated route outside /v1/ and an open one inside.
  app.get("/probe/required", { config: { auth: "required" } }, async (request) => ({
    caller: request.caller?.id ?? null,
  }));
  app.get("/v1/probe/none", { config: { auth: "none" } }, async (request) => ({ caller: request.caller?.id ?? null }));
  app.get("/v1/probe/optional", { config: { auth: "optional" } }, async (request) => ({
    caller: request.caller?.id ?? null,
  }));
  await app.listen({ port: 0, host: "127.0.0.1" });
  t.after(() => app.close());
  const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  const get = async (path: string, token?: string) => {
    const res = await fetch(`${base}${path}`, token ? { headers: { authorization: `Bearer ${token}` } } : {});
    return { status: res.status, body: (await res.json()) as unknown };
  };
  const alice = await h.token("alice");
  assert.equal((await get("/probe/required")).status, 401, "no token on a required route outside /v1/");
  assert.deepEqual(await get("/probe/required", alice), { status: 200, body: { caller: "alice" } });
  assert.deepEqual(
    await get("/v1/probe/none", "not-a-token"),
    { status: 200, body: { caller: null } },
    "a route with auth none ignores the header",
  );
  assert.deepEqual(await get("/v1/probe/optional"), { status: 200, body: { caller: null } });
  assert.deepEqual(await get("/v1/probe/optional", alice), { status: 200, body: { caller: "alice" } });
  assert.equal((await get("/v1/probe/optional", "not-a-token")).status, 401, "optional: a bad token is still refused");
});
