-- One write path: the single write is a batch of one (docs/write-path.md, "One write path").
--
-- like_set_batch and relation_set_batch are the only functions that decide a like, a follow, an
-- unfollow or a decision: the rules (the erasure guard's question, the tombstone, the visibility
-- check, the block check after the row lock, the private account's share lock, the numbering in
-- ascending partition order) are written once, there. like_set, like_set_if_visible,
-- relation_follow, relation_unfollow and relation_decide stay as names for one write, each a call
-- of the batch function with arrays of one.
--
-- One outcome vocabulary: CHANGED, NOOP, or REJECTED with a code. like_set_if_visible answered
-- 'HIDDEN' and relation_set_batch and relation_unblock answered 'ACCOUNT_NOT_FOUND' as the
-- outcome; they now answer REJECTED with code ITEM_NOT_FOUND or ACCOUNT_NOT_FOUND (the reason
-- still names the missing accounts). A refusal by the erasure guard or a tombstone is a REJECTED
-- row (ACCOUNT_BEING_ERASED, ACCOUNT_ERASED, with the account), as a batch answered it already.

DROP FUNCTION like_set_if_visible(text, text, boolean, integer);
DROP FUNCTION like_set(text, text, boolean, integer);

-- The library's like: any existing item.
CREATE FUNCTION like_set(p_user text, p_item text, p_want boolean, p_part integer)
  RETURNS TABLE (outcome text, liked boolean, version bigint, seq bigint, code text, account text)
  LANGUAGE sql
AS $$
  SELECT b.outcome, b.liked, b.version, b.seq, b.code, b.account
    FROM like_set_batch(ARRAY[p_user], ARRAY[p_item], ARRAY[p_want], ARRAY[p_part], ARRAY[false]) b
$$;

-- The API's like: only an item the user may see (item_state), else REJECTED ITEM_NOT_FOUND.
CREATE FUNCTION like_set_if_visible(p_user text, p_item text, p_want boolean, p_part integer)
  RETURNS TABLE (outcome text, liked boolean, version bigint, seq bigint, code text, account text)
  LANGUAGE sql
AS $$
  SELECT b.outcome, b.liked, b.version, b.seq, b.code, b.account
    FROM like_set_batch(ARRAY[p_user], ARRAY[p_item], ARRAY[p_want], ARRAY[p_part], ARRAY[true]) b
$$;

CREATE OR REPLACE FUNCTION relation_follow(p_follower text, p_followee text, p_partitions integer)
  RETURNS TABLE (outcome text, state text, version bigint, seq bigint, reason text, code text)
  LANGUAGE sql
AS $$
  SELECT b.outcome, b.state, b.version, b.seq, b.reason, b.code
    FROM relation_set_batch(ARRAY['follow'], ARRAY[p_follower], ARRAY[p_followee], ARRAY[NULL::boolean], p_partitions) b
$$;

CREATE OR REPLACE FUNCTION relation_unfollow(p_follower text, p_followee text, p_partitions integer)
  RETURNS TABLE (outcome text, state text, version bigint, seq bigint, reason text, code text)
  LANGUAGE sql
AS $$
  SELECT b.outcome, b.state, b.version, b.seq, b.reason, b.code
    FROM relation_set_batch(ARRAY['unfollow'], ARRAY[p_follower], ARRAY[p_followee], ARRAY[NULL::boolean], p_partitions) b
$$;

CREATE OR REPLACE FUNCTION relation_decide(p_followee text, p_follower text, p_approve boolean, p_partitions integer)
  RETURNS TABLE (outcome text, state text, version bigint, seq bigint, reason text, code text)
  LANGUAGE sql
AS $$
  SELECT b.outcome, b.state, b.version, b.seq, b.reason, b.code
    FROM relation_set_batch(ARRAY['decide'], ARRAY[p_followee], ARRAY[p_follower], ARRAY[p_approve], p_partitions) b
$$;

-- relation_set_batch as before, but for a missing account: REJECTED ACCOUNT_NOT_FOUND.
CREATE OR REPLACE FUNCTION relation_set_batch(p_ops text[], p_as text[], p_bs text[], p_approves boolean[], p_partitions integer)
 RETURNS TABLE(ord integer, outcome text, state text, version bigint, seq bigint, reason text, code text, account text)
 LANGUAGE plpgsql
AS $$
DECLARE
  n          integer := coalesce(cardinality(p_ops), 0);
  v_follower text[] := array_fill(NULL::text, ARRAY[n]);
  v_followee text[] := array_fill(NULL::text, ARRAY[n]);
  v_part     integer[] := array_fill(0, ARRAY[n]);
  -- Per write: which locked pair it is about (index into the pair arrays); its answer.
  v_pair_of  integer[] := array_fill(0, ARRAY[n]);
  o_outcome  text[] := array_fill(NULL::text, ARRAY[n]);
  o_state    text[] := array_fill('REMOVED'::text, ARRAY[n]);
  o_version  bigint[] := array_fill(0::bigint, ARRAY[n]);
  o_seq      bigint[] := array_fill(0::bigint, ARRAY[n]);
  o_reason   text[] := array_fill(NULL::text, ARRAY[n]);
  o_code     text[] := array_fill(NULL::text, ARRAY[n]);
  o_account  text[] := array_fill(NULL::text, ARRAY[n]);
  -- Per locked pair: ids, the state and version as locked, and as the batch's writes leave them.
  k_follower text[] := '{}';
  k_followee text[] := '{}';
  k_version0 bigint[] := '{}';
  k_state    text[] := '{}';
  k_version  bigint[] := '{}';
  v_refusal  record;
  v_pair     record;
  v_cur      record;
  v_target   text;
  v_k        integer;
  v_j        integer;
  v_parts    record;
  v_next     bigint;
  i          integer;
  v_hooks    boolean := current_setting('ledger.test_hooks', true) = 'on';
  v_hit      record;
BEGIN
  IF cardinality(p_as) IS DISTINCT FROM n OR cardinality(p_bs) IS DISTINCT FROM n OR cardinality(p_approves) IS DISTINCT FROM n THEN
    RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'relation_set_batch: the four arrays must have the same length';
  END IF;
  IF n = 0 THEN
    RETURN;
  END IF;

  -- Which pair each write is about, and whether its accounts let it write at all (before any lock,
  -- as the single functions' first INSERT meets the guard and the foreign keys).
  FOR i IN 1 .. n LOOP
    IF p_ops[i] IS NULL OR p_ops[i] NOT IN ('follow', 'unfollow', 'decide') OR p_as[i] IS NULL OR p_bs[i] IS NULL
       OR p_as[i] = p_bs[i] OR (p_ops[i] = 'decide' AND p_approves[i] IS NULL) THEN
      RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'relation_set_batch: write ' || i || ' is not a follow, unfollow or decide of two accounts';
    END IF;
    IF p_ops[i] = 'decide' THEN
      v_follower[i] := p_bs[i]; v_followee[i] := p_as[i];
    ELSE
      v_follower[i] := p_as[i]; v_followee[i] := p_bs[i];
    END IF;
    v_part[i] := ledger_partition(v_followee[i], p_partitions);
    SELECT * INTO v_refusal FROM relation_pair_refusal(v_follower[i], v_followee[i], p_as[i], p_bs[i]);
    IF v_refusal.code = 'ACCOUNT_BEING_ERASED' THEN
      o_outcome[i] := 'REJECTED'; o_code[i] := v_refusal.code; o_account[i] := v_refusal.account;
      o_reason[i] := 'account ' || v_refusal.account || ' is being erased';
    ELSIF v_refusal.code = 'ACCOUNT_NOT_FOUND' THEN
      o_outcome[i] := 'REJECTED'; o_code[i] := 'ACCOUNT_NOT_FOUND'; o_reason[i] := v_refusal.missing;
    END IF;
  END LOOP;

  -- Each pair once, in the global order (relation_lock_pair: placeholder, then FOR UPDATE).
  FOR v_pair IN
    SELECT w.follower, w.followee, array_agg(w.ord ORDER BY w.ord) AS ords
      FROM unnest(v_follower, v_followee, o_outcome) WITH ORDINALITY AS w(follower, followee, decided, ord)
     WHERE w.decided IS NULL
     GROUP BY w.follower, w.followee
     ORDER BY w.follower COLLATE "C", w.followee COLLATE "C"
  LOOP
    SELECT * INTO v_cur FROM relation_lock_pair(v_pair.follower, v_pair.followee);
    k_follower := k_follower || v_pair.follower;
    k_followee := k_followee || v_pair.followee;
    k_version0 := k_version0 || v_cur.version;
    k_state := k_state || v_cur.state;
    k_version := k_version || v_cur.version;
    v_k := cardinality(k_follower);
    FOREACH v_j IN ARRAY v_pair.ords LOOP
      v_pair_of[v_j] := v_k;
    END LOOP;
  END LOOP;

  -- The writes in arrival order, each on its pair's state as the earlier writes left it.
  FOR i IN 1 .. n LOOP
    CONTINUE WHEN o_outcome[i] IS NOT NULL;
    v_k := v_pair_of[i];
    o_state[i] := k_state[v_k]; o_version[i] := k_version[v_k];
    IF p_ops[i] = 'follow' THEN
      IF v_hooks THEN
        PERFORM ledger_hook('follow.afterLock', jsonb_build_object('follower', v_follower[i], 'followee', v_followee[i]));
      END IF;
      -- After the pair's lock: a block must take the same row lock first (chapter 30, 30-H/30-I).
      IF relation_blocked_either_way(v_follower[i], v_followee[i]) THEN
        o_outcome[i] := 'REJECTED'; o_reason[i] := 'blocked'; o_code[i] := 'BLOCKED';
        CONTINUE;
      END IF;
      IF k_state[v_k] = 'ACTIVE' THEN
        o_outcome[i] := 'NOOP'; o_reason[i] := 'already ACTIVE';
        CONTINUE;
      END IF;
      SELECT CASE WHEN a.private THEN 'PENDING' ELSE 'ACTIVE' END INTO v_target FROM account a WHERE a.account_id = v_followee[i];
      IF v_target = 'PENDING' THEN
        -- As relation_follow: the share lock waits for an unlock in progress and re-reads the flag after it.
        SELECT CASE WHEN a.private THEN 'PENDING' ELSE 'ACTIVE' END INTO v_target FROM account a WHERE a.account_id = v_followee[i] FOR SHARE;
      END IF;
      IF k_state[v_k] = v_target THEN
        o_outcome[i] := 'NOOP'; o_reason[i] := 'already ' || v_target;
        CONTINUE;
      END IF;
    ELSIF p_ops[i] = 'unfollow' THEN
      IF k_state[v_k] = 'REMOVED' THEN
        o_outcome[i] := 'NOOP'; o_reason[i] := 'already REMOVED';
        CONTINUE;
      END IF;
      v_target := 'REMOVED';
    ELSE
      IF k_state[v_k] <> 'PENDING' THEN
        o_outcome[i] := 'REJECTED'; o_reason[i] := 'not PENDING (' || k_state[v_k] || ')'; o_code[i] := 'NOT_PENDING';
        CONTINUE;
      END IF;
      v_target := CASE WHEN p_approves[i] THEN 'ACTIVE' ELSE 'REMOVED' END;
    END IF;
    o_outcome[i] := 'CHANGED'; o_reason[i] := k_state[v_k] || '->' || v_target;
    o_state[i] := v_target; o_version[i] := k_version[v_k] + 1;
    k_state[v_k] := v_target; k_version[v_k] := k_version[v_k] + 1;
  END LOOP;

  -- Each changed pair's row once, in its final state (rows the batch holds: no new lock). Just
  -- before its UPDATE, the pair is asked what the UPDATE guard (erasure_guard_relation through
  -- erasure_guard_accounts, TG_OP 'UPDATE') asks of the row, in a statement of its own, so with a
  -- snapshot as new as the trigger's would be: the first of follower, followee with an
  -- erased_state refuses it if that state is ERASING. An erasure that started after the first
  -- check (or while the batch waited for a lock) is caught here, as the trigger caught it; the
  -- pair's writes are then REJECTED rows, as the first check answers them, and its row is not
  -- written, where the trigger's exception aborted the whole batch. So the trigger is skipped for
  -- these UPDATEs only (ledger.relation_guarded, migration 026); the placeholder INSERTs of
  -- relation_lock_pair still meet the INSERT guard.
  PERFORM set_config('ledger.relation_guarded', 'on', true);
  FOR v_k IN 1 .. coalesce(cardinality(k_follower), 0) LOOP
    CONTINUE WHEN k_version[v_k] = k_version0[v_k];
    IF NOT erasure_writing() THEN
      SELECT a.account_id, a.erased_state INTO v_hit
        FROM unnest(ARRAY[k_follower[v_k], k_followee[v_k]]) WITH ORDINALITY AS x(id, ord) JOIN account a ON a.account_id = x.id
       WHERE a.erased_state IS NOT NULL ORDER BY x.ord LIMIT 1;
      IF FOUND AND v_hit.erased_state = 'ERASING' THEN
        FOR i IN 1 .. n LOOP
          CONTINUE WHEN v_pair_of[i] <> v_k;
          o_outcome[i] := 'REJECTED'; o_code[i] := 'ACCOUNT_BEING_ERASED'; o_account[i] := v_hit.account_id;
          o_reason[i] := 'account ' || v_hit.account_id || ' is being erased';
          o_state[i] := 'REMOVED'; o_version[i] := 0;
        END LOOP;
        CONTINUE;
      END IF;
    END IF;
    UPDATE relation r SET state = k_state[v_k], version = k_version[v_k], changed_at = now()
     WHERE r.follower = k_follower[v_k] AND r.followee = k_followee[v_k];
  END LOOP;
  PERFORM set_config('ledger.relation_guarded', '', true);

  -- The numbers: one update per partition, ascending, each taking that partition's count at once.
  FOR v_parts IN
    SELECT w.part, count(*) AS k FROM unnest(v_part, o_outcome) AS w(part, outcome)
     WHERE w.outcome = 'CHANGED' GROUP BY w.part ORDER BY w.part
  LOOP
    UPDATE event_seq s SET last = s.last + v_parts.k WHERE s.part = v_parts.part RETURNING s.last - v_parts.k INTO v_next;
    FOR i IN 1 .. n LOOP
      IF o_outcome[i] = 'CHANGED' AND v_part[i] = v_parts.part THEN
        v_next := v_next + 1;
        o_seq[i] := v_next;
      END IF;
    END LOOP;
  END LOOP;

  INSERT INTO relation_event (part, seq, follower, followee, state, version)
  SELECT w.part, w.seq, w.follower, w.followee, w.state, w.version
    FROM unnest(v_part, o_seq, v_follower, v_followee, o_state, o_version, o_outcome) AS w(part, seq, follower, followee, state, version, outcome)
   WHERE w.outcome = 'CHANGED';

  IF v_hooks THEN
    -- relation_write_event's point, once per event in arrival order, every event written and
    -- every lock held: the first to park is the batch's first event, one above its partition's
    -- committed last, its version one above its pair's committed one.
    FOR i IN 1 .. n LOOP
      CONTINUE WHEN o_outcome[i] IS DISTINCT FROM 'CHANGED';
      PERFORM ledger_hook('relation.afterEvent', jsonb_build_object(
        'follower', v_follower[i], 'followee', v_followee[i], 'state', o_state[i], 'version', o_version[i], 'part', v_part[i], 'seq', o_seq[i]));
    END LOOP;
  END IF;

  RETURN QUERY SELECT w.ord::integer, w.outcome, w.state, w.version, w.seq, w.reason, w.code, w.account
    FROM unnest(o_outcome, o_state, o_version, o_seq, o_reason, o_code, o_account) WITH ORDINALITY AS w(outcome, state, version, seq, reason, code, account, ord);
END
$$;

-- relation_unblock as before, but for a missing account: REJECTED ACCOUNT_NOT_FOUND.
CREATE OR REPLACE FUNCTION relation_unblock(p_blocker text, p_blocked text)
 RETURNS TABLE(outcome text, state text, version bigint, seq bigint, reason text, code text)
 LANGUAGE plpgsql
AS $$
DECLARE
  v_missing text;
  v_erasing text;
  v_deleted integer;
  v_state text := 'REMOVED';
  v_version bigint := 0;
BEGIN
  SELECT string_agg(id, ', ' ORDER BY ord) INTO v_missing
    FROM unnest(ARRAY[p_blocker, p_blocked]) WITH ORDINALITY AS i(id, ord)
   WHERE NOT EXISTS (SELECT 1 FROM account a WHERE a.account_id = i.id AND a.erased_state IS DISTINCT FROM 'ERASED');
  IF v_missing IS NOT NULL THEN
    RETURN QUERY SELECT 'REJECTED', v_state, v_version, 0::bigint, v_missing, 'ACCOUNT_NOT_FOUND';
    RETURN;
  END IF;
  SELECT a.account_id INTO v_erasing FROM account a WHERE a.account_id IN (p_blocker, p_blocked) AND a.erased_state = 'ERASING' LIMIT 1;
  IF v_erasing IS NOT NULL THEN
    PERFORM erasure_refuse(v_erasing);
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
