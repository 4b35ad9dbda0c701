-- The hot authors a reader follows now (ACTIVE): the authors a home page merges. The same query,
-- now in PL/pgSQL: a SQL function that cannot be inlined (this one aggregates) is parsed and
-- planned again at every call, about a fifth of a home page's execution at 100,000 accounts;
-- PL/pgSQL keeps its plan for the session. STABLE either way, so it reads the page's snapshot
-- (docs/feed.md, "The page").
CREATE OR REPLACE FUNCTION feed_hot_followees(p_reader text)
  RETURNS text[] LANGUAGE plpgsql STABLE
AS $$
BEGIN
  RETURN (SELECT coalesce(array_agg(h.author ORDER BY h.author), '{}')
            FROM feed_hot_author h JOIN relation r ON r.follower = p_reader AND r.followee = h.author AND r.state = 'ACTIVE');
END
$$;
