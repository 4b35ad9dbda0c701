-- Absent readers (docs/feed.md, "Absent readers"): fan-out writes nothing to the inbox of a reader
-- who has not read the home timeline for LEDGER_FEED_ABSENT_MS; the reader's next read installs
-- the inbox from the facts. Both states live in the reader's feed_reader row, the row every writer
-- of that inbox locks first, so the consumer's decision to skip and the read's rebuild are ordered.

-- last_read_at: the reader's last read, written at most once per interval (not on every read); a
-- reader's clock starts when its row is created (existing readers: now, as if they had just read).
-- skipped_since: when fan-out first skipped this reader since its inbox was last installed; NULL
-- means the inbox is complete (the invariant holds in full), set means rows may be missing.
ALTER TABLE feed_reader
  ADD COLUMN last_read_at  timestamptz NOT NULL DEFAULT now(),
  ADD COLUMN skipped_since timestamptz;
CREATE INDEX feed_reader_skipped ON feed_reader (reader) WHERE skipped_since IS NOT NULL;

-- Of the given readers, whose rows are already locked by the caller (a consumer batch), those
-- fan-out must skip: the ones already skipped, and the ones absent now (last read longer than
-- p_absent_ms ago), which are marked skipped here in the same transaction as the skip itself.
-- Called after the reader locks, so it reads the row as the last writer of that lock left it:
-- a read's rebuild that committed before counts (docs/feed.md, "Why a returning reader loses nothing").
CREATE FUNCTION feed_skip_absent(p_readers text[], p_absent_ms bigint)
  RETURNS TABLE (reader text) LANGUAGE sql
AS $$
  WITH marked AS (
    UPDATE feed_reader f SET skipped_since = now()
     WHERE f.reader = ANY (p_readers) AND f.skipped_since IS NULL
       AND f.last_read_at < now() - make_interval(secs => p_absent_ms / 1000.0)
    RETURNING f.reader)
  SELECT m.reader FROM marked m
  UNION ALL
  SELECT f.reader FROM feed_reader f WHERE f.reader = ANY (p_readers) AND f.skipped_since IS NOT NULL
$$;

-- A returning reader, its row locked by the caller: install its inbox from the truth
-- (feed_install_reader) when fan-out skipped it, and record the read. Returns whether it rebuilt.
CREATE FUNCTION feed_return_reader(p_reader text, p_max integer)
  RETURNS TABLE (rebuilt boolean, added integer, removed integer) LANGUAGE plpgsql
AS $$
DECLARE
  v_skipped boolean;
BEGIN
  SELECT f.skipped_since IS NOT NULL INTO v_skipped FROM feed_reader f WHERE f.reader = p_reader;
  IF v_skipped THEN
    SELECT i.added, i.removed INTO added, removed FROM feed_install_reader(p_reader, p_max) i;
  ELSE
    added := 0;
    removed := 0;
  END IF;
  UPDATE feed_reader f SET last_read_at = now(), skipped_since = NULL WHERE f.reader = p_reader;
  rebuilt := coalesce(v_skipped, false);
  RETURN NEXT;
END
$$;

-- THE feed invariant, with absent readers: a skipped inbox (skipped_since set) may lack rows, so
-- its missing rows are not counted, but each row it holds must still be in the reader's truth
-- above the horizon (not only among the newest p_max: newer rows were skipped). A complete inbox
-- is judged exactly as before.
CREATE OR REPLACE FUNCTION feed_audit(p_max integer)
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
           EXISTS (SELECT 1 FROM feed_reader f WHERE f.reader = d.reader AND f.skipped_since IS NOT NULL)
             AND (NOT d.extra OR EXISTS (SELECT 1 FROM above a WHERE a.reader = d.reader AND a.post_id = d.post_id)) AS skipped,
           EXISTS (SELECT 1 FROM post_outbox o JOIN feed_post_watermark w USING (part)
                    WHERE o.post_id = d.post_id AND o.seq > w.applied_upto
                      AND NOT EXISTS (SELECT 1 FROM feed_post_seen s WHERE s.part = o.part AND s.seq = o.seq))
        OR EXISTS (SELECT 1 FROM relation_event o JOIN feed_relation_watermark w USING (part)
                    WHERE o.follower = d.reader AND o.followee = d.author AND o.seq > w.applied_upto
                      AND NOT EXISTS (SELECT 1 FROM feed_relation_seen s WHERE s.part = o.part AND s.seq = o.seq)) AS pending
      FROM diff d)
  SELECT (SELECT count(DISTINCT reader) FROM (SELECT reader FROM feed_inbox UNION SELECT reader FROM truth) r)::int,
         count(*) FILTER (WHERE extra AND NOT pending AND NOT skipped)::int,
         count(*) FILTER (WHERE NOT extra AND NOT pending AND NOT skipped)::int,
         (SELECT count(*) FROM (SELECT 1 FROM feed_inbox GROUP BY reader HAVING count(*) > p_max) o)::int,
         (SELECT count(*) FROM feed_inbox i JOIN feed_reader h ON h.reader = i.reader
           WHERE (i.at, i.post_id) <= (h.horizon_at, h.horizon_id))::int,
         count(*) FILTER (WHERE pending AND NOT skipped)::int,
         ((SELECT coalesce(sum(s.last - w.applied_upto), 0) FROM post_seq s JOIN feed_post_watermark w USING (part))
        + (SELECT coalesce(sum(s.last - w.applied_upto), 0) FROM event_seq s JOIN feed_relation_watermark w USING (part)))::int
    FROM judged
$$;

-- The feed figures of each periodic audit: what ledger_feed_drift_rows_total adds up (by any process).
CREATE TABLE feed_audit_run (
  run_id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at              timestamptz NOT NULL DEFAULT now(),
  extra           integer NOT NULL CHECK (extra >= 0),
  missing         integer NOT NULL CHECK (missing >= 0),
  skipped_readers integer NOT NULL CHECK (skipped_readers >= 0)
);
