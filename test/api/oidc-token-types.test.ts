/**
 * An OIDC ID token is not an access token, even when its aud (the client's id) is one of
 * LEDGER_JWT_AUDIENCE. Over real HTTP against the test's own JWKS server: by default only RFC 9068
 * access tokens (header typ at+jwt) are taken; LEDGER_JWT_TYPES=at+jwt,JWT takes a provider's JWT-
 * typed or untyped access tokens, and then refuses those that carry an ID token's claims. Each
 * refusal is a 401 with its own code and writes nothing. Before, the ID token liked as its sub.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { assertError, ok, startApi, type ApiHarness } from "./harness.ts";
import { TestProvider, type ProviderKey } from "../support/identity-provider.ts";

async function providerApi(
  t: import("node:test").TestContext,
  tokenTypes?: string[],
): Promise<{ h: ApiHarness; idp: TestProvider; key: ProviderKey }> {
  const idp = await TestProvider.start();
  t.after(() => idp.close());
  const key = await idp.addKey("RS256", "rsa-1");
  const h = await startApi({ app: { jwks: idp.options(tokenTypes ? { tokenTypes } : {}) } });
  t.after(() => h.close());
  ok(await h.request("PUT", "/v1/items/item-1", { token: await idp.sign(key, { role: "admin" }, { sub: "root" }) }));
  return { h, idp, key };
}

/** What a provider's sign-in hands the client: typ JWT, aud the client's id (here the API's audience), nonce, at_hash, auth_time. */
const ID_TOKEN_CLAIMS = {
  nonce: "n-0S6_WzA2Mj",
  at_hash: "77QmUPtjPfzWtF2AnpK9RQ",
  auth_time: 1_700_000_000,
  email: "alice@example.test",
};

async function likers(h: ApiHarness): Promise<string[]> {
  return (
    await h.db.pool.query<{ user_id: string }>(
      "SELECT user_id FROM like_fact WHERE item_id = 'item-1' AND liked ORDER BY user_id",
    )
  ).rows.map((r) => r.user_id);
}

test("oidc token types: by default only at+jwt access tokens act; an ID token (typ JWT, or none) is 401 TOKEN_TYPE_NOT_ALLOWED and writes nothing", async (t) => {
  const { h, idp, key } = await providerApi(t);
  const like = (token: string) => h.request("PUT", "/v1/items/item-1/likes/me", { token });
  const refusals: [string, string][] = [
    ["an ID token (typ JWT)", await idp.sign(key, ID_TOKEN_CLAIMS, { sub: "mallory", typ: "JWT" })],
    ["an ID token without typ", await idp.sign(key, ID_TOKEN_CLAIMS, { sub: "mallory", typ: undefined })],
    ["a JWT-typed token without ID claims", await idp.sign(key, {}, { sub: "mallory", typ: "JWT" })],
    ["another type (a logout token)", await idp.sign(key, {}, { sub: "mallory", typ: "logout+jwt" })],
  ];
  for (const [label, token] of refusals) {
    const res = assertError(await like(token), 401, "TOKEN_TYPE_NOT_ALLOWED", label);
    assert.match(res.error.message, /LEDGER_JWT_TYPES/, `${label}: the message names the setting`);
  }
  assert.deepEqual(await likers(h), [], "nothing written");
  // Controls: access tokens, typed as RFC 9068 says (case and the application/ prefix do not matter).
  for (const [user, typ] of [
    ["alice", "at+jwt"],
    ["bob", "application/at+jwt"],
    ["carol", "AT+JWT"],
  ] as const) {
    ok(await like(await idp.sign(key, {}, { sub: user, typ })), 200, typ);
  }
  assert.deepEqual(await likers(h), ["alice", "bob", "carol"]);
});

test("oidc token types: with LEDGER_JWT_TYPES=at+jwt,JWT, JWT-typed and untyped access tokens act, and a token with an ID token's claims is 401 TOKEN_IS_ID_TOKEN", async (t) => {
  const { h, idp, key } = await providerApi(t, ["at+jwt", "jwt"]);
  const like = (token: string) => h.request("PUT", "/v1/items/item-1/likes/me", { token });
  const idTokens: [string, string][] = [
    ["typ JWT, nonce and at_hash", await idp.sign(key, ID_TOKEN_CLAIMS, { sub: "mallory", typ: "JWT" })],
    ["no typ, nonce only", await idp.sign(key, { nonce: "abc" }, { sub: "mallory", typ: undefined })],
    [
      "typ JWT, at_hash only",
      await idp.sign(key, { at_hash: "77QmUPtjPfzWtF2AnpK9RQ" }, { sub: "mallory", typ: "JWT" }),
    ],
    ["typ JWT, c_hash only", await idp.sign(key, { c_hash: "LDktKdoQak3Pk0cnXxCltA" }, { sub: "mallory", typ: "JWT" })],
    ["Keycloak's ID token (typ claim ID)", await idp.sign(key, { typ: "ID" }, { sub: "mallory", typ: "JWT" })],
  ];
  for (const [label, token] of idTokens) assertError(await like(token), 401, "TOKEN_IS_ID_TOKEN", label);
  assertError(
    await like(await idp.sign(key, {}, { sub: "mallory", typ: "logout+jwt" })),
    401,
    "TOKEN_TYPE_NOT_ALLOWED",
    "a type not listed",
  );
  assert.deepEqual(await likers(h), [], "nothing written");
  // Controls: the access tokens of such a provider (Keycloak's says typ Bearer in the payload).
  ok(
    await like(await idp.sign(key, { typ: "Bearer", auth_time: 1_700_000_000 }, { sub: "alice", typ: "JWT" })),
    200,
    "typ JWT",
  );
  ok(await like(await idp.sign(key, {}, { sub: "bob", typ: undefined })), 200, "no typ");
  // The header decides for at+jwt: an RFC 9068 token is an access token whatever else it carries.
  ok(await like(await idp.sign(key, { nonce: "abc" }, { sub: "carol", typ: "at+jwt" })), 200, "at+jwt with a nonce");
  assert.deepEqual(await likers(h), ["alice", "bob", "carol"]);
});
