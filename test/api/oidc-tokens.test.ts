/**
 * Tokens of the product's identity provider (LEDGER_JWKS_URL), over real HTTP
 * against a JWKS the test serves itself. Every algorithm the service takes works; every way a
 * token can be wrong is 401 with a code of its own, writes nothing, and costs the provider no
 * request; an HS256 token is refused, also the classic forgery with the provider's public key as
 * HMAC secret (its negative control is a verifier that accepts HS256, which takes it as admin).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { SignJWT, jwtVerify, type JWTPayload } from "jose";
import { TokenVerifier, signToken } from "../../src/api/auth.ts";
import { readCaller } from "../../src/api/auth/claims.ts";
import { ProviderCheck } from "../../src/api/auth/provider-check.ts";
import { ProviderKeys } from "../../src/api/auth/provider-keys.ts";
import type { TokenCheck } from "../../src/api/auth/token-check.ts";
import { unauthenticated } from "../../src/api/errors.ts";
import { assertError, ok, startApi, type ApiHarness } from "./harness.ts";
import { TestProvider, generateProviderKey, unsigned, type ProviderKey } from "../support/identity-provider.ts";

async function providerApi(
  t: import("node:test").TestContext,
  options: Parameters<TestProvider["options"]>[0] = {},
): Promise<{ h: ApiHarness; idp: TestProvider }> {
  const idp = await TestProvider.start();
  t.after(() => idp.close());
  await idp.addKey("RS256", "rsa-1");
  await idp.addKey("ES256", "ec-1");
  await idp.addKey("EdDSA", "ed-1");
  const h = await startApi({ app: { jwks: idp.options(options) } });
  t.after(() => h.close());
  return { h, idp };
}

const key = (idp: TestProvider, kid: string): ProviderKey => idp.published.find((k) => k.kid === kid)!;

test("oidc: RS256, ES256 and EdDSA tokens of the provider are accepted; sub acts, role admin opens the admin routes", async (t) => {
  const { h, idp } = await providerApi(t);
  const admin = await idp.sign(key(idp, "rsa-1"), { role: "admin" }, { sub: "root" });
  ok(await h.request("PUT", "/v1/items/item-1", { token: admin }), 200, "an admin creates an item");
  const users = [
    ["rsa-1", "alice"],
    ["ec-1", "bob"],
    ["ed-1", "carol"],
  ] as const;
  for (const [kid, user] of users) {
    const token = await idp.sign(key(idp, kid), {}, { sub: user });
    ok(
      await h.request("PUT", "/v1/items/item-1/likes/me", { token }),
      200,
      `${kid} (${key(idp, kid).alg}) likes as ${user}`,
    );
    // An admin route stays closed to a user token.
    assertError(await h.request("GET", "/v1/admin/status", { token }), 403, "FORBIDDEN", `${kid}: no admin`);
  }
  const { rows } = await h.db.pool.query<{ user_id: string }>(
    "SELECT user_id FROM like_fact WHERE liked ORDER BY user_id",
  );
  assert.deepEqual(
    rows.map((r) => r.user_id),
    ["alice", "bob", "carol"],
    "each like is the token's sub",
  );
  ok(await h.request("GET", "/v1/admin/status", { token: admin }), 200, "role admin");
  t.diagnostic(`note JWKS requests: ${idp.requests}`);
  assert.equal(idp.requests, 1, "one fetch of the set at start serves every key");
});

test("oidc: a wrong token is 401 with a code of its own (kid, aud, iss, exp, alg, signature, user), writes nothing, and asks the provider nothing", async (t) => {
  const { h, idp } = await providerApi(t);
  const admin = await idp.sign(key(idp, "rsa-1"), { role: "admin" }, { sub: "root" });
  ok(await h.request("PUT", "/v1/items/item-1", { token: admin }));
  const requestsBefore = idp.requests;
  const rsa = key(idp, "rsa-1");
  const ec = key(idp, "ec-1");
  const stranger = await generateProviderKey("RS256", "rsa-1"); // same kid, another key: a forged signature
  const otherRsa = await generateProviderKey("RS256");
  const now = Math.floor(Date.now() / 1000);
  const claims = { sub: "alice", iss: idp.issuer, aud: idp.audience, role: "admin", exp: now + 600, iat: now };

  const cases: [string, string, string][] = [
    ["unknown kid", await idp.sign(rsa, {}, { kid: "no-such-key" }), "TOKEN_UNKNOWN_KID"],
    ["another audience", await idp.sign(rsa, {}, { aud: "another-api" }), "TOKEN_AUDIENCE_MISMATCH"],
    ["no audience among several", await idp.sign(rsa, {}, { aud: ["a", "b"] }), "TOKEN_AUDIENCE_MISMATCH"],
    ["another issuer", await idp.sign(rsa, {}, { iss: "https://evil.example.test/" }), "TOKEN_ISSUER_MISMATCH"],
    ["expired", await idp.sign(rsa, {}, { expIn: -60 }), "TOKEN_EXPIRED"],
    ["not valid yet", await idp.sign(rsa, {}, { nbfIn: 300 }), "TOKEN_NOT_YET_VALID"],
    ["no exp", await idp.sign(rsa, {}, { expIn: false }), "UNAUTHENTICATED"],
    [
      "valid for longer than LEDGER_JWT_MAX_TTL_MS",
      await idp.sign(rsa, {}, { expIn: 11 * 365 * 24 * 3600 }),
      "TOKEN_LIFETIME_TOO_LONG",
    ],
    [
      "signed by another key under the provider's kid",
      await idp.sign(stranger, { role: "admin" }),
      "TOKEN_SIGNATURE_INVALID",
    ],
    ["alg RS256 with the kid of an EC key", await idp.sign(otherRsa, {}, { kid: ec.kid }), "TOKEN_ALG_MISMATCH"],
    ["alg ES256 with the kid of an RSA key", await idp.sign(ec, {}, { kid: rsa.kid }), "TOKEN_ALG_MISMATCH"],
    ["alg none", unsigned({ alg: "none", kid: rsa.kid }, claims), "TOKEN_ALG_NOT_ALLOWED"],
    ["alg none, no kid", unsigned({ alg: "none" }, claims), "TOKEN_ALG_NOT_ALLOWED"],
    [
      "HS256 of social-ledger token",
      await signToken(new Uint8Array(randomBytes(32)), "alice", { admin: true }),
      "TOKEN_ALG_NOT_ALLOWED",
    ],
    [
      "HS256 with the provider's public key (PEM) as HMAC secret",
      await forgeHs256(rsa.publicPem, claims, rsa.kid),
      "TOKEN_ALG_NOT_ALLOWED",
    ],
    [
      "HS256 with the provider's JWK as HMAC secret",
      await forgeHs256(JSON.stringify(rsa.publicJwk), claims, rsa.kid),
      "TOKEN_ALG_NOT_ALLOWED",
    ],
    ["PS256", unsigned({ alg: "PS256", kid: rsa.kid }, claims), "TOKEN_ALG_NOT_ALLOWED"],
    ["no sub", await idp.sign(rsa, {}, { sub: undefined }), "TOKEN_USER_CLAIM_INVALID"],
    ["a sub that is no user id", await idp.sign(rsa, {}, { sub: "alice smith" }), "TOKEN_USER_CLAIM_INVALID"],
    ["sub me", await idp.sign(rsa, {}, { sub: "me" }), "TOKEN_USER_CLAIM_INVALID"],
    ["an empty sub", await idp.sign(rsa, {}, { sub: "" }), "TOKEN_USER_CLAIM_INVALID"],
    ["not a JWT", "not-a-jwt", "UNAUTHENTICATED"],
  ];
  for (const [label, token, code] of cases) {
    const body = assertError(await h.request("PUT", "/v1/items/item-1/likes/me", { token }), 401, code, label);
    t.diagnostic(`note ${label}: ${code}: ${body.error.message}`);
    // Refused again, also once the first answer could have been remembered.
    assertError(await h.request("GET", "/v1/admin/status", { token }), 401, code, `${label}, on an admin route`);
  }
  const { rows } = await h.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM like_fact");
  assert.equal(rows[0]!.n, 0, "no refused token wrote");
  // The cooldown after the start's fetch: an unknown kid did not make the service ask again.
  assert.equal(idp.requests, requestsBefore, "no refusal fetched the set");
  // The same service takes a good token: the refusals are about the tokens.
  ok(await h.request("PUT", "/v1/items/item-1/likes/me", { token: await idp.sign(rsa) }));
});

test("oidc: a token whose aud holds LEDGER_JWT_AUDIENCE among others, or is one of several configured audiences, is accepted", async (t) => {
  const { h, idp } = await providerApi(t, { audience: ["social-ledger-api", "mobile-app"] });
  const rsa = key(idp, "rsa-1");
  ok(
    await h.request("GET", "/v1/accounts/me/likes", {
      token: await idp.sign(rsa, {}, { aud: ["account", "social-ledger-api"] }),
    }),
  );
  ok(await h.request("GET", "/v1/accounts/me/likes", { token: await idp.sign(rsa, {}, { aud: "mobile-app" }) }));
  assertError(
    await h.request("GET", "/v1/accounts/me/likes", { token: await idp.sign(rsa, {}, { aud: "account" }) }),
    401,
    "TOKEN_AUDIENCE_MISMATCH",
  );
});

/** The classic algorithm-confusion forgery: HS256 with the provider's public key bytes as the HMAC secret. */
function forgeHs256(publicKeyText: string, claims: JWTPayload, kid: string): Promise<string> {
  return new SignJWT(claims).setProtectedHeader({ alg: "HS256", kid }).sign(new TextEncoder().encode(publicKeyText));
}

/**
 * The mutant: a verifier that, under a JWKS, also takes HS256 and, like the libraries that had
 * this bug, uses the key it holds (the provider's public key, as PEM) as the HMAC secret.
 */
class ConfusedCheck implements TokenCheck {
  constructor(
    private readonly keys: ProviderKeys,
    private readonly publicPem: string,
    private readonly audience: string,
  ) {}
  keyGeneration(): number {
    return 0;
  }
  async check(token: string, now: Date) {
    const { payload } = await jwtVerify(
      token,
      async (header, jws) =>
        header.alg === "HS256" ? new TextEncoder().encode(this.publicPem) : this.keys.resolve(header, jws),
      {
        algorithms: ["RS256", "ES256", "EdDSA", "HS256"],
        audience: this.audience,
        requiredClaims: ["exp"],
        currentDate: now,
      },
    );
    const read = readCaller(payload, { userClaim: "sub", adminClaim: "role", adminValue: "admin", arrays: true });
    if ("problem" in read) throw unauthenticated(read.problem);
    return { caller: read.caller, exp: payload.exp!, nbf: payload.nbf, iat: payload.iat };
  }
}

test("oidc negative control: a verifier that accepted HS256 under a JWKS takes the forged token as an admin; the service's check refuses it", async (t) => {
  const idp = await TestProvider.start();
  t.after(() => idp.close());
  const rsa = await idp.addKey("RS256", "rsa-1");
  const now = Math.floor(Date.now() / 1000);
  const forged = await forgeHs256(
    rsa.publicPem,
    { sub: "mallory", iss: idp.issuer, aud: idp.audience, role: "admin", exp: now + 600, iat: now },
    rsa.kid,
  );
  const options = idp.options();
  const keys = new ProviderKeys(options);
  const confused = new TokenVerifier(new ConfusedCheck(keys, rsa.publicPem, idp.audience));
  assert.deepEqual(
    await confused.verify(`Bearer ${forged}`),
    { id: "mallory", admin: true },
    "the mutant is fooled: the forgery is what the HTTP test above must refuse",
  );
  const real = new TokenVerifier(
    new ProviderCheck(keys, { issuer: options.issuer, audience: options.audience, claims: options }),
  );
  await assert.rejects(
    real.verify(`Bearer ${forged}`),
    (err: { code?: string }) => err.code === "TOKEN_ALG_NOT_ALLOWED",
  );
  // The real check takes the provider's own tokens with the same keys.
  assert.deepEqual(await real.verify(`Bearer ${await idp.sign(rsa, {}, { sub: "mallory" })}`), {
    id: "mallory",
    admin: false,
  });
});

test("oidc: a remembered provider token is refused once the clock passes its exp (TOKEN_EXPIRED), and one with a future nbf is not accepted early", async (t) => {
  const idp = await TestProvider.start();
  t.after(() => idp.close());
  const rsa = await idp.addKey("RS256", "rsa-1");
  const options = idp.options();
  let nowMs = Date.now();
  const verifier = new TokenVerifier(
    new ProviderCheck(new ProviderKeys(options), {
      issuer: options.issuer,
      audience: options.audience,
      claims: options,
    }),
    () => nowMs,
  );
  const token = await idp.sign(rsa, {}, { sub: "alice", expIn: 60 });
  assert.deepEqual(await verifier.verify(`Bearer ${token}`), { id: "alice", admin: false });
  assert.deepEqual(await verifier.verify(`Bearer ${token}`), { id: "alice", admin: false }, "remembered");
  const fetched = idp.requests;
  nowMs += 61_000;
  await assert.rejects(verifier.verify(`Bearer ${token}`), (err: { code?: string }) => err.code === "TOKEN_EXPIRED");
  const early = await idp.sign(rsa, {}, { sub: "bob", nbfIn: 30, expIn: 600 });
  nowMs = Date.now();
  await assert.rejects(
    verifier.verify(`Bearer ${early}`),
    (err: { code?: string }) => err.code === "TOKEN_NOT_YET_VALID",
  );
  nowMs += 31_000;
  assert.deepEqual(await verifier.verify(`Bearer ${early}`), { id: "bob", admin: false });
  nowMs = Date.now();
  await assert.rejects(
    verifier.verify(`Bearer ${early}`),
    (err: { code?: string }) => err.code === "TOKEN_NOT_YET_VALID",
    "not early because it was remembered",
  );
  assert.equal(idp.requests, fetched, "time checks need no key fetch");
});
