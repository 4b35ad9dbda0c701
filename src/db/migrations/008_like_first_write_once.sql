-- like_set writes a pair's first like once: the fact row is inserted liked at version 1 (and
-- its event written), instead of a v0 placeholder that the same transaction then updates. The
-- result is the one the placeholder path gives (the placeholder would have compared as "not
-- liked" and been updated to liked, version 1); it saves a heap tuple, an index entry and an
-- update's WAL on the most common write. An existing pair, and every unlike, take the
-- placeholder path of migration 003 unchanged. Concurrent first likes of one pair: the second
-- INSERT waits for the first's commit, then does nothing and finds the row liked (NOOP).
CREATE OR REPLACE FUNCTION like_set(p_user text, p_item text, p_want boolean, p_part integer)
  RETURNS TABLE (outcome text, liked boolean, version bigint, seq bigint)
  LANGUAGE plpgsql
AS $$
DECLARE
  cur_liked   boolean;
  cur_version bigint;
  new_seq     bigint;
BEGIN
  IF p_want THEN
    INSERT INTO like_fact (user_id, item_id, liked, version) VALUES (p_user, p_item, true, 1)
      ON CONFLICT DO NOTHING;
    IF FOUND THEN
      UPDATE like_seq s SET last = s.last + 1 WHERE s.part = p_part RETURNING s.last INTO new_seq;
      INSERT INTO like_outbox (part, seq, user_id, item_id, delta, version)
        VALUES (p_part, new_seq, p_user, p_item, 1, 1);
      RETURN QUERY SELECT 'CHANGED'::text, true, 1::bigint, new_seq;
      RETURN;
    END IF;
  ELSE
    INSERT INTO like_fact (user_id, item_id, liked, version) VALUES (p_user, p_item, false, 0)
      ON CONFLICT DO NOTHING;
  END IF;
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
