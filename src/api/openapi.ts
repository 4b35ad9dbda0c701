/**
 * Finishes the OpenAPI document the route schemas generate, so a client can generate code from
 * it: an operationId for every operation, a description for every response (the generator's
 * "Default Response" otherwise), for every error status the error codes it can carry with an
 * example body, the statuses every route can answer before its handler (413, 415, 431), the
 * response headers the service sends, and `security: []` where no token is read. Applied once,
 * in @fastify/swagger's transformObject.
 */
import { FRESHNESS_TOKEN_PATTERN } from "./schemas.ts";
import { ID_PATTERN } from "../ids.ts";

interface Response {
  description?: string;
  headers?: Record<string, { $ref: string }>;
  content?: Record<string, { schema?: unknown; example?: unknown }>;
}

interface Operation {
  operationId?: string;
  summary?: string;
  security?: unknown[];
  parameters?: { name: string; in: string }[];
  requestBody?: { required?: boolean };
  responses?: Record<string, Response>;
}

type Paths = Record<string, Record<string, Operation>>;

export interface OpenApiDocument {
  paths?: Paths;
  components?: { schemas?: Record<string, unknown>; headers?: Record<string, unknown> };
}

/** The error codes an error status can carry, with what they mean: the `code` of `{error: {code, message}}`. */
export const ERROR_CODES_BY_STATUS: Record<number, Record<string, string>> = {
  400: {
    INVALID_INPUT: "a parameter, query or body field is malformed (the message names it); nothing was written",
    WEBHOOK_URL_REFUSED:
      "the webhook URL is not http(s), or resolves to an address the SSRF policy refuses (loopback, private, link-local, ...)",
    UNKNOWN_EVENT_TYPE: "a webhook event type that no outbox produces",
  },
  401: {
    UNAUTHENTICATED: "no, an expired or an invalid bearer token",
    TOKEN_LIFETIME_TOO_LONG: "the token is valid for longer than LEDGER_JWT_MAX_TTL_MS allows",
    TOKEN_KEY_UNAVAILABLE:
      "with an identity provider (LEDGER_JWKS_URL): its keys could not be fetched and the token's key is not cached; retry later",
    TOKEN_UNKNOWN_KID: "with an identity provider: it publishes no key with the token's kid",
    TOKEN_ALG_NOT_ALLOWED:
      "with an identity provider: the token's alg is not RS256, ES256 or EdDSA (HS256 and none are refused)",
    TOKEN_ALG_MISMATCH: "with an identity provider: the token's alg does not fit the type of the key its kid names",
    TOKEN_SIGNATURE_INVALID: "with an identity provider: the signature does not verify with the key its kid names",
    TOKEN_ISSUER_MISMATCH: "with an identity provider: the token's iss is not LEDGER_JWT_ISSUER",
    TOKEN_AUDIENCE_MISMATCH: "with an identity provider: the token's aud holds none of LEDGER_JWT_AUDIENCE",
    TOKEN_EXPIRED: "with an identity provider: the token has expired",
    TOKEN_NOT_YET_VALID: "with an identity provider: the token's nbf is in the future",
    TOKEN_USER_CLAIM_INVALID:
      "with an identity provider: the user claim (LEDGER_JWT_USER_CLAIM) is missing or no valid user id",
    TOKEN_TYPE_NOT_ALLOWED:
      "with an identity provider: the token's header typ is not one of LEDGER_JWT_TYPES (default at+jwt, RFC 9068 access tokens)",
    TOKEN_IS_ID_TOKEN:
      "with an identity provider: a token typed JWT (or untyped) carries claims of an OIDC ID token (nonce, at_hash, c_hash)",
  },
  403: {
    FORBIDDEN: "the token may not do this (admin only, or acting for someone else)",
    COLLECTIONS_HIDDEN: "the account hides its followers and following",
  },
  404: {
    ITEM_NOT_FOUND: "no such item, or one the caller may not see (the two are indistinguishable on purpose)",
    POST_NOT_FOUND: "no such post, or one the caller may not see",
    ACCOUNT_NOT_FOUND: "no such account, or one in a block with the caller",
    ERASURE_NOT_FOUND: "no erasure of this account was started",
    NOT_FOUND: "no such route",
    WEBHOOK_NOT_FOUND: "no webhook endpoint with this id",
  },
  409: {
    SELF_FOLLOW: "following (or deciding a request of) yourself",
    SELF_BLOCK: "blocking yourself",
    BLOCKED: "a block between the two accounts forbids this",
    NOT_PENDING: "there is no request to decide, and the relation is not already in the target state",
    REBUILD_IN_PROGRESS: "another rebuild is running",
    REPLAY_BELOW_RETENTION:
      "the replay position's events are already pruned (the message names the oldest position left)",
    REPLAY_BEYOND_END: "the replay position is past the partition's last event",
    ACCOUNT_BEING_ERASED:
      "the account (or the author of the content) is being erased: writes by or towards it are refused until the erasure completes",
  },
  410: {
    ACCOUNT_ERASED:
      "the acting account was erased: an erased id is a tombstone and can never act again (docs/erasure.md); nothing was written",
  },
  413: { PAYLOAD_TOO_LARGE: "the body is over 64 KiB" },
  415: { UNSUPPORTED_MEDIA_TYPE: "bodies are application/json only" },
  431: { HEADERS_TOO_LARGE: "the request headers are too large (answered before any route, without X-Request-Id)" },
  429: { RATE_LIMITED: "over the caller's budget; Retry-After says when to come back" },
  503: {
    DATABASE_UNAVAILABLE:
      "the database is down, restarting, recovering or unreachable (no answer within LEDGER_PG_QUERY_TIMEOUT_MS); retry after Retry-After seconds (a write answered so may or may not have committed; repeating a target-state write is safe)",
    DATABASE_DISK_FULL:
      "the database's disk is full (SQLSTATE 53100): nothing was written; reads go on; retry after Retry-After seconds",
    SHUTTING_DOWN: "the server is stopping; retry on another connection",
    NOT_READY: "migrations are behind (readiness only)",
    NOT_LIVE: "the embedded PostgreSQL could not be restarted and the process is exiting (liveness only)",
  },
};

/** GET /v1/accounts/{id}/followers -> getAccountsByIdFollowers: method, then each path segment, {x} as ByX. */
export function operationIdOf(method: string, path: string): string {
  const words = path
    .split("/")
    .filter((s) => s !== "" && s !== "v1")
    .map((segment) => {
      const param = /^\{(.+)\}$/.exec(segment);
      const word = param ? `by-${param[1]}` : segment;
      return word
        .split(/[-_.]/)
        .filter(Boolean)
        .map((w) => w[0]!.toUpperCase() + w.slice(1))
        .join("");
    });
  return method.toLowerCase() + (words.join("") || "Root");
}

interface SchemaNode {
  $ref?: string;
  type?: string | string[];
  enum?: unknown[];
  format?: string;
  pattern?: string;
  default?: unknown;
  minimum?: number;
  properties?: Record<string, SchemaNode>;
  items?: SchemaNode;
  oneOf?: SchemaNode[];
  anyOf?: SchemaNode[];
}

/** Examples of the string patterns the schemas use, so an example validates against its own schema. */
const EXAMPLE_BY_PATTERN: Record<string, string> = {
  [FRESHNESS_TOKEN_PATTERN]: "1/0/16B3748",
  [ID_PATTERN.source]: "alice",
};

/** A value of the schema's shape (enum's first value, a default, a date for date-time), so a client sees what an answer looks like. */
export function exampleOf(schema: unknown, schemas: Record<string, unknown>, depth = 0): unknown {
  const node = schema as SchemaNode;
  if (depth > 8) return null;
  if (node.$ref) return exampleOf(schemas[node.$ref.split("/").at(-1)!], schemas, depth + 1);
  if (node.enum) return node.enum[0];
  if (node.default !== undefined) return node.default;
  const variant = node.oneOf?.[0] ?? node.anyOf?.[0];
  if (variant) return exampleOf(variant, schemas, depth + 1);
  const type = Array.isArray(node.type) ? node.type.find((t) => t !== "null") : node.type;
  switch (type) {
    case "object":
      return Object.fromEntries(
        Object.entries(node.properties ?? {}).map(([k, v]) => [k, exampleOf(v, schemas, depth + 1)]),
      );
    case "array":
      return node.items ? [exampleOf(node.items, schemas, depth + 1)] : [];
    case "integer":
    case "number":
      return node.minimum ?? 0;
    case "boolean":
      return false;
    case "string":
      if (node.pattern !== undefined) {
        const example = EXAMPLE_BY_PATTERN[node.pattern];
        if (example === undefined)
          throw new Error(`no example for the pattern ${node.pattern} (openapi.ts EXAMPLE_BY_PATTERN)`);
        return example;
      }
      return node.format === "date-time" ? "2026-01-01T00:00:00.000Z" : "string";
    default:
      return node.properties ? exampleOf({ ...node, type: "object" }, schemas, depth + 1) : null;
  }
}

/** The response headers the service sends, declared once and referenced by the responses that carry them. */
export const RESPONSE_HEADERS = {
  "X-Request-Id": {
    description:
      "the request's id (also in the logs); absent on answers given before any route (400 unparsable, 408, 431)",
    schema: { type: "string" },
  },
  "X-RateLimit-Limit": {
    description: "the caller's budget per minute (reads and writes have one each)",
    schema: { type: "integer" },
  },
  "X-RateLimit-Remaining": { description: "requests left in the current minute", schema: { type: "integer" } },
  "X-RateLimit-Reset": { description: "seconds until the budget is renewed", schema: { type: "integer" } },
  "Retry-After": { description: "seconds to wait before retrying", schema: { type: "integer" } },
  Link: {
    description: 'RFC 8288 `<...>; rel="next"`: the next page, when there is one (its cursor is also nextCursor)',
    schema: { type: "string" },
  },
  "x-ledger-freshness": {
    description:
      "with read replicas: the freshness token of a write (its `freshness` field); present it on a later read",
    schema: { type: "string", pattern: FRESHNESS_TOKEN_PATTERN },
  },
  "x-ledger-freshness-status": {
    description:
      "with read replicas, on a routed read whose token could not be honoured as asked: `lost` (the token's write was lost in a database failover: the answer is the primary's, which does not hold it) or `unverifiable` (the token is of an earlier timeline whose switch point the service may not read: the answer is the primary's)",
    schema: { type: "string", enum: ["lost", "unverifiable"] },
  },
  "x-ledger-read-from": {
    description: "with read replicas: the server that answered a routed read, `primary` or a replica's name",
    schema: { type: "string" },
  },
  Location: {
    description: "an accepted erasure: where to watch its progress (GET /v1/accounts/{id}/erasure)",
    schema: { type: "string" },
  },
  "WWW-Authenticate": {
    description: "the scheme /metrics expects (with LEDGER_METRICS_TOKEN)",
    schema: { type: "string" },
  },
} as const;

type HeaderName = keyof typeof RESPONSE_HEADERS;

const WRITE_METHODS = new Set(["put", "post", "patch", "delete"]);
const refTo = (name: string) => ({ $ref: `#/components/schemas/${name}` });

/** The headers an answer of this operation and status may carry (none is promised: each depends on configuration or state). */
function headersOf(
  path: string,
  method: string,
  op: Operation,
  status: number,
  schemas: Record<string, unknown>,
): HeaderName[] {
  const headers: HeaderName[] = [];
  if (status !== 431) headers.push("X-Request-Id");
  const rateLimited = op.responses?.["429"] !== undefined;
  if (rateLimited && status !== 431) headers.push("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset");
  if (status === 429 || status === 503 || status === 206) headers.push("Retry-After");
  const routedRead = op.parameters?.some((p) => p.in === "query" && p.name === "freshness") === true;
  if (routedRead) headers.push("x-ledger-read-from");
  if (routedRead && status >= 200 && status < 300) headers.push("x-ledger-freshness-status");
  if (status >= 200 && status < 300) {
    if (WRITE_METHODS.has(method)) headers.push("x-ledger-freshness");
    const schema = op.responses?.[String(status)]?.content?.["application/json"]?.schema as
      { $ref?: string } | undefined;
    const named = schema?.$ref
      ? (schemas[schema.$ref.split("/").at(-1)!] as { properties?: Record<string, unknown> } | undefined)
      : undefined;
    if (named?.properties?.nextCursor) headers.push("Link");
  }
  if (path === "/metrics" && status === 401) headers.push("WWW-Authenticate");
  if (status === 202) headers.push("Location");
  return headers;
}

export function finishOpenApi(doc: OpenApiDocument): void {
  const paths = doc.paths ?? {};
  doc.components ??= {};
  const schemas = doc.components.schemas ?? {};
  doc.components.headers = { ...RESPONSE_HEADERS };
  for (const [path, operations] of Object.entries(paths)) {
    for (const [method, op] of Object.entries(operations)) {
      op.operationId ??= operationIdOf(method, path);
      // A route that reads no token says so (Redocly's security-defined): health checks, and /metrics without LEDGER_METRICS_TOKEN.
      op.security ??= [];
      op.responses ??= {};
      // Answered before any route's handler: headers too large on every route; bodies too large or not JSON where a body can be sent.
      const early = WRITE_METHODS.has(method) ? [413, 415, 431] : [431];
      for (const status of early)
        op.responses[String(status)] ??= { content: { "application/json": { schema: refTo("LedgerError") } } };
      for (const [status, response] of Object.entries(op.responses)) {
        const headers = headersOf(path, method, op, Number(status), schemas);
        if (headers.length > 0)
          response.headers = Object.fromEntries(headers.map((h) => [h, { $ref: `#/components/headers/${h}` }]));
        const codes = ERROR_CODES_BY_STATUS[Number(status)];
        if (codes) {
          const list = Object.entries(codes)
            .map(([code, meaning]) => `\`${code}\`: ${meaning}`)
            .join("; ");
          if (!response.description || response.description === "Default Response")
            response.description = `Error. \`error.code\` is one of: ${list}.`;
          const [firstCode, firstMeaning] = Object.entries(codes)[0]!;
          const json = response.content?.["application/json"];
          // The schema's other required fields too (/healthz's 503 carries `database`).
          const rest = json?.schema ? (exampleOf(json.schema, schemas) as Record<string, unknown>) : {};
          if (json && json.example === undefined)
            json.example = { ...rest, error: { code: firstCode, message: firstMeaning } };
        } else {
          if (!response.description || response.description === "Default Response")
            response.description = op.summary ?? "Success";
          const json = response.content?.["application/json"];
          if (json && json.example === undefined && json.schema) json.example = exampleOf(json.schema, schemas);
        }
      }
    }
  }
}
