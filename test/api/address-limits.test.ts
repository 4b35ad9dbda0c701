/**
 * What the service answers before it knows a caller has budgets per client address, over real
 * HTTP: the documents (/openapi.json, /docs, /dashboard and their files) and the auth hook's 401s.
 * Before, both were unlimited: the per-user limiter runs after authentication, and the documents
 * had none. A second client address (127.0.0.2, a source address of the loopback network) is the
 * control that the budget is the address's, not the server's; a token verified before the flood
 * still works, and an API read keeps its own budget.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
import { assertError, ok, startApi, type ApiHarness, type ApiResponse } from "./harness.ts";

const OTHER_ADDRESS = "127.0.0.2";

/** A GET from another source address of the loopback network. */
function getFrom(h: ApiHarness, localAddress: string, path: string, token?: string): Promise<ApiResponse> {
  const url = new URL(path, h.baseUrl);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname + url.search,
        localAddress,
        headers: token ? { authorization: `Bearer ${token}` } : {},
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          const headers = new Headers(
            Object.entries(res.headers).flatMap(([k, v]) =>
              v === undefined ? [] : [[k, String(v)] as [string, string]],
            ),
          );
          const json = (res.headers["content-type"] ?? "").includes("application/json") && text.length > 0;
          resolve({ status: res.statusCode!, headers, text, body: json ? JSON.parse(text) : undefined });
        });
      },
    );
    req.on("error", reject);
    req.end();
  });
}

const DOCUMENTS = [
  "/openapi.json",
  "/docs/json",
  "/docs",
  "/docs/static/swagger-ui.css",
  "/dashboard",
  "/dashboard/assets/dashboard.css",
  "/dashboard/vendor/uplot/uPlot.iife.min.js",
];

test("documents: /openapi.json, /docs and /dashboard with their files share a budget per client address; over it, 429 with Retry-After", async (t) => {
  const h = await startApi({ app: { documentsPerMinute: DOCUMENTS.length } });
  t.after(() => h.close());
  for (const path of DOCUMENTS) {
    const res = await h.request("GET", path, { redirect: "manual" });
    assert.ok(res.status === 200 || (path === "/docs" && res.status === 302), `${path}: ${res.status}`);
    assert.equal(res.headers.get("x-ratelimit-limit"), String(DOCUMENTS.length), `${path} counts`);
  }
  for (const path of DOCUMENTS) {
    const res = await h.request("GET", path, { redirect: "manual" });
    assertError(res, 429, "RATE_LIMITED", path);
    assert.ok(Number(res.headers.get("retry-after")) > 0, `${path}: Retry-After`);
  }
  // Controls: another address has its own budget; the API's reads are another budget.
  assert.equal((await getFrom(h, OTHER_ADDRESS, "/openapi.json")).status, 200, "another client address");
  ok(await h.request("GET", "/healthz"));
  const admin = await h.as("root", { admin: true });
  ok(await admin.put("/v1/items/item-1"));
  ok(await h.request("GET", "/v1/items/item-1/like-count"), 200, "a public read without a token");
});

test("refused tokens: 401s draw on a budget per client address; the one over it is 429, and no new token from there is checked until the window ends", async (t) => {
  const h = await startApi({ app: { authFailuresPerMinute: 3 } });
  t.after(() => h.close());
  const alice = await h.as("alice");
  ok(await alice.get("/v1/accounts/me/likes"), 200, "alice's token is verified before the flood");
  const fresh = await h.token("bob");
  const garbage = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJtYWxsb3J5In0.bad-signature";
  const remaining: string[] = [];
  for (const token of [garbage, `${garbage}x`, null]) {
    const res = await h.request("GET", "/v1/accounts/me/likes", { token });
    assertError(res, 401, "UNAUTHENTICATED");
    remaining.push(res.headers.get("x-ratelimit-remaining") ?? "none");
  }
  assert.deepEqual(remaining, ["2", "1", "0"], "each 401 counts, a missing token too, and says what is left");
  const over = await h.request("GET", "/v1/accounts/me/likes", { token: garbage });
  assertError(over, 429, "RATE_LIMITED", "the refusal over the budget");
  assert.ok(Number(over.headers.get("retry-after")) > 0);
  // A valid token never checked before is not checked now: 429 at once.
  assertError(
    await h.request("GET", "/v1/accounts/me/likes", { token: fresh }),
    429,
    "RATE_LIMITED",
    "a new token from an address over its budget",
  );
  // A token verified before keeps working; public reads without a token are not refusals.
  ok(await alice.get("/v1/accounts/me/likes"), 200, "a remembered token");
  // Another address: its own budget, its tokens checked.
  assertError(
    await getFrom(h, OTHER_ADDRESS, "/v1/accounts/me/likes", garbage),
    401,
    "UNAUTHENTICATED",
    "another address, a bad token",
  );
  ok(await getFrom(h, OTHER_ADDRESS, "/v1/accounts/me/likes", fresh), 200, "another address, a new valid token");
});
