-- The two outboxes only webhook delivery reads, the block outbox (webhook_block_event) and the
-- account outbox (account_outbox), become retention kinds 'blocks' and 'accounts'
-- (docs/retention.md): pruned below every endpoint's delivery cursor (its retention_hold) and the
-- margin, with the pruned prefix counted in retention_floor so that their gapless numbering stays
-- checkable. No relay publishes them: relay_watermark keeps its kinds.
ALTER TABLE retention_floor DROP CONSTRAINT retention_floor_kind_check;
ALTER TABLE retention_floor ADD CONSTRAINT retention_floor_kind_check
  CHECK (kind IN ('likes', 'relations', 'comments', 'posts', 'blocks', 'accounts'));
ALTER TABLE retention_hold DROP CONSTRAINT retention_hold_kind_check;
ALTER TABLE retention_hold ADD CONSTRAINT retention_hold_kind_check
  CHECK (kind IN ('likes', 'relations', 'comments', 'posts', 'blocks', 'accounts'));

-- Every cursor of the two sources holds retention where it stands, as registration and every
-- cursor move now do; without these rows the first prune would take what the endpoints have not
-- received yet.
INSERT INTO retention_floor (kind, part)
SELECT DISTINCT c.source, c.part FROM webhook_cursor c WHERE c.source IN ('blocks', 'accounts')
ON CONFLICT DO NOTHING;
INSERT INTO retention_hold (holder, kind, part, upto)
SELECT 'webhook:' || c.endpoint_id, c.source, c.part, c.delivered_upto
  FROM webhook_cursor c WHERE c.source IN ('blocks', 'accounts')
ON CONFLICT (holder, kind, part) DO UPDATE SET upto = EXCLUDED.upto, updated_at = now();

-- The periodic audit's webhook section now follows two outboxes, each with its own cursor rows
-- (as the notification section's): the block outbox's rows keep their position.
UPDATE audit_cursor SET section = 'webhooks.blocks' WHERE section = 'webhooks';
