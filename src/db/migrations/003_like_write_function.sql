-- The like write path of chapter 32 as one server-side function, so a like or unlike is one
-- round trip (one autocommit statement) instead of seven. Same statements, same order, same
-- locks as the statement-by-statement transaction it replaces (docs/write-path.md):
-- placeholder fact row, fact row FOR UPDATE, compare, and only on a change: version + 1, the
-- next number of the user's partition sequence, the outbox event. The fact row's FK to item
-- raises 23503 on the first statement for a missing item, before anything is written.
CREATE FUNCTION like_set(p_user text, p_item text, p_want boolean, p_part integer)
  RETURNS TABLE (outcome text, liked boolean, version bigint, seq bigint)
  LANGUAGE plpgsql
AS $$
DECLARE
  cur_liked   boolean;
  cur_version bigint;
  new_seq     bigint;
BEGIN
  INSERT INTO like_fact (user_id, item_id, liked, version) VALUES (p_user, p_item, false, 0)
    ON CONFLICT DO NOTHING;
  SELECT f.liked, f.version INTO cur_liked, cur_version
    FROM like_fact f WHERE f.user_id = p_user AND f.item_id = p_item FOR UPDATE;
  IF cur_liked = p_want THEN
    RETURN QUERY SELECT 'NOOP'::text, cur_liked, cur_version, 0::bigint;
    RETURN;
  END IF;
  UPDATE like_fact f SET liked = p_want, version = cur_version + 1, changed_at = now()
   WHERE f.user_id = p_user AND f.item_id = p_item;
  UPDATE like_seq s SET last = s.last + 1 WHERE s.part = p_part RETURNING s.last INTO new_seq;
  INSERT INTO like_outbox (part, seq, user_id, item_id, delta, version)
    VALUES (p_part, new_seq, p_user, p_item, CASE WHEN p_want THEN 1 ELSE -1 END, cur_version + 1);
  RETURN QUERY SELECT 'CHANGED'::text, p_want, cur_version + 1, new_seq;
END
$$;
