/**
 * Which claims of a provider token name the user and make an admin
 * (LEDGER_JWT_USER_CLAIM, LEDGER_JWT_ADMIN_CLAIM, LEDGER_JWT_ADMIN_VALUE), over real HTTP. The
 * user claim's value must be a valid user id (else 401 TOKEN_USER_CLAIM_INVALID); the admin
 * claim may be a value or an array of them (groups); everybody else is refused the admin routes.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import type { JwksOptions } from "../../src/api/auth.ts";
import { assertError, ok, startApi, type ApiHarness } from "./harness.ts";
import { TestProvider, type ProviderKey } from "../support/identity-provider.ts";

async function setup(
  t: TestContext,
  o: Partial<JwksOptions>,
): Promise<{ h: ApiHarness; idp: TestProvider; key: ProviderKey }> {
  const idp = await TestProvider.start();
  t.after(() => idp.close());
  const key = await idp.addKey("ES256");
  const h = await startApi({ app: { jwks: idp.options(o) } });
  t.after(() => h.close());
  await h.ledger.likes.createItem("item-1");
  return { h, idp, key };
}

/** The admin routes and admin-only writes: each 403 for a non-admin, each answered for an admin. */
async function adminAnswers(h: ApiHarness, token: string): Promise<number[]> {
  return [
    (await h.request("GET", "/v1/admin/status", { token })).status,
    (await h.request("GET", "/v1/admin/audit", { token })).status,
    (await h.request("PUT", "/v1/items/item-x", { token })).status,
    (await h.request("PUT", "/v1/accounts/someone-else", { token, json: { private: false } })).status,
  ];
}

test("oidc claims: LEDGER_JWT_USER_CLAIM names the user (sub is then ignored); a value that is no user id is 401 TOKEN_USER_CLAIM_INVALID", async (t) => {
  const { h, idp, key } = await setup(t, { userClaim: "preferred_username" });
  const token = await idp.sign(key, { preferred_username: "alice" }, { sub: "auth0|64f1c2" });
  ok(await h.request("PUT", "/v1/items/item-1/likes/me", { token }));
  const { rows } = await h.db.pool.query<{ user_id: string }>("SELECT user_id FROM like_fact");
  assert.deepEqual(
    rows.map((r) => r.user_id),
    ["alice"],
    "the like is the claim's user, not sub's",
  );
  for (const [label, claims] of [
    ["no such claim (sub alone)", {}],
    ["a number", { preferred_username: 42 }],
    ["an array", { preferred_username: ["alice"] }],
    ["spaces", { preferred_username: "alice smith" }],
    ["me", { preferred_username: "me" }],
    ["too long", { preferred_username: "a".repeat(129) }],
  ] as const) {
    assertError(
      await h.request("PUT", "/v1/items/item-1/likes/me", { token: await idp.sign(key, claims, { sub: "alice" }) }),
      401,
      "TOKEN_USER_CLAIM_INVALID",
      label,
    );
  }
  const after = await h.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM like_fact");
  assert.equal(after.rows[0]!.n, 1, "no refused token wrote");
});

test('oidc claims: by default role "admin" (or an array holding it) is an admin; other roles, none, or role true are not', async (t) => {
  const { h, idp, key } = await setup(t, {});
  for (const [label, claims] of [
    ["role admin", { role: "admin" }],
    ["role [user, admin]", { role: ["user", "admin"] }],
  ] as const) {
    assert.deepEqual(await adminAnswers(h, await idp.sign(key, claims, { sub: "root" })), [200, 200, 200, 200], label);
  }
  for (const [label, claims] of [
    ["no role", {}],
    ["role user", { role: "user" }],
    ["role Admin", { role: "Admin" }],
    ["role [user]", { role: ["user"] }],
    ["role true", { role: true }],
    ["admin: true", { admin: true }],
    ["groups [admin]", { groups: ["admin"] }],
  ] as const) {
    assert.deepEqual(await adminAnswers(h, await idp.sign(key, claims, { sub: "alice" })), [403, 403, 403, 403], label);
  }
});

test("oidc claims: LEDGER_JWT_ADMIN_CLAIM groups with LEDGER_JWT_ADMIN_VALUE ledger-admins maps a group (array or value) to admin, and role admin no longer does", async (t) => {
  const { h, idp, key } = await setup(t, { adminClaim: "groups", adminValue: "ledger-admins" });
  for (const [label, claims] of [
    ["groups [staff, ledger-admins]", { groups: ["staff", "ledger-admins"] }],
    ["groups ledger-admins", { groups: "ledger-admins" }],
  ] as const) {
    assert.deepEqual(await adminAnswers(h, await idp.sign(key, claims, { sub: "root" })), [200, 200, 200, 200], label);
  }
  for (const [label, claims] of [
    ["groups [staff]", { groups: ["staff"] }],
    ["groups []", { groups: [] }],
    ["role admin", { role: "admin" }],
    ["groups [[ledger-admins]]", { groups: [["ledger-admins"]] }],
    ["groups {ledger-admins: true}", { groups: { "ledger-admins": true } }],
  ] as const) {
    assert.deepEqual(await adminAnswers(h, await idp.sign(key, claims, { sub: "alice" })), [403, 403, 403, 403], label);
  }
  // A non-admin still acts for itself.
  ok(
    await h.request("PUT", "/v1/accounts/alice", {
      token: await idp.sign(key, { groups: ["staff"] }, { sub: "alice" }),
      json: { private: false },
    }),
  );
});

test("oidc claims: an Auth0-style namespaced claim and a boolean flag map too", async (t) => {
  const { h, idp, key } = await setup(t, { adminClaim: "https://ledger.example.com/is_admin", adminValue: "true" });
  assert.deepEqual(
    await adminAnswers(h, await idp.sign(key, { "https://ledger.example.com/is_admin": true }, { sub: "root" })),
    [200, 200, 200, 200],
  );
  assert.deepEqual(
    await adminAnswers(h, await idp.sign(key, { "https://ledger.example.com/is_admin": false }, { sub: "alice" })),
    [403, 403, 403, 403],
  );
});
