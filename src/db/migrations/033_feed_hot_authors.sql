-- Hot authors in the home timeline (docs/feed.md, "Hot authors"): the posts of an author with at
-- least LEDGER_FEED_HOT_FOLLOWERS followers are not fanned out to followers' inboxes; each home
-- page merges them at read time from post_author_newest.

-- The authors whose posts are merged at read time. Written only by the post consumer, under the
-- author's feed lock, when it applies one of the author's post events: the read and the fan-out
-- both follow this set, never the follower count directly, so they cannot disagree.
CREATE TABLE feed_hot_author (
  author text PRIMARY KEY,
  since  timestamptz NOT NULL DEFAULT now()
);

-- The inbox truth leaves out the posts merged at read time: a hot author's posts reach only the
-- author's own inbox. Everything that plans, installs or audits inboxes reads this view, so a new
-- follow of a hot author merges nothing and the audit does not expect its posts in inboxes.
CREATE OR REPLACE VIEW feed_truth AS
  SELECT r.follower AS reader, p.post_id, p.author, p.created_at AS at
    FROM relation r JOIN post p ON p.author = r.followee
   WHERE r.state = 'ACTIVE' AND p.deleted_at IS NULL
     AND NOT EXISTS (SELECT 1 FROM feed_hot_author h WHERE h.author = r.followee)
     AND post_readable(r.follower, p.author, p.visibility, p.part, p.acl_token, 'TRUTH')
  UNION ALL
  SELECT p.author, p.post_id, p.author, p.created_at FROM post p WHERE p.deleted_at IS NULL;

-- Judges the authors of a post batch against the threshold, by the follower count projection
-- (proj_count): hot from p_threshold followers on. Called by the post consumer with the authors'
-- feed locks held, before it reads its plan. Returns the authors whose state changed and the new
-- state; the caller turns those into a transition plan (feed_hot_transition_plan). The count only
-- decides cost (which side carries the posts), never who may read: both sides give the same page.
CREATE FUNCTION feed_judge_hot_authors(p_authors text[], p_threshold integer)
  RETURNS TABLE (author text, hot boolean) LANGUAGE sql
AS $$
  WITH judged AS (
    SELECT a.author, coalesce((SELECT c.n FROM proj_count c WHERE c.followee = a.author), 0) >= p_threshold AS hot,
           EXISTS (SELECT 1 FROM feed_hot_author h WHERE h.author = a.author) AS was_hot
      FROM (SELECT DISTINCT x AS author FROM unnest(p_authors) AS x) a),
  heated AS (
    INSERT INTO feed_hot_author (author) SELECT j.author FROM judged j WHERE j.hot AND NOT j.was_hot ORDER BY 1
    ON CONFLICT DO NOTHING RETURNING feed_hot_author.author),
  cooled AS (
    DELETE FROM feed_hot_author h USING judged j WHERE h.author = j.author AND NOT j.hot RETURNING h.author)
  SELECT heated.author, true FROM heated
  UNION ALL
  SELECT cooled.author, false FROM cooled
$$;

-- What an author's change of state means for the inboxes, read after feed_judge_hot_authors in
-- the same transaction (rows op, reader, post_id, author as a consumer plan):
-- - heated: the author's rows leave its followers' inboxes (the merge carries them from now on,
--   and they no longer take places under the cap);
-- - cooled: every follower's inbox gets the author's newest p_max posts of its truth, as a follow
--   would merge them (posts made while hot, and for followers who followed while it was hot, all
--   of them): the fan-out deferred while hot, paid once.
CREATE FUNCTION feed_hot_transition_plan(p_heated text[], p_cooled text[], p_max integer)
  RETURNS TABLE (op text, reader text, post_id text, author text) LANGUAGE sql STABLE
AS $$
  SELECT 'remove', i.reader, i.post_id, i.author
    FROM unnest(p_heated) AS a(author)
    JOIN relation r ON r.followee = a.author AND r.state = 'ACTIVE'
    JOIN feed_inbox i ON i.reader = r.follower AND i.author = a.author
  UNION ALL
  SELECT 'add', r.follower, t.post_id, t.author
    FROM unnest(p_cooled) AS a(author)
    JOIN relation r ON r.followee = a.author AND r.state = 'ACTIVE'
    CROSS JOIN LATERAL (
      SELECT t.post_id, t.author FROM feed_truth t
       WHERE t.reader = r.follower AND t.author = a.author ORDER BY t.at DESC, t.post_id DESC LIMIT p_max) t
$$;

-- The hot authors a reader follows now (ACTIVE): the authors a home page merges.
CREATE FUNCTION feed_hot_followees(p_reader text)
  RETURNS text[] LANGUAGE sql STABLE
AS $$
  SELECT coalesce(array_agg(h.author ORDER BY h.author), '{}')
    FROM feed_hot_author h JOIN relation r ON r.follower = p_reader AND r.followee = h.author AND r.state = 'ACTIVE'
$$;
