-- Reserved: number 029 belongs to the feed inbox's migration (post outbox, feed_inbox), built on
-- another branch. Migration numbers have no gaps, so this empty step holds the place; the merge
-- that brings the inbox's 029 replaces this file with it.
SELECT 1;
