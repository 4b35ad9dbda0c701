-- Webhooks for posts and accounts (docs/webhooks.md): the post outbox becomes a webhook source,
-- and accounts get an outbox of their own (created, settings changed, erased), written by a
-- trigger in the transaction of the write, with a gapless commit-ordered sequence per partition
-- of the account as every outbox.

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
-- routes, the import, the erasure's finish) gets its events from the two triggers below, in the
-- transaction of its write:
--   * a new account that is not a tombstone: 'created' (an imported tombstone is no erasure: nothing);
--   * the finish of an erasure (erased_state becomes ERASED): 'erased', one per erasure, in the
--     transaction of the erasure's last batch; the reset of the settings in the same UPDATE is part
--     of it, and the settings the account's earlier events recorded are emptied;
--   * any other change of private or hide_collections: 'updated'. A write that leaves both as they
--     were (an upsert of the same value, erasure_start's ERASING) writes nothing.
-- Statement-level, over the statement's transition tables, so that a statement writing many
-- accounts (the import's) bumps each partition's sequence row once: a row-level trigger updates
-- the same sequence row once per account, and in one transaction each update walks the versions
-- the earlier ones left (docs/decisions/0031-account-events-per-statement.md).
-- Lock order: the account rows, then the account_seq rows in ascending partition order. An
-- erasure's last batch takes the block sequence row before them; an unlock's approvals take
-- event_seq after them.
CREATE FUNCTION account_outbox_append(p_ids text[], p_kinds text[], p_private boolean[], p_hide boolean[])
  RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_partitions integer;
BEGIN
  IF coalesce(cardinality(p_ids), 0) = 0 THEN
    RETURN;
  END IF;
  SELECT c.partitions INTO v_partitions FROM ledger_config c;
  INSERT INTO account_seq (part)
    SELECT DISTINCT ledger_partition(x, v_partitions) FROM unnest(p_ids) AS x ORDER BY 1
    ON CONFLICT (part) DO NOTHING;
  PERFORM 1 FROM account_seq s
    WHERE s.part IN (SELECT ledger_partition(x, v_partitions) FROM unnest(p_ids) AS x)
    ORDER BY s.part FOR UPDATE;
  WITH ev AS (
    SELECT e.id, e.kind, e.private, e.hide, e.ord, ledger_partition(e.id, v_partitions) AS part
      FROM unnest(p_ids, p_kinds, p_private, p_hide) WITH ORDINALITY AS e(id, kind, private, hide, ord)),
  bumped AS (
    UPDATE account_seq s SET last = s.last + k.n
      FROM (SELECT ev.part, count(*) AS n FROM ev GROUP BY ev.part) k
     WHERE s.part = k.part
    RETURNING s.part, s.last - k.n AS base)
  INSERT INTO account_outbox (part, seq, account_id, kind, private, hide_collections)
  SELECT ev.part, b.base + row_number() OVER (PARTITION BY ev.part ORDER BY ev.ord), ev.id, ev.kind, ev.private, ev.hide
    FROM ev JOIN bumped b ON b.part = ev.part;
END
$$;

CREATE FUNCTION account_inserted_events() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_ids text[];
  v_private boolean[];
  v_hide boolean[];
BEGIN
  SELECT array_agg(n.account_id ORDER BY n.account_id), array_agg(n.private ORDER BY n.account_id),
         array_agg(n.hide_collections ORDER BY n.account_id)
    INTO v_ids, v_private, v_hide
    FROM new_accounts n WHERE n.erased_state IS NULL;
  PERFORM account_outbox_append(v_ids, array_fill('created'::text, ARRAY[coalesce(cardinality(v_ids), 0)]), v_private, v_hide);
  RETURN NULL;
END
$$;

CREATE FUNCTION account_updated_events() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_ids text[];
  v_kinds text[];
  v_private boolean[];
  v_hide boolean[];
BEGIN
  WITH changed AS (
    SELECT n.account_id, n.private, n.hide_collections,
           CASE WHEN n.erased_state = 'ERASED' AND o.erased_state IS DISTINCT FROM 'ERASED' THEN 'erased'
                WHEN n.erased_state IS NULL
                 AND (n.private IS DISTINCT FROM o.private OR n.hide_collections IS DISTINCT FROM o.hide_collections) THEN 'updated'
           END AS kind
      FROM new_accounts n JOIN old_accounts o ON o.account_id = n.account_id)
  SELECT array_agg(c.account_id ORDER BY c.account_id), array_agg(c.kind ORDER BY c.account_id),
         array_agg(CASE WHEN c.kind = 'updated' THEN c.private END ORDER BY c.account_id),
         array_agg(CASE WHEN c.kind = 'updated' THEN c.hide_collections END ORDER BY c.account_id)
    INTO v_ids, v_kinds, v_private, v_hide
    FROM changed c WHERE c.kind IS NOT NULL;
  IF 'erased' = ANY (v_kinds) THEN
    UPDATE account_outbox o SET private = NULL, hide_collections = NULL
     WHERE o.account_id IN (SELECT x.id FROM unnest(v_ids, v_kinds) AS x(id, kind) WHERE x.kind = 'erased')
       AND o.private IS NOT NULL;
  END IF;
  PERFORM account_outbox_append(v_ids, v_kinds, v_private, v_hide);
  RETURN NULL;
END
$$;

CREATE TRIGGER account_outbox_inserted AFTER INSERT ON account
  REFERENCING NEW TABLE AS new_accounts FOR EACH STATEMENT EXECUTE FUNCTION account_inserted_events();
CREATE TRIGGER account_outbox_updated AFTER UPDATE ON account
  REFERENCING OLD TABLE AS old_accounts NEW TABLE AS new_accounts FOR EACH STATEMENT EXECUTE FUNCTION account_updated_events();

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
-- Each post cursor holds the post outbox's retention where it stands, as registration does.
INSERT INTO retention_floor (kind, part) SELECT 'posts', s.part FROM post_seq s ON CONFLICT DO NOTHING;
INSERT INTO retention_hold (holder, kind, part, upto)
SELECT 'webhook:' || e.endpoint_id, 'posts', s.part, s.last FROM webhook_endpoint e CROSS JOIN post_seq s;
INSERT INTO webhook_cursor (endpoint_id, source, part, delivered_upto)
SELECT e.endpoint_id, 'accounts', p.part, 0
  FROM webhook_endpoint e CROSS JOIN generate_series(0, (SELECT partitions - 1 FROM ledger_config)) AS p(part);
