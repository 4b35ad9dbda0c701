-- Webhooks for posts and accounts (docs/webhooks.md): the post outbox becomes a webhook source,
-- and accounts get an outbox of their own (created, settings changed, erased), written by a
-- trigger in the transaction of the write, with a gapless commit-ordered sequence per partition
-- of the account as every outbox.

-- The post outbox predates the failover timeline: its rows name the timeline they were committed
-- on, as every outbox's do (rows before this migration were all written on timeline 1).
ALTER TABLE post_outbox ADD COLUMN timeline integer NOT NULL DEFAULT 1;
ALTER TABLE post_outbox ALTER COLUMN timeline SET DEFAULT ledger_timeline();

CREATE TABLE account_seq (
  part integer PRIMARY KEY CHECK (part >= 0),
  last bigint  NOT NULL DEFAULT 0 CHECK (last >= 0)
);

-- One row per account event. The settings are the row's after the write, kept here so that every
-- attempt and replay of the event carries the same body (the account row changes later). An
-- 'erased' event carries none, and the erasure empties them in the account's earlier events: no
-- setting of an erased account remains (docs/erasure.md).
CREATE TABLE account_outbox (
  part             integer NOT NULL REFERENCES account_seq (part),
  seq              bigint  NOT NULL CHECK (seq > 0),
  account_id       text    NOT NULL,
  kind             text    NOT NULL CHECK (kind IN ('created', 'updated', 'erased')),
  private          boolean,
  hide_collections boolean,
  timeline         integer NOT NULL DEFAULT ledger_timeline(),
  created_at       timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (part, seq),
  CHECK ((private IS NULL) = (hide_collections IS NULL)),
  CHECK (kind <> 'erased' OR private IS NULL)
);
CREATE INDEX account_outbox_by_account ON account_outbox (account_id);

-- Every writer of account rows (PUT /v1/accounts/{id}, a first relation write, the settings
-- routes, the import, the erasure's finish) gets its event from this trigger:
--   * a new account that is not a tombstone: 'created' (an imported tombstone is no erasure: nothing);
--   * the finish of an erasure (erased_state becomes ERASED): 'erased', one per erasure, in the
--     transaction of the erasure's last batch; the reset of the settings in the same UPDATE is part
--     of it, and the settings the account's earlier events recorded are emptied;
--   * any other change of private or hide_collections: 'updated'. A write that leaves both as they
--     were (an upsert of the same value, erasure_start's ERASING) writes nothing.
-- Lock order: the account row, then its account_seq row. An erasure's last batch takes the block
-- sequence row before it; the settings path takes event_seq (an unlock's approvals) after it.
CREATE FUNCTION account_write_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_kind text;
  v_part integer;
  v_seq  bigint;
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.erased_state IS NOT NULL THEN
      RETURN NULL;
    END IF;
    v_kind := 'created';
  ELSIF NEW.erased_state = 'ERASED' AND OLD.erased_state IS DISTINCT FROM 'ERASED' THEN
    v_kind := 'erased';
  ELSIF NEW.erased_state IS NULL
        AND (NEW.private IS DISTINCT FROM OLD.private OR NEW.hide_collections IS DISTINCT FROM OLD.hide_collections) THEN
    v_kind := 'updated';
  ELSE
    RETURN NULL;
  END IF;
  SELECT ledger_partition(NEW.account_id, c.partitions) INTO v_part FROM ledger_config c;
  INSERT INTO account_seq AS s (part, last) VALUES (v_part, 1)
    ON CONFLICT (part) DO UPDATE SET last = s.last + 1
    RETURNING s.last INTO v_seq;
  IF v_kind = 'erased' THEN
    UPDATE account_outbox o SET private = NULL, hide_collections = NULL
     WHERE o.account_id = NEW.account_id AND o.private IS NOT NULL;
  END IF;
  INSERT INTO account_outbox (part, seq, account_id, kind, private, hide_collections)
    VALUES (v_part, v_seq, NEW.account_id, v_kind,
            CASE WHEN v_kind <> 'erased' THEN NEW.private END,
            CASE WHEN v_kind <> 'erased' THEN NEW.hide_collections END);
  RETURN NULL;
END
$$;
CREATE TRIGGER account_outbox_written AFTER INSERT OR UPDATE ON account
  FOR EACH ROW EXECUTE FUNCTION account_write_event();

-- The two new webhook sources.
ALTER TABLE webhook_cursor DROP CONSTRAINT webhook_cursor_source_check;
ALTER TABLE webhook_cursor ADD CONSTRAINT webhook_cursor_source_check
  CHECK (source IN ('likes', 'relations', 'comments', 'blocks', 'posts', 'accounts'));
ALTER TABLE webhook_lost_delivery DROP CONSTRAINT webhook_lost_delivery_source_check;
ALTER TABLE webhook_lost_delivery ADD CONSTRAINT webhook_lost_delivery_source_check
  CHECK (source IN ('likes', 'relations', 'comments', 'blocks', 'posts', 'accounts'));

-- Endpoints registered before: cursors at each partition's current end, as a registration now
-- would place them (the account outbox starts empty).
INSERT INTO webhook_cursor (endpoint_id, source, part, delivered_upto)
SELECT e.endpoint_id, 'posts', s.part, s.last FROM webhook_endpoint e CROSS JOIN post_seq s;
INSERT INTO webhook_cursor (endpoint_id, source, part, delivered_upto)
SELECT e.endpoint_id, 'accounts', p.part, 0
  FROM webhook_endpoint e CROSS JOIN generate_series(0, (SELECT partitions - 1 FROM ledger_config)) AS p(part);
