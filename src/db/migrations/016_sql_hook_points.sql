-- Hook points inside the write functions, so a deterministic race test parks the very statements
-- production runs (issue 19; docs/testing.md, "Hook points"). `ledger_hook(point, context)` returns
-- at once unless the setting `ledger.test_hooks` is 'on', which only test databases set (ALTER
-- DATABASE ... SET). Each call site tests the setting itself before it builds the context, so
-- production pays one current_setting call per hook point (docs/write-path.md). With the setting on,
-- a point is armed while a test holds the advisory lock (1752133483, hashtext(point)) exclusively:
-- the first transaction to arrive then sends a NOTICE with the point and its context (and its
-- pid) and waits for a shared lock on that key, which pg_locks shows as an ungranted advisory lock
-- until the test lets go. Only one transaction parks per point at a time (the claim, key
-- (1752133484, hashtext(point)), is held to the end of the parked transaction); later arrivals pass.
-- The functions below are those of migrations 007 and 008 unchanged, plus the hook calls.
CREATE FUNCTION ledger_hook(p_point text, p_context jsonb) RETURNS void
  LANGUAGE plpgsql
AS $$
DECLARE
  v_key integer;
BEGIN
  IF current_setting('ledger.test_hooks', true) IS DISTINCT FROM 'on' THEN
    RETURN;
  END IF;
  v_key := hashtext(p_point);
  -- Not armed: nobody holds the point's lock exclusively. Nothing is kept.
  IF pg_try_advisory_lock_shared(1752133483, v_key) THEN
    PERFORM pg_advisory_unlock_shared(1752133483, v_key);
    RETURN;
  END IF;
  -- Armed, and another transaction is parked here already: pass.
  IF NOT pg_try_advisory_xact_lock(1752133484, v_key) THEN
    RETURN;
  END IF;
  RAISE NOTICE USING MESSAGE = 'ledger_hook ' || p_point,
    DETAIL = (p_context || jsonb_build_object('pid', pg_backend_pid()))::text;
  PERFORM pg_advisory_xact_lock_shared(1752133483, v_key);
END
$$;

CREATE OR REPLACE FUNCTION relation_write_event(p_follower text, p_followee text, p_target text, p_version bigint, p_partitions integer)
  RETURNS bigint
  LANGUAGE plpgsql
AS $$
DECLARE
  v_part integer := ledger_partition(p_followee, p_partitions);
  v_seq  bigint;
BEGIN
  UPDATE relation r SET state = p_target, version = p_version, changed_at = now()
   WHERE r.follower = p_follower AND r.followee = p_followee;
  UPDATE event_seq s SET last = s.last + 1 WHERE s.part = v_part RETURNING s.last INTO v_seq;
  INSERT INTO relation_event (part, seq, follower, followee, state, version)
    VALUES (v_part, v_seq, p_follower, p_followee, p_target, p_version);
  IF current_setting('ledger.test_hooks', true) = 'on' THEN
    PERFORM ledger_hook('relation.afterEvent', jsonb_build_object(
      'follower', p_follower, 'followee', p_followee, 'state', p_target, 'version', p_version, 'part', v_part, 'seq', v_seq));
  END IF;
  RETURN v_seq;
END
$$;

CREATE OR REPLACE FUNCTION relation_follow(p_follower text, p_followee text, p_partitions integer)
  RETURNS TABLE (outcome text, state text, version bigint, seq bigint, reason text, code text)
  LANGUAGE plpgsql
AS $$
DECLARE
  cur      record;
  v_target text;
BEGIN
  SELECT * INTO cur FROM relation_lock_pair(p_follower, p_followee);
  IF current_setting('ledger.test_hooks', true) = 'on' THEN
    PERFORM ledger_hook('follow.afterLock', jsonb_build_object('follower', p_follower, 'followee', p_followee));
  END IF;
  -- After the lock: a block must take the same row lock first (chapter 30, 30-H/30-I).
  IF relation_blocked_either_way(p_follower, p_followee) THEN
    RETURN QUERY SELECT 'REJECTED', cur.state, cur.version, 0::bigint, 'blocked', 'BLOCKED';
    RETURN;
  END IF;
  IF cur.state = 'ACTIVE' THEN
    RETURN QUERY SELECT 'NOOP', cur.state, cur.version, 0::bigint, 'already ACTIVE', NULL::text;
    RETURN;
  END IF;
  SELECT CASE WHEN a.private THEN 'PENDING' ELSE 'ACTIVE' END INTO v_target FROM account a WHERE a.account_id = p_followee;
  IF v_target = 'PENDING' THEN
    -- A request is only PENDING while the account is private: the share lock waits for an
    -- unlock in progress (which approves the requests it can see) and re-reads the flag after it.
    SELECT CASE WHEN a.private THEN 'PENDING' ELSE 'ACTIVE' END INTO v_target FROM account a WHERE a.account_id = p_followee FOR SHARE;
  END IF;
  -- A request left PENDING towards an account that is public now is approved by asking again.
  IF cur.state = v_target THEN
    RETURN QUERY SELECT 'NOOP', cur.state, cur.version, 0::bigint, 'already ' || cur.state, NULL::text;
    RETURN;
  END IF;
  RETURN QUERY SELECT 'CHANGED', v_target, cur.version + 1,
    relation_write_event(p_follower, p_followee, v_target, cur.version + 1, p_partitions),
    cur.state || '->' || v_target, NULL::text;
END
$$;

CREATE OR REPLACE FUNCTION relation_block(p_blocker text, p_blocked text, p_partitions integer)
  RETURNS TABLE (outcome text, state text, version bigint, seq bigint, reason text, code text)
  LANGUAGE plpgsql
AS $$
DECLARE
  -- Both rows in (follower, followee) order, byte-wise like the caller's, the same for every transaction.
  v_first_is_blocker boolean := p_blocker COLLATE "C" < p_blocked COLLATE "C";
  v_f1 text := CASE WHEN v_first_is_blocker THEN p_blocker ELSE p_blocked END;
  v_e1 text := CASE WHEN v_first_is_blocker THEN p_blocked ELSE p_blocker END;
  cur1 record;
  cur2 record;
  v_inserted integer;
  v_state text;
  v_version bigint;
  v_seq bigint := 0;
  v_new_seq bigint;
  v_change record;
BEGIN
  SELECT * INTO cur1 FROM relation_lock_pair(v_f1, v_e1);
  SELECT * INTO cur2 FROM relation_lock_pair(v_e1, v_f1);
  IF current_setting('ledger.test_hooks', true) = 'on' THEN
    PERFORM ledger_hook('block.afterLock', jsonb_build_object('blocker', p_blocker, 'blocked', p_blocked));
  END IF;
  INSERT INTO block (blocker, blocked) VALUES (p_blocker, p_blocked) ON CONFLICT DO NOTHING;
  GET DIAGNOSTICS v_inserted = ROW_COUNT;
  -- The blocked user's follow of the blocker, as it is before any change.
  IF v_first_is_blocker THEN
    v_state := cur2.state; v_version := cur2.version;
  ELSE
    v_state := cur1.state; v_version := cur1.version;
  END IF;
  FOR v_change IN
    SELECT c.follower, c.followee, c.cur_version
      FROM (VALUES (1, v_f1, v_e1, cur1.state, cur1.version), (2, v_e1, v_f1, cur2.state, cur2.version))
           AS c(ord, follower, followee, cur_state, cur_version)
     WHERE c.cur_state <> 'REMOVED'
     ORDER BY ledger_partition(c.followee, p_partitions), c.ord
  LOOP
    v_new_seq := relation_write_event(v_change.follower, v_change.followee, 'REMOVED', v_change.cur_version + 1, p_partitions);
    IF v_change.follower = p_blocked THEN
      v_state := 'REMOVED'; v_version := v_change.cur_version + 1;
    END IF;
    v_seq := greatest(v_seq, v_new_seq);
  END LOOP;
  IF current_setting('ledger.test_hooks', true) = 'on' THEN
    PERFORM ledger_hook('block.beforeCommit', jsonb_build_object('blocker', p_blocker, 'blocked', p_blocked, 'seq', v_seq));
  END IF;
  IF v_inserted = 0 AND v_seq = 0 THEN
    RETURN QUERY SELECT 'NOOP', v_state, v_version, 0::bigint, 'already blocked', NULL::text;
    RETURN;
  END IF;
  RETURN QUERY SELECT 'CHANGED', v_state, v_version, v_seq, 'blocked', NULL::text;
END
$$;

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
      IF current_setting('ledger.test_hooks', true) = 'on' THEN
        PERFORM ledger_hook('like.beforeCommit', jsonb_build_object(
          'userId', p_user, 'itemId', p_item, 'part', p_part, 'seq', new_seq, 'version', 1));
      END IF;
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
  IF current_setting('ledger.test_hooks', true) = 'on' THEN
    PERFORM ledger_hook('like.beforeCommit', jsonb_build_object(
      'userId', p_user, 'itemId', p_item, 'part', p_part, 'seq', new_seq, 'version', cur_version + 1));
  END IF;
  RETURN QUERY SELECT 'CHANGED'::text, p_want, cur_version + 1, new_seq;
END
$$;
