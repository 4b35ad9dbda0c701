-- An account may hide its follower and following lists (and their counts) from everyone else
-- (Mastodon's hide_collections). The relation truth and its projection are unchanged.
ALTER TABLE account ADD COLUMN hide_collections boolean NOT NULL DEFAULT false;
