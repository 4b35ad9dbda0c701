-- post_outbox is an outbox like the others: pruned below the home timeline's watermark (retention
-- kind 'posts', docs/retention.md) and published to JetStream by the relay (docs/transport-jetstream.md).
ALTER TABLE retention_floor DROP CONSTRAINT retention_floor_kind_check;
ALTER TABLE retention_floor ADD CONSTRAINT retention_floor_kind_check
  CHECK (kind IN ('likes', 'relations', 'comments', 'posts'));
ALTER TABLE retention_hold DROP CONSTRAINT retention_hold_kind_check;
ALTER TABLE retention_hold ADD CONSTRAINT retention_hold_kind_check
  CHECK (kind IN ('likes', 'relations', 'comments', 'posts'));
ALTER TABLE relay_watermark DROP CONSTRAINT relay_watermark_kind_check;
ALTER TABLE relay_watermark ADD CONSTRAINT relay_watermark_kind_check
  CHECK (kind IN ('likes', 'relations', 'comments', 'posts'));

-- The timeline each post event was committed on, as the other outboxes record it: with its
-- position it names the event in a JetStream message id (docs/failover.md). Rows written before
-- were written before any failover, so a constant 1 names them without rewriting the table.
ALTER TABLE post_outbox ADD COLUMN timeline integer NOT NULL DEFAULT 1;
ALTER TABLE post_outbox ALTER COLUMN timeline SET DEFAULT ledger_timeline();
