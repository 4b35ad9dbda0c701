-- Group commit for like writes (issue 22; docs/write-path.md, "Group commit"): many likes and
-- unlikes in one statement, one transaction, one commit. Each write is decided on its own, in
-- arrival order, and answered in its own result row: no write's failure fails another, so a
-- missing or hidden item, or an account being erased, is a REJECTED row with a code instead of
-- an exception that would abort the batch.
--
-- Lock order, the same for every batch: fact rows in (item_id, user_id) byte order, each pair
-- locked (or inserted) before the next is touched; then the like_seq rows of the batch's
-- partitions in ascending order, each moved by ONE update that takes all of the batch's numbers
-- of that partition at once. The sequence rows are held to commit, so numbering stays gapless
-- and commit-ordered per partition; numbers are handed out in arrival order.

-- The erasure's write guard for likes, as a question: the account being erased that refuses a
-- like by p_user of p_item (the liker, or the author of the post or comment), or NULL. The same
-- rule as erasure_guard_like (migration 020), asked by like_set_batch before it writes.
CREATE FUNCTION like_erasure_refusal(p_user text, p_item text) RETURNS text
  LANGUAGE sql STABLE
AS $$
  SELECT CASE
    WHEN EXISTS (SELECT 1 FROM account_erasure e WHERE e.account_id = p_user AND e.finished_at IS NULL) THEN p_user
    ELSE (SELECT e.account_id FROM account_erasure e
           WHERE e.finished_at IS NULL
             AND e.account_id = coalesce((SELECT p.author FROM post p WHERE p.post_id = p_item),
                                         (SELECT c.author FROM comment c WHERE c.comment_id = p_item)))
  END
$$;

-- The per-row trigger of migration 020 stays for every other writer of like_fact (like_set,
-- imports, ad-hoc SQL). like_set_batch asks the same question itself, per write and without
-- an exception, and sets ledger.like_guarded for the span of its own writes only, so the
-- trigger's function is not called for those rows.
CREATE OR REPLACE TRIGGER like_fact_erasure_guard BEFORE INSERT OR UPDATE ON like_fact FOR EACH ROW
  WHEN (current_setting('ledger.like_guarded', true) IS DISTINCT FROM 'on')
  EXECUTE FUNCTION erasure_guard_like();

-- p_checked[i]: the API's write (like_set_if_visible's rule: item_state in the truth, an unlike
-- of one's own like allowed on a HIDDEN item); otherwise like_set's (any existing item).
-- Returns one row per write, ord = its position in the arrays (1-based).
CREATE FUNCTION like_set_batch(p_users text[], p_items text[], p_wants boolean[], p_parts integer[], p_checked boolean[])
  RETURNS TABLE (ord integer, outcome text, liked boolean, version bigint, seq bigint, code text, account text)
  LANGUAGE plpgsql
AS $$
DECLARE
  n            integer := coalesce(cardinality(p_users), 0);
  -- Per write: NULL (to decide under the lock), 'REJECTED'; its answer.
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
  -- Each pair once, in the global order; its writes applied in arrival order under its lock.
  FOR v_pair IN
    SELECT w.user_id, w.item_id, array_agg(w.ord ORDER BY w.ord) AS ords, bool_and(w.checked) AS all_checked
      FROM unnest(p_users, p_items, o_outcome, p_checked) WITH ORDINALITY AS w(user_id, item_id, decided, checked, ord)
     WHERE w.decided IS NULL
     GROUP BY w.user_id, w.item_id
     ORDER BY w.item_id COLLATE "C", w.user_id COLLATE "C"
  LOOP
    SELECT f.liked, f.version INTO cur_liked, cur_version
      FROM like_fact f WHERE f.user_id = v_pair.user_id AND f.item_id = v_pair.item_id FOR UPDATE;
    v_found := FOUND;
    v_item_known := v_found OR v_pair.all_checked;
    IF NOT v_found THEN
      cur_liked := false; cur_version := 0;
      IF NOT v_item_known THEN
        v_item_known := EXISTS (SELECT 1 FROM item it WHERE it.item_id = v_pair.item_id);
      END IF;
    END IF;
    <<apply>>
    LOOP
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
      EXIT apply WHEN v_changes = 0;
      IF v_found THEN
        UPDATE like_fact f SET liked = new_liked, version = new_version, changed_at = now()
         WHERE f.user_id = v_pair.user_id AND f.item_id = v_pair.item_id;
        EXIT apply;
      END IF;
      -- A new pair is written once, in its final state (migration 008's first write).
      INSERT INTO like_fact (user_id, item_id, liked, version) VALUES (v_pair.user_id, v_pair.item_id, new_liked, new_version)
        ON CONFLICT DO NOTHING;
      EXIT apply WHEN FOUND;
      -- Another transaction created the pair and has committed: decide again from its row.
      SELECT f.liked, f.version INTO cur_liked, cur_version
        FROM like_fact f WHERE f.user_id = v_pair.user_id AND f.item_id = v_pair.item_id FOR UPDATE;
      v_found := true; v_item_known := true;
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
