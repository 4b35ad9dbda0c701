-- Placeholder on branch i14-nats only: 011 and 012 belong to other branches (migration runner refuses gaps).
-- The lead drops this file when the real 012 lands.
SELECT 1;
