-- A set-based like batch for the common case (issue 22; docs/write-path.md, "The set-based
-- batch (migration 027)"). like_set_batch of migration 024 runs a few PL/pgSQL statements per
-- pair, and each statement costs an executor start, a snapshot and an end (~0.1 ms on a loaded
-- 2-core machine: 128-148 µs of backend time per write of a 64-write batch, against ~37 µs for a
-- set-based prototype; bench/like-batch-cost.ts). When the batch's undecided writes name distinct
-- pairs (the common case: a pair written twice in one batch still takes the per-pair loop of
-- migration 024, unchanged, which stays the reference), the batch is applied with a handful of
-- statements instead:
--   1. one plain read of every pair's committed row (no lock), which answers the writes the
--      committed state already satisfies (NOOP, or REJECTED: an unknown item, an unlike on a
--      HIDDEN item that is not liked) exactly as the loop's "0 rows: read and decide" does, and
--      sorts the rest in the global order ((item_id, user_id) COLLATE "C");
--   2. the remaining pairs, in that order, cut into runs of consecutive pairs of one kind: a run
--      of existing rows is locked by ONE SELECT ... ORDER BY ... FOR UPDATE (the locking clause is
--      applied above the sort, so rows are locked, and waited for, in the global order) and
--      decided on the locked rows; a run of new pairs is ONE INSERT ... SELECT ... ORDER BY ... ON
--      CONFLICT DO UPDATE ... WHERE NOT liked (ModifyTable inserts, or on a conflict locks, each
--      row as the sort hands it over, so again in the global order, a pair created meanwhile
--      being waited for and decided at its own position);
--   3. one UPDATE of every existing row that changes, all of them already locked by this
--      transaction (so it waits for nobody and its plan's order does not matter);
--   4. numbers, outbox, hook point and answers exactly as before (shared with the loop).
-- The sequence of lock acquisitions (and so of waits) is the loop's: each pair locked before the
-- next one in the global order, NOOP pairs not at all, like_seq rows after every fact row. The
-- price is a separate heap lock record for each existing row that changes (the FOR UPDATE; the
-- UPDATE of 024 took its lock itself): the trade-off is measured in docs/write-path.md.

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
  -- The set-based path. s_*: the undecided writes in the global order, with their pair's
  -- committed row as the first read saw it; r_*: the current run (E: existing rows to lock, N:
  -- new pairs to insert); l_*: what a run's statement returned; c_ords: existing rows to update.
  v_distinct   boolean;
  s_ord        integer[];
  s_found      boolean[];
  s_liked      boolean[];
  s_version    bigint[];
  s_known      boolean[];
  v_kind       text;
  r_kind       text;
  r_ords       integer[] := '{}';
  l_ords       integer[];
  l_liked      boolean[];
  l_version    bigint[];
  c_ords       integer[] := '{}';
  j            integer;
  v_cur        integer;
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

  -- The first read, without a lock: each undecided write's pair as committed now, whether the
  -- pairs are distinct, and (for a pair without a row, on the library's rule) whether its item
  -- exists, as the loop asks it. Sorted in the global order, the order every later step keeps.
  SELECT coalesce(bool_and(r.writes = 1), true),
         array_agg(r.ord ORDER BY r.item_id COLLATE "C", r.user_id COLLATE "C"),
         array_agg(r.found ORDER BY r.item_id COLLATE "C", r.user_id COLLATE "C"),
         array_agg(r.liked ORDER BY r.item_id COLLATE "C", r.user_id COLLATE "C"),
         array_agg(r.version ORDER BY r.item_id COLLATE "C", r.user_id COLLATE "C"),
         array_agg(r.known ORDER BY r.item_id COLLATE "C", r.user_id COLLATE "C")
    INTO v_distinct, s_ord, s_found, s_liked, s_version, s_known
    FROM (SELECT w.ord::integer AS ord, w.user_id, w.item_id,
                 f.user_id IS NOT NULL AS found, coalesce(f.liked, false) AS liked, coalesce(f.version, 0::bigint) AS version,
                 CASE WHEN f.user_id IS NOT NULL OR w.checked THEN true
                      ELSE EXISTS (SELECT 1 FROM item it WHERE it.item_id = w.item_id) END AS known,
                 count(*) OVER (PARTITION BY w.user_id, w.item_id) AS writes
            FROM unnest(p_users, p_items, o_outcome, p_checked) WITH ORDINALITY AS w(user_id, item_id, decided, checked, ord)
            LEFT JOIN like_fact f ON f.user_id = w.user_id AND f.item_id = w.item_id
           WHERE w.decided IS NULL) r;

  PERFORM set_config('ledger.like_guarded', 'on', true);
  IF NOT v_distinct THEN
  -- A pair written more than once: migration 024's loop, unchanged.
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
  ELSE
    -- Distinct pairs. j runs one past the end so that the last run is written too.
    FOR j IN 1 .. coalesce(cardinality(s_ord), 0) + 1 LOOP
      v_kind := NULL;
      IF j <= coalesce(cardinality(s_ord), 0) THEN
        -- v_cur, not i: writing the run that ends here uses i.
        v_cur := s_ord[j]; i := v_cur;
        -- The loop's decision on the committed row (its "read and decide" step), in its order of tests.
        IF NOT s_known[j] THEN
          o_outcome[i] := 'REJECTED'; o_code[i] := 'ITEM_NOT_FOUND';
        ELSIF v_if_liked[i] AND NOT s_liked[j] THEN
          o_outcome[i] := 'REJECTED'; o_code[i] := 'ITEM_NOT_FOUND';
        ELSIF p_wants[i] = s_liked[j] THEN
          -- Answered from the committed row, no lock taken, nothing written (migration 024).
          o_outcome[i] := 'NOOP'; o_liked[i] := s_liked[j]; o_version[i] := s_version[j];
        ELSIF s_found[j] THEN
          v_kind := 'E';
        ELSE
          v_kind := 'N';
        END IF;
      END IF;
      -- A run ends where the next pair to write is of the other kind, or at the end: it is
      -- written now, before any later pair is touched, so locks are taken in the global order.
      IF r_kind IS NOT NULL AND (v_kind IS DISTINCT FROM r_kind) AND (v_kind IS NOT NULL OR j > cardinality(s_ord)) THEN
        IF r_kind = 'E' THEN
          -- Lock the run's rows in the global order (the locking clause is applied to the sorted
          -- rows; a row locked by another transaction is waited for, then its newest version is
          -- locked and returned), and decide each write on its locked row, which nobody else can
          -- change before this transaction ends.
          SELECT array_agg(x.ord), array_agg(x.liked), array_agg(x.version) INTO l_ords, l_liked, l_version
            FROM (SELECT w.ord, f.liked, f.version
                    FROM unnest(r_ords) AS w(ord)
                    JOIN like_fact f ON f.user_id = p_users[w.ord] AND f.item_id = p_items[w.ord]
                   ORDER BY f.item_id COLLATE "C", f.user_id COLLATE "C"
                     FOR UPDATE OF f) x;
          IF coalesce(cardinality(l_ords), 0) <> cardinality(r_ords) THEN
            -- A row read a moment ago is gone (nothing in the ledger deletes fact rows; a manual
            -- DELETE could). Deciding it here would take a lock out of the global order, so the
            -- batch is refused as a serialization failure: it has written nothing that survives,
            -- and LikeService runs it again (withStatementRetry), deciding from the new state.
            RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE = 'like_set_batch: a fact row vanished while the batch locked it; run the batch again';
          END IF;
          FOR k IN 1 .. cardinality(l_ords) LOOP
            i := l_ords[k];
            IF v_if_liked[i] AND NOT l_liked[k] THEN
              o_outcome[i] := 'REJECTED'; o_code[i] := 'ITEM_NOT_FOUND';
            ELSIF p_wants[i] = l_liked[k] THEN
              o_outcome[i] := 'NOOP'; o_liked[i] := l_liked[k]; o_version[i] := l_version[k];
            ELSE
              o_outcome[i] := 'CHANGED'; o_liked[i] := p_wants[i]; o_version[i] := l_version[k] + 1;
              c_ords := c_ords || i;
            END IF;
          END LOOP;
        ELSE
          -- First likes (an unlike of a missing row is a NOOP above), in the global order: each
          -- pair inserted at version 1 (migration 008's first write), or, if another transaction
          -- created it meanwhile, that transaction waited for and the row locked (ON CONFLICT
          -- DO UPDATE locks the row even where its WHERE is false) and changed only if not liked.
          WITH written AS (
            INSERT INTO like_fact AS f (user_id, item_id, liked, version)
            SELECT p_users[w.ord], p_items[w.ord], true, 1 FROM unnest(r_ords) AS w(ord)
             ORDER BY p_items[w.ord] COLLATE "C", p_users[w.ord] COLLATE "C"
            ON CONFLICT (user_id, item_id) DO UPDATE SET liked = true, version = f.version + 1, changed_at = now()
             WHERE NOT f.liked
            RETURNING f.user_id, f.item_id, f.version)
          SELECT array_agg(w.ord), array_agg(x.version) INTO l_ords, l_version
            FROM written x JOIN unnest(r_ords) AS w(ord) ON p_users[w.ord] = x.user_id AND p_items[w.ord] = x.item_id;
          FOR k IN 1 .. coalesce(cardinality(l_ords), 0) LOOP
            i := l_ords[k];
            o_outcome[i] := 'CHANGED'; o_liked[i] := true; o_version[i] := l_version[k];
          END LOOP;
          -- Not written: the pair was created and liked meanwhile, and is locked by this
          -- transaction now. The loop answers it NOOP from that row; so does this.
          FOREACH i IN ARRAY r_ords LOOP
            CONTINUE WHEN o_outcome[i] IS NOT NULL;
            SELECT f.liked, f.version INTO cur_liked, cur_version
              FROM like_fact f WHERE f.user_id = p_users[i] AND f.item_id = p_items[i];
            IF NOT FOUND OR NOT cur_liked THEN
              RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE = 'like_set_batch: a fact row changed while the batch held its lock; run the batch again';
            END IF;
            o_outcome[i] := 'NOOP'; o_liked[i] := cur_liked; o_version[i] := cur_version;
          END LOOP;
        END IF;
        r_kind := NULL;
      END IF;
      IF v_kind IS NOT NULL THEN
        IF r_kind IS NULL THEN
          r_kind := v_kind; r_ords := ARRAY[v_cur];
        ELSE
          r_ords := r_ords || v_cur;
        END IF;
      END IF;
    END LOOP;
    -- Every existing row that changes, in one statement. All are locked by this transaction
    -- already (above), so this waits for nobody and the order its plan visits them in is no
    -- lock order; the version condition holds by that lock and is checked anyway.
    IF cardinality(c_ords) > 0 THEN
      UPDATE like_fact f SET liked = p_wants[c.ord], version = o_version[c.ord], changed_at = now()
        FROM unnest(c_ords) AS c(ord)
       WHERE f.user_id = p_users[c.ord] AND f.item_id = p_items[c.ord] AND f.version = o_version[c.ord] - 1;
      GET DIAGNOSTICS k = ROW_COUNT;
      IF k <> cardinality(c_ords) THEN
        RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE = 'like_set_batch: a locked fact row changed under the batch; run the batch again';
      END IF;
    END IF;
  END IF;
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
