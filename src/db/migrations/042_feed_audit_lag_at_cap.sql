-- The home-timeline invariant under lag at the cap (docs/feed.md, "The invariant"). A difference
-- was explained by a pending event only on its own row (the post's event, or the pair's relation
-- event). At the cap a pending event moves the cut of the reader's newest cap, so rows of other
-- posts differ too: the 60-minute soak's final audit, run before the feed had drained, reported
-- 1,260 "extra" rows that were inbox rows pushed out by pending newer posts. A reader with any
-- pending event that can change its inbox is now judged after that event: its differences count as
-- explained by pending (lag), and the periodic audit audits the reader again once the event is
-- applied (its ranges stop at the feed's watermarks).
CREATE OR REPLACE FUNCTION feed_audit_readers(p_readers text[], p_max integer)
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
  -- Readers with an event not applied yet that can change their inbox: a post event of an author
  -- in their truth's authors, or a relation event of theirs. At the cap, such an event moves the
  -- cut: a new post pending pushes the inbox's oldest row out of the truth's newest cap (extra), a
  -- deletion pending pulls an older one in (missing). Those rows are lag, not lies.
  -- The pending events are read from each partition's range above the feed's watermark (the
  -- outboxes' primary keys), a few rows under lag, before they are matched with the readers.
  pending_authors AS MATERIALIZED (
    SELECT DISTINCT o.author FROM feed_post_watermark w
      JOIN post_outbox o ON o.part = w.part AND o.seq > w.applied_upto
     WHERE NOT EXISTS (SELECT 1 FROM feed_post_seen s WHERE s.part = o.part AND s.seq = o.seq)),
  pending_followers AS MATERIALIZED (
    SELECT DISTINCT o.follower FROM feed_relation_watermark w
      JOIN relation_event o ON o.part = w.part AND o.seq > w.applied_upto
     WHERE NOT EXISTS (SELECT 1 FROM feed_relation_seen s WHERE s.part = o.part AND s.seq = o.seq)),
  lagging AS (
    SELECT a.reader FROM authors a JOIN pending_authors p ON p.author = a.author
    UNION
    SELECT rd.reader FROM rd JOIN pending_followers f ON f.follower = rd.reader),
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
                      AND NOT EXISTS (SELECT 1 FROM feed_relation_seen s WHERE s.part = o.part AND s.seq = o.seq))
        OR EXISTS (SELECT 1 FROM lagging l WHERE l.reader = d.reader) AS pending
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
