-- Likes ledger (seed chapter 32), partitioned by stable_hash(user_id) mod P.
-- Table and column names follow the chapter; `part` is the partition number, and with
-- P = 1 every table holds exactly the chapter's rows plus part = 0.

-- P is fixed once per database by initLedger(); the row is absent until then.
CREATE TABLE ledger_config (
  singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  partitions integer NOT NULL CHECK (partitions BETWEEN 1 AND 1024),
  created_at timestamptz NOT NULL DEFAULT now()
);

-- Same rule as stablePartition() in src/partition.ts: first 32 bits of md5, unsigned, mod P.
CREATE FUNCTION ledger_partition(key text, partitions integer) RETURNS integer
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  AS $$ SELECT (('x' || substr(md5(key), 1, 8))::bit(32)::bigint % partitions)::integer $$;

CREATE TABLE item (
  item_id    text PRIMARY KEY,
  created_at timestamptz NOT NULL DEFAULT now()
);

-- Facts: at most one row per (user, item); version +1 on every state change.
CREATE TABLE like_fact (
  user_id    text    NOT NULL,
  item_id    text    NOT NULL REFERENCES item (item_id),
  liked      boolean NOT NULL,
  version    bigint  NOT NULL CHECK (version >= 0),
  changed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (user_id, item_id)
);
CREATE INDEX like_fact_likers ON like_fact (item_id, changed_at DESC, user_id) WHERE liked;

-- One gapless, commit-ordered sequence per partition (the chapter's single-row UPDATE trick).
CREATE TABLE like_seq (
  part integer PRIMARY KEY CHECK (part >= 0),
  last bigint  NOT NULL DEFAULT 0 CHECK (last >= 0)
);

-- Outbox: exactly one event per state change, written in the fact's transaction.
CREATE TABLE like_outbox (
  part       integer  NOT NULL REFERENCES like_seq (part),
  seq        bigint   NOT NULL CHECK (seq > 0),
  user_id    text     NOT NULL,
  item_id    text     NOT NULL,
  delta      smallint NOT NULL CHECK (delta IN (-1, 1)),
  version    bigint   NOT NULL CHECK (version > 0),
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (part, seq),
  UNIQUE (user_id, item_id, version)
);
-- pendingForItem reads the item's events above the watermark: a range read on this index.
CREATE INDEX like_outbox_item_seq ON like_outbox (item_id, part, seq);

-- Derived side: one count row per (item, partition); an item's count is the sum.
CREATE TABLE like_count (
  item_id  text    NOT NULL REFERENCES item (item_id),
  part     integer NOT NULL REFERENCES like_seq (part),
  n        bigint  NOT NULL DEFAULT 0,
  base_seq bigint  NOT NULL DEFAULT 0 CHECK (base_seq >= 0),
  PRIMARY KEY (item_id, part)
);

-- How each event took effect: added by the consumer, or already inside a rebuild baseline.
CREATE TABLE processed_event (
  part integer NOT NULL,
  seq  bigint  NOT NULL,
  how  text    NOT NULL CHECK (how IN ('APPLIED', 'COVERED')),
  PRIMARY KEY (part, seq)
);

-- Contiguous watermark per partition: the largest w such that 1..w are all processed.
CREATE TABLE counter_watermark (
  part         integer PRIMARY KEY REFERENCES like_seq (part),
  applied_upto bigint  NOT NULL DEFAULT 0 CHECK (applied_upto >= 0)
);

-- Every rebuild run and the drift it corrected, so that a recurring drift is visible.
CREATE TABLE like_rebuild_run (
  run_id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  started_at    timestamptz NOT NULL DEFAULT now(),
  snapshot_seqs bigint[]    NOT NULL,
  items_checked integer     NOT NULL,
  items_drifted integer     NOT NULL,
  total_abs_drift bigint    NOT NULL
);
CREATE TABLE like_rebuild_drift (
  run_id  bigint NOT NULL REFERENCES like_rebuild_run (run_id),
  item_id text   NOT NULL,
  old_n   bigint NOT NULL,
  new_n   bigint NOT NULL,
  drift   bigint NOT NULL,
  PRIMARY KEY (run_id, item_id)
);
