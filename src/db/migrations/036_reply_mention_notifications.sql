-- Reply and mention notifications (docs/notifications.md): one event may now notify several
-- accounts (a comment notifies the post's author and the author of the comment it replies to; a
-- post or comment notifies every account it mentions), so the recipient joins the view's key.
-- Mentions are facts recorded when the post or comment is written (the accounts named then,
-- which existed and could read it), so the view stays a function of stored facts.

-- The accounts a post or comment mentions (`@id` in its body), written in its create transaction
-- (src/content/mentions.ts) and never changed: a mention is not re-decided when an account is
-- created, blocked or erased later; the read decides what the mentioned account may see now.
CREATE TABLE mention (
  item_id text NOT NULL REFERENCES item (item_id),
  account text NOT NULL REFERENCES account (account_id),
  PRIMARY KEY (item_id, account)
);

-- One notification row per (fact pair, recipient).
ALTER TABLE notification DROP CONSTRAINT notification_pkey;
ALTER TABLE notification ADD PRIMARY KEY (source, actor, subject, recipient);
ALTER TABLE notification DROP CONSTRAINT notification_source_check;
ALTER TABLE notification ADD CONSTRAINT notification_source_check CHECK (source IN ('like', 'relation', 'comment', 'post'));
ALTER TABLE notification DROP CONSTRAINT notification_type_check;
ALTER TABLE notification ADD CONSTRAINT notification_type_check
  CHECK (type IN ('like', 'follow', 'follow_request', 'comment', 'reply', 'mention'));

-- The post outbox feeds the view too (mentions in posts). Nothing before this migration can
-- notify (no mention was recorded), so the watermark starts at the sequence's end.
CREATE TABLE notification_post_seen (part integer NOT NULL, seq bigint NOT NULL, PRIMARY KEY (part, seq));
CREATE TABLE notification_post_watermark (
  part         integer PRIMARY KEY REFERENCES post_seq (part),
  applied_upto bigint  NOT NULL DEFAULT 0 CHECK (applied_upto >= 0)
);
INSERT INTO notification_post_watermark (part, applied_upto) SELECT part, last FROM post_seq;

-- THE rule of whom a comment notifies, and as what: the post's author (comment), the author of
-- the comment it replies to (reply), each account it mentions (mention); never its own author,
-- and one notification per recipient, the first of that order (the post's author replied to on
-- their own post is notified of a comment). notification_truth and the comment consumer both
-- ask it.
CREATE FUNCTION notification_comment_recipients(p_comment text, p_author text, p_post_author text, p_parent text)
  RETURNS TABLE (recipient text, type text) LANGUAGE sql STABLE PARALLEL SAFE
AS $$
  SELECT DISTINCT ON (r.recipient) r.recipient, r.type FROM (
    SELECT p_post_author AS recipient, 'comment'::text AS type, 1 AS rank
    UNION ALL
    SELECT pc.author, 'reply', 2 FROM comment pc WHERE pc.comment_id = p_parent
    UNION ALL
    SELECT m.account, 'mention', 3 FROM mention m WHERE m.item_id = p_comment) r
   WHERE r.recipient <> p_author
   ORDER BY r.recipient, r.rank
$$;

CREATE OR REPLACE VIEW notification_truth AS
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
  SELECT 'comment', c.author, c.comment_id, n.recipient, n.type, c.comment_id, comment_counted(c.deleted_at), c.version,
         CASE WHEN comment_counted(c.deleted_at) THEN c.created_at ELSE c.deleted_at END
    FROM comment c JOIN post p ON p.post_id = c.post_id
    CROSS JOIN LATERAL notification_comment_recipients(c.comment_id, c.author, p.author, c.parent_id) n
  UNION ALL
  -- A post's version is its post_outbox event's: 1 created, 2 deleted.
  SELECT 'post', p.author, p.post_id, m.account, 'mention', p.post_id, p.deleted_at IS NULL,
         CASE WHEN p.deleted_at IS NULL THEN 1 ELSE 2 END::bigint, coalesce(p.deleted_at, p.created_at)
    FROM post p JOIN mention m ON m.item_id = p.post_id
   WHERE m.account <> p.author;

-- Replies written before this migration notify their parent's author from now on: their rows
-- are installed as a rebuild installs them (part 0, seq 0), so the view equals the facts at once.
INSERT INTO notification (source, actor, subject, recipient, type, item_id, active, version, at, id, group_key, part, seq)
SELECT t.source, t.actor, t.subject, t.recipient, t.type, t.item_id, t.active, t.version, t.at,
       notification_id(t.at, t.source, t.actor, t.subject, t.version),
       notification_group_key(t.type, t.item_id, t.at, notification_id(t.at, t.source, t.actor, t.subject, t.version)), 0, 0
  FROM notification_truth t
 WHERE t.source = 'comment' AND t.type = 'reply'
ON CONFLICT DO NOTHING;
