-- Every run of the feed invariant records its figures (docs/feed.md, "Metrics"): the periodic
-- audit did; the full audit (`social-ledger audit`, GET /v1/admin/audit) now does too, and says
-- which it was. Rows written before were the periodic audit's.
ALTER TABLE feed_audit_run ADD COLUMN source text NOT NULL DEFAULT 'periodic' CHECK (source IN ('periodic', 'full'));
ALTER TABLE feed_audit_run ALTER COLUMN source DROP DEFAULT;

-- What each feed rebuild (`social-ledger rebuild --kind feed`) changed, one row per run, as the
-- counts' rebuilds record theirs (like_rebuild_run). No row per reader: an account id here would
-- be one more place for an erasure to reach; the run's report names the readers.
CREATE TABLE feed_rebuild_run (
  run_id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  started_at      timestamptz NOT NULL DEFAULT now(),
  readers_checked integer NOT NULL CHECK (readers_checked >= 0),
  readers_drifted integer NOT NULL CHECK (readers_drifted >= 0),
  rows_added      integer NOT NULL CHECK (rows_added >= 0),
  rows_removed    integer NOT NULL CHECK (rows_removed >= 0)
);
