-- Where each earlier timeline of this server's history ended (docs/failover.md, "Freshness tokens").
-- A freshness token names (timeline, WAL position). After a promotion, a token of an earlier
-- timeline names a write that survived it iff its position is at or below the point where the
-- history left that timeline: WAL up to there is the same on both timelines, WAL past it on the
-- old timeline was never received by the promoted standby.
--
-- PostgreSQL writes that point into the timeline history file it creates at the promotion
-- (pg_wal/<timeline, 8 hex digits>.history: one line per ancestor, "<parent timeline> <switch
-- point> <reason>"). The file of the present timeline lists every ancestor, is never recycled,
-- and is streamed to every standby that follows the switch, so any later primary of the lineage
-- holds it. It is read with pg_read_file, which only a superuser (or a role granted EXECUTE on
-- it) may call: this function runs as its owner, the role that ran the migrations, and reads
-- nothing but that one file (switch points are no secret: every role may call it). Timeline 1 has
-- no history file; a missing file is no rows.
CREATE FUNCTION ledger_timeline_history(present integer)
  RETURNS TABLE (timeline integer, switched_at pg_lsn)
  LANGUAGE sql STABLE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $$
  SELECT (line.m[1])::integer, (line.m[2])::pg_lsn
  FROM regexp_matches(
         coalesce(pg_read_file('pg_wal/' || upper(lpad(to_hex(present), 8, '0')) || '.history', true), ''),
         '^\s*([0-9]+)\s+([0-9A-Fa-f]+/[0-9A-Fa-f]+)', 'gn') AS line(m)
  WHERE present > 1
$$;

