/**
 * The set-based statements of the feed bench's generator (support/feed-population.ts): the shape
 * of the chapter on feed fan-out, scaled to A accounts (ids a00000001.., zero-padded so numeric
 * order is text order):
 *   follows: about 100 per account. The 20 hot accounts a1..a20 are followed by a share
 *     0.5 / j^0.7 of all accounts (a1 by half of them, a10 by a tenth, a20 by 6%): at A = 100,000
 *     the largest has 50,000 followers and ten have 10,000 or more. Every account also follows
 *     96 others chosen by a hash, skewed towards low ids (x^1.2), so followers are heavy-tailed
 *     below the hot accounts too. The last 100 accounts follow all 20 hot ones (the hot readers).
 *   posts: 10 per account, 2,000 per hot account (a deep history the reads must not walk),
 *     80% PUBLIC, 15% FOLLOWERS, 5% SELF, a body of 100 to 300 characters, one a minute
 *     per account going back from a fixed epoch.
 * Rows are written as live writes followed by drained consumers leave them: relation and its
 * projection ACTIVE at version 1, proj_count from the projection, acl_token 0 (every watermark is
 * at or above it, so FOLLOWERS posts are judged by the projection, as after a drain).
 */

const ACCOUNT = (n: string) => `'a' || lpad((${n})::text, 8, '0')`;
/** A fixed epoch: generated posts are dated before any live write. */
const EPOCH = "timestamptz '2026-01-01 00:00:00+00'";
/** A uniform value in [0, 1) from two integers, the same on every run. */
const UNIT = (a: string, b: string) => `((hashint8((${a}) * 1000 + (${b}))::bigint + 2147483648) / 4294967296.0)`;

export const HOT_AUTHORS = 20;
export const FOLLOWS_PER_ACCOUNT = 96;
export const POSTS_PER_ACCOUNT = 10;
export const POSTS_PER_HOT_ACCOUNT = 2000;
export const HOT_READERS = 100;

/** $1 accounts. */
export const INSERT_ACCOUNTS = `
  INSERT INTO account (account_id) SELECT ${ACCOUNT("a")} FROM generate_series(1, $1::bigint) a ORDER BY 1`;

/** The follows of accounts [$1, $2): $3 accounts. Duplicates and self-follows are dropped. */
const FOLLOW_ROWS = `
  SELECT ${ACCOUNT("f")} AS follower, ${ACCOUNT("t")} AS followee, ${EPOCH} - f * interval '1 second' AS at
    FROM generate_series($1::bigint, $2::bigint - 1) f
    CROSS JOIN LATERAL (
      SELECT j AS t FROM generate_series(1, ${HOT_AUTHORS}) j
       WHERE ${UNIT("f", "-j")} < 0.5 / power(j, 0.7) OR f > $3::bigint - ${HOT_READERS}
      UNION ALL
      SELECT ${HOT_AUTHORS} + 1 + floor(($3::bigint - ${HOT_AUTHORS}) * power(${UNIT("f", "k")}, 1.2))::bigint
        FROM generate_series(1, ${FOLLOWS_PER_ACCOUNT}) k) g
   WHERE t <> f`;

export const INSERT_RELATIONS = `
  INSERT INTO relation (follower, followee, state, version, changed_at)
  SELECT follower, followee, 'ACTIVE', 1, min(at) FROM (${FOLLOW_ROWS}) r GROUP BY 1, 2 ORDER BY 1, 2`;

/** The projection of every follow, as a drained projector leaves it. */
export const INSERT_PROJECTION = `
  INSERT INTO proj_follower (followee, follower, state, version, since)
  SELECT followee, follower, state, version, changed_at FROM relation ORDER BY followee, follower`;

export const INSERT_FOLLOWER_COUNTS = `
  INSERT INTO proj_count (followee, n)
  SELECT followee, count(*) FROM proj_follower WHERE state = 'ACTIVE' GROUP BY followee ORDER BY followee`;

/** The posts of accounts [$1, $2): $3 partitions. */
const POST_ROWS = `
  SELECT ${ACCOUNT("a")} || '-p' || i AS post_id, ${ACCOUNT("a")} AS author,
         CASE WHEN i % 20 = 0 THEN 'SELF' WHEN i % 20 < 4 THEN 'FOLLOWERS' ELSE 'PUBLIC' END AS visibility,
         repeat('lorem ipsum ', (8 + (i * 7 + a) % 17)::int) AS body,
         ledger_partition(${ACCOUNT("a")}, $3::int) AS part,
         ${EPOCH} - (i * 60 + a % 60) * interval '1 second' AS created_at
    FROM generate_series($1::bigint, $2::bigint - 1) a,
         generate_series(1, CASE WHEN a <= ${HOT_AUTHORS} THEN ${POSTS_PER_HOT_ACCOUNT} ELSE ${POSTS_PER_ACCOUNT} END) i`;

export const INSERT_POST_ITEMS = `INSERT INTO item (item_id, kind) SELECT post_id, 'post' FROM (${POST_ROWS}) p ORDER BY 1`;

export const INSERT_POSTS = `
  INSERT INTO post (post_id, author, visibility, body, part, acl_token, created_at)
  SELECT post_id, author, visibility, body, part, 0, created_at FROM (${POST_ROWS}) p ORDER BY author, created_at`;

export const accountId = (n: number) => `a${String(n).padStart(8, "0")}`;
