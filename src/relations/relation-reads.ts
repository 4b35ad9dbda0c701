import type { Pool } from "../db/pool.ts";
import { PartitionConfigError } from "../errors.ts";
import { cursorTimeSql, decodeCursor, encodeCursor, validateLimit } from "../pagination.ts";
import { validateId, validateNonNegativeInteger } from "../ids.ts";

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

/**
 * Followers from the projection, newest first, keyset-paginated on (since, follower): a row
 * that stays ACTIVE is returned exactly once however the list changes between pages.
 */
export async function listFollowers(pool: Pool, accountId: string, options: { limit?: number; cursor?: string } = {}): Promise<FollowerPage> {
  validateId("accountId", accountId);
  const limit = validateLimit(options.limit);
  const after = options.cursor === undefined ? null : decodeCursor(options.cursor);
  const { rows } = await pool.query<{ follower: string; since: Date; at: string }>(
    `SELECT follower, since, ${cursorTimeSql("since")} AS at FROM proj_follower
      WHERE followee = $1 AND state = 'ACTIVE'
        AND ($2::timestamptz IS NULL OR (since, follower) < ($2::timestamptz, $3::text))
      ORDER BY since DESC, follower DESC
      LIMIT $4`,
    [accountId, after?.at ?? null, after?.id ?? null, limit + 1],
  );
  const page = rows.slice(0, limit);
  const last = page[page.length - 1];
  return {
    followers: page.map((r) => ({ accountId: r.follower, since: r.since })),
    ...(rows.length > limit && last ? { nextCursor: encodeCursor({ at: last.at, id: last.follower }) } : {}),
  };
}

export async function followerCount(pool: Pool, accountId: string, allowedLag: number): Promise<FollowerCount> {
  validateId("accountId", accountId);
  validateNonNegativeInteger("allowedLag", allowedLag);
  // One named statement: the account's partition is computed in SQL (ledger_partition, the same
  // rule as stablePartition) instead of reading the partition count in a round trip of its own.
  const { rows } = await pool.query<{ n: number; lag: number | null }>({
    name: "relation_follower_count",
    text: `SELECT coalesce((SELECT n FROM proj_count WHERE followee = $1), 0)::bigint AS n,
                  (SELECT s.last - w.applied_upto FROM event_seq s JOIN proj_watermark w USING (part)
                    WHERE part = (SELECT ledger_partition($1, partitions) FROM ledger_config))::bigint AS lag`,
    values: [accountId],
  });
  const { n, lag } = rows[0]!;
  // No partition row: ledger_config has no row yet.
  if (lag === null) throw new PartitionConfigError("the ledger is not initialised: run initLedger first");
  return { count: n, lag, stale: lag > allowedLag };
}
