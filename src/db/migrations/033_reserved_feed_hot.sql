-- A placeholder for the number 033, reserved for the hot-authors work (branch feed-hot), so that
-- this branch's migrations have no gap. Merging both: delete this file, keep feed-hot's 033.
SELECT 1;
