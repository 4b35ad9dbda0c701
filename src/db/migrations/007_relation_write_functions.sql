-- The relation writes of chapter 30 (follow, unfollow, decide, block, unblock) as server-side
-- functions, one round trip each. They run the statements of RelationService's step-by-step
-- path in the same order with the same locks (relation rows in (follower, followee) order, then
-- event_seq rows in ascending partition order); docs/write-path.md. A missing account fails the
-- placeholder INSERT's foreign key (23503) before anything is written. Self-targeted calls are
-- answered by the caller without a round trip.

-- Ensures the pair's row exists (a v0 REMOVED placeholder, no event) and locks it. Each
-- statement of a volatile function takes a new snapshot, so the SELECT sees a row another
-- transaction inserted meanwhile.
CREATE FUNCTION relation_lock_pair(p_follower text, p_followee text, OUT state text, OUT version bigint)
  LANGUAGE plpgsql
AS $$
BEGIN
  INSERT INTO relation (follower, followee, state, version) VALUES (p_follower, p_followee, 'REMOVED', 0)
    ON CONFLICT DO NOTHING;
  SELECT r.state, r.version INTO state, version
    FROM relation r WHERE r.follower = p_follower AND r.followee = p_followee FOR UPDATE;
END
$$;

-- State change under the pair's lock: the new state and version, the next seq of the followee's
-- partition, the event. Returns the seq.
CREATE FUNCTION relation_write_event(p_follower text, p_followee text, p_target text, p_version bigint, p_partitions integer)
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
  RETURN v_seq;
END
$$;

CREATE FUNCTION relation_blocked_either_way(p_a text, p_b text) RETURNS boolean
  LANGUAGE sql STABLE
AS $$
  SELECT EXISTS (SELECT 1 FROM block WHERE (blocker = p_a AND blocked = p_b) OR (blocker = p_b AND blocked = p_a))
$$;

CREATE FUNCTION relation_follow(p_follower text, p_followee text, p_partitions integer)
  RETURNS TABLE (outcome text, state text, version bigint, seq bigint, reason text, code text)
  LANGUAGE plpgsql
AS $$
DECLARE
  cur      record;
  v_target text;
BEGIN
  SELECT * INTO cur FROM relation_lock_pair(p_follower, p_followee);
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

CREATE FUNCTION relation_unfollow(p_follower text, p_followee text, p_partitions integer)
  RETURNS TABLE (outcome text, state text, version bigint, seq bigint, reason text, code text)
  LANGUAGE plpgsql
AS $$
DECLARE
  cur record;
BEGIN
  SELECT * INTO cur FROM relation_lock_pair(p_follower, p_followee);
  IF cur.state = 'REMOVED' THEN
    RETURN QUERY SELECT 'NOOP', cur.state, cur.version, 0::bigint, 'already REMOVED', NULL::text;
    RETURN;
  END IF;
  RETURN QUERY SELECT 'CHANGED', 'REMOVED', cur.version + 1,
    relation_write_event(p_follower, p_followee, 'REMOVED', cur.version + 1, p_partitions),
    cur.state || '->REMOVED', NULL::text;
END
$$;

CREATE FUNCTION relation_decide(p_followee text, p_follower text, p_approve boolean, p_partitions integer)
  RETURNS TABLE (outcome text, state text, version bigint, seq bigint, reason text, code text)
  LANGUAGE plpgsql
AS $$
DECLARE
  cur      record;
  v_target text := CASE WHEN p_approve THEN 'ACTIVE' ELSE 'REMOVED' END;
BEGIN
  SELECT * INTO cur FROM relation_lock_pair(p_follower, p_followee);
  IF cur.state <> 'PENDING' THEN
    RETURN QUERY SELECT 'REJECTED', cur.state, cur.version, 0::bigint, 'not PENDING (' || cur.state || ')', 'NOT_PENDING';
    RETURN;
  END IF;
  RETURN QUERY SELECT 'CHANGED', v_target, cur.version + 1,
    relation_write_event(p_follower, p_followee, v_target, cur.version + 1, p_partitions),
    cur.state || '->' || v_target, NULL::text;
END
$$;

-- blocker blocks blocked: the block row, and both directions of the relation REMOVED. The
-- result is about the blocked user's follow of the blocker; seq is the highest one written.
CREATE FUNCTION relation_block(p_blocker text, p_blocked text, p_partitions integer)
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
  IF v_inserted = 0 AND v_seq = 0 THEN
    RETURN QUERY SELECT 'NOOP', v_state, v_version, 0::bigint, 'already blocked', NULL::text;
    RETURN;
  END IF;
  RETURN QUERY SELECT 'CHANGED', v_state, v_version, v_seq, 'blocked', NULL::text;
END
$$;

-- Deletes the block row only; the relation stays REMOVED (invariant 4). A missing account is
-- reported as outcome ACCOUNT_NOT_FOUND with the missing ids as reason; nothing is written.
CREATE FUNCTION relation_unblock(p_blocker text, p_blocked text)
  RETURNS TABLE (outcome text, state text, version bigint, seq bigint, reason text, code text)
  LANGUAGE plpgsql
AS $$
DECLARE
  v_missing text;
  v_deleted integer;
  v_state text := 'REMOVED';
  v_version bigint := 0;
BEGIN
  SELECT string_agg(id, ', ' ORDER BY ord) INTO v_missing
    FROM unnest(ARRAY[p_blocker, p_blocked]) WITH ORDINALITY AS i(id, ord)
   WHERE NOT EXISTS (SELECT 1 FROM account a WHERE a.account_id = i.id);
  IF v_missing IS NOT NULL THEN
    RETURN QUERY SELECT 'ACCOUNT_NOT_FOUND', v_state, v_version, 0::bigint, v_missing, NULL::text;
    RETURN;
  END IF;
  DELETE FROM block b WHERE b.blocker = p_blocker AND b.blocked = p_blocked;
  GET DIAGNOSTICS v_deleted = ROW_COUNT;
  SELECT r.state, r.version INTO v_state, v_version FROM relation r WHERE r.follower = p_blocked AND r.followee = p_blocker;
  IF NOT FOUND THEN
    v_state := 'REMOVED'; v_version := 0;
  END IF;
  IF v_deleted = 0 THEN
    RETURN QUERY SELECT 'NOOP', v_state, v_version, 0::bigint, 'not blocked', NULL::text;
    RETURN;
  END IF;
  RETURN QUERY SELECT 'CHANGED', v_state, v_version, 0::bigint, 'unblocked', NULL::text;
END
$$;
