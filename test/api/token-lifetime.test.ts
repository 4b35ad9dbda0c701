import { test } from "node:test";
import assert from "node:assert/strict";
import { SignJWT } from "jose";
import { signToken } from "../../src/api/auth.ts";
import { MAX_TOKEN_TTL_S } from "../../src/config.ts";
import { assertError, ok, startApi } from "./harness.ts";

/** A token's lifetime is bounded (LEDGER_JWT_MAX_TTL_MS), however far its exp lies. */

const now = () => Math.floor(Date.now() / 1000);

/** A token with exactly these claims (jose adds nothing): sub alice, issuer social-ledger. */
function tokenWith(secret: Uint8Array, claims: { exp: number; iat?: number }): Promise<string> {
  return new SignJWT({ sub: "alice", iss: "social-ledger", ...claims })
    .setProtectedHeader({ alg: "HS256" })
    .sign(secret);
}

test("token lifetime: by default a token valid for longer than `token --ttl` allows (exp = 1e300, or ten years and a second) is 401 TOKEN_LIFETIME_TOO_LONG; ten years is accepted", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const read = (token: string) => h.request("GET", "/v1/accounts/me/likes", { token });
  const issued = now();
  for (const [label, claims] of [
    ["exp = 1e300", { exp: 1e300, iat: issued }],
    ["exp = 1e300 without iat", { exp: 1e300 }],
    ["ten years and a second", { exp: issued + MAX_TOKEN_TTL_S + 1, iat: issued }],
  ] as const) {
    assertError(await read(await tokenWith(h.secret, claims)), 401, "TOKEN_LIFETIME_TOO_LONG", label);
  }
  // The longest token the CLI mints works: the default is what `token --ttl` allows.
  ok(await read(await signToken(h.secret, "alice", { ttlSeconds: MAX_TOKEN_TTL_S })), 200, "a ten-year token");
  ok(await read(await signToken(h.secret, "alice")), 200, "the default 30-day token");
});

test("token lifetime: LEDGER_JWT_MAX_TTL_MS bounds exp - iat, and exp - now when iat is absent or in the future", async (t) => {
  const h = await startApi({ app: { jwtMaxTtlSeconds: 3600 } });
  t.after(() => h.close());
  const read = (token: string) => h.request("GET", "/v1/accounts/me/likes", { token });
  const issued = now();
  ok(await read(await tokenWith(h.secret, { exp: issued + 3600, iat: issued })), 200, "exactly the maximum");
  ok(
    await read(await tokenWith(h.secret, { exp: issued + 3000, iat: issued - 600 })),
    200,
    "issued ten minutes ago, 3600 s in all",
  );
  for (const [label, claims] of [
    ["a second over", { exp: issued + 3601, iat: issued }],
    ["issued long ago", { exp: issued + 60, iat: issued - 3600 }],
    ["no iat", { exp: issued + 3700 }],
    ["iat in the future hides the lifetime", { exp: issued + 7200, iat: issued + 7000 }],
  ] as const) {
    assertError(await read(await tokenWith(h.secret, claims)), 401, "TOKEN_LIFETIME_TOO_LONG", label);
  }
  // A refused token writes nothing, and the check runs before the verified-token cache remembers it.
  const long = await tokenWith(h.secret, { exp: issued + 3601, iat: issued });
  assertError(await h.request("PUT", "/v1/items/item-1/likes/me", { token: long }), 401, "TOKEN_LIFETIME_TOO_LONG");
  assertError(await read(long), 401, "TOKEN_LIFETIME_TOO_LONG", "again, not from the cache");
  const { rows } = await h.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM like_fact");
  assert.equal(rows[0]!.n, 0);
});
