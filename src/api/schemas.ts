import { ID_PATTERN, MAX_ID_LENGTH } from "../ids.ts";
import { MAX_PAGE_SIZE } from "../pagination.ts";
import { MAX_BODY_LENGTH } from "../relations/posts.ts";

/** JSON schemas of the API: validated at the edge, and the source of the OpenAPI document. */

export const id = { type: "string", minLength: 1, maxLength: MAX_ID_LENGTH, pattern: ID_PATTERN.source } as const;

export const idParams = {
  type: "object", required: ["id"], additionalProperties: false, properties: { id },
} as const;

export const errorSchema = {
  type: "object",
  required: ["error"],
  properties: {
    error: {
      type: "object", required: ["code", "message"],
      properties: { code: { type: "string" }, message: { type: "string" } },
    },
  },
} as const;

const errorRef = { $ref: "LedgerError#" } as const;

/**
 * Error responses a route can give, by status code. Every route that reads or writes the
 * database can also answer 503 DATABASE_UNAVAILABLE (with Retry-After) while it is down.
 */
export function errors(...statuses: number[]): Record<number, typeof errorRef> {
  return Object.fromEntries([...new Set([...statuses, 503])].map((s) => [s, errorRef]));
}

export const pageQuery = {
  type: "object", additionalProperties: false,
  properties: {
    limit: { type: "integer", minimum: 1, maximum: MAX_PAGE_SIZE, default: 50 },
    cursor: { type: "string", minLength: 1, maxLength: 512 },
  },
} as const;

export const lagQuery = {
  type: "object", additionalProperties: false,
  properties: { allowedLag: { type: "integer", minimum: 0, default: 16 } },
} as const;

/** A count read: the lag it may have, and `exact` to insist on the database read with its error bound. */
export const countQuery = {
  type: "object", additionalProperties: false,
  properties: { allowedLag: { type: "integer", minimum: 0, default: 16 }, exact: { type: "boolean", default: false } },
} as const;

/** Where a count came from (docs/cache.md): Redis with the age of its last reconciliation, or the database. */
export const countSource = {
  source: { type: "string", enum: ["cache", "database"] },
  reconciledAgeMs: { type: "integer" },
} as const;

export const likeOutcome = {
  type: "object", required: ["outcome", "liked", "version", "seq"],
  properties: {
    outcome: { type: "string", enum: ["CHANGED", "NOOP"] },
    liked: { type: "boolean" }, version: { type: "integer" }, seq: { type: "integer" },
  },
} as const;

export const relationOutcome = {
  type: "object", required: ["outcome", "state", "version", "seq"],
  properties: {
    outcome: { type: "string", enum: ["CHANGED", "NOOP"] },
    state: { type: "string", enum: ["ACTIVE", "PENDING", "REMOVED"] },
    version: { type: "integer" }, seq: { type: "integer" }, reason: { type: "string" },
  },
} as const;

export const postBody = {
  type: "object", required: ["visibility", "body"], additionalProperties: false,
  properties: {
    visibility: { type: "string", enum: ["PUBLIC", "FOLLOWERS", "SELF"] },
    body: { type: "string", maxLength: MAX_BODY_LENGTH },
  },
} as const;

export const post = {
  type: "object", required: ["id", "author", "visibility", "body", "aclToken", "createdAt"],
  properties: {
    id: { type: "string" }, author: { type: "string" }, visibility: { type: "string" }, body: { type: "string" },
    aclToken: { type: "integer" }, createdAt: { type: "string", format: "date-time" },
  },
} as const;

export const bearer = [{ bearer: [] }];
