import type { Pool } from "../db/pool.ts";
import { InvalidInputError } from "../errors.ts";
import { validateId, validateNonNegativeInteger } from "../ids.ts";
import { stablePartition } from "../partition.ts";
import { readPartitions } from "../db/ledger-config.ts";

export interface FollowerPage {
  followers: { accountId: string; since: Date }[];
  /** Opaque; absent on the last page. */
  nextCursor?: string;
}

export interface FollowerCount {
  count: number;
  /** Unprojected events of the account's partition: the projection may be this many events behind. */
  lag: number;
  stale: boolean;
}

export const MAX_PAGE_SIZE = 200;

function encodeCursor(since: Date, follower: string): string {
  return Buffer.from(JSON.stringify([since.toISOString(), follower])).toString("base64url");
}

/**
 * The only form encodeCursor writes: Date#toISOString of a year 0001..9999. Date.parse accepts
 * far more ("1", "2020", "+275760-..."), which PostgreSQL then refuses with 22007/22008/22009.
 */
const CURSOR_SINCE = /^(?!0000)\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

function decodeCursor(cursor: string): [string, string] {
  try {
    const value = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8")) as unknown;
    if (
      Array.isArray(value) && value.length === 2 && typeof value[0] === "string" && typeof value[1] === "string" &&
      CURSOR_SINCE.test(value[0]) && new Date(value[0]).toISOString() === value[0] // throws on an impossible date
    ) {
      return [value[0], validateId("cursor", value[1])];
    }
  } catch {
    // fall through to the typed error below
  }
  throw new InvalidInputError("cursor", "is not a cursor this service issued");
}

/**
 * Followers from the projection, newest first, keyset-paginated on (since, follower): a row
 * that stays ACTIVE is returned exactly once however the list changes between pages.
 */
export async function listFollowers(pool: Pool, accountId: string, options: { limit?: number; cursor?: string } = {}): Promise<FollowerPage> {
  validateId("accountId", accountId);
  const limit = options.limit ?? 50;
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_PAGE_SIZE) throw new InvalidInputError("limit", `must be an integer in 1..${MAX_PAGE_SIZE}`);
  const after = options.cursor === undefined ? null : decodeCursor(options.cursor);
  const { rows } = await pool.query<{ follower: string; since: Date }>(
    `SELECT follower, since FROM proj_follower
      WHERE followee = $1 AND state = 'ACTIVE'
        AND ($2::timestamptz IS NULL OR (since, follower) < ($2::timestamptz, $3::text))
      ORDER BY since DESC, follower DESC
      LIMIT $4`,
    [accountId, after?.[0] ?? null, after?.[1] ?? null, limit + 1],
  );
  const page = rows.slice(0, limit);
  const last = page[page.length - 1];
  return {
    followers: page.map((r) => ({ accountId: r.follower, since: r.since })),
    ...(rows.length > limit && last ? { nextCursor: encodeCursor(last.since, last.follower) } : {}),
  };
}

export async function followerCount(pool: Pool, accountId: string, allowedLag: number): Promise<FollowerCount> {
  validateId("accountId", accountId);
  validateNonNegativeInteger("allowedLag", allowedLag);
  const part = stablePartition(accountId, await readPartitions(pool));
  const { rows } = await pool.query<{ n: number; lag: number }>(
    `SELECT coalesce((SELECT n FROM proj_count WHERE followee = $1), 0)::bigint AS n,
            (SELECT s.last - w.applied_upto FROM event_seq s JOIN proj_watermark w USING (part) WHERE part = $2)::bigint AS lag`,
    [accountId, part],
  );
  const { n, lag } = rows[0]!;
  return { count: n, lag, stale: lag > allowedLag };
}
