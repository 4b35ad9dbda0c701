-- Identities that survive a failover (docs/failover.md). An outbox position (partition, seq) is
-- handed out again after a promotion with asynchronous replication: the commits the standby never
-- received are gone, and the new primary numbers its next events from where its copy ended. Each
-- outbox row therefore records the timeline it was committed on, and every identity handed outside
-- the database (JetStream message ids, webhook-id) names (timeline, partition, seq): an event the
-- standby received keeps its identity on the new primary, an event written after the promotion
-- gets one no lost event ever had.

-- The timeline this server writes WAL on: the WAL file name of the current position starts with it
-- (pg_walfile_name uses the insertion timeline, which a promotion moves at once; the checkpoint's
-- timeline in pg_control only moves at the next checkpoint). A standby writes no WAL: there it is
-- the timeline of its last checkpoint (restartpoint), for reports only.
CREATE FUNCTION ledger_timeline() RETURNS integer
  LANGUAGE sql STABLE PARALLEL SAFE
AS $$
  SELECT CASE WHEN pg_is_in_recovery() THEN (SELECT timeline_id FROM pg_control_checkpoint())
              ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END
$$;

-- Rows written before this migration were all written before any failover this project has seen,
-- so a constant 1 names them (and adds the column without rewriting the tables); new rows take
-- the timeline of the server that commits them.
ALTER TABLE like_outbox ADD COLUMN timeline integer NOT NULL DEFAULT 1;
ALTER TABLE like_outbox ALTER COLUMN timeline SET DEFAULT ledger_timeline();
ALTER TABLE relation_event ADD COLUMN timeline integer NOT NULL DEFAULT 1;
ALTER TABLE relation_event ALTER COLUMN timeline SET DEFAULT ledger_timeline();
ALTER TABLE comment_outbox ADD COLUMN timeline integer NOT NULL DEFAULT 1;
ALTER TABLE comment_outbox ALTER COLUMN timeline SET DEFAULT ledger_timeline();
ALTER TABLE webhook_block_event ADD COLUMN timeline integer NOT NULL DEFAULT 1;
ALTER TABLE webhook_block_event ALTER COLUMN timeline SET DEFAULT ledger_timeline();

-- Webhook messages an endpoint acknowledged (2xx) whose event the database no longer has under
-- that identity: the delivery worker remembers what it delivered and, when the database's cursor
-- is found behind it (a promotion lost the cursor's advance), compares. The receiver holds these
-- events; the facts do not. Reported, never replaced silently (the audit lists them as findings).
CREATE TABLE webhook_lost_delivery (
  endpoint_id text NOT NULL REFERENCES webhook_endpoint (endpoint_id) ON DELETE CASCADE,
  webhook_id text NOT NULL,
  source text NOT NULL CHECK (source IN ('likes', 'relations', 'comments', 'blocks')),
  part integer NOT NULL CHECK (part >= 0),
  seq bigint NOT NULL CHECK (seq > 0),
  timeline integer NOT NULL,
  delivered_at timestamptz NOT NULL,
  detected_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (endpoint_id, webhook_id)
);
