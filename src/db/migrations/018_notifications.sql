-- Notifications (issue 21): a derived view of the like, relation and comment facts, kept by a
-- de-duplicating consumer of their outboxes and grouped at read time (docs/notifications.md).

-- Per source outbox: the processed sequence numbers and the contiguous watermark, as every view
-- has them. A database migrated with pruned outboxes starts at its floor: the events below it are
-- gone, and only a rebuild (from the facts) brings their notifications in.
CREATE TABLE notification_like_seen (part integer NOT NULL, seq bigint NOT NULL, PRIMARY KEY (part, seq));
CREATE TABLE notification_like_watermark (
  part         integer PRIMARY KEY REFERENCES like_seq (part),
  applied_upto bigint  NOT NULL DEFAULT 0 CHECK (applied_upto >= 0)
);
CREATE TABLE notification_relation_seen (part integer NOT NULL, seq bigint NOT NULL, PRIMARY KEY (part, seq));
CREATE TABLE notification_relation_watermark (
  part         integer PRIMARY KEY REFERENCES event_seq (part),
  applied_upto bigint  NOT NULL DEFAULT 0 CHECK (applied_upto >= 0)
);
CREATE TABLE notification_comment_seen (part integer NOT NULL, seq bigint NOT NULL, PRIMARY KEY (part, seq));
CREATE TABLE notification_comment_watermark (
  part         integer PRIMARY KEY REFERENCES comment_seq (part),
  applied_upto bigint  NOT NULL DEFAULT 0 CHECK (applied_upto >= 0)
);
INSERT INTO notification_like_watermark (part, applied_upto)
  SELECT s.part, coalesce(f.pruned_upto, 0) FROM like_seq s LEFT JOIN retention_floor f ON f.kind = 'likes' AND f.part = s.part;
INSERT INTO notification_relation_watermark (part, applied_upto)
  SELECT s.part, coalesce(f.pruned_upto, 0) FROM event_seq s LEFT JOIN retention_floor f ON f.kind = 'relations' AND f.part = s.part;
INSERT INTO notification_comment_watermark (part, applied_upto)
  SELECT s.part, coalesce(f.pruned_upto, 0) FROM comment_seq s LEFT JOIN retention_floor f ON f.kind = 'comments' AND f.part = s.part;

-- The author of a likeable item, for the kinds that have one (a plain item has none: no one is notified).
CREATE VIEW notification_item_author AS
  SELECT p.post_id AS item_id, p.author FROM post p
  UNION ALL
  SELECT c.comment_id, c.author FROM comment c;

-- A notification's id: its time in microseconds (16 digits) and a digest of the fact pair and its
-- version. Ids sort in time order, and the same fact at the same version has the same id whether
-- the consumer or a rebuild wrote it.
CREATE FUNCTION notification_id(p_at timestamptz, p_source text, p_actor text, p_subject text, p_version bigint)
  RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
  SELECT lpad(floor(extract(epoch FROM p_at) * 1000000)::bigint::text, 16, '0') || '-'
      || substr(md5(p_source || '/' || p_actor || '/' || p_subject || '/' || p_version::text), 1, 12)
$$;

-- THE grouping rule (Mastodon 4.3's group_key): likes of one item, and follows, fall into one
-- group per fixed 12-hour window of UTC time; every other type is a group of its own.
CREATE FUNCTION notification_group_key(p_type text, p_item text, p_at timestamptz, p_id text)
  RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
  SELECT CASE p_type
    WHEN 'like' THEN 'like-' || p_item || '-' || floor(extract(epoch FROM p_at) / 43200)::bigint::text
    WHEN 'follow' THEN 'follow-' || floor(extract(epoch FROM p_at) / 43200)::bigint::text
    ELSE 'ungrouped-' || p_id
  END
$$;

-- THE definition of what notifies whom, from the facts: one row per fact pair that can notify
-- (active or not), with its version. The consumer's per-event statements say the same about each
-- event (src/notifications/notification-sources.ts); the rebuild installs from this view and the
-- audit compares against it.
CREATE VIEW notification_truth AS
  SELECT 'like'::text AS source, f.user_id AS actor, f.item_id AS subject, a.author AS recipient, 'like'::text AS type,
         f.item_id, f.liked AS active, f.version, f.changed_at AS at
    FROM like_fact f JOIN notification_item_author a ON a.item_id = f.item_id
   WHERE a.author <> f.user_id AND f.version > 0
  UNION ALL
  SELECT 'relation', r.follower, r.followee, r.followee, CASE r.state WHEN 'PENDING' THEN 'follow_request' ELSE 'follow' END,
         NULL, r.state <> 'REMOVED', r.version, r.changed_at
    FROM relation r
   WHERE r.version > 0
  UNION ALL
  SELECT 'comment', c.author, c.comment_id, p.author, 'comment', c.comment_id, comment_counted(c.deleted_at), c.version,
         CASE WHEN comment_counted(c.deleted_at) THEN c.created_at ELSE c.deleted_at END
    FROM comment c JOIN post p ON p.post_id = c.post_id
   WHERE p.author <> c.author;

-- The derived side: one row per fact pair, keeping the highest version seen (an inactive row is
-- kept so that an older event delivered late stays stale). (part, seq) is the event that wrote the
-- row, seq 0 when a rebuild installed it from the facts.
CREATE TABLE notification (
  source    text    NOT NULL CHECK (source IN ('like', 'relation', 'comment')),
  actor     text    NOT NULL,
  subject   text    NOT NULL,
  recipient text    NOT NULL,
  type      text    NOT NULL CHECK (type IN ('like', 'follow', 'follow_request', 'comment')),
  item_id   text,
  active    boolean NOT NULL,
  version   bigint  NOT NULL CHECK (version > 0),
  at        timestamptz NOT NULL,
  -- "C": ids and keys compare byte by byte, whatever the database's collation.
  id        text    COLLATE "C" NOT NULL,
  group_key text    COLLATE "C" NOT NULL,
  part      integer NOT NULL,
  seq       bigint  NOT NULL CHECK (seq >= 0),
  PRIMARY KEY (source, actor, subject)
);
CREATE INDEX notification_inbox ON notification (recipient, id DESC) WHERE active;
CREATE INDEX notification_by_recipient ON notification (recipient, source, actor, subject);

-- How far a reader has read (Mastodon's notifications marker): the id of the newest notification
-- read; every visible notification with a larger id is unread.
CREATE TABLE notification_marker (
  recipient    text PRIMARY KEY,
  last_read_id text COLLATE "C" NOT NULL,
  updated_at   timestamptz NOT NULL DEFAULT now()
);

-- Every rebuild run and the rows it corrected.
CREATE TABLE notification_rebuild_run (
  run_id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  started_at         timestamptz NOT NULL DEFAULT now(),
  snapshot_seqs      jsonb   NOT NULL,
  recipients_checked integer NOT NULL,
  rows_drifted       integer NOT NULL,
  rows_pending       integer NOT NULL
);
