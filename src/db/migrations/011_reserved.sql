-- Placeholder for migration 011 (assigned to branch i8-perf), so that 012 has no gap on this
-- branch. Delete this file when i8-perf's 011 is merged.
SELECT 1;
