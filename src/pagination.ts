import { InvalidInputError } from "./errors.ts";
import { validateId } from "./ids.ts";

/**
 * Keyset cursors for lists ordered by (a timestamp, an id). The timestamp travels as text
 * with PostgreSQL's full microsecond precision: a millisecond JavaScript Date would round it
 * and make the next page skip rows that share the millisecond.
 */
export interface Keyset {
  at: string;
  id: string;
}

export const MAX_PAGE_SIZE = 200;

/** SQL that renders a timestamptz column in the cursor's form. `column` is always a literal name in our code. */
export function cursorTimeSql(column: string): string {
  return `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
}

const CURSOR_AT = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.\d{6}Z$/;

export function encodeCursor(key: Keyset): string {
  return Buffer.from(JSON.stringify([key.at, key.id])).toString("base64url");
}

export function decodeCursor(cursor: unknown): Keyset {
  if (typeof cursor === "string" && cursor.length <= 512) {
    try {
      const value = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8")) as unknown;
      if (Array.isArray(value) && value.length === 2 && typeof value[0] === "string" && typeof value[1] === "string") {
        const m = CURSOR_AT.exec(value[0]);
        // Reject impossible dates (month 13, Feb 30, year 0) that PostgreSQL would refuse with 22008.
        if (
          m &&
          Number(m[1]) >= 1 &&
          new Date(`${value[0].slice(0, 23)}Z`).toISOString().slice(0, 19) === value[0].slice(0, 19)
        ) {
          return { at: value[0], id: validateId("cursor", value[1]) };
        }
      }
    } catch {
      // not base64url JSON: the typed error below says so
    }
  }
  throw new InvalidInputError("cursor", "is not a cursor this service issued");
}

/** The options of a list read: the page, and who reads it (null or absent: nobody, a request without a token). */
export interface ListOptions {
  limit?: number;
  cursor?: string;
  viewer?: string | null;
}

export function validateViewer(viewer: string | null | undefined): string | null {
  return viewer === undefined || viewer === null ? null : validateId("viewer", viewer);
}

export function validateLimit(limit: unknown, fallback = 50): number {
  if (limit === undefined) return fallback;
  if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 1 || limit > MAX_PAGE_SIZE) {
    throw new InvalidInputError("limit", `must be an integer in 1..${MAX_PAGE_SIZE}, got ${String(limit)}`);
  }
  return limit;
}

/**
 * One page out of a query that fetched `limit + 1` rows: the first `limit`, and a cursor after
 * the last of them when there was one more row (absent on the last page).
 */
export function keysetPage<R>(rows: R[], limit: number, keyOf: (row: R) => Keyset): { page: R[]; nextCursor?: string } {
  const page = rows.slice(0, limit);
  const last = page[page.length - 1];
  return rows.length > limit && last ? { page, nextCursor: encodeCursor(keyOf(last)) } : { page };
}
