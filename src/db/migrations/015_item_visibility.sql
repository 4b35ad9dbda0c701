-- Item visibility (issue 18, item 1): who may see a likeable item is decided by its kind, in one
-- function, and the like write asks it inside the write (docs/security.md, "Item visibility and
-- blocks"). Before, the like routes treated every item that is no post as public, and a
-- comment's item was one: anyone liked, listed and counted comments of followers-only posts,
-- of authors who blocked them, and of deleted posts.

-- Every item names its kind, and there is no default: an insert that does not say what it is
-- fails, and a kind must be listed here before it can be stored. item_state() has a branch per
-- kind and answers MISSING for any other, so a kind without a rule is visible to nobody.
ALTER TABLE item ADD COLUMN kind text;
UPDATE item i SET kind = 'post' FROM post p WHERE p.post_id = i.item_id;
UPDATE item i SET kind = 'comment' FROM comment c WHERE c.comment_id = i.item_id;
UPDATE item SET kind = 'plain' WHERE kind IS NULL;
ALTER TABLE item ALTER COLUMN kind SET NOT NULL,
  ADD CONSTRAINT item_kind CHECK (kind IN ('plain', 'post', 'comment'));

-- A post's read rule (chapter 30), for reader p_reader (NULL: no token) and read mode p_mode,
-- with p_token the acl_token of the content judged (the post's own, or a comment's on it). The
-- same rule as PostService.canRead and the comment lists' statement (src/content/comments.ts).
CREATE FUNCTION post_readable(p_reader text, p_author text, p_visibility text, p_part integer, p_token bigint, p_mode text)
  RETURNS boolean
  LANGUAGE sql STABLE
AS $$
  SELECT CASE
    WHEN p_reader IS NOT NULL AND p_reader = p_author THEN true
    WHEN p_visibility = 'PUBLIC' THEN p_reader IS NULL OR NOT relation_blocked_either_way(p_reader, p_author)
    WHEN p_visibility <> 'FOLLOWERS' OR p_reader IS NULL THEN false
    WHEN p_mode = 'TRUTH' THEN EXISTS (SELECT 1 FROM relation r WHERE r.follower = p_reader AND r.followee = p_author AND r.state = 'ACTIVE')
    WHEN p_mode = 'PROJECTION_ONLY'
      OR (SELECT w.applied_upto FROM proj_watermark w WHERE w.part = p_part)
         >= CASE WHEN p_mode = 'CONTENT_TOKEN' THEN p_token ELSE (SELECT s.last FROM event_seq s WHERE s.part = p_part) END
      THEN EXISTS (SELECT 1 FROM proj_follower f WHERE f.followee = p_author AND f.follower = p_reader AND f.state = 'ACTIVE')
    ELSE EXISTS (SELECT 1 FROM relation r WHERE r.follower = p_reader AND r.followee = p_author AND r.state = 'ACTIVE')
  END
$$;

-- THE rule for any likeable item, by kind: MISSING (no such item, or gone for everyone: a
-- deleted post, a deleted comment, a comment of a deleted post), HIDDEN (live, but p_reader may
-- not see it), or VISIBLE.
--   plain:   visible to everybody (an item made likeable by an admin, PUT /v1/items/{id}).
--   post:    post_readable with the post's token.
--   comment: exactly as visible as the comment itself: post_readable of its post with the
--            comment's token, and no block either way between the reader and the comment's author.
-- Every like route asks this function: the writes inside the write (like_set_if_visible), the
-- reads (likers, count, likes/me) before reading.
CREATE FUNCTION item_state(p_reader text, p_item text, p_mode text)
  RETURNS text
  LANGUAGE plpgsql STABLE
AS $$
DECLARE
  v_kind text;
  v_post record;
  v_comment record;
BEGIN
  SELECT i.kind INTO v_kind FROM item i WHERE i.item_id = p_item;
  IF NOT FOUND THEN
    RETURN 'MISSING';
  END IF;
  CASE v_kind
    WHEN 'plain' THEN
      RETURN 'VISIBLE';
    WHEN 'post' THEN
      SELECT p.author, p.visibility, p.part, p.acl_token INTO v_post FROM post p WHERE p.post_id = p_item AND p.deleted_at IS NULL;
      IF NOT FOUND THEN
        RETURN 'MISSING';
      END IF;
      RETURN CASE WHEN post_readable(p_reader, v_post.author, v_post.visibility, v_post.part, v_post.acl_token, p_mode) THEN 'VISIBLE' ELSE 'HIDDEN' END;
    WHEN 'comment' THEN
      SELECT c.author AS comment_author, c.acl_token, p.author, p.visibility, p.part INTO v_comment
        FROM comment c JOIN post p ON p.post_id = c.post_id
       WHERE c.comment_id = p_item AND c.deleted_at IS NULL AND p.deleted_at IS NULL;
      IF NOT FOUND THEN
        RETURN 'MISSING';
      END IF;
      RETURN CASE
        WHEN post_readable(p_reader, v_comment.author, v_comment.visibility, v_comment.part, v_comment.acl_token, p_mode)
         AND (p_reader IS NULL OR NOT relation_blocked_either_way(p_reader, v_comment.comment_author))
        THEN 'VISIBLE' ELSE 'HIDDEN' END;
    ELSE
      RETURN 'MISSING';
  END CASE;
END
$$;

-- The API's like and unlike, decided and written in one statement: item_state in the truth,
-- then like_set (migrations 003/008) unchanged. A like needs a VISIBLE item. An unlike needs a
-- live one, and retracting one's own like is allowed also after a block hid the item
-- (docs/relations-authorization.md); with no like to retract, a HIDDEN item answers as a
-- missing one. 'HIDDEN' is the outcome for both (the route's 404), and nothing is written.
CREATE FUNCTION like_set_if_visible(p_user text, p_item text, p_want boolean, p_part integer)
  RETURNS TABLE (outcome text, liked boolean, version bigint, seq bigint)
  LANGUAGE plpgsql
AS $$
DECLARE
  v_state text := item_state(p_user, p_item, 'TRUTH');
BEGIN
  IF v_state = 'MISSING'
     OR (v_state = 'HIDDEN' AND (p_want OR NOT EXISTS (SELECT 1 FROM like_fact f WHERE f.user_id = p_user AND f.item_id = p_item AND f.liked))) THEN
    RETURN QUERY SELECT 'HIDDEN'::text, false, 0::bigint, 0::bigint;
    RETURN;
  END IF;
  RETURN QUERY SELECT l.outcome, l.liked, l.version, l.seq FROM like_set(p_user, p_item, p_want, p_part) l;
END
$$;

-- Replaced by like_set_if_visible: it answered 'POST' for a post and treated every other item
-- as public.
DROP FUNCTION like_set_plain_item(text, text, boolean, integer);
