import { NOTIFICATION_COLUMNS, withIdAndGroup } from "../notifications/notification-sources.ts";

/**
 * The set-based statements of the import's apply phases (docs/import.md). Each reads the staged
 * lines of run $1 in the range ($2, $3] of one kind's `ord` (their key order). A fact without
 * history (no row, or the v0 placeholder a rejected write leaves) is written at version 1 with its history
 * baseline (like_outbox_pruned / relation_event_pruned: one event, outside the outbox, exactly as
 * retention leaves a pruned prefix), so every audit counts it as one event, and its derived rows
 * (like_count, proj_follower, proj_count) move in the same statement: no outbox event is written,
 * and nothing is left for a consumer or a rebuild to catch up on.
 */

/** The range's lines of one kind; $4 the kind. */
const RANGE =
  "FROM import_stage s WHERE s.run_id = $1::bigint AND s.kind = $4::text AND s.ord > $2::bigint AND s.ord <= $3::bigint";

/** The staged line's `b` is an erased account (a tombstone). */
const TOMBSTONE = "EXISTS (SELECT 1 FROM account t WHERE t.account_id = s.b AND t.erased_state = 'ERASED')";

/** The last `ord` of a kind's staged lines (they are numbered 1..n): $1 run, $2 kind. */
export const LAST_ORD =
  "SELECT coalesce(max(ord), 0)::bigint AS last FROM import_stage WHERE run_id = $1 AND kind = $2";

/**
 * New accounts of the range, with the defaults of PUT /v1/accounts/{id}, and the tombstones of
 * erased accounts (state ERASED: the row an erasure leaves, docs/erasure.md); existing ones are left
 * to the live path.
 */
export const INSERT_ACCOUNTS = `
  WITH ins AS (
    INSERT INTO account (account_id, private, hide_collections, erased_state)
    SELECT DISTINCT ON (s.a) s.a, coalesce(s.private, false), coalesce(s.hide, false), CASE WHEN s.state = 'ERASED' THEN 'ERASED' END ${RANGE}
     ORDER BY s.a, s.line
    ON CONFLICT (account_id) DO NOTHING RETURNING 1)
  SELECT count(*)::int AS written FROM ins`;

/** Existing accounts of the range whose settings the file changes: PUT /v1/accounts/{id}'s own path (an unlock approves requests). */
export const CHANGED_ACCOUNTS = `
  SELECT DISTINCT ON (s.a) s.a AS id, s.private, s.hide ${RANGE}
     AND s.state IS DISTINCT FROM 'ERASED'
     AND EXISTS (SELECT 1 FROM account x WHERE x.account_id = s.a AND x.erased_state IS NULL
                  AND ((s.private IS NOT NULL AND s.private <> x.private) OR (s.hide IS NOT NULL AND s.hide <> x.hide_collections)))
   ORDER BY s.a, s.line`;

/** The acting accounts of follows and blocks that exist nowhere yet: created public, as the API does on a user's first relation write. */
export const INSERT_ACTORS = `
  WITH ins AS (
    INSERT INTO account (account_id, private)
    SELECT DISTINCT s.a, false FROM import_stage s WHERE s.run_id = $1 AND s.kind IN ('follow', 'block') ORDER BY 1
    ON CONFLICT (account_id) DO NOTHING RETURNING 1)
  SELECT count(*)::int AS written FROM ins`;

/** Items of the range, plain (what PUT /v1/items/{id} makes likeable); an existing item keeps its kind. */
export const INSERT_ITEMS = `
  WITH ins AS (
    INSERT INTO item (item_id, kind) SELECT DISTINCT s.a, 'plain' ${RANGE} ORDER BY 1
    ON CONFLICT (item_id) DO NOTHING RETURNING 1)
  SELECT count(*)::int AS written FROM ins`;

/**
 * Blocks through relation_block itself, one call per pair in (lower id, higher id) byte order:
 * it locks both relation rows, writes the block row and a REMOVED event for each direction that
 * was not REMOVED (a follow that exists in the database). A new block row gets the line's `at`
 * ($5: the import time for lines without one). $6: P.
 */
export const APPLY_BLOCKS = `
  WITH p AS (SELECT DISTINCT ON (s.a, s.b) s.a, s.b, coalesce(s.at, $5) AS at ${RANGE} AND NOT ${TOMBSTONE} ORDER BY s.a, s.b, s.line),
  fresh AS (SELECT p.* FROM p WHERE NOT EXISTS (SELECT 1 FROM block k WHERE k.blocker = p.a AND k.blocked = p.b)),
  called AS MATERIALIZED (
    SELECT r.outcome FROM (SELECT * FROM p ORDER BY least(a COLLATE "C", b COLLATE "C"), greatest(a COLLATE "C", b COLLATE "C"), a COLLATE "C") q
      CROSS JOIN LATERAL relation_block(q.a, q.b, $6) r)
  SELECT (SELECT count(*) FROM called)::int AS calls, (SELECT count(*) FROM fresh)::int AS written`;

/**
 * Blocks of the range towards erased accounts (an export's, of a blocker who never lifted them):
 * written as they were, the block row alone. relation_block answers an erased account as missing,
 * and the account has no live relation to remove; the block guard lets this statement write them
 * (ledger.tombstone_blocks, set around it only). $5: the import time for lines without `at`.
 */
export const APPLY_TOMBSTONE_BLOCKS = `
  WITH ins AS (
    INSERT INTO block (blocker, blocked, created_at)
    SELECT DISTINCT ON (s.a, s.b) s.a, s.b, coalesce(s.at, $5) ${RANGE} AND ${TOMBSTONE}
     ORDER BY s.a, s.b, s.line
    ON CONFLICT (blocker, blocked) DO NOTHING RETURNING 1)
  SELECT count(*)::int AS written FROM ins`;

/** Sets the `at` of the block rows this batch created, the pairs $6/$7 ($5: the import time for lines without one). */
export const DATE_NEW_BLOCKS = `
  UPDATE block k SET created_at = p.at
    FROM (SELECT DISTINCT ON (s.a, s.b) s.a, s.b, coalesce(s.at, $5) AS at ${RANGE} ORDER BY s.a, s.b, s.line) p
    JOIN unnest($6::text[], $7::text[]) AS n(a, b) ON n.a = p.a AND n.b = p.b
   WHERE k.blocker = p.a AND k.blocked = p.b`;

/** The blocks of the range that do not exist yet (their rows get the line's `at` after relation_block wrote them). */
export const NEW_BLOCKS = `
  SELECT DISTINCT s.a, s.b ${RANGE} AND NOT ${TOMBSTONE}
     AND NOT EXISTS (SELECT 1 FROM block k WHERE k.blocker = s.a AND k.blocked = s.b)`;

/**
 * The follow pairs' rows: a v0 placeholder where none exists, then every row locked, in
 * (follower, followee) byte order as relation_block locks them, so no lock cycle forms with a
 * live block. After these, no live write can change the pairs until the batch commits.
 */
export const LOCK_FOLLOW_PAIRS = [
  `INSERT INTO relation (follower, followee, state, version)
   SELECT s.a, s.b, 'REMOVED', 0 ${RANGE} GROUP BY s.a, s.b ORDER BY s.a COLLATE "C", s.b COLLATE "C"
   ON CONFLICT DO NOTHING`,
  `SELECT 1 FROM relation r JOIN (SELECT DISTINCT s.a, s.b ${RANGE}) p ON r.follower = p.a AND r.followee = p.b
    ORDER BY r.follower COLLATE "C", r.followee COLLATE "C" FOR UPDATE OF r`,
  // As relation_follow: a request is only PENDING while the account is private, so an unlock in
  // progress is waited for and the flag read after it (by the next statement).
  `SELECT 1 FROM account x WHERE x.account_id IN (SELECT s.b ${RANGE} AND s.state = 'PENDING') ORDER BY x.account_id FOR SHARE`,
  // The projection's partitions, as a projector batch takes them: projectors of a partition wait.
  `SELECT 1 FROM proj_watermark w
    WHERE w.part IN (SELECT DISTINCT ledger_partition(s.b, $5) ${RANGE}) ORDER BY w.part FOR UPDATE`,
] as const;

/**
 * The follows of the range without history, written at version 1 with their baseline, their
 * projection (version 1, since = at), follower count and notification row (the row the
 * notification rebuild installs for a fact at version 1: seq 0, part 0; a row of a higher version
 * is newer and stays), in one statement read after the locks:
 * a pair blocked either way (by the database or an earlier phase of this file) is left REMOVED;
 * PENDING towards a public account is ACTIVE; ACTIVE towards a private account is an approved
 * follow. $5 import time.
 */
export const APPLY_FOLLOWS = `
  WITH p AS (SELECT DISTINCT ON (s.a, s.b) s.a AS follower, s.b AS followee, s.state, coalesce(s.at, $5) AS at ${RANGE} ORDER BY s.a, s.b, s.line),
  t AS (SELECT p.follower, p.followee, p.at, CASE WHEN p.state = 'PENDING' AND NOT x.private THEN 'ACTIVE' ELSE p.state END AS target
          FROM p JOIN account x ON x.account_id = p.followee),
  upd AS (
    UPDATE relation r SET state = t.target, version = 1, changed_at = t.at
      FROM t
     WHERE r.follower = t.follower AND r.followee = t.followee AND r.version = 0
       AND NOT EXISTS (SELECT 1 FROM block k WHERE (k.blocker = t.follower AND k.blocked = t.followee) OR (k.blocker = t.followee AND k.blocked = t.follower))
    RETURNING r.follower, r.followee, r.state, r.changed_at),
  baseline AS (
    INSERT INTO relation_event_pruned (follower, followee, events, max_version, last_state)
    SELECT follower, followee, 1, 1, state FROM upd RETURNING 1),
  projected AS (
    INSERT INTO proj_follower (followee, follower, state, version, since)
    SELECT followee, follower, state, 1, changed_at FROM upd ORDER BY followee, follower
    ON CONFLICT (followee, follower) DO UPDATE SET state = EXCLUDED.state, version = 1, since = EXCLUDED.since
     WHERE proj_follower.version < 1
    RETURNING followee, state),
  counted AS (
    INSERT INTO proj_count (followee, n)
    SELECT followee, count(*) FROM projected WHERE state = 'ACTIVE' GROUP BY followee ORDER BY followee
    ON CONFLICT (followee) DO UPDATE SET n = proj_count.n + EXCLUDED.n RETURNING 1),
  candidate AS (
    SELECT 'relation'::text AS source, follower AS actor, followee AS subject, followee AS recipient,
           CASE state WHEN 'PENDING' THEN 'follow_request' ELSE 'follow' END AS type, NULL::text AS item_id,
           true AS active, 1::bigint AS version, changed_at AS at, 0 AS part, 0::bigint AS seq FROM upd),
  notified AS (
    INSERT INTO notification AS n (${NOTIFICATION_COLUMNS})
    ${withIdAndGroup("candidate")} FROM candidate ORDER BY candidate.source, candidate.actor, candidate.subject
    ON CONFLICT (source, actor, subject, recipient) DO UPDATE
       SET type = EXCLUDED.type, item_id = EXCLUDED.item_id, active = EXCLUDED.active, version = EXCLUDED.version,
           at = EXCLUDED.at, id = EXCLUDED.id, group_key = EXCLUDED.group_key, part = 0, seq = 0
     WHERE n.version < EXCLUDED.version
    RETURNING 1)
  SELECT (SELECT count(*) FROM upd)::int AS written, (SELECT count(*) FROM baseline)::int AS baselines,
         (SELECT count(*) FROM counted)::int AS counted, (SELECT count(*) FROM notified)::int AS notified`;

/** The like counters' partitions of the range's users, as a consumer batch takes them ($5 P). */
export const LOCK_LIKE_WATERMARKS = `
  SELECT 1 FROM counter_watermark w
   WHERE w.part IN (SELECT DISTINCT ledger_partition(s.a, $5) ${RANGE}) ORDER BY w.part FOR UPDATE`;

/**
 * The likes of the range on plain items without history, written liked at version 1 with their
 * baseline and like_count (per item and user partition) in one statement; the count rows are
 * taken in (item, part) order, as a consumer takes them. Likes of posts and comments, and pairs
 * with history, are left to the live path. $5 P, $6 import time.
 */
export const APPLY_LIKES = `
  WITH p AS (
    SELECT DISTINCT ON (s.a, s.b) s.a AS user_id, s.b AS item_id, coalesce(s.at, $6) AS at
      FROM import_stage s JOIN item i ON i.item_id = s.b AND i.kind = 'plain'
     WHERE s.run_id = $1 AND s.kind = $4 AND s.ord > $2 AND s.ord <= $3
     ORDER BY s.a, s.b, s.line),
  ins AS (
    INSERT INTO like_fact (user_id, item_id, liked, version, changed_at)
    SELECT user_id, item_id, true, 1, at FROM p ORDER BY user_id, item_id
    ON CONFLICT (user_id, item_id) DO UPDATE SET liked = true, version = 1, changed_at = EXCLUDED.changed_at
     WHERE like_fact.version = 0
    RETURNING user_id, item_id),
  baseline AS (
    INSERT INTO like_outbox_pruned (user_id, item_id, events, delta_sum, max_version)
    SELECT user_id, item_id, 1, 1, 1 FROM ins RETURNING 1),
  counted AS (
    INSERT INTO like_count (item_id, part, n)
    SELECT item_id, ledger_partition(user_id, $5), count(*) FROM ins GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (item_id, part) DO UPDATE SET n = like_count.n + EXCLUDED.n RETURNING 1)
  SELECT (SELECT count(*) FROM ins)::int AS written, (SELECT count(*) FROM baseline)::int AS baselines,
         (SELECT count(*) FROM counted)::int AS counted`;

/** Follows of the range the set-based phase could not write (the pair has history): for relation_follow, one by one. */
export const UNSATISFIED_FOLLOWS = `
  SELECT DISTINCT ON (s.a, s.b) s.a AS follower, s.b AS followee, s.state ${RANGE}
     AND NOT EXISTS (SELECT 1 FROM relation r JOIN account x ON x.account_id = r.followee
                      WHERE r.follower = s.a AND r.followee = s.b
                        AND (r.state = 'ACTIVE' OR (r.state = 'PENDING' AND s.state = 'PENDING' AND x.private)))
     AND NOT EXISTS (SELECT 1 FROM block k WHERE (k.blocker = s.a AND k.blocked = s.b) OR (k.blocker = s.b AND k.blocked = s.a))
   ORDER BY s.a, s.b, s.line`;

/** Likes of the range not liked yet after the set-based phase (posts, comments, pairs with history): for like_set_if_visible. */
export const UNSATISFIED_LIKES = `
  SELECT DISTINCT ON (s.a, s.b) s.a AS user_id, s.b AS item_id, s.at ${RANGE}
     AND NOT EXISTS (SELECT 1 FROM like_fact f WHERE f.user_id = s.a AND f.item_id = s.b AND f.liked)
   ORDER BY s.a, s.b, s.line`;

/**
 * The counted targets of the run, for the Redis count layer: items liked, accounts followed, and
 * the items the file declares (the empty-ledger path stages no like lines, and every item it liked
 * is declared in the file, the ledger having had none; a dropped counter of an item not liked
 * only backfills the same count).
 */
export const TOUCHED_TARGETS = `
  SELECT DISTINCT CASE s.kind WHEN 'follow' THEN 'followers' ELSE 'likes' END AS kind, coalesce(s.b, s.a) AS target
    FROM import_stage s WHERE s.run_id = $1 AND s.kind IN ('like', 'follow', 'item')`;

/**
 * The readers whose home timeline the run's set-based writes may have changed: the follower of a
 * follow line whose followee has a live post (following an account without posts adds nothing to an
 * inbox: rebuilding every follower cost 83 of a 95-second import of 40,000 follows, none of them
 * of an author with posts), and a side of a block line whose inbox holds the other's posts (a block removes them).
 */
export const FEED_READERS = `
  SELECT s.a AS reader FROM import_stage s
   WHERE s.run_id = $1 AND s.kind = 'follow'
     AND EXISTS (SELECT 1 FROM post p WHERE p.author = s.b AND p.deleted_at IS NULL)
  UNION
  SELECT r.reader FROM import_stage s CROSS JOIN LATERAL (VALUES (s.a, s.b), (s.b, s.a)) AS r(reader, other)
   WHERE s.run_id = $1 AND s.kind = 'block'
     AND EXISTS (SELECT 1 FROM feed_inbox i WHERE i.reader = r.reader AND i.author = r.other)
  ORDER BY 1`;

/**
 * The accounts the run's lines notify whose view misses the row of a fact the run names: the
 * followees of its follows, the authors of the posts and comments it likes, where the fact stands
 * (version above 0) and the view has no row of the pair. The follows phase writes the rows of the
 * follows it writes, and the live writes' events reach the view through its consumer (a pair whose
 * event is not consumed yet is listed too: the rebuild leaves a pending pair to its event), so this
 * is usually nobody.
 */
export const NOTIFIED_RECIPIENTS = `
  SELECT s.b AS recipient FROM import_stage s JOIN relation r ON r.follower = s.a AND r.followee = s.b AND r.version > 0
   WHERE s.run_id = $1 AND s.kind = 'follow'
     AND NOT EXISTS (SELECT 1 FROM notification n WHERE n.source = 'relation' AND n.actor = s.a AND n.subject = s.b)
  UNION
  SELECT a.author FROM import_stage s JOIN notification_item_author a ON a.item_id = s.b AND a.author <> s.a
    JOIN like_fact f ON f.user_id = s.a AND f.item_id = s.b AND f.version > 0
   WHERE s.run_id = $1 AND s.kind = 'like'
     AND NOT EXISTS (SELECT 1 FROM notification n WHERE n.source = 'like' AND n.actor = s.a AND n.subject = s.b)
  ORDER BY 1`;
