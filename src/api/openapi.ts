/**
 * Finishes the OpenAPI document the route schemas generate, so a client can generate code from
 * it: an operationId for every operation, a description for every response (the generator's
 * "Default Response" otherwise), and for every error status the error codes it can carry with
 * an example body. Applied once, in @fastify/swagger's transformObject.
 */

interface Operation {
  operationId?: string;
  summary?: string;
  requestBody?: { required?: boolean };
  responses?: Record<string, { description?: string; content?: Record<string, { schema?: unknown; example?: unknown }> }>;
}

type Paths = Record<string, Record<string, Operation>>;

/** The error codes an error status can carry, with what they mean: the `code` of `{error: {code, message}}`. */
export const ERROR_CODES_BY_STATUS: Record<number, Record<string, string>> = {
  400: { INVALID_INPUT: "a parameter, query or body field is malformed (the message names it); nothing was written" },
  401: {
    UNAUTHENTICATED: "no, an expired or an invalid bearer token",
    TOKEN_LIFETIME_TOO_LONG: "the token is valid for longer than LEDGER_JWT_MAX_TTL_SECONDS allows",
  },
  403: {
    FORBIDDEN: "the token may not do this (admin only, or acting for someone else)",
    COLLECTIONS_HIDDEN: "the account hides its followers and following",
  },
  404: {
    ITEM_NOT_FOUND: "no such item, or one the caller may not see (the two are indistinguishable on purpose)",
    POST_NOT_FOUND: "no such post, or one the caller may not see",
    ACCOUNT_NOT_FOUND: "no such account, or one in a block with the caller",
    NOT_FOUND: "no such route",
  },
  409: {
    SELF_FOLLOW: "following (or deciding a request of) yourself",
    SELF_BLOCK: "blocking yourself",
    BLOCKED: "a block between the two accounts forbids this",
    NOT_PENDING: "there is no request to decide, and the relation is not already in the target state",
    REBUILD_IN_PROGRESS: "another rebuild is running",
  },
  413: { PAYLOAD_TOO_LARGE: "the body is over 64 KiB" },
  415: { UNSUPPORTED_MEDIA_TYPE: "bodies are application/json only" },
  429: { RATE_LIMITED: "over the caller's budget; Retry-After says when to come back" },
  503: {
    DATABASE_UNAVAILABLE: "the database is down, restarting or recovering; retry after Retry-After seconds (a write answered so may or may not have committed; repeating a target-state write is safe)",
    SHUTTING_DOWN: "the server is stopping; retry on another connection",
    NOT_READY: "migrations are behind (readiness only)",
  },
};

/** GET /v1/accounts/{id}/followers -> getAccountsByIdFollowers: method, then each path segment, {x} as ByX. */
export function operationIdOf(method: string, path: string): string {
  const words = path.split("/").filter((s) => s !== "" && s !== "v1").map((segment) => {
    const param = /^\{(.+)\}$/.exec(segment);
    const word = param ? `by-${param[1]}` : segment;
    return word.split(/[-_.]/).filter(Boolean).map((w) => w[0]!.toUpperCase() + w.slice(1)).join("");
  });
  return method.toLowerCase() + (words.join("") || "Root");
}

interface SchemaNode {
  $ref?: string;
  type?: string | string[];
  enum?: unknown[];
  format?: string;
  default?: unknown;
  minimum?: number;
  properties?: Record<string, SchemaNode>;
  items?: SchemaNode;
  oneOf?: SchemaNode[];
  anyOf?: SchemaNode[];
}

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
      return Object.fromEntries(Object.entries(node.properties ?? {}).map(([k, v]) => [k, exampleOf(v, schemas, depth + 1)]));
    case "array":
      return node.items ? [exampleOf(node.items, schemas, depth + 1)] : [];
    case "integer":
    case "number":
      return node.minimum ?? 0;
    case "boolean":
      return false;
    case "string":
      return node.format === "date-time" ? "2026-01-01T00:00:00.000Z" : "string";
    default:
      return node.properties ? exampleOf({ ...node, type: "object" }, schemas, depth + 1) : null;
  }
}

export function finishOpenApi(paths: Paths, schemas: Record<string, unknown> = {}): void {
  for (const [path, operations] of Object.entries(paths)) {
    for (const [method, op] of Object.entries(operations)) {
      op.operationId ??= operationIdOf(method, path);
      for (const [status, response] of Object.entries(op.responses ?? {})) {
        const codes = ERROR_CODES_BY_STATUS[Number(status)];
        if (codes) {
          const list = Object.entries(codes).map(([code, meaning]) => `\`${code}\`: ${meaning}`).join("; ");
          if (!response.description || response.description === "Default Response") response.description = `Error. \`error.code\` is one of: ${list}.`;
          const [firstCode, firstMeaning] = Object.entries(codes)[0]!;
          const json = response.content?.["application/json"];
          if (json && json.example === undefined) json.example = { error: { code: firstCode, message: firstMeaning } };
        } else {
          if (!response.description || response.description === "Default Response") response.description = op.summary ?? "Success";
          const json = response.content?.["application/json"];
          if (json && json.example === undefined && json.schema) json.example = exampleOf(json.schema, schemas);
        }
      }
    }
  }
}
