-- Less WAL per like (issue 22; docs/write-path.md, "No separate row-lock record"): a write that
-- changes an existing fact row locks and changes it with ONE statement,
--   UPDATE like_fact ... WHERE <the pair> AND <the state the decision was made on> RETURNING ...,
-- instead of SELECT ... FOR UPDATE (a heap lock record of its own in the WAL, and a dirtied page)
-- followed by the UPDATE. Under READ COMMITTED an UPDATE that finds the row locked by another
-- transaction waits for it and then re-checks its WHERE on the row's newest version, so:
--   * 1 row: the row was in the expected state when it was locked, and the UPDATE holds its lock
--     to commit, exactly as the FOR UPDATE did;
--   * 0 rows: the newest committed version is not in that state. The function then reads the
--     row (a plain read, no lock) and decides again; a write that changes nothing (NOOP, or a
--     REJECTED unlike on a hidden item) is answered from that committed state and writes
--     nothing at all, neither a lock record nor, for a NOOP-only call, a transaction id.
-- Outcomes, arrival order, the lock order ((item, user) COLLATE "C" across a batch's pairs,
-- then like_seq rows ascending), the erasure refusal, like.beforeCommit and the numbering
-- (taken after every fact lock, one UPDATE per partition) are those of migrations 016 and 021.

-- The erasure guard of like_fact (migrations 020, 021) as a BEFORE UPDATE row trigger made every
-- UPDATE of the table lock the old row first (PostgreSQL fetches and locks the row a BEFORE
-- UPDATE trigger is given, whatever its WHEN says: a heap lock record per update, the very record
-- this migration removes). On UPDATE it is now an AFTER row trigger: the same function, the same
-- WHEN, still inside the writing statement (an AFTER row trigger fires at the end of its statement,
-- and its exception aborts that statement), with the row already locked by the UPDATE itself, so
-- it refuses exactly the writes it refused. On INSERT it stays BEFORE: it then also fires for an
-- INSERT ... ON CONFLICT DO NOTHING that inserts nothing, which is how like_set refuses a NOOP by
-- an account being erased, and an INSERT has no old row to lock. The INSERT trigger keeps its name
-- (the importer disables it by name around its bulk INSERT).
DROP TRIGGER like_fact_erasure_guard ON like_fact;
CREATE TRIGGER like_fact_erasure_guard BEFORE INSERT ON like_fact FOR EACH ROW
  WHEN (current_setting('ledger.like_guarded', true) IS DISTINCT FROM 'on')
  EXECUTE FUNCTION erasure_guard_like();
CREATE TRIGGER like_fact_erasure_guard_update AFTER UPDATE ON like_fact FOR EACH ROW
  WHEN (current_setting('ledger.like_guarded', true) IS DISTINCT FROM 'on')
  EXECUTE FUNCTION erasure_guard_like();

-- like_set: an existing pair is changed by one conditional UPDATE; the first like is migration
-- 008's INSERT, an unlike of a never-liked pair still leaves its v0 placeholder (as before), and
-- both INSERTs still fire the erasure guard trigger for NOOPs too, as before.
CREATE OR REPLACE FUNCTION like_set(p_user text, p_item text, p_want boolean, p_part integer)
  RETURNS TABLE (outcome text, liked boolean, version bigint, seq bigint)
  LANGUAGE plpgsql
AS $$
DECLARE
  cur_liked   boolean;
  new_version bigint;
  new_seq     bigint;
BEGIN
  LOOP
    IF p_want THEN
      INSERT INTO like_fact (user_id, item_id, liked, version) VALUES (p_user, p_item, true, 1)
        ON CONFLICT DO NOTHING;
      IF FOUND THEN
        new_version := 1;
        EXIT;
      END IF;
    ELSE
      INSERT INTO like_fact (user_id, item_id, liked, version) VALUES (p_user, p_item, false, 0)
        ON CONFLICT DO NOTHING;
    END IF;
    -- Lock and change in one statement; 0 rows: the pair's newest committed state already is p_want.
    UPDATE like_fact f SET liked = p_want, version = f.version + 1, changed_at = now()
     WHERE f.user_id = p_user AND f.item_id = p_item AND f.liked <> p_want
    RETURNING f.version INTO new_version;
    EXIT WHEN FOUND;
    SELECT f.liked, f.version INTO cur_liked, new_version
      FROM like_fact f WHERE f.user_id = p_user AND f.item_id = p_item;
    IF FOUND AND cur_liked = p_want THEN
      RETURN QUERY SELECT 'NOOP'::text, cur_liked, new_version, 0::bigint;
      RETURN;
    END IF;
    -- A write committed between the two statements and moved the pair away from p_want (or the
    -- row was deleted): decide again from the start.
  END LOOP;
  UPDATE like_seq s SET last = s.last + 1 WHERE s.part = p_part RETURNING s.last INTO new_seq;
  INSERT INTO like_outbox (part, seq, user_id, item_id, delta, version)
    VALUES (p_part, new_seq, p_user, p_item, CASE WHEN p_want THEN 1 ELSE -1 END, new_version);
  IF current_setting('ledger.test_hooks', true) = 'on' THEN
    PERFORM ledger_hook('like.beforeCommit', jsonb_build_object(
      'userId', p_user, 'itemId', p_item, 'part', p_part, 'seq', new_seq, 'version', new_version));
  END IF;
  RETURN QUERY SELECT 'CHANGED'::text, p_want, new_version, new_seq;
END
$$;

-- like_set_batch: per pair (in the global order), a pair written once in the batch is first
-- tried with the one conditional UPDATE (the common case: one statement per write). Otherwise,
-- and when that UPDATE finds nothing to change, the pair's committed row is read without a lock,
-- its writes are decided in arrival order from it (as in migration 021), and, if any changes,
-- written with an UPDATE conditional on the (liked, version) read; 0 rows means a concurrent
-- write committed in between, and the pair is read and decided again.
CREATE OR REPLACE FUNCTION like_set_batch(p_users text[], p_items text[], p_wants boolean[], p_parts integer[], p_checked boolean[])
  RETURNS TABLE (ord integer, outcome text, liked boolean, version bigint, seq bigint, code text, account text)
  LANGUAGE plpgsql
AS $$
DECLARE
  n            integer := coalesce(cardinality(p_users), 0);
  -- Per write: NULL (to decide), 'REJECTED'; its answer.
  o_outcome    text[] := array_fill(NULL::text, ARRAY[n]);
  o_liked      boolean[] := array_fill(false, ARRAY[n]);
  o_version    bigint[] := array_fill(0::bigint, ARRAY[n]);
  o_seq        bigint[] := array_fill(0::bigint, ARRAY[n]);
  o_code       text[] := array_fill(NULL::text, ARRAY[n]);
  o_account    text[] := array_fill(NULL::text, ARRAY[n]);
  -- An unlike on a HIDDEN item: allowed only while the pair is liked (decided in apply order).
  v_if_liked   boolean[] := array_fill(false, ARRAY[n]);
  v_erasing    boolean := EXISTS (SELECT 1 FROM account_erasure WHERE finished_at IS NULL) AND NOT erasure_writing();
  v_state      text;
  v_who        text;
  v_pair       record;
  v_found      boolean;
  cur_liked    boolean;
  cur_version  bigint;
  new_liked    boolean;
  new_version  bigint;
  v_changes    integer;
  v_item_known boolean;
  i            integer;
  k            integer;
  v_part       record;
  v_next       bigint;
  v_last_ord   integer := 0;
BEGIN
  IF cardinality(p_items) IS DISTINCT FROM n OR cardinality(p_wants) IS DISTINCT FROM n
     OR cardinality(p_parts) IS DISTINCT FROM n OR cardinality(p_checked) IS DISTINCT FROM n THEN
    RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'like_set_batch: the five arrays must have the same length';
  END IF;
  IF n = 0 THEN
    RETURN;
  END IF;

  -- What each write may do, decided before any lock, as like_set_if_visible and the erasure guard do.
  FOR i IN 1 .. n LOOP
    IF p_checked[i] THEN
      v_state := item_state(p_users[i], p_items[i], 'TRUTH');
      IF v_state = 'MISSING'
         OR (v_state = 'HIDDEN' AND (p_wants[i] OR NOT EXISTS (SELECT 1 FROM like_fact f WHERE f.user_id = p_users[i] AND f.item_id = p_items[i] AND f.liked))) THEN
        o_outcome[i] := 'REJECTED'; o_code[i] := 'ITEM_NOT_FOUND';
        CONTINUE;
      END IF;
      v_if_liked[i] := v_state = 'HIDDEN';
    END IF;
    IF v_erasing THEN
      v_who := like_erasure_refusal(p_users[i], p_items[i]);
      IF v_who IS NOT NULL THEN
        o_outcome[i] := 'REJECTED'; o_code[i] := 'ACCOUNT_BEING_ERASED'; o_account[i] := v_who;
      END IF;
    END IF;
  END LOOP;

  PERFORM set_config('ledger.like_guarded', 'on', true);
  -- Each pair once, in the global order; its writes applied in arrival order.
  FOR v_pair IN
    SELECT w.user_id, w.item_id, array_agg(w.ord ORDER BY w.ord) AS ords, bool_and(w.checked) AS all_checked
      FROM unnest(p_users, p_items, o_outcome, p_checked) WITH ORDINALITY AS w(user_id, item_id, decided, checked, ord)
     WHERE w.decided IS NULL
     GROUP BY w.user_id, w.item_id
     ORDER BY w.item_id COLLATE "C", w.user_id COLLATE "C"
  LOOP
    IF cardinality(v_pair.ords) = 1 THEN
      -- One write of this pair: it changes the row iff the row's newest committed state differs
      -- from what it wants (an existing row also proves the item exists; an unlike on a HIDDEN
      -- item changes only a liked row, which is this condition too).
      i := v_pair.ords[1];
      UPDATE like_fact f SET liked = p_wants[i], version = f.version + 1, changed_at = now()
       WHERE f.user_id = v_pair.user_id AND f.item_id = v_pair.item_id AND f.liked <> p_wants[i]
      RETURNING f.version INTO new_version;
      IF FOUND THEN
        o_outcome[i] := 'CHANGED'; o_liked[i] := p_wants[i]; o_version[i] := new_version;
        CONTINUE;
      END IF;
    END IF;
    <<apply>>
    LOOP
      SELECT f.liked, f.version INTO cur_liked, cur_version
        FROM like_fact f WHERE f.user_id = v_pair.user_id AND f.item_id = v_pair.item_id;
      v_found := FOUND;
      v_item_known := v_found OR v_pair.all_checked;
      IF NOT v_found THEN
        cur_liked := false; cur_version := 0;
        IF NOT v_item_known THEN
          v_item_known := EXISTS (SELECT 1 FROM item it WHERE it.item_id = v_pair.item_id);
        END IF;
      END IF;
      new_liked := cur_liked; new_version := cur_version; v_changes := 0;
      FOREACH i IN ARRAY v_pair.ords LOOP
        IF NOT v_item_known AND NOT p_checked[i] THEN
          o_outcome[i] := 'REJECTED'; o_code[i] := 'ITEM_NOT_FOUND';
        ELSIF v_if_liked[i] AND NOT new_liked THEN
          o_outcome[i] := 'REJECTED'; o_code[i] := 'ITEM_NOT_FOUND';
        ELSIF p_wants[i] = new_liked THEN
          o_outcome[i] := 'NOOP'; o_liked[i] := new_liked; o_version[i] := new_version;
        ELSE
          new_liked := p_wants[i]; new_version := new_version + 1; v_changes := v_changes + 1;
          o_outcome[i] := 'CHANGED'; o_liked[i] := new_liked; o_version[i] := new_version;
        END IF;
      END LOOP;
      -- Nothing to change: answered from the committed row just read, no lock taken, nothing written.
      EXIT apply WHEN v_changes = 0;
      IF v_found THEN
        UPDATE like_fact f SET liked = new_liked, version = new_version, changed_at = now()
         WHERE f.user_id = v_pair.user_id AND f.item_id = v_pair.item_id
           AND f.liked = cur_liked AND f.version = cur_version;
      ELSE
        -- A new pair is written once, in its final state (migration 008's first write).
        INSERT INTO like_fact (user_id, item_id, liked, version) VALUES (v_pair.user_id, v_pair.item_id, new_liked, new_version)
          ON CONFLICT DO NOTHING;
      END IF;
      EXIT apply WHEN FOUND;
      -- Another transaction changed or created the pair and has committed: decide again from its row.
    END LOOP apply;
  END LOOP;
  PERFORM set_config('ledger.like_guarded', '', true);

  -- The numbers: one update per partition, ascending, each taking that partition's count at once.
  FOR v_part IN
    SELECT w.part, count(*) AS n FROM unnest(p_parts, o_outcome) AS w(part, outcome)
     WHERE w.outcome = 'CHANGED' GROUP BY w.part ORDER BY w.part
  LOOP
    UPDATE like_seq s SET last = s.last + v_part.n WHERE s.part = v_part.part RETURNING s.last - v_part.n INTO v_next;
    FOR i IN 1 .. n LOOP
      IF o_outcome[i] = 'CHANGED' AND p_parts[i] = v_part.part THEN
        v_next := v_next + 1;
        o_seq[i] := v_next;
        v_last_ord := greatest(v_last_ord, i);
      END IF;
    END LOOP;
  END LOOP;

  IF v_last_ord > 0 THEN
    INSERT INTO like_outbox (part, seq, user_id, item_id, delta, version)
    SELECT w.part, w.seq, w.user_id, w.item_id, CASE WHEN w.liked THEN 1 ELSE -1 END, w.version
      FROM unnest(p_parts, o_seq, p_users, p_items, o_liked, o_version, o_outcome) AS w(part, seq, user_id, item_id, liked, version, outcome)
     WHERE w.outcome = 'CHANGED';
    IF current_setting('ledger.test_hooks', true) = 'on' THEN
      -- Once per batch, with every lock held. The context is the batch's first event's: its seq is
      -- one above the committed last of its partition, its version one above its pair's committed one.
      k := array_position(o_outcome, 'CHANGED');
      PERFORM ledger_hook('like.beforeCommit', jsonb_build_object(
        'userId', p_users[k], 'itemId', p_items[k], 'part', p_parts[k], 'seq', o_seq[k], 'version', o_version[k],
        'events', (SELECT count(*) FROM unnest(o_outcome) AS x(o) WHERE x.o = 'CHANGED')));
    END IF;
  END IF;

  RETURN QUERY SELECT w.ord::integer, w.outcome, w.liked, w.version, w.seq, w.code, w.account
    FROM unnest(o_outcome, o_liked, o_version, o_seq, o_code, o_account) WITH ORDINALITY AS w(outcome, liked, version, seq, code, account, ord);
END
$$;
