-- The home-timeline invariant over a set of readers (docs/feed.md, "The invariant"), so the
-- periodic audit can check the readers an event touched instead of every timeline each run
-- (docs/counters.md, "The periodic audit is incremental").
--
-- ONE invariant: feed_audit_readers is the only definition of the checks, and feed_audit (the full
-- form of `social-ledger audit` and GET /v1/admin/audit) is feed_audit_readers over every reader
-- that can have an inbox or a truth: every inbox's reader, every ACTIVE follower, every author of
-- a live post. Two definitions (a full one with hash joins over feed_truth, a restricted copy)
-- would be two invariants that drift apart unseen; a single one with "NULL: all readers" would be
-- planned once, generically, for both cases (a SQL function's statements are planned without its
-- arguments' values), so it would scan feed_truth for three readers too. Every check is per
-- reader (a reader's rows against its truth, its cap, its horizon), so the full form is the sum
-- of the per-reader forms; only `lag` is global, and is the same in both.
--
-- Each reader's truth is read by a LATERAL lookup per (reader, followee or itself), and its inbox
-- per reader (OFFSET 0 keeps each a lookup: the planner cannot flatten it into a join of the whole
-- feed_truth or feed_inbox with the readers), through relation's primary key (follower first),
-- post_by_author and feed_inbox's primary key. Looked up per reader only, the planner hashed the
-- reader's few follows against a scan of every post, once per reader (3,000 posts read for one
-- reader; test/audit/feed-incremental-audit.test.ts).
-- So the restricted form reads the rows of its readers' follows and their followees' posts, and
-- the full form costs what it did (every truth row, read reader by reader instead of by one hash
-- join).
CREATE FUNCTION feed_audit_readers(p_readers text[], p_max integer)
  RETURNS TABLE (readers integer, extra integer, missing integer, over_cap integer, below_horizon integer,
                 explained_by_pending integer, lag integer)
  LANGUAGE sql STABLE
AS $$
  WITH rd AS (SELECT DISTINCT x AS reader FROM unnest(p_readers) AS x WHERE x IS NOT NULL),
  -- The accounts whose posts can be in a reader's truth: those it follows ACTIVE, and itself.
  authors AS (
    SELECT rd.reader, r.followee AS author FROM rd JOIN relation r ON r.follower = rd.reader AND r.state = 'ACTIVE'
    UNION SELECT rd.reader, rd.reader FROM rd),
  above AS MATERIALIZED (
    SELECT t.* FROM authors a LEFT JOIN feed_reader h ON h.reader = a.reader CROSS JOIN LATERAL (
      SELECT t.reader, t.post_id, t.author, t.at FROM feed_truth t
       WHERE t.reader = a.reader AND t.author = a.author
         AND (h.horizon_at IS NULL OR (t.at, t.post_id) > (h.horizon_at, h.horizon_id))
      OFFSET 0) t),
  ranked AS (SELECT a.*, row_number() OVER (PARTITION BY a.reader ORDER BY a.at DESC, a.post_id DESC) AS rn FROM above a),
  truth AS (SELECT reader, post_id, author FROM ranked WHERE rn <= p_max),
  inbox AS MATERIALIZED (
    SELECT i.* FROM rd CROSS JOIN LATERAL (
      SELECT i.reader, i.post_id, i.author, i.at FROM feed_inbox i WHERE i.reader = rd.reader OFFSET 0) i),
  diff AS (
    SELECT coalesce(t.reader, i.reader) AS reader, coalesce(t.post_id, i.post_id) AS post_id,
           coalesce(t.author, i.author) AS author, t.reader IS NULL AS extra
      FROM truth t FULL JOIN inbox i ON i.reader = t.reader AND i.post_id = t.post_id
     WHERE t.reader IS NULL OR i.reader IS NULL),
  judged AS (
    SELECT d.extra,
           EXISTS (SELECT 1 FROM feed_reader f WHERE f.reader = d.reader AND f.skipped_since IS NOT NULL)
             AND (NOT d.extra OR EXISTS (SELECT 1 FROM above a WHERE a.reader = d.reader AND a.post_id = d.post_id)) AS skipped,
           EXISTS (SELECT 1 FROM post_outbox o JOIN feed_post_watermark w USING (part)
                    WHERE o.post_id = d.post_id AND o.seq > w.applied_upto
                      AND NOT EXISTS (SELECT 1 FROM feed_post_seen s WHERE s.part = o.part AND s.seq = o.seq))
        OR EXISTS (SELECT 1 FROM relation_event o JOIN feed_relation_watermark w USING (part)
                    WHERE o.follower = d.reader AND o.followee = d.author AND o.seq > w.applied_upto
                      AND NOT EXISTS (SELECT 1 FROM feed_relation_seen s WHERE s.part = o.part AND s.seq = o.seq)) AS pending
      FROM diff d)
  SELECT (SELECT count(DISTINCT reader) FROM (SELECT reader FROM inbox UNION SELECT reader FROM truth) r)::int,
         count(*) FILTER (WHERE extra AND NOT pending AND NOT skipped)::int,
         count(*) FILTER (WHERE NOT extra AND NOT pending AND NOT skipped)::int,
         (SELECT count(*) FROM (SELECT 1 FROM inbox GROUP BY reader HAVING count(*) > p_max) o)::int,
         (SELECT count(*) FROM inbox i JOIN feed_reader h ON h.reader = i.reader
           WHERE (i.at, i.post_id) <= (h.horizon_at, h.horizon_id))::int,
         count(*) FILTER (WHERE pending AND NOT skipped)::int,
         ((SELECT coalesce(sum(s.last - w.applied_upto), 0) FROM post_seq s JOIN feed_post_watermark w USING (part))
        + (SELECT coalesce(sum(s.last - w.applied_upto), 0) FROM event_seq s JOIN feed_relation_watermark w USING (part)))::int
    FROM judged
$$;

-- The full form: the same checks over every reader that can have an inbox or a truth (the readers
-- of feed_truth are ACTIVE followers and authors of live posts).
CREATE OR REPLACE FUNCTION feed_audit(p_max integer)
  RETURNS TABLE (readers integer, extra integer, missing integer, over_cap integer, below_horizon integer,
                 explained_by_pending integer, lag integer)
  LANGUAGE sql STABLE
AS $$
  SELECT * FROM feed_audit_readers(
    ARRAY(SELECT i.reader FROM feed_inbox i
          UNION SELECT r.follower FROM relation r WHERE r.state = 'ACTIVE'
          UNION SELECT p.author FROM post p WHERE p.deleted_at IS NULL),
    p_max)
$$;
