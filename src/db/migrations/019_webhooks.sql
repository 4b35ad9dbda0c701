-- Signed webhooks from the outboxes (issue 21, docs/webhooks.md): endpoints, one delivery cursor
-- per (endpoint, source outbox, partition), and an outbox for blocks, which until now changed
-- the block table without an event of their own.

-- A receiver. The signing secret is stored as issued ('whsec_' + base64), not encrypted at rest
-- (docs/security.md); previous_secret signs too until previous_secret_until (rotation grace).
CREATE TABLE webhook_endpoint (
  endpoint_id           text PRIMARY KEY,
  url                   text NOT NULL,
  -- Event types delivered, or '{*}' for all of them.
  events                text[] NOT NULL CHECK (cardinality(events) BETWEEN 1 AND 64),
  paused                boolean NOT NULL DEFAULT false,
  secret                text NOT NULL CHECK (secret LIKE 'whsec\_%'),
  previous_secret       text CHECK (previous_secret LIKE 'whsec\_%'),
  previous_secret_until timestamptz,
  created_at            timestamptz NOT NULL DEFAULT now(),
  updated_at            timestamptz NOT NULL DEFAULT now(),
  CHECK ((previous_secret IS NULL) = (previous_secret_until IS NULL))
);

-- Where an endpoint is in one outbox partition: events 1..delivered_upto are delivered (a 2xx)
-- or not subscribed. Only the worker holding this row's lock delivers the partition, one event
-- at a time, and moves delivered_upto after the receiver's 2xx, in the same transaction that
-- moves the endpoint's retention hold. attempts/next_attempt_at: the retry state of the event
-- delivered_upto + 1.
CREATE TABLE webhook_cursor (
  endpoint_id     text    NOT NULL REFERENCES webhook_endpoint (endpoint_id) ON DELETE CASCADE,
  source          text    NOT NULL CHECK (source IN ('likes', 'relations', 'comments', 'blocks')),
  part            integer NOT NULL CHECK (part >= 0),
  delivered_upto  bigint  NOT NULL CHECK (delivered_upto >= 0),
  attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  next_attempt_at timestamptz NOT NULL DEFAULT now(),
  -- First failed attempt of the event waiting now; NULL while none failed.
  failing_since   timestamptz,
  last_error      text,
  last_status     integer,
  delivered_at    timestamptz,
  PRIMARY KEY (endpoint_id, source, part)
);
CREATE INDEX webhook_cursor_due ON webhook_cursor (next_attempt_at);

-- Blocks: one event per block row inserted or deleted, in the block's transaction, with a
-- gapless commit-ordered sequence per partition of the blocker (the row lock of the sequence
-- row, as for every outbox). A trigger, so that both write paths (the SQL functions and the
-- step-by-step path) write it and the relation write functions stay as they are.
CREATE TABLE webhook_block_seq (
  part integer PRIMARY KEY CHECK (part >= 0),
  last bigint  NOT NULL DEFAULT 0 CHECK (last >= 0)
);

CREATE TABLE webhook_block_event (
  part       integer NOT NULL REFERENCES webhook_block_seq (part),
  seq        bigint  NOT NULL CHECK (seq > 0),
  blocker    text    NOT NULL,
  blocked    text    NOT NULL,
  state      text    NOT NULL CHECK (state IN ('BLOCKED', 'UNBLOCKED')),
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (part, seq)
);

CREATE FUNCTION webhook_block_outbox() RETURNS trigger
  LANGUAGE plpgsql
AS $$
DECLARE
  v_blocker text := CASE WHEN TG_OP = 'INSERT' THEN NEW.blocker ELSE OLD.blocker END;
  v_blocked text := CASE WHEN TG_OP = 'INSERT' THEN NEW.blocked ELSE OLD.blocked END;
  v_part    integer;
  v_seq     bigint;
BEGIN
  SELECT ledger_partition(v_blocker, c.partitions) INTO v_part FROM ledger_config c;
  INSERT INTO webhook_block_seq AS s (part, last) VALUES (v_part, 1)
    ON CONFLICT (part) DO UPDATE SET last = s.last + 1
    RETURNING s.last INTO v_seq;
  INSERT INTO webhook_block_event (part, seq, blocker, blocked, state)
    VALUES (v_part, v_seq, v_blocker, v_blocked, CASE WHEN TG_OP = 'INSERT' THEN 'BLOCKED' ELSE 'UNBLOCKED' END);
  RETURN NULL;
END
$$;

CREATE TRIGGER webhook_block_outbox AFTER INSERT OR DELETE ON block
  FOR EACH ROW EXECUTE FUNCTION webhook_block_outbox();
