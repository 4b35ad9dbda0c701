-- An author's posts, newest first, as a reader may see them (GET /v1/accounts/{id}/posts), and the
-- read-time merge of several authors' newest posts that the home timeline uses for authors too
-- followed to fan out (docs/feed-hot-authors.md).

-- The per-author index both reads walk: one range per author, newest first, in the keyset's order
-- (created_at, post_id). Deleted posts are never shown, so they are not in it.
CREATE INDEX post_author_newest ON post (author, created_at DESC, post_id DESC) WHERE deleted_at IS NULL;

-- The newest p_limit posts of the accounts p_authors that p_reader (NULL: no token) may read, after
-- the keyset (p_before_at, p_before_id) (both NULL: from the newest), newest first. Each post is
-- judged when the page is read, by the rule of post_readable with the post's own acl_token in the
-- default read mode of GET /v1/posts/{id} (CONTENT_TOKEN): the author reads all of it; SELF nobody
-- else; PUBLIC anyone in no block with the author either way; FOLLOWERS an ACTIVE follower, from the
-- follower projection when its watermark has reached the post's token, else from the relation
-- table. Deleted posts never.
--
-- The rule is post_readable's CASE written out, not a call of it: a call per row starts the SQL
-- function's executor for every post (a function with sub-selects is never inlined): 5x the
-- page's cost when measured (docs/feed-hot-authors.md). Written out, the checks that depend only on the reader and the
-- author (the block, the follow) reference no column of the post, so each becomes an InitPlan of
-- the author's range: run at most once per author, and only when a post needs it. The SQL test
-- test/content/author-posts-rule.test.ts holds it equal to post_readable on every case.
--
-- Cost: each author is one range of post_author_newest below the keyset, stopped after p_limit
-- readable rows (the LIMIT is inside the LATERAL), then at most (authors x p_limit) rows are
-- sorted for the page. It never reads an author's older history, whatever its size. The keyset is
-- an index condition: NULLs become (+infinity, ''), so no OR hides it from the index.
-- LANGUAGE sql, STABLE and a single SELECT: the planner inlines it into the caller's query.
CREATE FUNCTION author_posts_page(p_reader text, p_authors text[], p_before_at timestamptz, p_before_id text, p_limit integer)
  RETURNS TABLE (post_id text, author text, visibility text, body text, acl_token bigint, created_at timestamptz)
  LANGUAGE sql STABLE
AS $$
  SELECT p.post_id, p.author, p.visibility, p.body, p.acl_token, p.created_at
    FROM (SELECT DISTINCT a.author FROM unnest(p_authors) AS a(author)) a
    CROSS JOIN LATERAL (
      SELECT q.post_id, q.author, q.visibility, q.body, q.acl_token, q.created_at
        FROM post q
       WHERE q.author = a.author AND q.deleted_at IS NULL
         AND (q.created_at, q.post_id) < (coalesce(p_before_at, 'infinity'::timestamptz), coalesce(p_before_id, ''))
         AND CASE
               WHEN p_reader IS NOT NULL AND p_reader = a.author THEN true
               WHEN q.visibility = 'PUBLIC' THEN p_reader IS NULL OR NOT EXISTS (
                 SELECT 1 FROM block b
                  WHERE (b.blocker = p_reader AND b.blocked = a.author) OR (b.blocker = a.author AND b.blocked = p_reader))
               WHEN q.visibility <> 'FOLLOWERS' OR p_reader IS NULL THEN false
               WHEN (SELECT w.applied_upto FROM proj_watermark w WHERE w.part = q.part) >= q.acl_token THEN EXISTS (
                 SELECT 1 FROM proj_follower f WHERE f.followee = a.author AND f.follower = p_reader AND f.state = 'ACTIVE')
               ELSE EXISTS (
                 SELECT 1 FROM relation r WHERE r.follower = p_reader AND r.followee = a.author AND r.state = 'ACTIVE')
             END
       ORDER BY q.created_at DESC, q.post_id DESC
       LIMIT p_limit) p
   ORDER BY p.created_at DESC, p.post_id DESC
   LIMIT p_limit
$$;
