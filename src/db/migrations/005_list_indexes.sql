-- Keyset indexes of the lists the API pages newest first on (time, id): the accounts one
-- follows, the requests one received, the accounts one blocks, the items one likes. Each is a
-- range read on its own index however long the list is.
CREATE INDEX relation_following_list ON relation (follower, changed_at DESC, followee DESC) WHERE state = 'ACTIVE';
CREATE INDEX relation_request_list ON relation (followee, changed_at DESC, follower DESC) WHERE state = 'PENDING';
CREATE INDEX block_list ON block (blocker, created_at DESC, blocked DESC);
CREATE INDEX like_fact_liked_list ON like_fact (user_id, changed_at DESC, item_id DESC) WHERE liked;
