-- The home timeline (docs/feed.md): a post outbox written in the post's own transaction, and
-- feed_inbox per reader kept from it and from relation_event by a de-duplicating consumer that
-- decides every event against the facts at apply time. A page is filtered again at read time.

-- Post events, partitioned by the author's partition (post.part), gapless and commit-ordered per
-- partition as every outbox: the sequence row is updated last in the writer's transaction and
-- stays locked until it commits.
CREATE TABLE post_seq (
  part integer PRIMARY KEY CHECK (part >= 0),
  last bigint  NOT NULL DEFAULT 0 CHECK (last >= 0)
);
CREATE TABLE post_outbox (
  part       integer NOT NULL REFERENCES post_seq (part),
  seq        bigint  NOT NULL CHECK (seq > 0),
  post_id    text    NOT NULL,
  author     text    NOT NULL,
  kind       text    NOT NULL CHECK (kind IN ('created', 'deleted')),
  -- 1 for the creation, 2 for the deletion: a post changes who may read it at most twice.
  version    bigint  NOT NULL CHECK (version IN (1, 2)),
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (part, seq),
  UNIQUE (post_id, version)
);
INSERT INTO post_seq (part) SELECT generate_series(0, partitions - 1) FROM ledger_config;

-- Every writer of post rows (createPost, deletePost, erasure_step's posts phase) gets its event
-- from this one trigger, in its own transaction: no write path can forget it. A deletion is the
-- tombstone's first deleted_at; a repeated delete changes nothing and writes nothing.
CREATE FUNCTION post_write_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_seq bigint;
BEGIN
  UPDATE post_seq SET last = last + 1 WHERE part = NEW.part RETURNING last INTO v_seq;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'post_seq has no row for partition %: the ledger is not initialised', NEW.part;
  END IF;
  INSERT INTO post_outbox (part, seq, post_id, author, kind, version)
  VALUES (NEW.part, v_seq, NEW.post_id, NEW.author,
          CASE WHEN TG_OP = 'INSERT' THEN 'created' ELSE 'deleted' END, CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE 2 END);
  RETURN NULL;
END
$$;
CREATE TRIGGER post_outbox_created AFTER INSERT ON post FOR EACH ROW EXECUTE FUNCTION post_write_event();
CREATE TRIGGER post_outbox_deleted AFTER UPDATE OF deleted_at ON post FOR EACH ROW
  WHEN (OLD.deleted_at IS NULL AND NEW.deleted_at IS NOT NULL) EXECUTE FUNCTION post_write_event();

-- The inbox: one row per (reader, post), ordered by the post's key (created_at, post_id).
CREATE TABLE feed_inbox (
  reader  text        NOT NULL,
  post_id text        NOT NULL,
  author  text        NOT NULL,
  at      timestamptz NOT NULL,
  PRIMARY KEY (reader, post_id)
);
CREATE INDEX feed_inbox_page ON feed_inbox (reader, at DESC, post_id DESC);
CREATE INDEX feed_inbox_by_post ON feed_inbox (post_id);
CREATE INDEX feed_inbox_by_author ON feed_inbox (reader, author);

-- Per reader: the row every writer of the reader's inbox locks first (the consumers, the
-- rebuild), and the horizon: the newest key trimmed away. The inbox holds exactly the reader's
-- truth above the horizon (at most the cap); below it, nothing is promised and nothing is read.
CREATE TABLE feed_reader (
  reader     text PRIMARY KEY,
  horizon_at timestamptz,
  horizon_id text,
  CHECK ((horizon_at IS NULL) = (horizon_id IS NULL))
);

-- Per source outbox, the processed sequence numbers and the contiguous watermark.
CREATE TABLE feed_post_seen (part integer NOT NULL, seq bigint NOT NULL, PRIMARY KEY (part, seq));
CREATE TABLE feed_post_watermark (
  part         integer PRIMARY KEY REFERENCES post_seq (part),
  applied_upto bigint  NOT NULL DEFAULT 0 CHECK (applied_upto >= 0)
);
CREATE TABLE feed_relation_seen (part integer NOT NULL, seq bigint NOT NULL, PRIMARY KEY (part, seq));
CREATE TABLE feed_relation_watermark (
  part         integer PRIMARY KEY REFERENCES event_seq (part),
  applied_upto bigint  NOT NULL DEFAULT 0 CHECK (applied_upto >= 0)
);
INSERT INTO feed_post_watermark (part) SELECT part FROM post_seq;
-- The inboxes are filled from the facts below, in this transaction: the relation events so far are in them.
INSERT INTO feed_relation_watermark (part, applied_upto) SELECT part, last FROM event_seq;

-- THE definition of what a reader's home timeline may hold: every live post the reader may read
-- in the truth (post_readable, TRUTH mode) by an account the reader follows (ACTIVE), and the
-- reader's own live posts (SELF ones too). The consumers, the rebuild and the audit all say this.
CREATE VIEW feed_truth AS
  SELECT r.follower AS reader, p.post_id, p.author, p.created_at AS at
    FROM relation r JOIN post p ON p.author = r.followee
   WHERE r.state = 'ACTIVE' AND p.deleted_at IS NULL
     AND post_readable(r.follower, p.author, p.visibility, p.part, p.acl_token, 'TRUTH')
  UNION ALL
  SELECT p.author, p.post_id, p.author, p.created_at FROM post p WHERE p.deleted_at IS NULL;

-- One reader's truth as the inbox must hold it: above the reader's horizon, the newest p_max.
CREATE FUNCTION feed_reader_truth(p_reader text, p_max integer)
  RETURNS TABLE (post_id text, author text, at timestamptz) LANGUAGE sql STABLE
AS $$
  SELECT t.post_id, t.author, t.at
    FROM feed_truth t LEFT JOIN feed_reader h ON h.reader = p_reader
   WHERE t.reader = p_reader AND (h.horizon_at IS NULL OR (t.at, t.post_id) > (h.horizon_at, h.horizon_id))
   ORDER BY t.at DESC, t.post_id DESC
   LIMIT p_max
$$;

-- THE feed invariant as one statement: every inbox equals its reader's truth (above the horizon,
-- the newest p_max), except where a post or relation event the feed has not applied yet explains
-- the difference (lag, not a lie). Also: no inbox above the cap, no row at or below its horizon.
CREATE FUNCTION feed_audit(p_max integer)
  RETURNS TABLE (readers integer, extra integer, missing integer, over_cap integer, below_horizon integer,
                 explained_by_pending integer, lag integer)
  LANGUAGE sql STABLE
AS $$
  WITH above AS (
    SELECT t.* FROM feed_truth t LEFT JOIN feed_reader h ON h.reader = t.reader
     WHERE h.horizon_at IS NULL OR (t.at, t.post_id) > (h.horizon_at, h.horizon_id)),
  ranked AS (SELECT a.*, row_number() OVER (PARTITION BY a.reader ORDER BY a.at DESC, a.post_id DESC) AS rn FROM above a),
  truth AS (SELECT reader, post_id, author FROM ranked WHERE rn <= p_max),
  diff AS (
    SELECT coalesce(t.reader, i.reader) AS reader, coalesce(t.post_id, i.post_id) AS post_id,
           coalesce(t.author, i.author) AS author, t.reader IS NULL AS extra
      FROM truth t FULL JOIN feed_inbox i ON i.reader = t.reader AND i.post_id = t.post_id
     WHERE t.reader IS NULL OR i.reader IS NULL),
  judged AS (
    SELECT d.extra,
           EXISTS (SELECT 1 FROM post_outbox o JOIN feed_post_watermark w USING (part)
                    WHERE o.post_id = d.post_id AND o.seq > w.applied_upto
                      AND NOT EXISTS (SELECT 1 FROM feed_post_seen s WHERE s.part = o.part AND s.seq = o.seq))
        OR EXISTS (SELECT 1 FROM relation_event o JOIN feed_relation_watermark w USING (part)
                    WHERE o.follower = d.reader AND o.followee = d.author AND o.seq > w.applied_upto
                      AND NOT EXISTS (SELECT 1 FROM feed_relation_seen s WHERE s.part = o.part AND s.seq = o.seq)) AS pending
      FROM diff d)
  SELECT (SELECT count(DISTINCT reader) FROM (SELECT reader FROM feed_inbox UNION SELECT reader FROM truth) r)::int,
         count(*) FILTER (WHERE extra AND NOT pending)::int,
         count(*) FILTER (WHERE NOT extra AND NOT pending)::int,
         (SELECT count(*) FROM (SELECT 1 FROM feed_inbox GROUP BY reader HAVING count(*) > p_max) o)::int,
         (SELECT count(*) FROM feed_inbox i JOIN feed_reader h ON h.reader = i.reader
           WHERE (i.at, i.post_id) <= (h.horizon_at, h.horizon_id))::int,
         count(*) FILTER (WHERE pending)::int,
         ((SELECT coalesce(sum(s.last - w.applied_upto), 0) FROM post_seq s JOIN feed_post_watermark w USING (part))
        + (SELECT coalesce(sum(s.last - w.applied_upto), 0) FROM event_seq s JOIN feed_relation_watermark w USING (part)))::int
    FROM judged
$$;

-- The inboxes of the facts so far (a database migrated with posts and follows), at the default cap.
INSERT INTO feed_inbox (reader, post_id, author, at)
  SELECT reader, post_id, author, at
    FROM (SELECT t.*, row_number() OVER (PARTITION BY t.reader ORDER BY t.at DESC, t.post_id DESC) AS rn FROM feed_truth t) r
   WHERE rn <= 800;
INSERT INTO feed_reader (reader, horizon_at, horizon_id)
  SELECT reader, at, post_id
    FROM (SELECT t.*, row_number() OVER (PARTITION BY t.reader ORDER BY t.at DESC, t.post_id DESC) AS rn FROM feed_truth t) r
   WHERE rn = 801;

-- THE read-time rule of a home timeline entry, decided when the page is read, whatever the inbox
-- holds: the post is live, and it is the reader's own or the reader follows its author now and
-- may read it as GET /v1/posts/{id} decides by default (post_readable with the post's token, so a
-- block or removal committed before the post was created is always seen: no new-enemy read).
CREATE FUNCTION feed_entry_visible(p_reader text, p_author text, p_visibility text, p_part integer, p_token bigint,
                                   p_deleted_at timestamptz)
  RETURNS boolean LANGUAGE sql STABLE
AS $$
  SELECT p_deleted_at IS NULL AND (p_reader = p_author OR (
    EXISTS (SELECT 1 FROM relation r WHERE r.follower = p_reader AND r.followee = p_author AND r.state = 'ACTIVE')
    AND post_readable(p_reader, p_author, p_visibility, p_part, p_token, 'CONTENT_TOKEN')))
$$;

-- One reader's inbox := its truth, the newest p_max (the rebuild), with the reader's row already
-- locked by the caller. The horizon goes to the newest truth key left out (none: NULL), so posts
-- trimmed away before come back when they are among the newest. Returns the rows it changed.
CREATE FUNCTION feed_install_reader(p_reader text, p_max integer)
  RETURNS TABLE (added integer, removed integer) LANGUAGE sql
AS $$
  WITH truth AS (
    SELECT t.post_id, t.author, t.at, row_number() OVER (ORDER BY t.at DESC, t.post_id DESC) AS rn
      FROM feed_truth t WHERE t.reader = p_reader),
  keep AS (SELECT * FROM truth WHERE rn <= p_max),
  cut AS (SELECT at, post_id FROM truth WHERE rn = p_max + 1),
  removed AS (
    DELETE FROM feed_inbox i WHERE i.reader = p_reader AND NOT EXISTS (SELECT 1 FROM keep k WHERE k.post_id = i.post_id)
    RETURNING 1),
  added AS (
    INSERT INTO feed_inbox (reader, post_id, author, at) SELECT p_reader, k.post_id, k.author, k.at FROM keep k ORDER BY k.post_id
    ON CONFLICT DO NOTHING RETURNING 1),
  horizon AS (
    UPDATE feed_reader SET horizon_at = (SELECT at FROM cut), horizon_id = (SELECT post_id FROM cut) WHERE reader = p_reader
    RETURNING 1)
  SELECT (SELECT count(*) FROM added)::int, (SELECT count(*) FROM removed)::int FROM (SELECT count(*) FROM horizon) h
$$;
