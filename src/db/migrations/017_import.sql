-- Importing existing facts (issue 20, docs/import.md): a file is staged whole in one transaction
-- (with its cross-line checks, so a file with a bad line leaves nothing behind), then applied
-- phase by phase in bounded batches; each batch commits its facts, their derived rows and the
-- run's cursor together, so a killed import resumes where it stopped.

-- One row per staged file, found again by the file's digest: the same file twice is one run.
CREATE TABLE import_run (
  run_id      bigint PRIMARY KEY,
  digest      text   NOT NULL UNIQUE,
  lines       bigint NOT NULL CHECK (lines >= 0),
  -- The `at` of every fact whose line gives none, fixed once so that a resumed run writes the same.
  imported_at timestamptz NOT NULL,
  -- The next phase to apply, and in it the last staged row applied (import_stage.ord).
  phase       text   NOT NULL CHECK (phase IN ('accounts', 'items', 'blocks', 'follows', 'likes', 'follow_writes', 'like_writes', 'notifications', 'caches', 'done')),
  after_ord   bigint NOT NULL DEFAULT 0,
  applied     jsonb  NOT NULL DEFAULT '{}',
  -- Like lines the set-based likes phase did not write (history, posts and comments, a pair's later
  -- lines, pairs liked already): while 0, the like_writes phase has nothing to look for.
  likes_left  bigint NOT NULL DEFAULT 0,
  finished_at timestamptz
);
CREATE SEQUENCE import_run_id;

-- The valid lines of a staged file, one row each; deleted when the run is done. `ord` numbers the
-- lines of a kind in (a, b, line) order, the key order of the tables they are written to, and the
-- apply walks them by it: each batch's index inserts are neighbours, not a random sample.
--   account: a = id, private, hide (NULL: not given)   item: a = id
--   like: a = user, b = item   follow: a = follower, b = followee, state   block: a = blocker, b = blocked
CREATE TABLE import_stage (
  run_id  bigint  NOT NULL,
  kind    text    NOT NULL CHECK (kind IN ('account', 'item', 'like', 'follow', 'block')),
  ord     bigint  NOT NULL,
  line    bigint  NOT NULL,
  a       text    NOT NULL,
  b       text,
  state   text    CHECK (state IN ('ACTIVE', 'PENDING')),
  private boolean,
  hide    boolean,
  at      timestamptz,
  PRIMARY KEY (run_id, kind, ord)
);
