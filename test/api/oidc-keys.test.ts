/**
 * The identity provider's keys over time. A rotation is picked up without a
 * restart; a flood of unknown kids costs the provider at most one request per cooldown (the
 * control: with no cooldown, one request each); a provider that is down at start does not keep
 * the service from starting, and its tokens get 401 TOKEN_KEY_UNAVAILABLE until it answers; a
 * provider that goes down later leaves tokens of cached keys working. Each count is the
 * requests the test's JWKS server received.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { freePort } from "../../src/db/embedded-cluster.ts";
import type { JwksOptions } from "../../src/api/auth.ts";
import { pollUntil } from "../../support/poll.ts";
import { assertError, ok, startApi, type ApiHarness } from "./harness.ts";
import { TestProvider, type ProviderKey } from "../support/identity-provider.ts";

async function api(t: TestContext, jwks: JwksOptions): Promise<ApiHarness> {
  const h = await startApi({ app: { jwks } });
  t.after(() => h.close());
  return h;
}

async function provider(t: TestContext): Promise<{ idp: TestProvider; k1: ProviderKey }> {
  const idp = await TestProvider.start();
  t.after(() => idp.close());
  return { idp, k1: await idp.addKey("RS256", "k1") };
}

const read = (h: ApiHarness, token: string) => h.request("GET", "/v1/accounts/me/likes", { token });

test("oidc keys: a rotation (new key added, old one removed) works without a restart; tokens of the removed key, remembered ones too, are refused", async (t) => {
  const { idp, k1 } = await provider(t);
  const h = await api(t, idp.options({ cooldownMs: 0 }));
  const old = await idp.sign(k1, {}, { sub: "alice" });
  ok(await read(h, old), 200, "k1 before the rotation");
  ok(await read(h, old), 200, "remembered");
  // The provider publishes k2 next to k1 (its announcement period): both work.
  const k2 = await idp.addKey("ES256", "k2");
  ok(await read(h, await idp.sign(k2, {}, { sub: "bob" })), 200, "k2, a kid the cached set lacked: fetched again");
  ok(await read(h, await idp.sign(k1, {}, { sub: "carol" })), 200, "k1 still");
  // Then it withdraws k1.
  idp.removeKey("k1");
  const k3 = await idp.addKey("EdDSA", "k3");
  ok(await read(h, await idp.sign(k3, {}, { sub: "dave" })), 200, "k3, after k1 was withdrawn");
  assertError(
    await read(h, await idp.sign(k1, {}, { sub: "erin" })),
    401,
    "TOKEN_UNKNOWN_KID",
    "a new token of the withdrawn k1",
  );
  // The set without k1 was fetched, so the token remembered since before is checked again.
  assertError(await read(h, old), 401, "TOKEN_UNKNOWN_KID", "a remembered token of the withdrawn k1");
  ok(await read(h, await idp.sign(k2, {}, { sub: "bob" })), 200, "k2 stays");
  t.diagnostic(`note JWKS requests over the rotation: ${idp.requests}`);
});

test("oidc keys: with a cooldown, a new kid right after a fetch waits for it (no request), then one fetch picks it up", async (t) => {
  const { idp, k1 } = await provider(t);
  const cooldownMs = 400;
  const h = await api(t, idp.options({ cooldownMs }));
  ok(await read(h, await idp.sign(k1)), 200);
  const fetched = idp.requests;
  const k2 = await idp.addKey("ES256", "k2");
  const started = Date.now();
  const token = await idp.sign(k2, {}, { sub: "bob" });
  const first = await read(h, token);
  if (Date.now() - started < cooldownMs) {
    assertError(first, 401, "TOKEN_UNKNOWN_KID", "within the cooldown");
    assert.equal(idp.requests, fetched, "no fetch within the cooldown");
  }
  // A bounded poll over the cooldown (it is time, not an event): the first request after it fetches once.
  await pollUntil(
    "k2 accepted after the cooldown",
    () => read(h, token),
    (res) => res.status === 200,
    10_000,
    50,
  );
  assert.equal(idp.requests, fetched + 1, "exactly one fetch picked up k2");
});

test("oidc keys: a flood of unknown kids costs the provider no request within the cooldown; control: without a cooldown, one request each", async (t) => {
  const { idp, k1 } = await provider(t);
  const h = await api(t, idp.options({ cooldownMs: 60_000 }));
  ok(await read(h, await idp.sign(k1)), 200);
  const before = idp.requests;
  const flood = await Promise.all(
    Array.from({ length: 100 }, async (_, i) => read(h, await idp.sign(k1, {}, { kid: `made-up-${i}` }))),
  );
  for (const res of flood) assertError(res, 401, "TOKEN_UNKNOWN_KID");
  t.diagnostic(`note 100 unknown kids, cooldown 60 s: ${idp.requests - before} JWKS requests`);
  assert.equal(idp.requests - before, 0);

  const { idp: open, k1: openKey } = await provider(t);
  const control = await api(t, open.options({ cooldownMs: 0 }));
  ok(await read(control, await open.sign(openKey)), 200);
  const start = open.requests;
  for (let i = 0; i < 20; i++)
    assertError(await read(control, await open.sign(openKey, {}, { kid: `made-up-${i}` })), 401, "TOKEN_UNKNOWN_KID");
  t.diagnostic(`note control, 20 unknown kids, cooldown 0: ${open.requests - start} JWKS requests`);
  assert.equal(open.requests - start, 20, "the control shows the cooldown is what bounds the flood");
});

test("oidc keys: a provider that does not answer at start (nothing listens, connections reset, no answer) does not keep the service from starting; tokens get 401 TOKEN_KEY_UNAVAILABLE, public reads and health answer", async (t) => {
  const { idp, k1 } = await provider(t);
  const nothing = await api(t, {
    ...idp.options({ cooldownMs: 0 }),
    url: `http://127.0.0.1:${await freePort()}/.well-known/jwks.json`,
  });
  await nothing.ledger.relations.upsertAccount("bob", {});
  assertError(await read(nothing, await idp.sign(k1)), 401, "TOKEN_KEY_UNAVAILABLE", "nothing listens");
  ok(await nothing.request("GET", "/healthz"));
  ok(await nothing.request("GET", "/v1/accounts/bob"), 200, "a public read without a token");
  assertError(
    await nothing.request("GET", "/v1/accounts/bob", { token: await idp.sign(k1) }),
    401,
    "TOKEN_KEY_UNAVAILABLE",
    "a public read with a token",
  );

  const silent = await TestProvider.start();
  t.after(() => silent.close());
  silent.published = idp.published;
  silent.mode = "hang";
  const hanging = await api(t, silent.options({ cooldownMs: 0, timeoutMs: 300 }));
  const started = Date.now();
  assertError(
    await read(hanging, await idp.sign(k1)),
    401,
    "TOKEN_KEY_UNAVAILABLE",
    "the provider accepts and never answers",
  );
  t.diagnostic(`note a provider that never answers: 401 after ${Date.now() - started} ms (timeout 300 ms)`);
  assert.ok(Date.now() - started < 5000);
});

test("oidc keys: provider down at start, then up: 401 TOKEN_KEY_UNAVAILABLE, then the same token works without a restart; while it is down, requests are bounded by the cooldown", async (t) => {
  const { idp, k1 } = await provider(t);
  idp.mode = "reset";
  const h = await api(t, idp.options({ cooldownMs: 0 }));
  const token = await idp.sign(k1);
  assertError(await read(h, token), 401, "TOKEN_KEY_UNAVAILABLE", "provider down");
  idp.mode = "up";
  ok(await read(h, token), 200, "provider up: the same token");

  const { idp: down, k1: downKey } = await provider(t);
  down.mode = "503";
  const bounded = await api(t, down.options({ cooldownMs: 60_000 }));
  for (let i = 0; i < 20; i++)
    assertError(await read(bounded, await down.sign(downKey, {}, { sub: `user-${i}` })), 401, "TOKEN_KEY_UNAVAILABLE");
  t.diagnostic(`note provider answering 503 at start, 20 tokens, cooldown 60 s: ${down.requests} JWKS requests`);
  assert.equal(down.requests, 1, "only the start's fetch: a failed fetch is retried after the cooldown, not per token");
});

test("oidc keys: a provider that goes down after its keys were fetched: tokens of cached keys keep working, also once the set is older than its max age; a kid the set lacks is 401 TOKEN_KEY_UNAVAILABLE", async (t) => {
  const { idp, k1 } = await provider(t);
  const fresh = await api(t, idp.options({ cooldownMs: 60_000 }));
  ok(await read(fresh, await idp.sign(k1, {}, { sub: "alice" })), 200);
  idp.mode = "503";
  const before = idp.requests;
  ok(await read(fresh, await idp.sign(k1, {}, { sub: "bob" })), 200, "a new token of the cached key, provider down");
  assert.equal(idp.requests, before, "a fresh set is not fetched again");

  // Max age 0: every use of the set wants a fetch, so this is the path of a set past its max age.
  const { idp: aging, k1: agingKey } = await provider(t);
  const stale = await api(t, aging.options({ cooldownMs: 60_000, cacheMaxAgeMs: 0 }));
  ok(await read(stale, await aging.sign(agingKey, {}, { sub: "alice" })), 200);
  aging.mode = "503";
  const start = aging.requests;
  for (let i = 0; i < 20; i++)
    ok(
      await read(stale, await aging.sign(agingKey, {}, { sub: `user-${i}` })),
      200,
      `new token ${i} of the cached key, set stale, provider down`,
    );
  assertError(
    await read(stale, await aging.sign(agingKey, {}, { kid: "k-new" })),
    401,
    "TOKEN_KEY_UNAVAILABLE",
    "a kid the last set lacks, provider down",
  );
  t.diagnostic(`note provider down, stale set, 21 new tokens: ${aging.requests - start} JWKS requests`);
  assert.equal(aging.requests - start, 1, "one failed fetch, then the last set until the cooldown ends");
});
