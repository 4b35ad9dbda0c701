-- Follow graph as authorization (seed chapter 30), partitioned by stable_hash(followee) mod P.
-- Table names follow the chapter; `part` is the partition, and with P = 1 this is the chapter.

CREATE TABLE account (
  account_id text PRIMARY KEY,
  private    boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT now()
);

-- Truth: one row per ordered pair; REMOVED doubles as "never followed" (the v0 placeholder).
CREATE TABLE relation (
  follower   text   NOT NULL REFERENCES account (account_id),
  followee   text   NOT NULL REFERENCES account (account_id),
  state      text   NOT NULL CHECK (state IN ('ACTIVE', 'PENDING', 'REMOVED')),
  version    bigint NOT NULL CHECK (version >= 0),
  changed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (follower, followee),
  CHECK (follower <> followee)
);
CREATE INDEX relation_by_followee ON relation (followee, follower) WHERE state = 'ACTIVE';
CREATE INDEX relation_pending_by_followee ON relation (followee, follower) WHERE state = 'PENDING';

CREATE TABLE block (
  blocker    text NOT NULL REFERENCES account (account_id),
  blocked    text NOT NULL REFERENCES account (account_id),
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (blocker, blocked),
  CHECK (blocker <> blocked)
);
CREATE INDEX block_by_blocked ON block (blocked, blocker);

-- One gapless, commit-ordered sequence per partition of the followee.
CREATE TABLE event_seq (
  part integer PRIMARY KEY CHECK (part >= 0),
  last bigint  NOT NULL DEFAULT 0 CHECK (last >= 0)
);

-- Each event carries the pair's target state and version: the projector keeps the larger version.
CREATE TABLE relation_event (
  part       integer NOT NULL REFERENCES event_seq (part),
  seq        bigint  NOT NULL CHECK (seq > 0),
  follower   text    NOT NULL,
  followee   text    NOT NULL,
  state      text    NOT NULL CHECK (state IN ('ACTIVE', 'PENDING', 'REMOVED')),
  version    bigint  NOT NULL CHECK (version > 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (part, seq),
  UNIQUE (follower, followee, version)
);

-- Derived side.
CREATE TABLE proj_follower (
  followee text   NOT NULL,
  follower text   NOT NULL,
  state    text   NOT NULL CHECK (state IN ('ACTIVE', 'PENDING', 'REMOVED')),
  version  bigint NOT NULL,
  since    timestamptz NOT NULL,
  PRIMARY KEY (followee, follower)
);
CREATE INDEX proj_follower_list ON proj_follower (followee, since DESC, follower DESC) WHERE state = 'ACTIVE';

CREATE TABLE proj_count (
  followee text PRIMARY KEY,
  n        bigint NOT NULL DEFAULT 0
);

CREATE TABLE proj_seen (
  part integer NOT NULL,
  seq  bigint  NOT NULL,
  PRIMARY KEY (part, seq)
);

CREATE TABLE proj_watermark (
  part         integer PRIMARY KEY REFERENCES event_seq (part),
  applied_upto bigint  NOT NULL DEFAULT 0 CHECK (applied_upto >= 0)
);

-- A post is also a likeable item (same id). acl_token = the author's partition's
-- event_seq.last, read under FOR SHARE when the post was created.
CREATE TABLE post (
  post_id    text PRIMARY KEY REFERENCES item (item_id),
  author     text NOT NULL REFERENCES account (account_id),
  visibility text NOT NULL CHECK (visibility IN ('PUBLIC', 'FOLLOWERS', 'SELF')),
  body       text NOT NULL,
  part       integer NOT NULL,
  acl_token  bigint NOT NULL CHECK (acl_token >= 0),
  created_at timestamptz NOT NULL DEFAULT now()
);

-- A database initialised before this migration gets its partition rows here; a fresh one
-- gets them from initLedger().
INSERT INTO event_seq (part) SELECT generate_series(0, partitions - 1) FROM ledger_config;
INSERT INTO proj_watermark (part) SELECT generate_series(0, partitions - 1) FROM ledger_config;
