import type { Pool, PoolClient } from "../db/pool.ts";
import { InvalidInputError, PartitionConfigError } from "../errors.ts";
import {
  cursorTimeSql,
  decodeCursor,
  encodeCursor,
  keysetPage,
  validateLimit,
  validateViewer,
  type ListOptions,
} from "../pagination.ts";
import { notBlockedEitherWay } from "./block-filter.ts";
import { validateId, validateNonNegativeInteger } from "../ids.ts";
import type { Relationship, ViewerRelationship } from "./types.ts";

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
 * that stays ACTIVE is returned exactly once however the list changes between pages. A follower
 * in a block with `viewer` (either way) is left out.
 */
export async function listFollowers(pool: Pool, accountId: string, options: ListOptions = {}): Promise<FollowerPage> {
  validateId("accountId", accountId);
  const limit = validateLimit(options.limit);
  const viewer = validateViewer(options.viewer);
  const after = options.cursor === undefined ? null : decodeCursor(options.cursor);
  const { rows } = await pool.query<{ follower: string; since: Date; at: string }>(
    `SELECT follower, since, ${cursorTimeSql("since")} AS at FROM proj_follower
      WHERE followee = $1 AND state = 'ACTIVE'
        AND ($2::timestamptz IS NULL OR (since, follower) < ($2::timestamptz, $3::text))
        AND ${notBlockedEitherWay("follower", "$5")}
      ORDER BY since DESC, follower DESC
      LIMIT $4`,
    [accountId, after?.at ?? null, after?.id ?? null, limit + 1, viewer],
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

export interface AccountListPage {
  accounts: { accountId: string; since: Date }[];
  /** Opaque; absent on the last page. */
  nextCursor?: string;
}

interface ListRow {
  account_id: string;
  since: Date;
  at: string;
}

type PageOptions = { limit?: number; cursor?: string };

/**
 * Pages a list of accounts newest first on (time DESC, account DESC). `sql` selects
 * account_id, since and at (the cursor's form of since), filters on $1 (the owner) and compares
 * ($2 time, $3 account) as the keyset; $4 is the row limit. A list that hides the accounts in a
 * block with its viewer says `byViewer` and reads the viewer as $5 (null for nobody).
 */
async function accountList(
  pool: Pool,
  sql: string,
  owner: string,
  options: ListOptions,
  byViewer = false,
): Promise<AccountListPage> {
  validateId("accountId", owner);
  const limit = validateLimit(options.limit);
  const viewer = validateViewer(options.viewer);
  const after = options.cursor === undefined ? null : decodeCursor(options.cursor);
  const values = [owner, after?.at ?? null, after?.id ?? null, limit + 1];
  const { rows } = await pool.query<ListRow>(sql, byViewer ? [...values, viewer] : values);
  const { page, nextCursor } = keysetPage(rows, limit, (r) => ({ at: r.at, id: r.account_id }));
  return {
    accounts: page.map((r) => ({ accountId: r.account_id, since: r.since })),
    ...(nextCursor ? { nextCursor } : {}),
  };
}

/**
 * The accounts `accountId` follows (ACTIVE), from the truth: exact at once, and the index
 * relation_following_list makes it a range read. `since` is when the follow became ACTIVE. An
 * account in a block with `viewer` (either way) is left out.
 */
export function listFollowing(pool: Pool, accountId: string, options: ListOptions = {}): Promise<AccountListPage> {
  return accountList(
    pool,
    `SELECT followee AS account_id, changed_at AS since, ${cursorTimeSql("changed_at")} AS at FROM relation
      WHERE follower = $1 AND state = 'ACTIVE'
        AND ($2::timestamptz IS NULL OR (changed_at, followee) < ($2::timestamptz, $3::text))
        AND ${notBlockedEitherWay("followee", "$5")}
      ORDER BY changed_at DESC, followee DESC
      LIMIT $4`,
    accountId,
    options,
    true,
  );
}

/** The follow requests `accountId` has received and not yet decided (PENDING), newest first, from the truth. */
export function listFollowRequests(pool: Pool, accountId: string, options: PageOptions = {}): Promise<AccountListPage> {
  return accountList(
    pool,
    `SELECT follower AS account_id, changed_at AS since, ${cursorTimeSql("changed_at")} AS at FROM relation
      WHERE followee = $1 AND state = 'PENDING'
        AND ($2::timestamptz IS NULL OR (changed_at, follower) < ($2::timestamptz, $3::text))
      ORDER BY changed_at DESC, follower DESC
      LIMIT $4`,
    accountId,
    options,
  );
}

/** The accounts `accountId` blocks, newest block first. */
export function listBlocks(pool: Pool, accountId: string, options: PageOptions = {}): Promise<AccountListPage> {
  return accountList(
    pool,
    `SELECT blocked AS account_id, created_at AS since, ${cursorTimeSql("created_at")} AS at FROM block
      WHERE blocker = $1
        AND ($2::timestamptz IS NULL OR (created_at, blocked) < ($2::timestamptz, $3::text))
      ORDER BY created_at DESC, blocked DESC
      LIMIT $4`,
    accountId,
    options,
  );
}

export interface Account {
  id: string;
  private: boolean;
  hideCollections: boolean;
}

/** The account's settings, or null when there is no such account (an account being erased, or erased, is none: docs/erasure.md). */
export async function readAccount(db: Pool | PoolClient, accountId: string): Promise<Account | null> {
  validateId("accountId", accountId);
  const { rows } = await db.query<{ private: boolean; hide_collections: boolean }>(
    "SELECT private, hide_collections FROM account WHERE account_id = $1 AND erased_state IS NULL",
    [accountId],
  );
  const row = rows[0];
  return row ? { id: accountId, private: row.private, hideCollections: row.hide_collections } : null;
}

/** How many accounts `accountId` follows, from the truth (exact). */
export async function followingCount(pool: Pool, accountId: string): Promise<number> {
  validateId("accountId", accountId);
  const { rows } = await pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM relation WHERE follower = $1 AND state = 'ACTIVE'",
    [accountId],
  );
  return rows[0]!.n;
}

/** The ids of `ids` that have no account: an error names only those, never the caller who exists. */
export async function missingAccounts(db: Pool | PoolClient, ids: string[]): Promise<string[]> {
  const { rows } = await db.query<{ account_id: string }>(
    "SELECT account_id FROM account WHERE account_id = ANY ($1) AND erased_state IS NULL",
    [ids],
  );
  return [...new Set(ids)].filter((id) => !rows.some((r) => r.account_id === id));
}

export const MAX_RELATIONSHIPS = 40;

/**
 * The Mastodon-shaped relationships of `viewer` towards each of `others` that exists (in the
 * order asked, once each), from the truth in one statement. Unknown ids are left out.
 */
export async function relationships(
  pool: Pool,
  viewer: string,
  others: readonly string[],
): Promise<(Relationship & { id: string })[]> {
  validateId("accountId", viewer);
  if (!Array.isArray(others) || others.length > MAX_RELATIONSHIPS) {
    throw new InvalidInputError("id", `must be a list of at most ${MAX_RELATIONSHIPS} account ids`);
  }
  others.forEach((id) => validateId("id", id));
  const { rows } = await pool.query<Relationship & { id: string }>(
    `SELECT o.id,
            coalesce(mine.state = 'ACTIVE', false) AS following,
            coalesce(mine.state = 'PENDING', false) AS requested,
            coalesce(theirs.state = 'ACTIVE', false) AS "followedBy",
            coalesce(theirs.state = 'PENDING', false) AS "requestedBy",
            EXISTS (SELECT 1 FROM block WHERE blocker = $1 AND blocked = o.id) AS blocking,
            EXISTS (SELECT 1 FROM block WHERE blocker = o.id AND blocked = $1) AS "blockedBy"
       FROM (SELECT id, min(n) AS n FROM unnest($2::text[]) WITH ORDINALITY AS u(id, n) GROUP BY id) AS o
       JOIN account a ON a.account_id = o.id AND a.erased_state IS NULL
       LEFT JOIN relation mine ON mine.follower = $1 AND mine.followee = o.id
       LEFT JOIN relation theirs ON theirs.follower = o.id AND theirs.followee = $1
      ORDER BY o.n`,
    [viewer, others],
  );
  return rows;
}

/**
 * The relationship of `a` towards `b` and which of the two accounts exist, in one named statement
 * of primary-key probes: its custom and generic plans are the same plan, so after the five custom
 * trials the plan cache keeps the generic one and a call is no longer planned (docs/write-path.md,
 * "Count reads"). relationships() answers a list and stays an ordinary query.
 */
export async function pairRelationship(
  pool: Pool,
  a: string,
  b: string,
): Promise<{ aExists: boolean; bExists: boolean; relationship: Relationship }> {
  validateId("accountId", a);
  validateId("otherId", b);
  const { rows } = await pool.query<Relationship & { a_exists: boolean; b_exists: boolean }>({
    name: "relation_pair_relationship",
    text: `SELECT EXISTS (SELECT 1 FROM account WHERE account_id = $1 AND erased_state IS NULL) AS a_exists,
                  EXISTS (SELECT 1 FROM account WHERE account_id = $2 AND erased_state IS NULL) AS b_exists,
                  coalesce(mine.state = 'ACTIVE', false) AS following,
                  coalesce(mine.state = 'PENDING', false) AS requested,
                  coalesce(theirs.state = 'ACTIVE', false) AS "followedBy",
                  coalesce(theirs.state = 'PENDING', false) AS "requestedBy",
                  EXISTS (SELECT 1 FROM block WHERE blocker = $1 AND blocked = $2) AS blocking,
                  EXISTS (SELECT 1 FROM block WHERE blocker = $2 AND blocked = $1) AS "blockedBy"
             FROM (SELECT) AS one
             LEFT JOIN relation mine ON mine.follower = $1 AND mine.followee = $2
             LEFT JOIN relation theirs ON theirs.follower = $2 AND theirs.followee = $1`,
    values: [a, b],
  });
  const r = rows[0]!;
  return {
    aExists: r.a_exists,
    bExists: r.b_exists,
    relationship: {
      following: r.following,
      requested: r.requested,
      followedBy: r.followedBy,
      requestedBy: r.requestedBy,
      blocking: r.blocking,
      blockedBy: r.blockedBy,
    },
  };
}

/**
 * What the viewer may learn of their relationship to an account (docs/api.md, "What a blocked
 * user learns"): null when the account blocks the viewer and the viewer does not block it (it
 * then answers as an account that does not exist), otherwise the relationship without blockedBy.
 */
export function asSeenByViewer(r: Relationship): ViewerRelationship | null {
  if (r.blockedBy && !r.blocking) return null;
  return {
    following: r.following,
    requested: r.requested,
    followedBy: r.followedBy,
    requestedBy: r.requestedBy,
    blocking: r.blocking,
  };
}
