-- Less WAL, and no per-row trigger call, on relation writes (issue 22; docs/write-path.md,
-- "Group commit", "The erasure guard after the update (migration 026)").
--
-- The erasure guard of relation (migration 020) as a BEFORE UPDATE row trigger made every UPDATE
-- of the table fetch and lock the old row first (PostgreSQL locks the row it hands a BEFORE
-- UPDATE trigger, whatever its WHEN says; migration 024 found it on like_fact). On UPDATE it is
-- now an AFTER row trigger: the same function, still inside the writing statement (an AFTER row
-- trigger fires at the end of its statement and its exception aborts it), with the row already
-- locked by the UPDATE itself, so it refuses exactly the writes it refused. On INSERT it stays
-- BEFORE under its old name (the placeholder INSERT ... ON CONFLICT DO NOTHING of
-- relation_lock_pair meets it, as before; an INSERT has no old row to lock).
-- block is not changed: no write path updates a block row (they are inserted and deleted).
DROP TRIGGER relation_erasure_guard ON relation;
CREATE TRIGGER relation_erasure_guard BEFORE INSERT ON relation FOR EACH ROW EXECUTE FUNCTION erasure_guard_relation();
-- Skipped while relation_set_batch writes its own rows: it asks the same question itself, right
-- before each UPDATE (below), and answers a refusal per write instead of aborting the batch.
CREATE TRIGGER relation_erasure_guard_update AFTER UPDATE ON relation FOR EACH ROW
  WHEN (current_setting('ledger.relation_guarded', true) IS DISTINCT FROM 'on')
  EXECUTE FUNCTION erasure_guard_relation();

-- relation_set_batch of migration 025, changed only in the loop that writes the changed pairs.
CREATE OR REPLACE FUNCTION relation_set_batch(p_ops text[], p_as text[], p_bs text[], p_approves boolean[], p_partitions integer)
  RETURNS TABLE (ord integer, outcome text, state text, version bigint, seq bigint, reason text, code text, account text)
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
      o_outcome[i] := 'ACCOUNT_NOT_FOUND'; o_reason[i] := v_refusal.missing;
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
