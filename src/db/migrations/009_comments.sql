-- Comments (issue 9): threaded facts with tombstones, and comment_count per post derived from
-- an outbox by the shared counter machinery (src/counters/). Partitioned like likes: by the
-- comment author's stable_hash mod P, so commenters of different partitions never queue on
-- one sequence row. docs/comments.md explains the choices.

-- A comment is a likeable item with the same id. The item row is inserted after the comment
-- (the foreign key is checked at commit), so an idempotent create that finds its key taken
-- writes nothing at all.
CREATE TABLE comment (
  comment_id      text PRIMARY KEY REFERENCES item (item_id) DEFERRABLE INITIALLY DEFERRED,
  post_id         text NOT NULL REFERENCES post (post_id),
  author          text NOT NULL REFERENCES account (account_id),
  -- Thread as parent + root + depth: the parent exists before the reply, so no cycle can form.
  parent_id       text REFERENCES comment (comment_id),
  root_id         text NOT NULL,
  depth           smallint NOT NULL CHECK (depth BETWEEN 0 AND 7),
  -- NULL once deleted: a tombstone keeps neither author text nor body readable.
  body            text,
  part            integer NOT NULL,
  -- event_seq.last of the post author's partition, read FOR SHARE at creation (as a post's).
  acl_token       bigint NOT NULL CHECK (acl_token >= 0),
  idempotency_key text,
  -- +1 on every change of counted state (create, delete): the outbox event's version.
  version         bigint NOT NULL CHECK (version >= 1),
  edit_count      integer NOT NULL DEFAULT 0 CHECK (edit_count >= 0),
  created_at      timestamptz NOT NULL DEFAULT now(),
  edited_at       timestamptz,
  deleted_at      timestamptz,
  deleted_by      text,
  UNIQUE (author, idempotency_key),
  CHECK ((deleted_at IS NULL) = (body IS NOT NULL)),
  CHECK ((parent_id IS NULL) = (depth = 0))
);
CREATE INDEX comment_top_level ON comment (post_id, created_at, comment_id) WHERE parent_id IS NULL;
CREATE INDEX comment_replies ON comment (parent_id, created_at, comment_id);

-- THE definition of a counted comment: the write path derives each event's delta from it,
-- and the rebuild and the audit count rows of counted_comment. Change it here only.
CREATE FUNCTION comment_counted(deleted_at timestamptz) RETURNS boolean
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$ SELECT deleted_at IS NULL $$;
CREATE VIEW counted_comment AS SELECT * FROM comment WHERE comment_counted(deleted_at);

CREATE TABLE comment_seq (
  part integer PRIMARY KEY CHECK (part >= 0),
  last bigint  NOT NULL DEFAULT 0 CHECK (last >= 0)
);

-- One event per change of a comment's counted state, in the fact's transaction.
CREATE TABLE comment_outbox (
  part       integer  NOT NULL REFERENCES comment_seq (part),
  seq        bigint   NOT NULL CHECK (seq > 0),
  comment_id text     NOT NULL,
  post_id    text     NOT NULL,
  delta      smallint NOT NULL CHECK (delta IN (-1, 1)),
  version    bigint   NOT NULL CHECK (version > 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (part, seq),
  UNIQUE (comment_id, version)
);
CREATE INDEX comment_outbox_post_seq ON comment_outbox (post_id, part, seq);

CREATE TABLE comment_count (
  post_id  text    NOT NULL REFERENCES post (post_id),
  part     integer NOT NULL REFERENCES comment_seq (part),
  n        bigint  NOT NULL DEFAULT 0,
  base_seq bigint  NOT NULL DEFAULT 0 CHECK (base_seq >= 0),
  PRIMARY KEY (post_id, part)
);
-- The metric ledger_negative_counts reads this on every scrape: an empty index while all is well.
CREATE INDEX comment_count_negative ON comment_count (post_id) WHERE n < 0;

CREATE TABLE comment_processed (
  part integer NOT NULL,
  seq  bigint  NOT NULL,
  how  text    NOT NULL CHECK (how IN ('APPLIED', 'COVERED')),
  PRIMARY KEY (part, seq)
);

CREATE TABLE comment_watermark (
  part         integer PRIMARY KEY REFERENCES comment_seq (part),
  applied_upto bigint  NOT NULL DEFAULT 0 CHECK (applied_upto >= 0)
);

CREATE TABLE comment_rebuild_run (
  run_id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  started_at      timestamptz NOT NULL DEFAULT now(),
  snapshot_seqs   bigint[]    NOT NULL,
  keys_checked    integer     NOT NULL,
  keys_drifted    integer     NOT NULL,
  total_abs_drift bigint      NOT NULL
);
CREATE TABLE comment_rebuild_drift (
  run_id  bigint NOT NULL REFERENCES comment_rebuild_run (run_id),
  post_id text   NOT NULL,
  old_n   bigint NOT NULL,
  new_n   bigint NOT NULL,
  drift   bigint NOT NULL,
  PRIMARY KEY (run_id, post_id)
);

INSERT INTO comment_seq (part) SELECT generate_series(0, partitions - 1) FROM ledger_config;
INSERT INTO comment_watermark (part) SELECT generate_series(0, partitions - 1) FROM ledger_config;
