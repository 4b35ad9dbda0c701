-- Every comment of one post, replies and tombstones included: the truth of a post's comment count
-- (counted_comment by post_id) in the Redis layer's reconciliation (src/cache/counter-kinds.ts) and the
-- comment counts' rebuild and audit read it per post. The only index on post_id before this one is
-- comment_top_level, partial (top-level comments), so those reads scanned the whole table.
CREATE INDEX comment_by_post ON comment (post_id);
