-- The like route's write for an item that is no post, in one round trip. Liking a post needs the
-- reader's right to see it (blocks, followers-only) checked first, in TypeScript; an item that is
-- no post is visible to everybody, so its check was only "does it exist", which like_set's first
-- statement answers anyway (the fact row's FK: 23503, nothing written). This function answers
-- 'POST' without writing anything when the item is a post, so the route takes its checked path;
-- otherwise it is like_set, unchanged (docs/write-path.md, "The HTTP like path").
CREATE FUNCTION like_set_plain_item(p_user text, p_item text, p_want boolean, p_part integer)
  RETURNS TABLE (outcome text, liked boolean, version bigint, seq bigint)
  LANGUAGE plpgsql
AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM post p WHERE p.post_id = p_item) THEN
    RETURN QUERY SELECT 'POST'::text, NULL::boolean, NULL::bigint, NULL::bigint;
    RETURN;
  END IF;
  RETURN QUERY SELECT l.outcome, l.liked, l.version, l.seq FROM like_set(p_user, p_item, p_want, p_part) l;
END
$$;
