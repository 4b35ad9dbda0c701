-- The outbox relay's progress (docs/transport-jetstream.md): per event kind and partition, every
-- event 1..published_upto has been published to the broker and acknowledged by it. Only grows.
-- A row exists only once a relay has run for that kind; retention must not prune an outbox at or
-- above published_upto + 1 while the row exists (the relay holds retention_hold at it: src/transport/relay-watermark.ts).
CREATE TABLE relay_watermark (
  kind           text    NOT NULL CHECK (kind IN ('likes', 'relations', 'comments')),
  part           integer NOT NULL CHECK (part >= 0),
  published_upto bigint  NOT NULL DEFAULT 0 CHECK (published_upto >= 0),
  updated_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (kind, part)
);
