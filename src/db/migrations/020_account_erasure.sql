-- Erasing an account (issue 20, part 3; docs/erasure.md). Every fact of the account is turned
-- off through the outboxes live writes use (like_outbox, relation_event, comment_outbox), in
-- bounded batches, one short transaction each, with the progress in account_erasure so that a
-- crash resumes where the last committed batch left off.

-- NULL: a live account. ERASING: an erasure runs; reads answer the account as missing and every
-- write by or towards it is refused (SQLSTATE SLE01, AccountBeingErasedError). ERASED: done; the
-- row stays because the relation rows (REMOVED, their versions) must go on numbering the pair's
-- events if the id is used again, and it reads as missing until a write creates the account anew.
ALTER TABLE account ADD COLUMN erased_state text CHECK (erased_state IN ('ERASING', 'ERASED'));
CREATE INDEX account_erased ON account (account_id) WHERE erased_state IS NOT NULL;

-- The erasure's state: the phase it is in, the keyset position inside it, and its figures.
CREATE TABLE account_erasure (
  account_id   text PRIMARY KEY REFERENCES account (account_id),
  requested_by text NOT NULL CHECK (requested_by IN ('self', 'admin', 'cli')),
  phase        text NOT NULL CHECK (phase IN ('posts', 'comments', 'post_likes', 'comment_likes', 'likes', 'following', 'followers', 'blocks', 'done')),
  cursor_id    text,
  -- facts to turn off, counted at the start; done: facts turned off so far.
  total        bigint NOT NULL CHECK (total >= 0),
  done         bigint NOT NULL DEFAULT 0 CHECK (done >= 0),
  batches      bigint NOT NULL DEFAULT 0,
  started_at   timestamptz NOT NULL DEFAULT now(),
  updated_at   timestamptz NOT NULL DEFAULT now(),
  finished_at  timestamptz,
  CHECK ((phase = 'done') = (finished_at IS NOT NULL))
);
-- The write guard's first question on every like: is any erasure running? An empty index.
CREATE INDEX account_erasure_running ON account_erasure (account_id) WHERE finished_at IS NULL;

-- The keyset walks of the phases: an account's posts and comments by id.
CREATE INDEX post_by_author ON post (author, post_id);
CREATE INDEX comment_by_author ON comment (author, comment_id);

-- True inside an erasure's own transaction (erasure_start, erasure_step set it locally).
CREATE FUNCTION erasure_writing() RETURNS boolean
  LANGUAGE sql STABLE
  AS $$ SELECT coalesce(current_setting('ledger.erasure', true), '') <> '' $$;

CREATE FUNCTION erasure_refuse(p_account text) RETURNS void
  LANGUAGE plpgsql
AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'SLE01',
    MESSAGE = 'account ' || p_account || ' is being erased: writes by or towards it are refused until the erasure completes';
END
$$;

-- The write guard of the relation and block rows, posts and comments: an account that is being
-- erased is refused (SLE01); one that is erased is missing for a new row, as the foreign key would say
-- (23503 with the constraint's name, which the services already turn into "unknown account").
CREATE FUNCTION erasure_guard_accounts(p_ids text[], p_constraints text[], p_op text) RETURNS void
  LANGUAGE plpgsql
AS $$
DECLARE
  v_hit record;
BEGIN
  SELECT a.account_id, a.erased_state, i.ord INTO v_hit
    FROM unnest(p_ids) WITH ORDINALITY AS i(id, ord) JOIN account a ON a.account_id = i.id
   WHERE a.erased_state IS NOT NULL ORDER BY i.ord LIMIT 1;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  IF v_hit.erased_state = 'ERASING' THEN
    PERFORM erasure_refuse(v_hit.account_id);
  END IF;
  -- An erased account's tombstones and REMOVED rows may still change (a post's author deletes
  -- a tombstoned reply); only a new row is refused.
  IF p_op <> 'INSERT' THEN
    RETURN;
  END IF;
  RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation', CONSTRAINT = p_constraints[v_hit.ord],
    MESSAGE = 'account ' || v_hit.account_id || ' was erased';
END
$$;

CREATE FUNCTION erasure_guard_relation() RETURNS trigger
  LANGUAGE plpgsql
AS $$
BEGIN
  IF NOT erasure_writing() THEN
    PERFORM erasure_guard_accounts(ARRAY[NEW.follower, NEW.followee], ARRAY['relation_follower_fkey', 'relation_followee_fkey'], TG_OP);
  END IF;
  RETURN NEW;
END
$$;
CREATE TRIGGER relation_erasure_guard BEFORE INSERT OR UPDATE ON relation FOR EACH ROW EXECUTE FUNCTION erasure_guard_relation();

CREATE FUNCTION erasure_guard_block() RETURNS trigger
  LANGUAGE plpgsql
AS $$
BEGIN
  IF NOT erasure_writing() THEN
    PERFORM erasure_guard_accounts(ARRAY[NEW.blocker, NEW.blocked], ARRAY['block_blocker_fkey', 'block_blocked_fkey'], TG_OP);
  END IF;
  RETURN NEW;
END
$$;
CREATE TRIGGER block_erasure_guard BEFORE INSERT OR UPDATE ON block FOR EACH ROW EXECUTE FUNCTION erasure_guard_block();

-- A post or comment by an erased or erasing account, or a comment on a post of an erasing one.
CREATE FUNCTION erasure_guard_content() RETURNS trigger
  LANGUAGE plpgsql
AS $$
BEGIN
  IF NOT erasure_writing() THEN
    PERFORM erasure_guard_accounts(ARRAY[NEW.author], ARRAY[TG_TABLE_NAME || '_author_fkey'], TG_OP);
    IF TG_TABLE_NAME = 'comment' AND EXISTS (
         SELECT 1 FROM post p JOIN account_erasure e ON e.account_id = p.author AND e.finished_at IS NULL WHERE p.post_id = NEW.post_id) THEN
      PERFORM erasure_refuse((SELECT author FROM post WHERE post_id = NEW.post_id));
    END IF;
  END IF;
  RETURN NEW;
END
$$;
CREATE TRIGGER post_erasure_guard BEFORE INSERT OR UPDATE ON post FOR EACH ROW EXECUTE FUNCTION erasure_guard_content();
CREATE TRIGGER comment_erasure_guard BEFORE INSERT OR UPDATE ON comment FOR EACH ROW EXECUTE FUNCTION erasure_guard_content();

-- Likes need no account (docs/api.md): an erased id may like again at once. While an erasure
-- runs, a like by the account, or of one of its posts or comments, is refused. The first
-- question (is any erasure running?) reads an empty partial index on the hot path.
CREATE FUNCTION erasure_guard_like() RETURNS trigger
  LANGUAGE plpgsql
AS $$
DECLARE
  v_author text;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM account_erasure WHERE finished_at IS NULL) OR erasure_writing() THEN
    RETURN NEW;
  END IF;
  IF EXISTS (SELECT 1 FROM account_erasure WHERE account_id = NEW.user_id AND finished_at IS NULL) THEN
    PERFORM erasure_refuse(NEW.user_id);
  END IF;
  SELECT coalesce((SELECT p.author FROM post p WHERE p.post_id = NEW.item_id), (SELECT c.author FROM comment c WHERE c.comment_id = NEW.item_id))
    INTO v_author;
  IF EXISTS (SELECT 1 FROM account_erasure WHERE account_id = v_author AND finished_at IS NULL) THEN
    PERFORM erasure_refuse(v_author);
  END IF;
  RETURN NEW;
END
$$;
CREATE TRIGGER like_fact_erasure_guard BEFORE INSERT OR UPDATE ON like_fact FOR EACH ROW EXECUTE FUNCTION erasure_guard_like();

-- The account row itself: no settings change while it is being erased; a write that creates the
-- account anew (ERASED -> NULL) ends the erasure's record, so the new account starts with none.
CREATE FUNCTION erasure_guard_account() RETURNS trigger
  LANGUAGE plpgsql
AS $$
BEGIN
  IF OLD.erased_state = 'ERASING' AND NOT erasure_writing() THEN
    PERFORM erasure_refuse(OLD.account_id);
  END IF;
  IF OLD.erased_state = 'ERASED' AND NEW.erased_state IS NULL THEN
    DELETE FROM account_erasure WHERE account_id = OLD.account_id;
  END IF;
  RETURN NEW;
END
$$;
CREATE TRIGGER account_erasure_guard BEFORE UPDATE ON account FOR EACH ROW EXECUTE FUNCTION erasure_guard_account();

-- relation_unblock of migration 007 checked existence by the account row alone; an erased account
-- is missing, one being erased refused. Otherwise unchanged.
CREATE OR REPLACE FUNCTION relation_unblock(p_blocker text, p_blocked text)
  RETURNS TABLE (outcome text, state text, version bigint, seq bigint, reason text, code text)
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
    RETURN QUERY SELECT 'ACCOUNT_NOT_FOUND', v_state, v_version, 0::bigint, v_missing, NULL::text;
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

-- THE remaining facts of an erasure, per phase: what each phase turns off, counted. The start's
-- total, the finish's check and the audit (erasure_leftovers) read it.
CREATE FUNCTION erasure_remaining(p_account text)
  RETURNS TABLE (phase text, n bigint)
  LANGUAGE sql STABLE
AS $$
  SELECT 'posts', count(*) FROM post WHERE author = p_account AND deleted_at IS NULL
  UNION ALL SELECT 'comments', count(*) FROM comment WHERE author = p_account AND (comment_counted(deleted_at) OR idempotency_key IS NOT NULL)
  UNION ALL SELECT 'post_likes', count(*) FROM post p JOIN like_fact f ON f.item_id = p.post_id AND f.liked WHERE p.author = p_account
  UNION ALL SELECT 'comment_likes', count(*) FROM comment c JOIN like_fact f ON f.item_id = c.comment_id AND f.liked WHERE c.author = p_account
  -- its likes of its own posts and comments are counted (and turned off) with those.
  UNION ALL SELECT 'likes', count(*) FROM like_fact f WHERE f.user_id = p_account AND f.liked
    AND NOT EXISTS (SELECT 1 FROM post p WHERE p.post_id = f.item_id AND p.author = p_account)
    AND NOT EXISTS (SELECT 1 FROM comment c WHERE c.comment_id = f.item_id AND c.author = p_account)
  UNION ALL SELECT 'following', count(*) FROM relation WHERE follower = p_account AND state <> 'REMOVED'
  UNION ALL SELECT 'followers', count(*) FROM relation WHERE followee = p_account AND state <> 'REMOVED'
  UNION ALL SELECT 'blocks', count(*) FROM block WHERE blocker = p_account OR blocked = p_account
$$;

-- Starts an erasure: NOT_FOUND (no such account), ERASED (done before; nothing written),
-- RUNNING (already started; nothing written) or STARTED. The account row's lock orders it
-- after any settings change in flight.
CREATE FUNCTION erasure_start(p_account text, p_requested_by text)
  RETURNS text
  LANGUAGE plpgsql
AS $$
DECLARE
  v_state text;
  v_total bigint;
BEGIN
  SELECT a.erased_state INTO v_state FROM account a WHERE a.account_id = p_account FOR UPDATE;
  IF NOT FOUND THEN
    RETURN 'NOT_FOUND';
  END IF;
  IF v_state IS NOT NULL THEN
    RETURN CASE v_state WHEN 'ERASED' THEN 'ERASED' ELSE 'RUNNING' END;
  END IF;
  PERFORM set_config('ledger.erasure', p_account, true);
  UPDATE account SET erased_state = 'ERASING' WHERE account_id = p_account;
  SELECT sum(r.n) INTO v_total FROM erasure_remaining(p_account) r;
  INSERT INTO account_erasure (account_id, requested_by, phase, total) VALUES (p_account, p_requested_by, 'posts', v_total)
    ON CONFLICT (account_id) DO UPDATE SET requested_by = EXCLUDED.requested_by, phase = 'posts', cursor_id = NULL, total = EXCLUDED.total,
      done = 0, batches = 0, started_at = now(), updated_at = now(), finished_at = NULL;
  RETURN 'STARTED';
END
$$;

-- Likes turned off as like_set turns one off, for many pairs at once: the fact rows (locked by
-- the caller) liked = false and version + 1, then each user partition's sequence row, locked in
-- ascending order (the write path's order: fact rows, then sequence rows), moved by the number
-- of its events, and one outbox event per pair with the next numbers. Returns the events written.
CREATE FUNCTION erasure_unlike(p_users text[], p_items text[], p_partitions integer)
  RETURNS integer
  LANGUAGE plpgsql
AS $$
DECLARE
  v_events integer;
BEGIN
  PERFORM 1 FROM like_seq s
   WHERE s.part IN (SELECT DISTINCT ledger_partition(u, p_partitions) FROM unnest(p_users) AS u)
   ORDER BY s.part FOR UPDATE;
  WITH pairs AS (SELECT * FROM unnest(p_users, p_items) AS x(user_id, item_id)),
  upd AS (
    UPDATE like_fact f SET liked = false, version = f.version + 1, changed_at = now()
      FROM pairs WHERE f.user_id = pairs.user_id AND f.item_id = pairs.item_id AND f.liked
    RETURNING f.user_id, f.item_id, f.version, ledger_partition(f.user_id, p_partitions) AS part),
  numbered AS (SELECT u.*, row_number() OVER (PARTITION BY u.part ORDER BY u.user_id, u.item_id) AS k FROM upd u),
  moved AS (
    UPDATE like_seq q SET last = q.last + c.n FROM (SELECT part, count(*) AS n FROM upd GROUP BY part) c
     WHERE q.part = c.part RETURNING q.part, q.last, c.n),
  ev AS (
    INSERT INTO like_outbox (part, seq, user_id, item_id, delta, version)
    SELECT nb.part, m.last - m.n + nb.k, nb.user_id, nb.item_id, -1, nb.version FROM numbered nb JOIN moved m USING (part)
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
CREATE FUNCTION erasure_step(p_account text, p_limit integer, p_partitions integer)
  RETURNS TABLE (phase text, facts integer, next_phase text)
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
  v_pair record;
BEGIN
  SELECT * INTO e FROM account_erasure a WHERE a.account_id = p_account FOR UPDATE;
  IF NOT FOUND OR e.phase = 'done' THEN
    RETURN QUERY SELECT coalesce(e.phase, 'none'), 0, coalesce(e.phase, 'none');
    RETURN;
  END IF;
  PERFORM set_config('ledger.erasure', p_account, true);
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
    -- Follows and follow requests, each way, REMOVED by relation_write_event (the relation writes'
    -- own step, which the projector consumes). The pair rows are locked first, then the
    -- sequence rows of their followees' partitions in ascending order (the write path's order).
    IF e.phase = 'following' THEN
      SELECT array_agg(t.follower ORDER BY t.followee), array_agg(t.followee ORDER BY t.followee), array_agg(t.version ORDER BY t.followee), max(t.followee)
        INTO v_users, v_items, v_versions, v_cursor
        FROM (SELECT r.follower, r.followee, r.version FROM relation r
               WHERE r.follower = p_account AND r.state <> 'REMOVED' AND r.followee > coalesce(e.cursor_id, '')
               ORDER BY r.followee LIMIT p_limit FOR UPDATE) t;
    ELSE
      SELECT array_agg(t.follower ORDER BY t.follower), array_agg(t.followee ORDER BY t.follower), array_agg(t.version ORDER BY t.follower)
        INTO v_users, v_items, v_versions
        FROM (SELECT r.follower, r.followee, r.version FROM relation r
               WHERE r.followee = p_account AND r.state IN ('ACTIVE', 'PENDING')
               ORDER BY r.follower LIMIT p_limit FOR UPDATE) t;
    END IF;
    v_picked := coalesce(cardinality(v_users), 0);
    PERFORM 1 FROM event_seq s
     WHERE s.part IN (SELECT DISTINCT ledger_partition(x, p_partitions) FROM unnest(v_items) AS x)
     ORDER BY s.part FOR UPDATE;
    FOR v_pair IN
      SELECT x.follower, x.followee, x.version FROM unnest(v_users, v_items, v_versions) AS x(follower, followee, version)
       ORDER BY ledger_partition(x.followee, p_partitions), x.follower, x.followee
    LOOP
      PERFORM relation_write_event(v_pair.follower, v_pair.followee, 'REMOVED', v_pair.version + 1, p_partitions);
    END LOOP;
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
  UPDATE account_erasure a SET phase = v_next, cursor_id = v_cursor, done = a.done + v_facts, batches = a.batches + 1,
         updated_at = now(), finished_at = CASE WHEN v_next = 'done' THEN now() END
   WHERE a.account_id = p_account;
  IF current_setting('ledger.test_hooks', true) = 'on' THEN
    PERFORM ledger_hook('erasure.beforeCommit', jsonb_build_object('account', p_account, 'phase', e.phase, 'facts', v_facts));
    PERFORM ledger_hook('erasure.beforeCommit.' || e.phase, jsonb_build_object('account', p_account, 'facts', v_facts));
  END IF;
  RETURN QUERY SELECT e.phase, v_facts, v_next;
END
$$;
