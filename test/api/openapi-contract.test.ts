/**
 * The OpenAPI document is the contract: it is a valid OpenAPI 3.0 document (checked by an
 * independent validator), every operation has a unique operationId and described responses,
 * every body is a named component, and the answers of a walk over every operation of the API
 * (successes and errors of every kind, 413, 415, 429 and 431 included) have a status the
 * document declares for their route, a body its schema accepts (required fields included), and
 * only headers it declares; every object a response carries lists its always-present fields as
 * required.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { Ajv } from "ajv";
import { Validator } from "@seriousme/openapi-schema-validator";
import { request as httpRequest } from "node:http";
import { createAccounts, ok, startApi, type ApiResponse, type PostJson } from "./harness.ts";

interface Header {
  $ref?: string;
  schema?: { type?: string };
}
interface Operation {
  operationId?: string;
  requestBody?: { content?: Record<string, { schema?: { $ref?: string } }> };
  responses?: Record<
    string,
    { description?: string; headers?: Record<string, Header>; content?: Record<string, { schema?: { $ref?: string } }> }
  >;
}
type Document = {
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, { properties?: Record<string, unknown> }>; headers: Record<string, Header> };
} & Record<string, unknown>;

/** The document path ("/v1/items/{id}/likes") of a concrete URL path, preferring literal segments ("me"). */
function templateOf(doc: Document, method: string, urlPath: string): string | undefined {
  const candidates = Object.keys(doc.paths)
    .filter((p) => doc.paths[p]![method.toLowerCase()])
    .filter((p) => {
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
      else if (ids.has(op.operationId))
        problems.push(`${where}: operationId ${op.operationId} also used by ${ids.get(op.operationId)}`);
      else ids.set(op.operationId, where);
      for (const [status, response] of Object.entries(op.responses ?? {})) {
        if (!response.description || response.description === "Default Response")
          problems.push(`${where} ${status}: no description`);
        if (
          response.content?.["application/json"] &&
          (response.content["application/json"] as { example?: unknown }).example === undefined
        )
          problems.push(`${where} ${status}: no example`);
        if (Number(status) >= 400) {
          if (!/`[A-Z_]+`/.test(response.description ?? "")) problems.push(`${where} ${status}: no error codes listed`);
        }
      }
    }
  }
  assert.deepEqual(problems, []);

  // Every request and response body is a named component (not def-0, not inline); a write's
  // success answer names the `freshness` field read-routing adds to it with read replicas.
  const unnamed: string[] = [];
  const componentOf = (schema: { $ref?: string } | undefined) =>
    /^#\/components\/schemas\/([A-Z][A-Za-z]+)$/.exec(schema?.$ref ?? "")?.[1];
  for (const [path, ops] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      const bodies = [
        ["request", op.requestBody?.content?.["application/json"]?.schema] as const,
        ...Object.entries(op.responses ?? {}).map(
          ([status, r]) => [status, r.content?.["application/json"]?.schema] as const,
        ),
      ];
      for (const [which, schema] of bodies) {
        if (which === "request" && !op.requestBody) continue;
        if (schema === undefined) continue;
        const name = componentOf(schema);
        if (!name || !doc.components.schemas[name])
          unnamed.push(`${method.toUpperCase()} ${path} ${which}: ${JSON.stringify(schema).slice(0, 80)}`);
        else if (/^2/.test(which) && method !== "get" && !doc.components.schemas[name]!.properties?.freshness)
          unnamed.push(`${method.toUpperCase()} ${path} ${which}: ${name} has no freshness`);
      }
    }
  }
  assert.deepEqual(unnamed, []);
  assert.deepEqual(
    Object.keys(doc.components.schemas).filter((n) => /^def-\d+$/.test(n)),
    [],
  );
  assert.ok(
    doc.components.schemas.LedgerError && doc.components.schemas.Relationship && doc.components.schemas.LikeCount,
    Object.keys(doc.components.schemas).join(),
  );
  // A reply's parentId is an id like any other: its length is bounded in the document, not only by the write.
  assert.equal((doc.components.schemas.CommentDraft!.properties!.parentId as { maxLength?: number }).maxLength, 128);
  t.diagnostic(`note ${ids.size} operations, e.g. ${[...ids.keys()].slice(0, 4).join(", ")}`);
});

interface SchemaNode {
  $ref?: string;
  type?: string;
  properties?: Record<string, SchemaNode>;
  required?: string[];
  items?: SchemaNode;
  additionalProperties?: boolean | SchemaNode;
  oneOf?: SchemaNode[];
  anyOf?: SchemaNode[];
  allOf?: SchemaNode[];
}

/**
 * The object schemas reachable from the document's responses (through $ref, properties, items,
 * additionalProperties and combinators) that declare properties but no `required`: a generated
 * client would type each of their fields as optional (`count?: number`). Maps (only
 * additionalProperties) have no fixed fields and are not objects of this kind.
 */
function objectsWithoutRequired(doc: Document): string[] {
  const schemas = doc.components.schemas as Record<string, SchemaNode>;
  const seen = new Set<string>();
  const found: string[] = [];
  const visit = (node: SchemaNode | undefined, where: string) => {
    if (!node || typeof node !== "object") return;
    if (node.$ref) {
      const name = node.$ref.split("/").at(-1)!;
      if (!seen.has(name)) {
        seen.add(name);
        visit(schemas[name], name);
      }
      return;
    }
    if (node.properties && Object.keys(node.properties).length > 0) {
      if (!node.required || node.required.length === 0) found.push(where);
      for (const name of node.required ?? [])
        if (!(name in node.properties)) found.push(`${where}: required ${name} is no property`);
      for (const [name, property] of Object.entries(node.properties)) visit(property, `${where}.${name}`);
    }
    if (node.items) visit(node.items, `${where}[]`);
    if (typeof node.additionalProperties === "object") visit(node.additionalProperties, `${where}.*`);
    for (const branch of [...(node.oneOf ?? []), ...(node.anyOf ?? []), ...(node.allOf ?? [])]) visit(branch, where);
  };
  for (const [path, ops] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      for (const [status, response] of Object.entries(op.responses ?? {})) {
        for (const [type, media] of Object.entries(response.content ?? {}))
          visit(media.schema as SchemaNode, `${method.toUpperCase()} ${path} ${status} ${type}`);
      }
    }
  }
  return [...new Set(found)].sort();
}

test("api contract: every object a response carries lists what it always has as required (LikeCount's count, PostRead's post, ...); the check catches a schema whose required was dropped", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const doc = (await h.request<Document>("GET", "/openapi.json")).body;
  assert.deepEqual(objectsWithoutRequired(doc), []);
  const schemas = doc.components.schemas as Record<string, SchemaNode>;
  for (const [name, fields] of Object.entries({
    LikeCount: ["count", "source"],
    FollowerCount: ["count", "source"],
    CommentCount: ["count", "source"],
    PostRead: ["post", "decidedBy"],
    HomeTimelinePage: ["entries", "lag", "complete"],
    TimelineEntry: ["post", "likes", "comments", "likedByMe"],
    LikeState: ["liked", "version"],
    ItemCreated: ["id"],
  }))
    assert.deepEqual(schemas[name]!.required, fields, name);
  // Negative control: the same document with LikeCount's required dropped.
  const dropped = structuredClone(doc);
  delete (dropped.components.schemas as Record<string, SchemaNode>).LikeCount!.required;
  assert.deepEqual(objectsWithoutRequired(dropped), ["LikeCount"]);
  const nested = structuredClone(doc);
  delete (nested.components.schemas as Record<string, SchemaNode>).DashboardState!.properties!.thresholds!.required;
  assert.deepEqual(objectsWithoutRequired(nested), ["DashboardState.thresholds"]);
});

/** The response headers the service sends (CORS aside): each one an answer carries must be declared for its route and status. */
const OUR_HEADERS = [
  "link",
  "location",
  "retry-after",
  "x-ratelimit-limit",
  "x-ratelimit-remaining",
  "x-ratelimit-reset",
  "x-request-id",
  "x-ledger-freshness",
  "x-ledger-read-from",
  "x-ledger-freshness-status",
  "www-authenticate",
];

interface Recorded {
  method: string;
  path: string;
  status: number;
  contentType: string;
  headers: Record<string, string>;
  body: unknown;
  text: string;
}

function recordOf(
  method: string,
  path: string,
  res: { status: number; headers: Headers; text: string; body: unknown },
): Recorded {
  const headers: Record<string, string> = {};
  res.headers.forEach((value, name) => {
    headers[name.toLowerCase()] = value;
  });
  return {
    method,
    path: path.split("?")[0]!,
    status: res.status,
    contentType: headers["content-type"] ?? "",
    headers,
    body: res.body,
    text: res.text,
  };
}

/** What in the recorded answers the document does not say: an unknown route or status, a body its schema refuses, an undeclared or malformed header. */
function contractProblems(doc: Document, recorded: Recorded[]): string[] {
  const ajv = new Ajv({ strict: false, allErrors: true });
  ajv.addFormat("date-time", (value: string) => /^\d{4}-\d\d-\d\dT/.test(value) && !Number.isNaN(Date.parse(value)));
  ajv.addSchema(structuredClone(doc), "openapi.json");
  const problems: string[] = [];
  for (const answer of recorded) {
    const { method, path, status } = answer;
    const template = templateOf(doc, method, path);
    const where = `${method} ${path} -> ${status}`;
    if (!template) {
      problems.push(`${where}: no such operation in the document`);
      continue;
    }
    const response = doc.paths[template]![method.toLowerCase()]!.responses?.[String(status)];
    if (!response) {
      problems.push(`${where}: status not declared for ${template}`);
      continue;
    }
    const declared = new Map(
      Object.entries(response.headers ?? {}).map(([name, h]) => [
        name.toLowerCase(),
        h.$ref ? doc.components.headers[h.$ref.split("/").at(-1)!]! : h,
      ]),
    );
    for (const name of OUR_HEADERS) {
      const value = answer.headers[name];
      if (value === undefined) continue;
      const header = declared.get(name);
      if (!header) problems.push(`${where}: header ${name} not declared`);
      else if (header.schema?.type === "integer" && !/^\d+$/.test(value))
        problems.push(`${where}: header ${name}: ${value} is not an integer`);
    }
    const mediaType = Object.keys(response.content ?? {}).find((type) => answer.contentType.startsWith(type));
    if (response.content && !mediaType) {
      problems.push(
        `${where}: content-type ${answer.contentType} not declared (${Object.keys(response.content).join(", ")})`,
      );
      continue;
    }
    if (mediaType !== "application/json") continue;
    const validate = ajv.compile({
      $ref: `openapi.json#/${pointer("paths", template, method.toLowerCase(), "responses", String(status), "content", "application/json", "schema")}`,
    });
    if (!validate(answer.body))
      problems.push(`${where}: ${ajv.errorsText(validate.errors)} in ${answer.text.slice(0, 200)}`);
  }
  return problems;
}

/** A request with headers of `bytes` bytes: node refuses them before any route with 431 (answered on the socket, so fetch is not used). */
async function oversizedHeaders(
  baseUrl: string,
  bytes: number,
): Promise<{ status: number; headers: Headers; text: string; body: unknown }> {
  const { hostname, port } = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      { host: hostname, port, path: "/v1/items/item-1/like-count", headers: { "x-padding": "a".repeat(bytes) } },
      (res) => {
        let text = "";
        res
          .setEncoding("utf8")
          .on("data", (chunk: string) => (text += chunk))
          .on("end", () => {
            const headers = new Headers();
            for (const [name, value] of Object.entries(res.headers))
              if (typeof value === "string") headers.set(name, value);
            resolve({ status: res.statusCode ?? 0, headers, text, body: JSON.parse(text) as unknown });
          });
      },
    );
    req.on("error", reject);
    req.end();
  });
}

test("api contract: the answers of a walk over every operation, successes and errors, have a declared status, a body the declared schema accepts and only declared headers; the check catches a wrong body, an undeclared status and an undeclared header", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const doc = (await h.request<Document>("GET", "/openapi.json")).body;
  const recorded: Recorded[] = [];
  const r = async (method: string, path: string, run: () => Promise<ApiResponse>) => {
    const res = await run();
    recorded.push(recordOf(method, path, res));
    return res;
  };
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "bob"]);
  await createAccounts(admin, ["priv"], { private: true });
  await createAccounts(admin, ["carol"], { private: true });
  const alice = await h.as("alice");
  const bob = await h.as("bob");
  const patch = (who: { token: string }, path: string, json: unknown) =>
    h.request("PATCH", path, { token: who.token, json });
  await r("PUT", "/v1/items/item-1", () => admin.put("/v1/items/item-1"));
  await r("PUT", "/v1/accounts/alice", () => alice.put("/v1/accounts/alice", { hideCollections: false }));
  await r("GET", "/v1/accounts/alice", () => bob.get("/v1/accounts/alice"));
  await r("PUT", "/v1/items/item-1/likes/me", () => alice.put("/v1/items/item-1/likes/me"));
  await r("PUT", "/v1/items/item-1/likes/me", () => bob.put("/v1/items/item-1/likes/me"));
  await r("GET", "/v1/items/item-1/likes/me", () => alice.get("/v1/items/item-1/likes/me"));
  await r("GET", "/v1/items/item-1/like-count", () => alice.get("/v1/items/item-1/like-count?allowedLag=5"));
  await r("GET", "/v1/items/item-1/likes", () => alice.get("/v1/items/item-1/likes?limit=1"));
  await r("GET", "/v1/accounts/me/likes", () => alice.get("/v1/accounts/me/likes"));
  await r("PUT", "/v1/accounts/me/following/bob", () => alice.put("/v1/accounts/me/following/bob"));
  await r("PUT", "/v1/accounts/me/following/priv", () => alice.put("/v1/accounts/me/following/priv"));
  await r("PUT", "/v1/accounts/me/following/carol", () => alice.put("/v1/accounts/me/following/carol"));
  const priv = await h.as("priv");
  const carol = await h.as("carol");
  await r("GET", "/v1/accounts/me/follow-requests", () => priv.get("/v1/accounts/me/follow-requests"));
  await r("POST", "/v1/accounts/me/follow-requests/alice/approve", () =>
    priv.post("/v1/accounts/me/follow-requests/alice/approve"),
  );
  await r("POST", "/v1/accounts/me/follow-requests/alice/reject", () =>
    carol.post("/v1/accounts/me/follow-requests/alice/reject"),
  );
  await r("GET", "/v1/accounts/me/relationships/bob", () => alice.get("/v1/accounts/me/relationships/bob"));
  await r("GET", "/v1/accounts/me/relationships", () => alice.get("/v1/accounts/me/relationships?id=bob&id=priv"));
  await h.drain();
  await r("GET", "/v1/accounts/bob/followers", () => alice.get("/v1/accounts/bob/followers"));
  await r("GET", "/v1/accounts/alice/following", () => alice.get("/v1/accounts/alice/following?limit=1"));
  await r("GET", "/v1/accounts/bob/follower-count", () => alice.get("/v1/accounts/bob/follower-count?allowedLag=0"));
  const post = ok(
    (await r("POST", "/v1/posts", () =>
      bob.post<PostJson>("/v1/posts", { visibility: "PUBLIC", body: "hi" }),
    )) as ApiResponse<PostJson>,
    201,
  );
  await r("GET", `/v1/posts/${post.id}`, () => alice.get(`/v1/posts/${post.id}?consistency=truth`));
  ok(await bob.post("/v1/posts", { visibility: "FOLLOWERS", body: "for followers" }), 201);
  await r("GET", "/v1/accounts/bob/posts", () => alice.get("/v1/accounts/bob/posts?limit=1"));
  await r("GET", "/v1/accounts/bob/posts", () => h.request("GET", "/v1/accounts/bob/posts"));
  await r("GET", "/v1/accounts/ghost/posts", () => alice.get("/v1/accounts/ghost/posts"));
  const comment = ok(
    (await r("POST", `/v1/posts/${post.id}/comments`, () =>
      alice.post<{ id: string }>(`/v1/posts/${post.id}/comments`, { body: "first" }),
    )) as ApiResponse<{ id: string }>,
    201,
  );
  await r("POST", `/v1/posts/${post.id}/comments`, () =>
    bob.post(`/v1/posts/${post.id}/comments`, { body: "reply", parentId: comment.id }),
  );
  await r("POST", `/v1/posts/${post.id}/comments`, () => bob.post(`/v1/posts/${post.id}/comments`, { body: "second" }));
  await h.drain();
  await r("GET", "/v1/timelines/home", () => alice.get("/v1/timelines/home?limit=1"));
  await r("GET", "/v1/timelines/home", () => alice.get("/v1/timelines/home?cursor=nonsense"));
  await r("GET", `/v1/posts/${post.id}/comments`, () => h.request("GET", `/v1/posts/${post.id}/comments?limit=1`));
  await r("GET", `/v1/comments/${comment.id}/replies`, () => alice.get(`/v1/comments/${comment.id}/replies`));
  await r("GET", `/v1/comments/${comment.id}`, () => alice.get(`/v1/comments/${comment.id}`));
  await r("PATCH", `/v1/comments/${comment.id}`, () => patch(alice, `/v1/comments/${comment.id}`, { body: "edited" }));
  await h.drain();
  await r("GET", `/v1/posts/${post.id}/comment-count`, () =>
    alice.get(`/v1/posts/${post.id}/comment-count?allowedLag=0`),
  );
  const notes = ok(
    (await r("GET", "/v1/notifications", () =>
      bob.get<{ groups: { mostRecentNotificationId: string }[] }>("/v1/notifications?limit=1"),
    )) as ApiResponse<{ groups: { mostRecentNotificationId: string }[] }>,
  );
  await r("GET", "/v1/notifications/unread-count", () => bob.get("/v1/notifications/unread-count"));
  await r("POST", "/v1/notifications/read", () =>
    bob.post("/v1/notifications/read", { upTo: notes.groups[0]!.mostRecentNotificationId }),
  );
  await r("POST", "/v1/notifications/read", () => bob.post("/v1/notifications/read", { upTo: "not-an-id" }));
  await r("DELETE", `/v1/comments/${comment.id}`, () => alice.delete(`/v1/comments/${comment.id}`));
  await r("PUT", "/v1/accounts/me/blocks/priv", () => bob.put("/v1/accounts/me/blocks/priv"));
  await r("GET", "/v1/accounts/me/blocks", () => bob.get("/v1/accounts/me/blocks"));
  await r("DELETE", "/v1/accounts/me/blocks/priv", () => bob.delete("/v1/accounts/me/blocks/priv"));
  await r("DELETE", "/v1/accounts/me/following/bob", () => alice.delete("/v1/accounts/me/following/bob"));
  await r("DELETE", "/v1/items/item-1/likes/me", () => alice.delete("/v1/items/item-1/likes/me"));
  await r("DELETE", `/v1/posts/${post.id}`, () => bob.delete(`/v1/posts/${post.id}`));
  await r("GET", "/v1/admin/status", () => admin.get("/v1/admin/status"));
  await r("GET", "/v1/admin/audit", () => admin.get("/v1/admin/audit"));
  await r("GET", "/v1/admin/dashboard", () => admin.get("/v1/admin/dashboard"));
  await r("POST", "/v1/admin/rebuild", () => admin.post("/v1/admin/rebuild", { items: ["item-1"] }));
  await r("POST", "/v1/admin/comment-counts/rebuild", () =>
    admin.post("/v1/admin/comment-counts/rebuild", { posts: [post.id] }),
  );
  await r("POST", "/v1/admin/notifications/rebuild", () =>
    admin.post("/v1/admin/notifications/rebuild", { recipients: ["bob"] }),
  );
  const hook = ok(
    (await r("POST", "/v1/admin/webhooks", () =>
      admin.post<{ id: string }>("/v1/admin/webhooks", {
        url: "https://8.8.8.8/hook",
        events: ["like.created", "follow.created"],
      }),
    )) as ApiResponse<{ id: string }>,
    201,
  );
  await r("GET", "/v1/admin/webhooks", () => admin.get("/v1/admin/webhooks"));
  await r("GET", `/v1/admin/webhooks/${hook.id}`, () => admin.get(`/v1/admin/webhooks/${hook.id}`));
  await r("PATCH", `/v1/admin/webhooks/${hook.id}`, () =>
    patch(admin, `/v1/admin/webhooks/${hook.id}`, { events: ["*"] }),
  );
  await r("POST", `/v1/admin/webhooks/${hook.id}/pause`, () => admin.post(`/v1/admin/webhooks/${hook.id}/pause`));
  await r("POST", `/v1/admin/webhooks/${hook.id}/resume`, () => admin.post(`/v1/admin/webhooks/${hook.id}/resume`));
  await r("POST", `/v1/admin/webhooks/${hook.id}/rotate-secret`, () =>
    admin.post(`/v1/admin/webhooks/${hook.id}/rotate-secret`, { graceSeconds: 60 }),
  );
  await r("POST", `/v1/admin/webhooks/${hook.id}/replay`, () =>
    admin.post(`/v1/admin/webhooks/${hook.id}/replay`, { source: "likes", partition: 0, fromSeq: 1 }),
  );
  await r("POST", `/v1/admin/webhooks/${hook.id}/replay`, () =>
    admin.post(`/v1/admin/webhooks/${hook.id}/replay`, { source: "likes", partition: 0, fromSeq: 99 }),
  );
  await r("POST", "/v1/admin/webhooks", () =>
    admin.post("/v1/admin/webhooks", { url: "http://127.0.0.1/", events: ["*"] }),
  );
  await r("GET", "/v1/admin/webhooks/whe_none", () => admin.get("/v1/admin/webhooks/whe_none"));
  await r("DELETE", `/v1/admin/webhooks/${hook.id}`, () => admin.delete(`/v1/admin/webhooks/${hook.id}`));
  // carol has one follow request: erased within the request (200), then her erasure's record.
  await r("DELETE", "/v1/accounts/carol", () => carol.delete("/v1/accounts/carol"));
  await r("GET", "/v1/accounts/carol/erasure", () => admin.get("/v1/accounts/carol/erasure"));
  await r("GET", "/v1/accounts/bob/erasure", () => bob.get("/v1/accounts/bob/erasure"));
  await r("DELETE", "/v1/accounts/bob", () => alice.delete("/v1/accounts/bob"));
  await r("GET", "/healthz", () => h.request("GET", "/healthz"));
  await r("GET", "/readyz", () => h.request("GET", "/readyz"));
  await r("GET", "/metrics", () => h.request("GET", "/metrics"));
  // Errors of every kind.
  await r("GET", "/v1/items/item-1/likes/me", () => h.request("GET", "/v1/items/item-1/likes/me"));
  await r("GET", "/v1/admin/status", () => alice.get("/v1/admin/status"));
  await r("PUT", "/v1/items/ghost/likes/me", () => alice.put("/v1/items/ghost/likes/me"));
  await r("PUT", "/v1/accounts/me/following/alice", () => alice.put("/v1/accounts/me/following/alice"));
  await r("POST", "/v1/posts", () => alice.post("/v1/posts", { visibility: "NOPE", body: "x" }));
  await r("GET", "/v1/items/item-1/like-count", () => alice.get("/v1/items/item-1/like-count?allowedLag=-1"));
  await r("GET", "/v1/accounts/ghost/followers", () => alice.get("/v1/accounts/ghost/followers"));
  await r("POST", "/v1/posts", () =>
    alice.post("/v1/posts", undefined, {
      raw: JSON.stringify({ visibility: "PUBLIC", body: "x".repeat(70_000) }),
      headers: { "content-type": "application/json" },
    }),
  );
  await r("PUT", "/v1/accounts/alice", () =>
    alice.put("/v1/accounts/alice", undefined, { raw: "private=true", headers: { "content-type": "text/plain" } }),
  );
  await r("GET", "/v1/items/item-1/like-count", () => oversizedHeaders(h.baseUrl, 40_000));
  t.diagnostic(`note statuses seen: ${[...new Set(recorded.map((a) => a.status))].sort().join(", ")}`);

  // A budget of two writes and a metrics token: 429 with Retry-After, and /metrics' 401.
  const limited = await startApi({ writesPerMinute: 2, app: { metricsToken: "scrape-secret" } });
  t.after(() => limited.close());
  const limitedAdmin = await limited.as("admin-1", { admin: true });
  for (let i = 0; i < 3; i++) await r("PUT", "/v1/items/item-2", () => limitedAdmin.put("/v1/items/item-2"));
  await r("GET", "/metrics", () => limited.request("GET", "/metrics"));
  await r("GET", "/metrics", () =>
    limited.request("GET", "/metrics", { headers: { authorization: "Bearer scrape-secret" } }),
  );
  // An erasure of more facts than one batch is accepted: 202 with Location.
  const eraser = await startApi({ erasureBatchSize: 1 });
  t.after(() => eraser.close());
  const dora = await eraser.as("dora");
  await eraser.as("admin-1", { admin: true }).then((a) => createAccounts(a, ["dora", "ed"]));
  ok(await (await eraser.as("ed")).put("/v1/accounts/me/following/dora"));
  ok(await dora.put("/v1/accounts/me/following/ed"));
  const accepted = await r("DELETE", "/v1/accounts/me", () => dora.delete("/v1/accounts/me"));
  assert.equal(accepted.status, 202, accepted.text);
  assert.equal(accepted.headers.get("location"), "/v1/accounts/dora/erasure");

  const problems = contractProblems(doc, recorded);
  t.diagnostic(
    `note ${recorded.length} answers checked against ${new Set(recorded.map((x) => `${x.method} ${templateOf(doc, x.method, x.path)}`)).size} operations`,
  );
  assert.deepEqual(problems, []);
  for (const status of [201, 400, 401, 403, 404, 409, 413, 415, 429, 431])
    assert.ok(
      recorded.some((a) => a.status === status),
      `the walk saw a ${status}`,
    );
  for (const header of OUR_HEADERS.filter((n) => !n.startsWith("x-ledger-")))
    assert.ok(
      recorded.some((a) => a.headers[header] !== undefined),
      `the walk saw ${header}`,
    );

  // Every operation of the document was walked, with a success.
  const walked = new Set(
    recorded.filter((a) => a.status < 300).map((a) => `${a.method} ${templateOf(doc, a.method, a.path)}`),
  );
  const operations = Object.entries(doc.paths).flatMap(([path, ops]) =>
    Object.keys(ops).map((m) => `${m.toUpperCase()} ${path}`),
  );
  assert.deepEqual(
    operations.filter((op) => !walked.has(op)),
    [],
  );

  // The check can fail: a count that is a string, an error body without its code, a status and a header the document does not declare.
  const countAnswer = recorded.find((a) => a.path === "/v1/items/item-1/like-count" && a.status === 200)!;
  const errorAnswer = recorded.find((a) => a.status === 404)!;
  const pageAnswer = recorded.find((a) => a.path === "/v1/items/item-1/likes" && a.headers.link !== undefined)!;
  const countless = { ...(countAnswer.body as Record<string, unknown>) };
  delete countless.count;
  const broken = [
    { ...countAnswer, body: { ...(countAnswer.body as object), count: "1" } },
    // A required field missing: the walk checks with the document's required lists.
    { ...countAnswer, body: countless },
    { ...errorAnswer, body: { error: { message: "no code" } } },
    { ...countAnswer, status: 418 },
    { ...countAnswer, headers: { ...countAnswer.headers, "retry-after": "1" } },
    { ...pageAnswer, headers: { ...pageAnswer.headers, "x-ratelimit-limit": "many" } },
  ];
  const caught = contractProblems(doc, broken);
  assert.equal(caught.length, broken.length, caught.join("\n"));
  const withoutLink = structuredClone(doc);
  delete withoutLink.paths["/v1/items/{id}/likes"]!.get!.responses!["200"]!.headers!.Link;
  assert.match(contractProblems(withoutLink, [pageAnswer]).join(), /header link not declared/);
});
