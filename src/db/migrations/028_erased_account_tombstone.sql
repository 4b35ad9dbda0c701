-- An erased account is a tombstone (docs/erasure.md, "What remains, and the id afterwards"): its
-- id can never act again, and an erasure removes the erased person's data only.
--
-- Before, the blocks phase deleted the blocks *of* the account too (another user's decision, made
-- for their own safety), and any later write revived the ERASED row, so a blocked user could lift
-- every block against them by erasing themselves and writing again. Now:
--   * the blocks phase deletes the blocks the account made, never the blocks made against it;
--   * an ERASED row never changes again outside an erasure (the account guard refuses it with
--     SQLSTATE SLE02, AccountErasedError, 410 ACCOUNT_ERASED), so no write path revives it;
--   * a new row naming an erased account (like, follow, block, post, comment) is refused with
--     SLE02, likes included (they need no account row, so the like guard asks the account table);
--   * an erasure request on an ERASED account whose facts are not all off (a fact a write
--     committed after the finish had counted) runs the erasure again, and erasure_leftovers()
--     lists such facts for the audit;
--   * the block outbox (webhook_block_event) no longer names an erased account: the finish
--     redacts its events, and an event written about one is written redacted.

CREATE FUNCTION erasure_erased_refuse(p_account text) RETURNS void
  LANGUAGE plpgsql
AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'SLE02',
    MESSAGE = 'account ' || p_account || ' was erased: its id can never act again, and no new fact may name it';
END
$$;

-- The guard of the relation and block rows, posts and comments (migration 020): an account being
-- erased refuses with SLE01 as before; an erased one now with SLE02 for a new row (it was a
-- foreign-key error, "unknown account", which a revived account then no longer met).
CREATE OR REPLACE FUNCTION erasure_guard_accounts(p_ids text[], p_constraints text[], p_op text) RETURNS void
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
  PERFORM erasure_erased_refuse(v_hit.account_id);
END
$$;

-- A block towards an erased account is its blocker's data and stays (the blocks phase keeps it).
-- The importer re-creates one from an export (the blocker live, the blocked a tombstone line of
-- the same file or of this ledger), with ledger.tombstone_blocks set for its own statement only;
-- no other path writes one (relation_block answers the erased account as missing).
CREATE OR REPLACE FUNCTION erasure_guard_block() RETURNS trigger
  LANGUAGE plpgsql
AS $$
BEGIN
  IF erasure_writing() THEN
    RETURN NEW;
  END IF;
  IF TG_OP = 'INSERT' AND current_setting('ledger.tombstone_blocks', true) = 'on'
     AND EXISTS (SELECT 1 FROM account a WHERE a.account_id = NEW.blocked AND a.erased_state = 'ERASED') THEN
    PERFORM erasure_guard_accounts(ARRAY[NEW.blocker], ARRAY['block_blocker_fkey'], TG_OP);
    RETURN NEW;
  END IF;
  PERFORM erasure_guard_accounts(ARRAY[NEW.blocker, NEW.blocked], ARRAY['block_blocker_fkey', 'block_blocked_fkey'], TG_OP);
  RETURN NEW;
END
$$;

-- Likes need no account row, but an erased id may not like: the first question is now whether
-- the liker is an erased account (one probe of the account table's primary key per write).
CREATE OR REPLACE FUNCTION erasure_guard_like() RETURNS trigger
  LANGUAGE plpgsql
AS $$
DECLARE
  v_author text;
BEGIN
  IF erasure_writing() THEN
    RETURN NEW;
  END IF;
  IF EXISTS (SELECT 1 FROM account a WHERE a.account_id = NEW.user_id AND a.erased_state = 'ERASED') THEN
    PERFORM erasure_erased_refuse(NEW.user_id);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM account_erasure WHERE finished_at IS NULL) THEN
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

-- The account row: no change while it is being erased (SLE01), and none ever after it was erased
-- (SLE02), but by an erasure's own transactions (erasure_start restarting one over leftovers).
-- The erasure's record stays with the tombstone.
CREATE OR REPLACE FUNCTION erasure_guard_account() RETURNS trigger
  LANGUAGE plpgsql
AS $$
BEGIN
  IF erasure_writing() THEN
    RETURN NEW;
  END IF;
  IF OLD.erased_state = 'ERASING' THEN
    PERFORM erasure_refuse(OLD.account_id);
  END IF;
  IF OLD.erased_state = 'ERASED' THEN
    PERFORM erasure_erased_refuse(OLD.account_id);
  END IF;
  RETURN NEW;
END
$$;

-- What an erasure turns off, per phase: as in migration 020, but the blocks phase counts only the
-- blocks the account made.
CREATE OR REPLACE FUNCTION erasure_remaining(p_account text)
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
  UNION ALL SELECT 'blocks', count(*) FROM block WHERE blocker = p_account
$$;

-- The block outbox's events that name an account are found by it (the finish's redaction, the audit).
CREATE INDEX webhook_block_event_blocker ON webhook_block_event (blocker);
CREATE INDEX webhook_block_event_blocked ON webhook_block_event (blocked);
-- A redacted event keeps its place in the gapless sequence and says nothing: no ids, state ERASED.
ALTER TABLE webhook_block_event ALTER COLUMN blocker DROP NOT NULL, ALTER COLUMN blocked DROP NOT NULL;
ALTER TABLE webhook_block_event DROP CONSTRAINT webhook_block_event_state_check;
ALTER TABLE webhook_block_event ADD CONSTRAINT webhook_block_event_state_check
  CHECK ((state IN ('BLOCKED', 'UNBLOCKED') AND blocker IS NOT NULL AND blocked IS NOT NULL)
      OR (state = 'ERASED' AND blocker IS NULL AND blocked IS NULL));

-- The events of accounts erased before this migration, redacted as the finish now does it.
UPDATE webhook_block_event x SET blocker = NULL, blocked = NULL, state = 'ERASED'
 WHERE EXISTS (SELECT 1 FROM account a WHERE a.account_id IN (x.blocker, x.blocked) AND a.erased_state = 'ERASED');

-- The import stages an erased account's tombstone line (an export's, docs/import.md) as state ERASED.
ALTER TABLE import_stage DROP CONSTRAINT import_stage_state_check;
ALTER TABLE import_stage ADD CONSTRAINT import_stage_state_check CHECK (state IN ('ACTIVE', 'PENDING', 'ERASED'));

-- Every fact an ERASED account still holds (what its erasure should have turned off), and every
-- block outbox event that still names it: the audit's leftover check. An erasure request on such
-- an account runs the erasure again.
CREATE FUNCTION erasure_leftovers()
  RETURNS TABLE (account_id text, what text, n bigint)
  LANGUAGE sql STABLE
AS $$
  SELECT a.account_id, r.phase, r.n FROM account a CROSS JOIN LATERAL erasure_remaining(a.account_id) r
   WHERE a.erased_state = 'ERASED' AND r.n > 0
  UNION ALL
  SELECT a.account_id, 'block_events', e.n FROM account a
   CROSS JOIN LATERAL (SELECT (SELECT count(*) FROM webhook_block_event x WHERE x.blocker = a.account_id)
                            + (SELECT count(*) FROM webhook_block_event x WHERE x.blocked = a.account_id) AS n) e
   WHERE a.erased_state = 'ERASED' AND e.n > 0
$$;

-- The block outbox's trigger (migration 019): an event about a block of or towards an erased
-- account (the importer's tombstone blocks, an erasure's own deletions) is written redacted.
CREATE OR REPLACE FUNCTION webhook_block_outbox() RETURNS trigger
  LANGUAGE plpgsql
AS $$
DECLARE
  v_blocker text := CASE WHEN TG_OP = 'INSERT' THEN NEW.blocker ELSE OLD.blocker END;
  v_blocked text := CASE WHEN TG_OP = 'INSERT' THEN NEW.blocked ELSE OLD.blocked END;
  v_erased  boolean;
  v_part    integer;
  v_seq     bigint;
BEGIN
  SELECT ledger_partition(v_blocker, c.partitions) INTO v_part FROM ledger_config c;
  v_erased := EXISTS (SELECT 1 FROM account a WHERE a.account_id IN (v_blocker, v_blocked) AND a.erased_state IS NOT NULL);
  INSERT INTO webhook_block_seq AS s (part, last) VALUES (v_part, 1)
    ON CONFLICT (part) DO UPDATE SET last = s.last + 1
    RETURNING s.last INTO v_seq;
  INSERT INTO webhook_block_event (part, seq, blocker, blocked, state)
    VALUES (v_part, v_seq, CASE WHEN NOT v_erased THEN v_blocker END, CASE WHEN NOT v_erased THEN v_blocked END,
            CASE WHEN v_erased THEN 'ERASED' WHEN TG_OP = 'INSERT' THEN 'BLOCKED' ELSE 'UNBLOCKED' END);
  RETURN NULL;
END
$$;

-- Starts an erasure: NOT_FOUND, RUNNING, STARTED as in migration 020; ERASED only when nothing is
-- left. An ERASED account that still holds facts (erasure_remaining) is erased again: STARTED.
CREATE OR REPLACE FUNCTION erasure_start(p_account text, p_requested_by text)
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
  IF v_state = 'ERASING' THEN
    RETURN 'RUNNING';
  END IF;
  SELECT sum(r.n) INTO v_total FROM erasure_remaining(p_account) r;
  IF v_state = 'ERASED' AND v_total = 0
     AND NOT EXISTS (SELECT 1 FROM webhook_block_event x WHERE x.blocker = p_account OR x.blocked = p_account) THEN
    RETURN 'ERASED';
  END IF;
  PERFORM set_config('ledger.erasure', p_account, true);
  UPDATE account SET erased_state = 'ERASING' WHERE account_id = p_account;
  INSERT INTO account_erasure (account_id, requested_by, phase, total) VALUES (p_account, p_requested_by, 'posts', v_total)
    ON CONFLICT (account_id) DO UPDATE SET requested_by = EXCLUDED.requested_by, phase = 'posts', cursor_id = NULL, total = EXCLUDED.total,
      done = 0, batches = 0, started_at = now(), updated_at = now(), finished_at = NULL;
  RETURN 'STARTED';
END
$$;

-- erasure_step of migration 023, changed in the blocks phase (only the blocks the account made) and
-- in the finish (the block outbox's events naming the account are redacted with it).
CREATE OR REPLACE FUNCTION erasure_step(p_account text, p_limit integer, p_partitions integer)
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
    -- The blocks it made. A block made against it is its blocker's decision and data: it stays,
    -- and the account, a tombstone, can never lift it. (The block outbox's trigger writes the
    -- deletions' events redacted: the account is ERASING.)
    WITH picked AS (
      SELECT b.blocker, b.blocked FROM block b WHERE b.blocker = p_account LIMIT p_limit),
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
      -- Its block history: who it blocked and who blocked it is no webhook's to replay.
      UPDATE webhook_block_event x SET blocker = NULL, blocked = NULL, state = 'ERASED' WHERE x.blocker = p_account;
      UPDATE webhook_block_event x SET blocker = NULL, blocked = NULL, state = 'ERASED' WHERE x.blocked = p_account;
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

-- like_set_batch of migration 024, with one more refusal: a write by an erased account is its own
-- REJECTED row, code ACCOUNT_ERASED (the batch skips the row trigger for its own writes).
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
  v_erased     text[];
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

  v_erased := ARRAY(SELECT a.account_id FROM account a WHERE a.account_id = ANY (p_users) AND a.erased_state = 'ERASED' AND NOT erasure_writing());
  -- What each write may do, decided before any lock, as like_set_if_visible and the erasure guard do.
  FOR i IN 1 .. n LOOP
    IF p_users[i] = ANY (v_erased) THEN
      o_outcome[i] := 'REJECTED'; o_code[i] := 'ACCOUNT_ERASED'; o_account[i] := p_users[i];
      CONTINUE;
    END IF;
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
