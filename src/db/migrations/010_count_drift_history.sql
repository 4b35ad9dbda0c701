-- Every drifted counter a reconciliation (Redis) or a rebuild (database) found and repaired.
-- drift = truth - displayed: positive means the displayed count was too low (an increment lost
-- after the commit), negative too high (an increment applied twice, a missing decrement).
CREATE TABLE count_drift_history (
  id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  kind       text   NOT NULL,
  origin     text   NOT NULL CHECK (origin IN ('reconcile', 'rebuild')),
  target     text   NOT NULL,
  truth      bigint NOT NULL,
  displayed  bigint NOT NULL,
  drift      bigint GENERATED ALWAYS AS (truth - displayed) STORED,
  found_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX count_drift_history_recent ON count_drift_history (kind, found_at DESC);
