import type { CounterSpec } from "../counters/counter-spec.ts";
import { LIKE_COUNTER } from "../likes/like-spec.ts";
import { COMMENT_COUNTER } from "../content/comment-spec.ts";
import { LEGAL_TRANSITIONS, previousRelationStateSql } from "../relations/relation-audit.ts";
import { pendingEventSql } from "../notifications/notification-sources.ts";
import { WEBHOOK_INVARIANTS } from "../webhooks/webhook-audit.ts";
import { inductedSql } from "./key-baseline.ts";

/**
 * The incremental form of every invariant the periodic audit checks, one SQL statement each
 * (docs/counters.md, "The periodic audit is incremental"). Each answers the same columns as its
 * full form (like-audit.ts, counter-audit.ts, relation-audit.ts, notification-audit.ts), over:
 *  - the events of a range of the outbox, per partition seq in ($2[i], $3[i]] of part $1[i]
 *    (a range read on the outbox's primary key (part, seq)), for the per-event checks (gapless
 *    sequence, partition placement, legal transitions), and
 *  - the targets those events touched, plus the sampled targets $4 (text[]), for the
 *    per-target checks, each read through the target's own indexes.
 * So a run reads what changed, not the history. lo must be at or above the outbox's retention
 * floor (the runner checks; the events below it are gone).
 */

const range = (outbox: string) => `
  r AS (SELECT * FROM unnest($1::int[], $2::bigint[], $3::bigint[]) AS r(part, lo, hi)),
  ev AS (SELECT o.* FROM r JOIN ${outbox} o ON o.part = r.part AND o.seq > r.lo AND o.seq <= r.hi),
  gaps AS (
    SELECT r.part FROM r LEFT JOIN ev ON ev.part = r.part
     GROUP BY r.part, r.lo, r.hi
    HAVING count(ev.seq) <> r.hi - r.lo OR (r.hi > r.lo AND max(ev.seq) <> r.hi))`;

/** counterAuditSql's columns over the changed and sampled keys (seq gaps over the range). */
export function counterAuditIncrementalSql(s: CounterSpec): string {
  return `
  WITH ${range(s.outbox)},
  keys AS (SELECT DISTINCT ${s.keyColumn} AS key FROM ev UNION SELECT unnest($4::text[])),
  per_key AS (
    SELECT k.key,
           (SELECT coalesce(sum(t.n), 0) FROM (${s.countedSql}) t WHERE t.key = k.key)::bigint AS truth,
           (SELECT coalesce(sum(c.n), 0) FROM ${s.count} c WHERE c.${s.keyColumn} = k.key)::bigint AS derived,
           ((SELECT coalesce(sum(o.delta), 0) FROM ${s.outbox} o WHERE o.${s.keyColumn} = k.key)
            ${s.prunedDeltasSql ? `+ (SELECT coalesce(sum(p.n), 0) FROM (${s.prunedDeltasSql}) p WHERE p.key = k.key)` : ""})::bigint AS deltas,
           (SELECT count(*) FROM ${s.outbox} o JOIN ${s.watermark} w ON w.part = o.part
             WHERE o.${s.keyColumn} = k.key AND o.seq > w.applied_upto
               AND NOT EXISTS (SELECT 1 FROM ${s.processed} pe WHERE pe.part = o.part AND pe.seq = o.seq))::bigint AS pending,
           (SELECT count(*) FROM ${s.count} c WHERE c.${s.keyColumn} = k.key AND c.n < 0)::bigint AS negative_rows
      FROM keys k)
  SELECT (SELECT coalesce(sum(q.last - w.applied_upto), 0) FROM ${s.sequence} q JOIN ${s.watermark} w USING (part))::bigint AS lag,
         (SELECT count(*) FROM gaps)::int AS seq_gap_partitions,
         (SELECT count(*) FROM per_key WHERE deltas <> truth)::int AS delta_sum_mismatch_keys,
         (SELECT count(*) FROM per_key WHERE abs(derived - truth) > pending)::int AS bound_violations,
         (SELECT count(*) FROM per_key WHERE derived <> truth)::int AS count_mismatch_keys,
         ((SELECT coalesce(sum(negative_rows), 0) FROM per_key) + (SELECT count(*) FROM per_key WHERE derived < 0))::int AS negative_counts`;
}

/**
 * counterReadSideSql's columns over the changed and sampled keys, per (key, partition). A touched
 * key with a valid baseline of at least $5 facts (key-baseline.ts) is audited by induction: its
 * facts per partition are the baseline's plus the deltas of its events in the range (read in `ev`),
 * not a recount. Extra columns for the store: `baselines` (the truths of the keys with at least $5
 * facts, per partition, at `to`), `dropped_baselines` (audited keys below it that have rows), and
 * `inducted_keys`.
 */
export function counterReadSideIncrementalSql(s: CounterSpec): string {
  return `
  WITH ${range(s.outbox)},
  keys AS (SELECT DISTINCT ${s.keyColumn} AS key FROM ev UNION SELECT unnest($4::text[])),
  ${inductedSql(s.kind, s.keyColumn)},
  wm AS (SELECT q.part, q.last, w.applied_upto FROM ${s.sequence} q JOIN ${s.watermark} w USING (part)),
  unprocessed AS (
    SELECT o.part, o.seq, o.${s.keyColumn} AS key, o.delta
      FROM ${s.outbox} o JOIN wm ON wm.part = o.part AND o.seq > wm.applied_upto
     WHERE NOT EXISTS (SELECT 1 FROM ${s.processed} pe WHERE pe.part = o.part AND pe.seq = o.seq)),
  -- Each key's facts counted once, all its partitions at a time: "= ANY (ARRAY(...))" is a value
  -- the planner pushes into countedSql's GROUP BY (an index range per key), and per_row joins the
  -- result (one row per key and partition) instead of scanning it per row. Counted per (key,
  -- partition), a hot key's facts were read once per partition (16x; docs/decisions/0016-periodic-audit-statements.md).
  facts AS (
    SELECT t.key, t.part, t.n FROM (${s.countedSql}) t WHERE t.key = ANY (ARRAY(SELECT key FROM keys EXCEPT SELECT key FROM inducted))
    UNION ALL
    -- Induction: a fact and its event are written in one transaction, and every changed fact is
    -- checked against its events by the write side's per-pair checks of this run, so the facts
    -- at "to" are the facts at "from" plus this range's deltas of the key, per partition.
    SELECT b.key, b.part, b.truth + coalesce((SELECT sum(e.delta) FROM ev e WHERE e.${s.keyColumn} = b.key AND e.part = b.part), 0)
      FROM audit_key_baseline b WHERE b.section = '${s.kind}' AND b.key = ANY (ARRAY(SELECT key FROM inducted))),
  per_row AS (
    SELECT k.key, wm.part, coalesce(c.n, 0) AS n, coalesce(x.n, 0) AS facts,
           (SELECT count(*) FROM unprocessed u WHERE u.key = k.key AND u.part = wm.part) AS pending,
           (SELECT coalesce(sum(u.delta), 0) FROM unprocessed u
             WHERE u.key = k.key AND u.part = wm.part AND u.seq > coalesce(c.base_seq, 0)) AS pending_delta
      FROM keys k CROSS JOIN wm
      -- The count rows of the keys only: joined to the whole table, the planner (estimating a few
      -- hundred keys) hashed every count row, a scan that grew with the history (705k rows at 1M likes;
      -- docs/decisions/0016-periodic-audit-statements.md).
      LEFT JOIN (SELECT * FROM ${s.count} WHERE ${s.keyColumn} = ANY (ARRAY(SELECT key FROM keys))) c ON c.${s.keyColumn} = k.key AND c.part = wm.part
      LEFT JOIN facts x ON x.key = k.key AND x.part = wm.part),
  per_key AS (
    SELECT key, sum(n) AS n, sum(facts) AS facts, sum(pending) AS pending,
           bool_or(n + pending_delta <> facts) AS exact_broken
      FROM per_row GROUP BY key)
  SELECT (SELECT sum(last) FROM wm)::bigint AS last_seq,
         (SELECT sum(applied_upto) FROM wm)::bigint AS watermark,
         (SELECT sum(last - applied_upto) FROM wm)::bigint AS lag,
         (SELECT count(*) FROM unprocessed)::bigint AS unprocessed,
         (SELECT count(*) FROM per_key WHERE n <> facts)::bigint AS count_mismatch_keys,
         (SELECT coalesce(max(abs(n - facts)), 0) FROM per_key)::bigint AS max_abs_err,
         (SELECT count(*) FROM per_key WHERE exact_broken)::bigint AS exact_violations,
         (SELECT count(*) FROM per_key WHERE abs(n - facts) > pending)::bigint AS bound_violations,
         ((SELECT count(*) FROM unprocessed) > (SELECT sum(last - applied_upto) FROM wm)) AS unprocessed_over_lag,
         (SELECT coalesce(jsonb_agg(jsonb_build_object('key', p.key, 'part', p.part, 'truth', p.facts)), '[]'::jsonb) FROM per_row p
           WHERE p.key IN (SELECT key FROM per_key WHERE facts >= $5::bigint)) AS baselines,
         ARRAY(SELECT DISTINCT b.key FROM audit_key_baseline b
                WHERE b.section = '${s.kind}' AND b.key = ANY (ARRAY(SELECT key FROM keys))
                  AND b.key NOT IN (SELECT key FROM per_key WHERE facts >= $5::bigint)) AS dropped_baselines,
         (SELECT count(*) FROM inducted)::int AS inducted_keys`;
}

export const COMMENT_AUDIT_INCREMENTAL_SQL = counterAuditIncrementalSql(COMMENT_COUNTER);
export const LIKE_READ_SIDE_INCREMENTAL_SQL = counterReadSideIncrementalSql(LIKE_COUNTER);

/**
 * WRITE_SIDE_SQL's columns (like-audit.ts) over the range: last_seq and outbox_rows are the
 * range's expected and present events (equal iff no gap), version_mismatch_pairs over the pairs
 * with an event in it, delta_sum_mismatch_items over the changed and sampled items, misplaced
 * events in the range (plus the pruned ones' count, one row per partition).
 */
export const LIKE_WRITE_SIDE_INCREMENTAL_SQL = `
  WITH ${range("like_outbox")},
  pairs AS (SELECT DISTINCT user_id, item_id FROM ev),
  items AS (SELECT item_id FROM ev UNION SELECT unnest($4::text[])),
  ${inductedSql(LIKE_COUNTER.kind, "item_id")},
  recounted_items AS MATERIALIZED (SELECT item_id FROM items EXCEPT SELECT key FROM inducted),
  pair_events AS (
    SELECT p.user_id, p.item_id, k.events + coalesce(b.events, 0) AS events, coalesce(k.delta_sum, 0) + coalesce(b.delta_sum, 0) AS delta_sum,
           k.min_version <= b.max_version AS overlaps_pruned
      FROM pairs p
      CROSS JOIN LATERAL (SELECT count(*) AS events, sum(o.delta) AS delta_sum, min(o.version) AS min_version
                            FROM like_outbox o WHERE o.item_id = p.item_id AND o.user_id = p.user_id) k
      LEFT JOIN like_outbox_pruned b ON b.user_id = p.user_id AND b.item_id = p.item_id)
  SELECT (SELECT coalesce(sum(hi - lo), 0) FROM r)::bigint AS last_seq,
         (SELECT count(*) FROM ev)::bigint AS outbox_rows,
         (SELECT count(*) FROM gaps)::bigint AS seq_gap_partitions,
         (SELECT count(*) FROM pair_events e JOIN like_fact f USING (user_id, item_id)
           WHERE f.version <> e.events OR f.liked::int <> e.delta_sum OR e.overlaps_pruned)::bigint AS version_mismatch_pairs,
         -- An item audited by induction (key-baseline.ts) is left out: its liked facts and its delta sum
         -- were equal at "from" (the clean run that stored its baseline checked both), and both move
         -- by this range's deltas of its pairs, each checked above (version_mismatch_pairs).
         -- (A CTE the filter below cannot be pushed into: filtered before the EXCEPT, the hot item was counted anyway.)
         (SELECT count(*) FROM recounted_items i
           WHERE (SELECT count(*) FROM like_fact f WHERE f.item_id = i.item_id AND f.liked)
              <> (SELECT coalesce(sum(o.delta), 0) FROM like_outbox o WHERE o.item_id = i.item_id)
               + (SELECT coalesce(sum(b.delta_sum), 0) FROM like_outbox_pruned b WHERE b.item_id = i.item_id))::bigint AS delta_sum_mismatch_items,
         ((SELECT count(*) FROM ev, ledger_config cfg WHERE ev.part <> ledger_partition(ev.user_id, cfg.partitions))
          + (SELECT coalesce(sum(misplaced_events), 0) FROM retention_floor WHERE kind = 'likes'))::bigint AS misplaced_events`;

const relationPairs = `${range("relation_event")},
  pairs AS (SELECT DISTINCT follower, followee FROM ev)`;

/** RELATION_INVARIANTS (relation-audit.ts), each over the pairs with an event in the range (or the range's events). */
export const RELATION_INVARIANTS_INCREMENTAL = {
  invalidRows: `
    WITH ${relationPairs}
    SELECT count(*)::int AS n FROM pairs p JOIN relation r USING (follower, followee)
     WHERE r.follower = r.followee OR r.state NOT IN ('ACTIVE', 'PENDING', 'REMOVED')`,
  versionMismatchPairs: `
    WITH ${relationPairs}
    SELECT count(*)::int AS n FROM pairs p JOIN relation r USING (follower, followee)
      LEFT JOIN relation_event_pruned b ON b.follower = r.follower AND b.followee = r.followee
      LEFT JOIN LATERAL (SELECT count(*) AS events, max(version) AS max_version FROM relation_event e
                          WHERE e.follower = r.follower AND e.followee = r.followee) c ON true
      LEFT JOIN relation_event last ON last.follower = r.follower AND last.followee = r.followee AND last.version = r.version
     WHERE r.version <> c.events + coalesce(b.events, 0)
        OR (r.version > 0 AND (coalesce(last.state, CASE WHEN b.max_version = r.version THEN b.last_state END) IS DISTINCT FROM r.state
                               OR greatest(c.max_version, b.max_version) <> r.version))`,
  /** The blocks between the two accounts of a changed pair (a block writes REMOVED events for the pairs it ends). */
  blockedButNotRemoved: `
    WITH ${relationPairs}
    SELECT count(*)::int AS n FROM pairs p JOIN relation r USING (follower, followee)
     WHERE r.state <> 'REMOVED'
       AND EXISTS (SELECT 1 FROM block b WHERE (b.blocker = r.follower AND b.blocked = r.followee) OR (b.blocker = r.followee AND b.blocked = r.follower))`,
  illegalTransitions: `
    WITH ${range("relation_event")}
    SELECT ((SELECT count(*) FROM ev e
               LEFT JOIN relation_event p ON p.follower = e.follower AND p.followee = e.followee AND p.version = e.version - 1
               LEFT JOIN relation_event_pruned b ON b.follower = e.follower AND b.followee = e.followee
              WHERE (${previousRelationStateSql("e", "p", "b")}, e.state) NOT IN ${LEGAL_TRANSITIONS})
          + (SELECT coalesce(sum(illegal_transitions), 0) FROM retention_floor WHERE kind = 'relations'))::int AS n`,
  sequenceViolations: `
    WITH ${range("relation_event")}
    SELECT ((SELECT count(*) FROM gaps)
          + (SELECT count(*) FROM ev e, ledger_config c WHERE e.part <> ledger_partition(e.followee, c.partitions))
          + (SELECT coalesce(sum(misplaced_events), 0) FROM retention_floor WHERE kind = 'relations'))::int AS n`,
} as const;

/** PROJECTION_DIFF (relation-audit.ts) over the changed pairs, and the counts of their followees and the sampled ones ($4). */
export const PROJECTION_DIFF_INCREMENTAL = {
  resurrected: `
    WITH ${relationPairs}
    SELECT count(*)::int AS n FROM pairs x JOIN proj_follower p USING (follower, followee)
      LEFT JOIN relation r ON r.follower = p.follower AND r.followee = p.followee
     WHERE p.state = 'ACTIVE' AND r.state IS DISTINCT FROM 'ACTIVE'`,
  missing: `
    WITH ${relationPairs}
    SELECT count(*)::int AS n FROM pairs x JOIN relation r USING (follower, followee)
      LEFT JOIN proj_follower p ON p.follower = r.follower AND p.followee = r.followee
     WHERE r.state = 'ACTIVE' AND p.state IS DISTINCT FROM 'ACTIVE'`,
  wrongCounts: `
    WITH ${relationPairs},
    followees AS (SELECT followee FROM pairs UNION SELECT unnest($4::text[]))
    SELECT count(*)::int AS n FROM followees f
     WHERE (SELECT count(*) FROM relation r WHERE r.followee = f.followee AND r.state = 'ACTIVE')
        <> coalesce((SELECT c.n FROM proj_count c WHERE c.followee = f.followee), 0)`,
} as const;

/**
 * NOTIFICATION_AUDIT_SQL's columns over the fact pairs with an event in the ranges of the four
 * outboxes: $1..$3 the like outbox's range, $4..$6 the relation events', $7..$9 the comment
 * outbox's, $10..$12 the post outbox's. Each pair's truth is read from notification_truth by its
 * key (pushed into the view's branch of that source), so the statement reads the changed pairs
 * only; a pair's rows are compared recipient by recipient.
 */
export const NOTIFICATION_AUDIT_INCREMENTAL_SQL = `
  WITH lr AS (SELECT * FROM unnest($1::int[], $2::bigint[], $3::bigint[]) AS r(part, lo, hi)),
  rr AS (SELECT * FROM unnest($4::int[], $5::bigint[], $6::bigint[]) AS r(part, lo, hi)),
  cr AS (SELECT * FROM unnest($7::int[], $8::bigint[], $9::bigint[]) AS r(part, lo, hi)),
  pr AS (SELECT * FROM unnest($10::int[], $11::bigint[], $12::bigint[]) AS r(part, lo, hi)),
  pairs AS (
    SELECT DISTINCT 'like'::text AS source, o.user_id AS actor, o.item_id AS subject
      FROM lr JOIN like_outbox o ON o.part = lr.part AND o.seq > lr.lo AND o.seq <= lr.hi
    UNION
    SELECT DISTINCT 'relation', o.follower, o.followee
      FROM rr JOIN relation_event o ON o.part = rr.part AND o.seq > rr.lo AND o.seq <= rr.hi
    UNION
    SELECT DISTINCT 'comment', c.author, o.comment_id
      FROM cr JOIN comment_outbox o ON o.part = cr.part AND o.seq > cr.lo AND o.seq <= cr.hi
      JOIN comment c ON c.comment_id = o.comment_id
    UNION
    SELECT DISTINCT 'post', o.author, o.post_id
      FROM pr JOIN post_outbox o ON o.part = pr.part AND o.seq > pr.lo AND o.seq <= pr.hi),
  truth AS (
    SELECT t.source, t.actor, t.subject, t.recipient, t.type, notification_id(t.at, t.source, t.actor, t.subject, t.version) AS id
      FROM pairs x CROSS JOIN LATERAL (
        -- OFFSET 0 keeps the lookup per pair: flattened, it became a hash join of the whole truth
        -- view (every relation row, notification_id() on each) with the pairs.
        SELECT * FROM notification_truth t WHERE t.source = x.source AND t.actor = x.actor AND t.subject = x.subject AND t.active OFFSET 0) t),
  view AS (
    SELECT v.source, v.actor, v.subject, v.recipient, v.type, v.id
      FROM pairs x JOIN notification v ON v.source = x.source AND v.actor = x.actor AND v.subject = x.subject WHERE v.active),
  diff AS (
    SELECT coalesce(t.source, v.source) AS source, coalesce(t.actor, v.actor) AS actor, coalesce(t.subject, v.subject) AS subject,
           t.source IS NULL AS extra, v.source IS NULL AS missing
      FROM truth t FULL JOIN view v
        ON v.source = t.source AND v.actor = t.actor AND v.subject = t.subject AND v.recipient = t.recipient
     WHERE t.source IS NULL OR v.source IS NULL OR t.type <> v.type OR t.id <> v.id),
  judged AS (SELECT d.extra, d.missing, ${pendingEventSql("d")} AS pending FROM diff d)
  SELECT count(*) FILTER (WHERE extra AND NOT pending)::int AS extra,
         count(*) FILTER (WHERE missing AND NOT pending)::int AS missing,
         count(*) FILTER (WHERE NOT extra AND NOT missing AND NOT pending)::int AS differing,
         (SELECT count(*) FROM pairs x JOIN notification v ON v.source = x.source AND v.actor = x.actor AND v.subject = x.subject
           WHERE v.active AND v.actor = v.recipient)::int AS self_notifications,
         count(*) FILTER (WHERE pending)::int AS explained_by_pending,
         (SELECT coalesce(sum(s.last - w.applied_upto), 0) FROM like_seq s JOIN notification_like_watermark w USING (part))::int
       + (SELECT coalesce(sum(s.last - w.applied_upto), 0) FROM event_seq s JOIN notification_relation_watermark w USING (part))::int
       + (SELECT coalesce(sum(s.last - w.applied_upto), 0) FROM comment_seq s JOIN notification_comment_watermark w USING (part))::int
       + (SELECT coalesce(sum(s.last - w.applied_upto), 0) FROM post_seq s JOIN notification_post_watermark w USING (part))::int AS lag
    FROM judged`;

/**
 * WEBHOOK_INVARIANTS (webhook-audit.ts): the cursor checks read one row per endpoint and
 * partition, not history, and stay as they are (no parameters); the block and account outboxes'
 * gapless sequences are checked over their ranges ($1..$3 of the outbox WEBHOOK_SEQUENCE_OUTBOX names).
 */
export const WEBHOOK_INVARIANTS_INCREMENTAL = {
  cursorsPastEnd: WEBHOOK_INVARIANTS.cursorsPastEnd,
  holdsOffCursor: WEBHOOK_INVARIANTS.holdsOffCursor,
  cursorsBelowFloor: WEBHOOK_INVARIANTS.cursorsBelowFloor,
  blockSequenceViolations: `
    WITH ${range("webhook_block_event")}
    SELECT count(*)::int AS n FROM gaps`,
  accountSequenceViolations: `
    WITH ${range("account_outbox")}
    SELECT count(*)::int AS n FROM gaps`,
} as const satisfies Record<keyof typeof WEBHOOK_INVARIANTS, string>;

/** The outbox whose range each of the webhook section's range statements reads. */
export const WEBHOOK_SEQUENCE_OUTBOX = {
  blockSequenceViolations: "blocks",
  accountSequenceViolations: "accounts",
} as const satisfies Partial<Record<keyof typeof WEBHOOK_INVARIANTS, string>>;

/**
 * The readers whose home timelines the post events ($1..$3, the post outbox's range) and the
 * relation events ($4..$6) of a run touched: a post event's author
 * (its own timeline) and the author's ACTIVE followers, unless the author is hot (its posts are
 * not fanned out: no follower's inbox changed for them; docs/feed.md, "Hot authors"), and each
 * relation event's follower. A non-hot author has fewer followers than the hot threshold, so a
 * run touches at most (post events x the threshold) + relation events.
 */
export const FEED_TOUCHED_READERS_SQL = `
  WITH pr AS (SELECT * FROM unnest($1::int[], $2::bigint[], $3::bigint[]) AS r(part, lo, hi)),
  rr AS (SELECT * FROM unnest($4::int[], $5::bigint[], $6::bigint[]) AS r(part, lo, hi)),
  authors AS (SELECT DISTINCT o.author FROM pr JOIN post_outbox o ON o.part = pr.part AND o.seq > pr.lo AND o.seq <= pr.hi)
  SELECT a.author AS reader FROM authors a
  UNION
  SELECT r.follower FROM authors a JOIN relation r ON r.followee = a.author AND r.state = 'ACTIVE'
   WHERE NOT EXISTS (SELECT 1 FROM feed_hot_author h WHERE h.author = a.author)
  UNION
  SELECT o.follower FROM rr JOIN relation_event o ON o.part = rr.part AND o.seq > rr.lo AND o.seq <= rr.hi`;
