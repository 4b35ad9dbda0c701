-- Retention of the outboxes (issue 8): like_outbox, relation_event and comment_outbox lose their
-- oldest events, and the audits read a pruned-prefix baseline instead, so every invariant query
-- gives after a prune the figures it gave before it. docs/retention.md has the safety argument.

-- Per (kind, partition): events 1..pruned_upto are gone from the outbox. The other columns are
-- the audits' figures over the deleted rows, added up prune after prune.
CREATE TABLE retention_floor (
  kind                text    NOT NULL CHECK (kind IN ('likes', 'relations', 'comments')),
  part                integer NOT NULL CHECK (part >= 0),
  pruned_upto         bigint  NOT NULL DEFAULT 0 CHECK (pruned_upto >= 0),
  -- deleted rows and the largest deleted seq: the gapless check is rows + pruned_events = last.
  pruned_events       bigint  NOT NULL DEFAULT 0,
  pruned_max_seq      bigint  NOT NULL DEFAULT 0,
  -- deleted events that sat outside their partition (0 unless the write path was broken).
  misplaced_events    bigint  NOT NULL DEFAULT 0,
  -- relations: deleted events whose transition from the pair's previous version was illegal.
  illegal_transitions bigint  NOT NULL DEFAULT 0,
  -- dedup keys (processed_event, proj_seen, comment_processed) at or below this are gone.
  keys_pruned_upto    bigint  NOT NULL DEFAULT 0 CHECK (keys_pruned_upto >= 0),
  pruned_at           timestamptz,
  PRIMARY KEY (kind, part)
);

-- Per (user, item): the deleted like events, as the write-side audit sums them.
CREATE TABLE like_outbox_pruned (
  user_id     text   NOT NULL,
  item_id     text   NOT NULL,
  events      bigint NOT NULL,
  delta_sum   bigint NOT NULL,
  max_version bigint NOT NULL,
  PRIMARY KEY (user_id, item_id)
);

-- Per (follower, followee): the deleted relation events and the state of the newest of them,
-- which is the "previous state" of the pair's oldest remaining event.
CREATE TABLE relation_event_pruned (
  follower    text   NOT NULL,
  followee    text   NOT NULL,
  events      bigint NOT NULL,
  max_version bigint NOT NULL,
  last_state  text   NOT NULL CHECK (last_state IN ('ACTIVE', 'PENDING', 'REMOVED')),
  PRIMARY KEY (follower, followee)
);

-- Per post: the deleted comment events' delta sum.
CREATE TABLE comment_outbox_pruned (
  post_id   text   PRIMARY KEY,
  delta_sum bigint NOT NULL
);

-- A transport that still reads the outbox from a position (a relay publishing it elsewhere)
-- holds events above `upto`: the prune never goes past the lowest hold of a (kind, part).
-- Delete a holder's rows when it is retired, or it stops retention for good.
CREATE TABLE retention_hold (
  holder     text    NOT NULL,
  kind       text    NOT NULL CHECK (kind IN ('likes', 'relations', 'comments')),
  part       integer NOT NULL CHECK (part >= 0),
  upto       bigint  NOT NULL CHECK (upto >= 0),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (holder, kind, part)
);
