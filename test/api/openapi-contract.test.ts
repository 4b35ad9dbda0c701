/**
 * The OpenAPI document is the contract: it is a valid OpenAPI 3.0 document (checked by an
 * independent validator), every operation has a unique operationId and described responses,
 * and the answers of a walk over the API (successes and errors of every kind) match the
 * response schema the document declares for their route and status.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { Ajv } from "ajv";
import { Validator } from "@seriousme/openapi-schema-validator";
import { createAccounts, ok, startApi, type ApiHarness, type ApiResponse, type PostJson } from "./harness.ts";

interface Operation {
  operationId?: string;
  responses?: Record<string, { description?: string; content?: Record<string, { schema?: unknown }> }>;
}
type Document = { paths: Record<string, Record<string, Operation>> } & Record<string, unknown>;

/** The document path ("/v1/items/{id}/likes") of a concrete URL path, preferring literal segments ("me"). */
function templateOf(doc: Document, method: string, urlPath: string): string | undefined {
  const candidates = Object.keys(doc.paths).filter((p) => doc.paths[p]![method.toLowerCase()]).filter((p) => {
    const pattern = new RegExp(`^${p.replace(/\{[^}]+\}/g, "[^/]+")}$`);
    return pattern.test(urlPath);
  });
  return candidates.sort((a, b) => (a.match(/\{/g)?.length ?? 0) - (b.match(/\{/g)?.length ?? 0))[0];
}

function pointer(...segments: string[]): string {
  return segments.map((s) => encodeURIComponent(s.replace(/~/g, "~0").replace(/\//g, "~1"))).join("/");
}

test("api contract: /openapi.json is a valid OpenAPI 3.0 document; every operation has a unique operationId, no 'Default Response', an example per JSON response, and error responses list their codes", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const doc = (await h.request<Document>("GET", "/openapi.json")).body;
  const validator = new Validator();
  const result = await validator.validate(structuredClone(doc));
  assert.equal(result.valid, true, JSON.stringify(result.errors, null, 1)?.slice(0, 2000));

  const ids = new Map<string, string>();
  const problems: string[] = [];
  for (const [path, ops] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      const where = `${method.toUpperCase()} ${path}`;
      if (!op.operationId) problems.push(`${where}: no operationId`);
      else if (ids.has(op.operationId)) problems.push(`${where}: operationId ${op.operationId} also used by ${ids.get(op.operationId)}`);
      else ids.set(op.operationId, where);
      for (const [status, response] of Object.entries(op.responses ?? {})) {
        if (!response.description || response.description === "Default Response") problems.push(`${where} ${status}: no description`);
        if (response.content?.["application/json"] && (response.content["application/json"] as { example?: unknown }).example === undefined) problems.push(`${where} ${status}: no example`);
        if (Number(status) >= 400) {
          if (!/`[A-Z_]+`/.test(response.description ?? "")) problems.push(`${where} ${status}: no error codes listed`);
        }
      }
    }
  }
  assert.deepEqual(problems, []);
  t.diagnostic(`note ${ids.size} operations, e.g. ${[...ids.keys()].slice(0, 4).join(", ")}`);
});

test("api contract: the answers of a walk over the API, successes and errors, match the schemas the document declares for their route and status", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const doc = (await h.request<Document>("GET", "/openapi.json")).body;
  const recorded: { method: string; path: string; res: ApiResponse }[] = [];
  const record = (h2: ApiHarness) => async (method: string, path: string, run: () => Promise<ApiResponse>) => {
    const res = await run();
    recorded.push({ method, path: path.split("?")[0]!, res });
    void h2;
    return res;
  };
  const r = record(h);
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "bob"]);
  await createAccounts(admin, ["priv"], { private: true });
  const alice = await h.as("alice");
  const bob = await h.as("bob");
  await r("PUT", "/v1/items/item-1", () => admin.put("/v1/items/item-1"));
  await r("PUT", "/v1/accounts/alice", () => alice.put("/v1/accounts/alice", { hideCollections: false }));
  await r("GET", "/v1/accounts/alice", () => bob.get("/v1/accounts/alice"));
  await r("PUT", "/v1/items/item-1/likes/me", () => alice.put("/v1/items/item-1/likes/me"));
  await r("GET", "/v1/items/item-1/likes/me", () => alice.get("/v1/items/item-1/likes/me"));
  await r("GET", "/v1/items/item-1/like-count", () => alice.get("/v1/items/item-1/like-count?allowedLag=5"));
  await r("GET", "/v1/items/item-1/likes", () => alice.get("/v1/items/item-1/likes?limit=2"));
  await r("GET", "/v1/accounts/me/likes", () => alice.get("/v1/accounts/me/likes"));
  await r("PUT", "/v1/accounts/me/following/bob", () => alice.put("/v1/accounts/me/following/bob"));
  await r("PUT", "/v1/accounts/me/following/priv", () => alice.put("/v1/accounts/me/following/priv"));
  const priv = await h.as("priv");
  await r("GET", "/v1/accounts/me/follow-requests", () => priv.get("/v1/accounts/me/follow-requests"));
  await r("POST", "/v1/accounts/me/follow-requests/alice/approve", () => priv.post("/v1/accounts/me/follow-requests/alice/approve"));
  await r("GET", "/v1/accounts/me/relationships/bob", () => alice.get("/v1/accounts/me/relationships/bob"));
  await r("GET", "/v1/accounts/me/relationships", () => alice.get("/v1/accounts/me/relationships?id=bob&id=priv"));
  await h.drain();
  await r("GET", "/v1/accounts/bob/followers", () => alice.get("/v1/accounts/bob/followers"));
  await r("GET", "/v1/accounts/alice/following", () => alice.get("/v1/accounts/alice/following"));
  await r("GET", "/v1/accounts/bob/follower-count", () => alice.get("/v1/accounts/bob/follower-count?allowedLag=0"));
  const post = ok(await r("POST", "/v1/posts", () => bob.post<PostJson>("/v1/posts", { visibility: "PUBLIC", body: "hi" })) as ApiResponse<PostJson>, 201);
  await r("GET", `/v1/posts/${post.id}`, () => alice.get(`/v1/posts/${post.id}?consistency=truth`));
  await r("PUT", "/v1/accounts/me/blocks/priv", () => bob.put("/v1/accounts/me/blocks/priv"));
  await r("GET", "/v1/accounts/me/blocks", () => bob.get("/v1/accounts/me/blocks"));
  await r("DELETE", "/v1/accounts/me/blocks/priv", () => bob.delete("/v1/accounts/me/blocks/priv"));
  await r("DELETE", "/v1/accounts/me/following/bob", () => alice.delete("/v1/accounts/me/following/bob"));
  await r("DELETE", "/v1/items/item-1/likes/me", () => alice.delete("/v1/items/item-1/likes/me"));
  await r("DELETE", `/v1/posts/${post.id}`, () => bob.delete(`/v1/posts/${post.id}`));
  await r("GET", "/v1/admin/status", () => admin.get("/v1/admin/status"));
  await r("GET", "/v1/admin/audit", () => admin.get("/v1/admin/audit"));
  await r("POST", "/v1/admin/rebuild", () => admin.post("/v1/admin/rebuild", { items: ["item-1"] }));
  await r("GET", "/healthz", () => h.request("GET", "/healthz"));
  await r("GET", "/readyz", () => h.request("GET", "/readyz"));
  // Errors of every kind.
  await r("GET", "/v1/items/item-1/likes/me", () => h.request("GET", "/v1/items/item-1/likes/me"));
  await r("GET", "/v1/admin/status", () => alice.get("/v1/admin/status"));
  await r("PUT", "/v1/items/ghost/likes/me", () => alice.put("/v1/items/ghost/likes/me"));
  await r("PUT", "/v1/accounts/me/following/alice", () => alice.put("/v1/accounts/me/following/alice"));
  await r("POST", "/v1/posts", () => alice.post("/v1/posts", { visibility: "NOPE", body: "x" }));
  await r("GET", "/v1/items/item-1/like-count", () => alice.get("/v1/items/item-1/like-count?allowedLag=-1"));

  const ajv = new Ajv({ strict: false, allErrors: true });
  ajv.addFormat("date-time", (value: string) => /^\d{4}-\d\d-\d\dT/.test(value) && !Number.isNaN(Date.parse(value)));
  ajv.addSchema(doc, "openapi.json");
  const problems: string[] = [];
  for (const { method, path, res } of recorded) {
    const template = templateOf(doc, method, path);
    const where = `${method} ${path} -> ${res.status}`;
    if (!template) {
      problems.push(`${where}: no such operation in the document`);
      continue;
    }
    const response = doc.paths[template]![method.toLowerCase()]!.responses?.[String(res.status)];
    if (!response) {
      problems.push(`${where}: status not declared for ${template}`);
      continue;
    }
    if (!response.content?.["application/json"]?.schema) continue;
    const validate = ajv.compile({ $ref: `openapi.json#/${pointer("paths", template, method.toLowerCase(), "responses", String(res.status), "content", "application/json", "schema")}` });
    if (!validate(res.body)) problems.push(`${where}: ${ajv.errorsText(validate.errors)} in ${res.text.slice(0, 200)}`);
  }
  t.diagnostic(`note ${recorded.length} answers checked against ${new Set(recorded.map((x) => `${x.method} ${templateOf(doc, x.method, x.path)}`)).size} operations`);
  assert.deepEqual(problems, []);

  // The check can fail: a count that is a string, and an error body without its code, are refused.
  const countSchema = ajv.compile({ $ref: `openapi.json#/${pointer("paths", "/v1/items/{id}/like-count", "get", "responses", "200", "content", "application/json", "schema")}` });
  assert.equal(countSchema({ count: "1", lag: 0, pendingForItem: 0, stale: false }), false);
  const errorSchema = ajv.compile({ $ref: `openapi.json#/${pointer("paths", "/v1/items/{id}/like-count", "get", "responses", "404", "content", "application/json", "schema")}` });
  assert.equal(errorSchema({ error: { message: "no code" } }), false);
});
