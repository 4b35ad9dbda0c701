/**
 * The set-based statements of the scale bench's generator (support/scale-population.ts): each writes
 * one table's rows for a range of a generated population, in the table's key order, exactly as
 * the import's apply (src/portability/import-sql.ts) writes a fact without history: version 1,
 * its baseline in the *_pruned table (one event outside the outbox, as retention leaves a pruned
 * prefix), its projection rows; the counts are summed from the facts at the end.
 *
 * The population (ids zero-padded so that numeric order is text order):
 *   accounts a00000001..A, private when id % 100 = 8; items i00000001..I, all 'plain'.
 *   like l (0 <= l < N): user a(l / 10 + 1) likes i00000001 (the hot item) when l % 10 = 0,
 *     else item 2 + (l / 10 + (l % 10) * stride) % (I - 1): ten distinct items per user.
 *   follow f (1 <= f <= A): a(f) follows a00000001 (the hub) when f is even, else
 *     a(1 + f * 7919 % A) (the next account if that is itself); towards a private account every
 *     third is a PENDING request, the others approved. Pairs blocked either way are skipped.
 *   blocks (written before the follows, through relation_block): a(100b + 3) blocks a(100b + 5).
 */

const ACCOUNT = (n: string) => `'a' || lpad((${n})::text, 8, '0')`;
const ITEM = (n: string) => `'i' || lpad((${n})::text, 8, '0')`;
/** A fixed epoch: generated facts are dated before any live write of the bench. */
const EPOCH = "timestamptz '2026-01-01 00:00:00+00'";

/** $1 first account number, $2 last (inclusive). */
export const INSERT_ACCOUNTS = `
  INSERT INTO account (account_id, private)
  SELECT ${ACCOUNT("a")}, a % 100 = 8 FROM generate_series($1::bigint, $2::bigint) a ORDER BY 1`;

/** $1 first item number, $2 last (inclusive). */
export const INSERT_ITEMS = `
  INSERT INTO item (item_id, kind) SELECT ${ITEM("i")}, 'plain' FROM generate_series($1::bigint, $2::bigint) i ORDER BY 1`;

/** The likes l in [$1, $2): user, item, time. $3 items I, $4 stride. */
const LIKE_ROWS = `
  SELECT ${ACCOUNT("l / 10 + 1")} AS user_id,
         ${ITEM("CASE WHEN l % 10 = 0 THEN 1 ELSE 2 + (l / 10 + (l % 10) * $4::bigint) % ($3::bigint - 1) END")} AS item_id,
         ${EPOCH} + l * interval '1 millisecond' AS at
    FROM generate_series($1::bigint, $2::bigint - 1) l`;

export const INSERT_LIKE_FACTS = `
  INSERT INTO like_fact (user_id, item_id, liked, version, changed_at)
  SELECT user_id, item_id, true, 1, at FROM (${LIKE_ROWS}) g ORDER BY user_id, item_id`;

export const INSERT_LIKE_BASELINES = `
  INSERT INTO like_outbox_pruned (user_id, item_id, events, delta_sum, max_version)
  SELECT user_id, item_id, 1, 1, 1 FROM (${LIKE_ROWS}) g ORDER BY user_id, item_id`;

/** After all likes: one count row per (item, user partition), as the consumer leaves them. $1 P. */
export const INSERT_LIKE_COUNTS = `
  INSERT INTO like_count (item_id, part, n)
  SELECT item_id, ledger_partition(user_id, $1::int), count(*) FROM like_fact WHERE liked GROUP BY 1, 2 ORDER BY 1, 2`;

/** $1 blocks; $2 P. Through the live write function (it also writes the webhook block outbox). */
export const APPLY_BLOCKS = `
  SELECT count(*)::int AS n FROM generate_series(0, $1::bigint - 1) b,
         LATERAL relation_block(${ACCOUNT("100 * b + 3")}, ${ACCOUNT("100 * b + 5")}, $2::int)`;

/** The follows f in [$1, $2) that no block forbids. $3 accounts A. */
const FOLLOW_ROWS = `
  SELECT g.follower, g.followee, CASE WHEN x.private AND g.f % 3 = 0 THEN 'PENDING' ELSE 'ACTIVE' END AS state, g.at
    FROM (SELECT f, ${ACCOUNT("f")} AS follower,
                 ${ACCOUNT("CASE WHEN f % 2 = 0 THEN 1 WHEN 1 + f * 7919 % $3::bigint = f THEN f % $3::bigint + 1 ELSE 1 + f * 7919 % $3::bigint END")} AS followee,
                 ${EPOCH} + f * interval '1 second' AS at
            FROM generate_series($1::bigint, $2::bigint - 1) f) g
    JOIN account x ON x.account_id = g.followee
   WHERE NOT EXISTS (SELECT 1 FROM block k WHERE (k.blocker = g.follower AND k.blocked = g.followee) OR (k.blocker = g.followee AND k.blocked = g.follower))`;

export const INSERT_RELATIONS = `
  INSERT INTO relation (follower, followee, state, version, changed_at)
  SELECT follower, followee, state, 1, at FROM (${FOLLOW_ROWS}) r ORDER BY follower, followee`;

export const INSERT_RELATION_BASELINES = `
  INSERT INTO relation_event_pruned (follower, followee, events, max_version, last_state)
  SELECT follower, followee, 1, 1, state FROM (${FOLLOW_ROWS}) r ORDER BY follower, followee`;

export const INSERT_PROJECTION = `
  INSERT INTO proj_follower (followee, follower, state, version, since)
  SELECT followee, follower, state, 1, at FROM (${FOLLOW_ROWS}) r ORDER BY followee, follower`;

/** The follow (request) notifications, as a notification rebuild installs them (part 0, seq 0). */
export const INSERT_FOLLOW_NOTIFICATIONS = `
  INSERT INTO notification (source, actor, subject, recipient, type, item_id, active, version, at, id, group_key, part, seq)
  SELECT 'relation', follower, followee, followee, t.type, NULL, true, 1, at, t.id,
         notification_group_key(t.type, NULL, at, t.id), 0, 0
    FROM (${FOLLOW_ROWS}) r,
         LATERAL (SELECT CASE r.state WHEN 'PENDING' THEN 'follow_request' ELSE 'follow' END AS type,
                         notification_id(r.at, 'relation', r.follower, r.followee, 1) AS id) t
   ORDER BY follower, followee`;

/** After all follows: the follower counts from the projection. */
export const INSERT_FOLLOWER_COUNTS = `
  INSERT INTO proj_count (followee, n)
  SELECT followee, count(*) FROM proj_follower WHERE state = 'ACTIVE' GROUP BY followee ORDER BY followee`;

/** The secondary indexes of the tables (none backing a constraint): dropped for the load, built after it. */
export const SECONDARY_INDEXES = `
  SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname) AS name, pg_get_indexdef(i.indexrelid) AS def
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE i.indrelid = ANY ($1::text[]::regclass[])
     AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)
   ORDER BY 1`;
