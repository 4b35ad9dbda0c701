-- Background jobs that keep live writes' latency (issue 22; docs/erasure.md "Pacing"). An erasure
-- batch used to lock the sequence rows of the partitions it writes before writing its fact rows,
-- so a live like of any of those partitions waited for the whole batch: sampled during
-- `npm run bench:erase`, 35 % of the live writes' time went to that wait (Lock:transactionid on
-- like_seq, blocked by the erasure). Now a batch writes its fact rows first and takes the sequence
-- rows last, for the numbering and the events' insert alone, in ascending partition order as
-- before (the write path's order: fact rows, then sequence rows). The relations' batches do the
-- same in one set-based step instead of a relation_write_event call per pair. And a batch that
-- does not finish the erasure commits without waiting for its WAL flush (erasure_step).

-- Likes turned off as like_set turns one off, for many pairs at once: the fact rows (locked by
-- the caller) liked = false and version + 1; only then each user partition's sequence row, locked
-- in ascending order, moved by the number of its events, and one outbox event per pair with the
-- next numbers, in (partition, user, item) order. Returns the events written.
CREATE OR REPLACE FUNCTION erasure_unlike(p_users text[], p_items text[], p_partitions integer)
  RETURNS integer
  LANGUAGE plpgsql
AS $$
DECLARE
  v_users text[];
  v_items text[];
  v_versions bigint[];
  v_parts integer[];
  v_events integer;
BEGIN
  WITH upd AS (
    UPDATE like_fact f SET liked = false, version = f.version + 1, changed_at = now()
      FROM unnest(p_users, p_items) AS x(user_id, item_id)
     WHERE f.user_id = x.user_id AND f.item_id = x.item_id AND f.liked
    RETURNING f.user_id, f.item_id, f.version, ledger_partition(f.user_id, p_partitions) AS part)
  SELECT array_agg(u.user_id ORDER BY u.part, u.user_id, u.item_id), array_agg(u.item_id ORDER BY u.part, u.user_id, u.item_id),
         array_agg(u.version ORDER BY u.part, u.user_id, u.item_id), array_agg(u.part ORDER BY u.part, u.user_id, u.item_id)
    INTO v_users, v_items, v_versions, v_parts
    FROM upd u;
  IF v_users IS NULL THEN
    RETURN 0;
  END IF;
  IF current_setting('ledger.test_hooks', true) = 'on' THEN
    PERFORM ledger_hook('erasure.beforeSequences', jsonb_build_object('seq', 'like_seq', 'parts', (SELECT jsonb_agg(DISTINCT x) FROM unnest(v_parts) AS x)));
  END IF;
  PERFORM 1 FROM like_seq s WHERE s.part IN (SELECT DISTINCT x FROM unnest(v_parts) AS x) ORDER BY s.part FOR UPDATE;
  PERFORM set_config('ledger.erasure_sequences_at', clock_timestamp()::text, true);
  WITH written AS (SELECT * FROM unnest(v_users, v_items, v_versions, v_parts) AS x(user_id, item_id, version, part)),
  numbered AS (SELECT w.*, row_number() OVER (PARTITION BY w.part ORDER BY w.user_id, w.item_id) AS k FROM written w),
  moved AS (
    UPDATE like_seq q SET last = q.last + c.n FROM (SELECT w.part, count(*) AS n FROM written w GROUP BY w.part) c
     WHERE q.part = c.part RETURNING q.part, q.last, c.n),
  ev AS (
    INSERT INTO like_outbox (part, seq, user_id, item_id, delta, version)
    SELECT nb.part, m.last - m.n + nb.k, nb.user_id, nb.item_id, -1, nb.version FROM numbered nb JOIN moved m USING (part)
    RETURNING 1)
  SELECT count(*) INTO v_events FROM ev;
  RETURN v_events;
END
$$;

-- Relations REMOVED as relation_write_event removes one, for many pairs at once: the pair rows
-- (locked by the caller) state REMOVED and version + 1; only then the sequence rows of the
-- followees' partitions, in ascending order, and one relation_event per pair with the next
-- numbers, in (partition, follower, followee) order (the order the per-pair loop numbered them).
CREATE FUNCTION erasure_remove_relations(p_followers text[], p_followees text[], p_versions bigint[], p_partitions integer)
  RETURNS integer
  LANGUAGE plpgsql
AS $$
DECLARE
  v_events integer;
BEGIN
  UPDATE relation r SET state = 'REMOVED', version = x.version + 1, changed_at = now()
    FROM unnest(p_followers, p_followees, p_versions) AS x(follower, followee, version)
   WHERE r.follower = x.follower AND r.followee = x.followee;
  IF current_setting('ledger.test_hooks', true) = 'on' THEN
    PERFORM ledger_hook('erasure.beforeSequences', jsonb_build_object('seq', 'event_seq',
      'parts', (SELECT jsonb_agg(DISTINCT ledger_partition(x, p_partitions)) FROM unnest(p_followees) AS x)));
  END IF;
  PERFORM 1 FROM event_seq s
   WHERE s.part IN (SELECT DISTINCT ledger_partition(x, p_partitions) FROM unnest(p_followees) AS x)
   ORDER BY s.part FOR UPDATE;
  PERFORM set_config('ledger.erasure_sequences_at', clock_timestamp()::text, true);
  WITH pairs AS (
    SELECT x.follower, x.followee, x.version + 1 AS version, ledger_partition(x.followee, p_partitions) AS part
      FROM unnest(p_followers, p_followees, p_versions) AS x(follower, followee, version)),
  numbered AS (SELECT p.*, row_number() OVER (PARTITION BY p.part ORDER BY p.follower, p.followee) AS k FROM pairs p),
  moved AS (
    UPDATE event_seq q SET last = q.last + c.n FROM (SELECT p.part, count(*) AS n FROM pairs p GROUP BY p.part) c
     WHERE q.part = c.part RETURNING q.part, q.last, c.n),
  ev AS (
    INSERT INTO relation_event (part, seq, follower, followee, state, version)
    SELECT nb.part, m.last - m.n + nb.k, nb.follower, nb.followee, 'REMOVED', nb.version FROM numbered nb JOIN moved m USING (part)
    RETURNING 1)
  SELECT count(*) INTO v_events FROM ev;
  RETURN v_events;
END
$$;

-- One batch of the erasure's current phase, at most p_limit facts, in the caller's transaction
-- (one autocommit statement: a short transaction). A phase that finds fewer than p_limit facts
-- is done: the erasure moves to the next phase (its work starts in the next batch). After the
-- last phase the finish checks that nothing is left (erasure_remaining) and marks the account
-- ERASED; anything left sends it back to the first phase. Returns the phase the batch worked on,
-- the facts it turned off, and the phase the erasure is in now.
-- erasure_step now also answers how long the batch held sequence rows (from the moment
-- erasure_unlike or erasure_remove_relations had them to the end of the batch; its commit does not
-- wait for a flush): what the pacing sizes batches by. NULL for a batch that took none.
DROP FUNCTION erasure_step(text, integer, integer);
CREATE FUNCTION erasure_step(p_account text, p_limit integer, p_partitions integer)
  RETURNS TABLE (phase text, facts integer, next_phase text, sequences_held_ms double precision)
  LANGUAGE plpgsql
AS $$
DECLARE
  e account_erasure%ROWTYPE;
  v_part integer := ledger_partition(p_account, p_partitions);
  v_picked integer := 0;
  v_facts integer := 0;
  v_cursor text;
  v_users text[];
  v_items text[];
  v_versions bigint[];
  v_next text;
  v_left bigint;
BEGIN
  SELECT * INTO e FROM account_erasure a WHERE a.account_id = p_account FOR UPDATE;
  IF NOT FOUND OR e.phase = 'done' THEN
    RETURN QUERY SELECT coalesce(e.phase, 'none'), 0, coalesce(e.phase, 'none'), NULL::double precision;
    RETURN;
  END IF;
  PERFORM set_config('ledger.erasure', p_account, true);
  PERFORM set_config('ledger.erasure_sequences_at', '', true);
  v_cursor := e.cursor_id;
  CASE e.phase
  WHEN 'posts' THEN
    -- Tombstones, as DELETE /v1/posts/{id} makes them (migration 006).
    WITH picked AS (
      SELECT p.post_id FROM post p WHERE p.author = p_account AND p.deleted_at IS NULL ORDER BY p.post_id LIMIT p_limit FOR UPDATE),
    upd AS (UPDATE post p SET body = '', deleted_at = now() FROM picked WHERE p.post_id = picked.post_id RETURNING 1)
    SELECT count(*) INTO v_picked FROM upd;
    v_facts := v_picked;
  WHEN 'comments' THEN
    -- Tombstones, as CommentService.delete makes them: a counted comment's version + 1 and one
    -- comment_outbox event of delta -1 in its (the author's) partition. The idempotency key goes
    -- too, so a new account of the same id never finds an old comment by its key.
    WITH picked AS (
      SELECT c.comment_id, comment_counted(c.deleted_at) AS counted FROM comment c
       WHERE c.author = p_account AND (comment_counted(c.deleted_at) OR c.idempotency_key IS NOT NULL)
       ORDER BY c.comment_id LIMIT p_limit FOR UPDATE),
    upd AS (
      UPDATE comment c SET deleted_at = coalesce(c.deleted_at, now()), deleted_by = coalesce(c.deleted_by, p_account), body = NULL,
             idempotency_key = NULL, version = c.version + picked.counted::int
        FROM picked WHERE c.comment_id = picked.comment_id
      RETURNING c.comment_id, c.post_id, c.version, picked.counted),
    numbered AS (SELECT u.*, row_number() OVER (ORDER BY u.comment_id) AS k, count(*) OVER () AS n FROM upd u WHERE u.counted),
    moved AS (UPDATE comment_seq s SET last = s.last + (SELECT count(*) FROM numbered) WHERE s.part = v_part AND EXISTS (SELECT 1 FROM numbered) RETURNING s.last),
    ev AS (
      INSERT INTO comment_outbox (part, seq, comment_id, post_id, delta, version)
      SELECT v_part, m.last - nb.n + nb.k, nb.comment_id, nb.post_id, -1, nb.version FROM numbered nb, moved m RETURNING 1)
    SELECT (SELECT count(*) FROM upd), (SELECT count(*) FROM ev) INTO v_picked, v_facts;
  WHEN 'post_likes', 'comment_likes' THEN
    -- Every like of its posts (or comments), by anyone, turned off by its liker's own sequence.
    -- Keyset on the item: an item with more likers than a batch is resumed at the same item.
    IF e.phase = 'post_likes' THEN
      SELECT array_agg(t.user_id ORDER BY t.item_id, t.user_id), array_agg(t.item_id ORDER BY t.item_id, t.user_id), max(t.item_id)
        INTO v_users, v_items, v_cursor
        FROM (SELECT f.user_id, f.item_id FROM post p JOIN like_fact f ON f.item_id = p.post_id AND f.liked
               WHERE p.author = p_account AND p.post_id >= coalesce(e.cursor_id, '')
               ORDER BY p.post_id, f.user_id LIMIT p_limit FOR UPDATE OF f) t;
    ELSE
      SELECT array_agg(t.user_id ORDER BY t.item_id, t.user_id), array_agg(t.item_id ORDER BY t.item_id, t.user_id), max(t.item_id)
        INTO v_users, v_items, v_cursor
        FROM (SELECT f.user_id, f.item_id FROM comment c JOIN like_fact f ON f.item_id = c.comment_id AND f.liked
               WHERE c.author = p_account AND c.comment_id >= coalesce(e.cursor_id, '')
               ORDER BY c.comment_id, f.user_id LIMIT p_limit FOR UPDATE OF f) t;
    END IF;
    v_picked := coalesce(cardinality(v_users), 0);
    IF v_picked > 0 THEN
      v_facts := erasure_unlike(v_users, v_items, p_partitions);
    END IF;
  WHEN 'likes' THEN
    SELECT array_agg(t.user_id ORDER BY t.item_id), array_agg(t.item_id ORDER BY t.item_id), max(t.item_id)
      INTO v_users, v_items, v_cursor
      FROM (SELECT f.user_id, f.item_id FROM like_fact f
             WHERE f.user_id = p_account AND f.liked AND f.item_id > coalesce(e.cursor_id, '')
             ORDER BY f.item_id LIMIT p_limit FOR UPDATE) t;
    v_picked := coalesce(cardinality(v_users), 0);
    IF v_picked > 0 THEN
      v_facts := erasure_unlike(v_users, v_items, p_partitions);
    END IF;
  WHEN 'following', 'followers' THEN
    -- Follows and follow requests, each way, REMOVED as relation_write_event removes one (the
    -- projector consumes the events), by erasure_remove_relations: the pair rows are locked
    -- here, the sequence rows of their followees' partitions only after the pair rows are written.
    IF e.phase = 'following' THEN
      SELECT array_agg(t.follower ORDER BY t.followee), array_agg(t.followee ORDER BY t.followee), array_agg(t.version ORDER BY t.followee), max(t.followee)
        INTO v_users, v_items, v_versions, v_cursor
        FROM (SELECT r.follower, r.followee, r.version FROM relation r
               WHERE r.follower = p_account AND r.state <> 'REMOVED' AND r.followee > coalesce(e.cursor_id, '')
               ORDER BY r.followee LIMIT p_limit FOR UPDATE) t;
    ELSE
      -- Keyset on the follower too: the index entries of the rows earlier batches REMOVED are
      -- not walked again by every later batch.
      SELECT array_agg(t.follower ORDER BY t.follower), array_agg(t.followee ORDER BY t.follower), array_agg(t.version ORDER BY t.follower), max(t.follower)
        INTO v_users, v_items, v_versions, v_cursor
        FROM (SELECT r.follower, r.followee, r.version FROM relation r
               WHERE r.followee = p_account AND r.state IN ('ACTIVE', 'PENDING') AND r.follower > coalesce(e.cursor_id, '')
               ORDER BY r.follower LIMIT p_limit FOR UPDATE) t;
    END IF;
    v_picked := coalesce(cardinality(v_users), 0);
    IF v_picked > 0 THEN
      PERFORM erasure_remove_relations(v_users, v_items, v_versions, p_partitions);
    END IF;
    v_facts := v_picked;
  WHEN 'blocks' THEN
    -- Blocks have no outbox (relation_unblock deletes the row and writes no event).
    WITH picked AS (
      SELECT b.blocker, b.blocked FROM block b WHERE b.blocker = p_account
      UNION ALL SELECT b.blocker, b.blocked FROM block b WHERE b.blocked = p_account
      LIMIT p_limit),
    del AS (DELETE FROM block b USING picked WHERE b.blocker = picked.blocker AND b.blocked = picked.blocked RETURNING 1)
    SELECT count(*) INTO v_picked FROM del;
    v_facts := v_picked;
  END CASE;

  v_next := e.phase;
  IF v_picked < p_limit THEN
    v_next := CASE e.phase
      WHEN 'posts' THEN 'comments' WHEN 'comments' THEN 'post_likes' WHEN 'post_likes' THEN 'comment_likes'
      WHEN 'comment_likes' THEN 'likes' WHEN 'likes' THEN 'following' WHEN 'following' THEN 'followers'
      WHEN 'followers' THEN 'blocks' ELSE 'done' END;
    v_cursor := NULL;
  END IF;
  IF v_next = 'done' THEN
    -- A write whose statement began before the erasure was visible may have added a fact since.
    SELECT sum(r.n) INTO v_left FROM erasure_remaining(p_account) r;
    IF v_left > 0 THEN
      v_next := 'posts';
      UPDATE account_erasure a SET total = a.total + v_left WHERE a.account_id = p_account;
    ELSE
      UPDATE account SET erased_state = 'ERASED', private = false, hide_collections = false WHERE account_id = p_account;
    END IF;
  END IF;
  -- A batch's commit does not wait for its WAL flush (it would hold the sequence rows through
  -- it): a batch lost in a server crash is lost with its progress row, and WAL is flushed in
  -- order, so no later commit survives it; the erasure redoes it. The finish is flushed before
  -- it answers: an erasure reported done stays done.
  IF v_next <> 'done' THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  UPDATE account_erasure a SET phase = v_next, cursor_id = v_cursor, done = a.done + v_facts, batches = a.batches + 1,
         updated_at = now(), finished_at = CASE WHEN v_next = 'done' THEN now() END
   WHERE a.account_id = p_account;
  IF current_setting('ledger.test_hooks', true) = 'on' THEN
    PERFORM ledger_hook('erasure.beforeCommit', jsonb_build_object('account', p_account, 'phase', e.phase, 'facts', v_facts));
    PERFORM ledger_hook('erasure.beforeCommit.' || e.phase, jsonb_build_object('account', p_account, 'facts', v_facts));
  END IF;
  RETURN QUERY SELECT e.phase, v_facts, v_next,
    extract(epoch FROM clock_timestamp() - nullif(current_setting('ledger.erasure_sequences_at', true), '')::timestamptz)::double precision * 1000;
END
$$;
