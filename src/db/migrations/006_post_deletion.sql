-- A deleted post is a tombstone: its body is erased and deleted_at set, its item and the like
-- facts, outbox events and counts of that item stay (the ledger and its audits are history);
-- every read of the API treats the post and its item as missing (docs/api.md).
ALTER TABLE post ADD COLUMN deleted_at timestamptz;
