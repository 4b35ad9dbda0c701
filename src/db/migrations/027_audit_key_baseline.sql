-- Issue 22: the periodic audit checks a hot key (an item with a million likes) by induction from
-- a stored count instead of recounting all its facts at every run that touches it
-- (docs/counters.md, "Hot keys: audited by induction"; src/audit/key-baseline.ts).

-- A key's counted facts in one outbox partition (`truth`), as of that partition's position
-- `upto`: written only by a clean run of the periodic audit, in the transaction that moves the
-- section's cursors to the same positions. A run uses a key's rows only if there is one per
-- partition and each is at exactly that run's starting position (the section's cursor); any
-- other row is stale and ignored (the key is recounted and its rows rewritten). Only keys with
-- at least the audit's threshold of facts (recountAbove) have rows.
CREATE TABLE audit_key_baseline (
  section text    NOT NULL,
  key     text    NOT NULL,
  part    integer NOT NULL,
  truth   bigint  NOT NULL CHECK (truth >= 0),
  upto    bigint  NOT NULL CHECK (upto >= 0),
  PRIMARY KEY (section, key, part)
);
