import { ID_PATTERN, MAX_ID_LENGTH } from "../ids.ts";
import { MAX_PAGE_SIZE } from "../pagination.ts";
import { MAX_BODY_LENGTH } from "../content/posts.ts";

/** JSON schemas of the API: validated at the edge, and the source of the OpenAPI document. */

const NAMED = new Map<string, object>();

/**
 * A schema with a name: app.ts adds it to fastify (addSchema, for serialization), to the body
 * validators and, under that name, to the OpenAPI document's components. Returns the reference
 * a route schema uses in its place. Names are unique; a second schema under a name is a bug.
 */
export function named<N extends string>(name: N, schema: object): { readonly $ref: `${N}#` } {
  if (NAMED.has(name)) throw new Error(`schema ${name} is named twice`);
  NAMED.set(name, { $id: name, title: name, ...schema });
  return { $ref: `${name}#` } as const;
}

/** Every named schema, with its $id. */
export function namedSchemas(): object[] {
  return [...NAMED.values()];
}

/**
 * The pattern of a freshness token: the timeline and the WAL position of a write, 2/0/16B3748, or
 * (the older form, still accepted) the position alone, 0/16B3748 (docs/read-replicas.md).
 */
export const FRESHNESS_TOKEN_PATTERN = "^([1-9][0-9]{0,9}/)?[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$";

/** What a write's success answers carry with read replicas (src/api/read-routing.ts adds it). */
export const freshnessField = {
  freshness: {
    type: "string",
    pattern: FRESHNESS_TOKEN_PATTERN,
    description:
      "only in a write's answer, with read replicas: the primary's timeline and WAL position after this write committed, `<timeline>/<position>` (also the x-ledger-freshness header); present it on a later read to see at least this state",
  },
} as const;

/** A named schema of a write's success answer: it names the `freshness` field the answer may carry. */
export function namedWriteAnswer<N extends string>(
  name: N,
  schema: { type: string; properties: Record<string, unknown> } & Record<string, unknown>,
) {
  return named(name, { ...schema, properties: { ...schema.properties, ...freshnessField } });
}

export const id = { type: "string", minLength: 1, maxLength: MAX_ID_LENGTH, pattern: ID_PATTERN.source } as const;

export const idParams = {
  type: "object",
  required: ["id"],
  additionalProperties: false,
  properties: { id },
} as const;

export const errorSchema = {
  type: "object",
  required: ["error"],
  properties: {
    error: {
      type: "object",
      required: ["code", "message"],
      properties: { code: { type: "string" }, message: { type: "string" } },
    },
  },
} as const;

const errorRef = named("LedgerError", errorSchema);

/**
 * Error responses a route can give, by status code. Every route that reads or writes the
 * database can also answer 503 DATABASE_UNAVAILABLE (with Retry-After) while it is down.
 */
export function errors(...statuses: number[]): Record<number, typeof errorRef> {
  return Object.fromEntries([...new Set([...statuses, 503])].map((s) => [s, errorRef]));
}

/**
 * Query strings: unknown parameters (cache busters) are dropped, not refused
 * (`additionalProperties: false` with the query validator's removeAdditional, app.ts).
 */
export const pageQuery = {
  type: "object",
  additionalProperties: false,
  properties: {
    limit: {
      type: "integer",
      minimum: 1,
      default: 50,
      description: `page size; above ${MAX_PAGE_SIZE} it is clamped to ${MAX_PAGE_SIZE}`,
    },
    cursor: {
      type: "string",
      minLength: 1,
      maxLength: 512,
      description: 'nextCursor of the previous page (also in its Link rel="next" header)',
    },
  },
} as const;

/** A named page of `key` rows (a named row schema): the rows, and nextCursor unless it is the last page (also in Link rel=next). */
export function pageOf<N extends string>(name: N, key: string, row: { $ref: string }) {
  return named(name, {
    type: "object",
    required: [key],
    properties: {
      [key]: { type: "array", items: row },
      nextCursor: { type: "string", description: "the cursor of the next page; absent on the last page" },
    },
  });
}

export const accountRow = (timeField: string) =>
  ({
    type: "object",
    required: ["accountId", timeField],
    properties: { accountId: { type: "string" }, [timeField]: { type: "string", format: "date-time" } },
  }) as const;
/** An account in a list (followers, following, blocks) with when the relation began. */
export const accountSince = named("AccountSince", accountRow("since"));

export const lagQuery = {
  type: "object",
  additionalProperties: false,
  properties: {
    allowedLag: {
      type: "integer",
      minimum: 0,
      default: 16,
      description:
        "how many unprocessed events (of the count's partitions) the caller accepts; a larger lag answers stale: true, never an error",
    },
  },
} as const;

/** What the fields of a derived count mean, for the OpenAPI document. */
export const countFields = {
  lag: {
    type: "integer",
    description:
      "events written but not yet applied by the consumer, over the partitions the count reads (present when source is database)",
  },
  stale: {
    type: "boolean",
    description:
      "lag > allowedLag: the count may be behind by more than the caller accepted (present when source is database)",
  },
  pendingForItem: {
    type: "integer",
    description:
      "unapplied events of this item: the exact error bound, |count - truth| <= pendingForItem (present when source is database)",
  },
} as const;

export const relationshipProperties = {
  following: { type: "boolean", description: "I follow them" },
  requested: { type: "boolean", description: "I asked to follow them; they have not decided" },
  followedBy: { type: "boolean", description: "they follow me" },
  requestedBy: { type: "boolean", description: "they asked to follow me; approve or reject it" },
  blocking: { type: "boolean", description: "I block them (no route says whether they block me: docs/api.md)" },
} as const;

export const relationship = {
  type: "object",
  required: Object.keys(relationshipProperties),
  properties: relationshipProperties,
} as const;
export const relationshipRef = named("Relationship", relationship);

/** A count read: the lag it may have, and `exact` to insist on the database read with its error bound. */
export const countQuery = {
  type: "object",
  additionalProperties: false,
  properties: {
    allowedLag: lagQuery.properties.allowedLag,
    exact: {
      type: "boolean",
      default: false,
      description:
        "true: read from the database with the exact error bound (lag, pendingForItem), never from the Redis count layer",
    },
  },
} as const;

/** Where a count came from (docs/cache.md): Redis with the age of its last reconciliation, or the database. */
export const countSource = {
  source: {
    type: "string",
    enum: ["cache", "database"],
    description: "cache: the Redis count layer (REDIS_URL), database: PostgreSQL with lag and stale",
  },
  reconciledAgeMs: {
    type: "integer",
    description: "present when source is cache: milliseconds since this counter was last reconciled with the facts",
  },
  degraded: {
    type: "boolean",
    enum: [true],
    description:
      "present (true) when the Redis count layer was asked and did not answer (down, hung, still connecting): this answer is the database's",
  },
} as const;

export const likeOutcome = namedWriteAnswer("LikeOutcome", {
  type: "object",
  required: ["outcome", "liked", "version", "seq"],
  properties: {
    outcome: { type: "string", enum: ["CHANGED", "NOOP"] },
    liked: { type: "boolean" },
    version: { type: "integer" },
    seq: { type: "integer" },
  },
});

export const relationOutcome = namedWriteAnswer("RelationOutcome", {
  type: "object",
  required: ["outcome", "state", "version", "seq", "relationship"],
  properties: {
    outcome: { type: "string", enum: ["CHANGED", "NOOP"] },
    state: { type: "string", enum: ["ACTIVE", "PENDING", "REMOVED"] },
    version: { type: "integer" },
    seq: { type: "integer" },
    reason: { type: "string" },
    relationship: relationshipRef,
  },
  description: "the write's outcome; relationship: my relationship to the account after the write, from the truth",
});

export const postBody = named("PostDraft", {
  type: "object",
  required: ["visibility", "body"],
  additionalProperties: false,
  properties: {
    visibility: { type: "string", enum: ["PUBLIC", "FOLLOWERS", "SELF"] },
    body: { type: "string", minLength: 1, maxLength: MAX_BODY_LENGTH },
  },
});

export const post = namedWriteAnswer("Post", {
  type: "object",
  required: ["id", "author", "visibility", "body", "aclToken", "createdAt"],
  properties: {
    id: { type: "string" },
    author: { type: "string" },
    visibility: { type: "string" },
    body: { type: "string" },
    aclToken: { type: "integer" },
    createdAt: { type: "string", format: "date-time" },
  },
});

export const bearer = [{ bearer: [] }];
/** A route that also answers without a token (public data): the bearer scheme, or none. */
export const optionalBearer: { [scheme: string]: string[] }[] = [{ bearer: [] }, {}];
