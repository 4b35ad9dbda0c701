-- Issue 22: the periodic audit checks what changed since its last run instead of all history
-- (src/audit/, docs/counters.md "The periodic audit is incremental").

-- How far each section of the periodic audit has checked each outbox partition: the events
-- with seq <= audited_upto, and the targets they touched, were audited clean (a section that
-- found a violation keeps its cursor, so it reports the violation again until it is repaired).
-- A cursor below the outbox's retention floor cannot be continued (the events it would need
-- are pruned): that section runs its full audit once and starts again at the present.
CREATE TABLE audit_cursor (
  section      text    NOT NULL,
  part         integer NOT NULL,
  audited_upto bigint  NOT NULL CHECK (audited_upto >= 0),
  PRIMARY KEY (section, part)
);

-- The rotating sample of targets nobody changed: each periodic run also audits the next few
-- targets after after_key (in key order, wrapping around), so old drift is found eventually.
CREATE TABLE audit_sample (
  section   text PRIMARY KEY,
  after_key text COLLATE "C" NOT NULL
);

-- The pruned baseline of one item, for the incremental delta-sum check of that item (the
-- primary key starts with user_id; only the prune writes this table, so the write path pays nothing).
CREATE INDEX like_outbox_pruned_item ON like_outbox_pruned (item_id);
