-- The current schema: what src/db/migrations make of an empty database, generated from its
-- catalogs by `npm run db:schema` (src/db/schema-dump.ts). Do not edit it: write a new
-- migration and regenerate; test/db/schema-file.test.ts fails while the two differ.
-- Sorted by name; owners, privileges and the rows initLedger adds are not part of it.
-- Documentation of the present, not a script to replay (sections are not in dependency order).

-- Sequences

CREATE SEQUENCE import_run_id AS bigint INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1 NO CYCLE;

-- Tables, with their constraints, indexes, triggers and policies

CREATE TABLE account (
  account_id text NOT NULL,
  private boolean DEFAULT false NOT NULL,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  hide_collections boolean DEFAULT false NOT NULL,
  erased_state text,
  CONSTRAINT account_erased_state_check CHECK ((erased_state = ANY (ARRAY['ERASING'::text, 'ERASED'::text]))),
  CONSTRAINT account_pkey PRIMARY KEY (account_id)
);
CREATE INDEX account_erased ON public.account USING btree (account_id) WHERE (erased_state IS NOT NULL);
CREATE TRIGGER account_erasure_guard BEFORE UPDATE ON account FOR EACH ROW EXECUTE FUNCTION erasure_guard_account();
CREATE TRIGGER account_outbox_inserted AFTER INSERT ON account REFERENCING NEW TABLE AS new_accounts FOR EACH STATEMENT EXECUTE FUNCTION account_inserted_events();
CREATE TRIGGER account_outbox_updated AFTER UPDATE ON account REFERENCING OLD TABLE AS old_accounts NEW TABLE AS new_accounts FOR EACH STATEMENT EXECUTE FUNCTION account_updated_events();

CREATE TABLE account_erasure (
  account_id text NOT NULL,
  requested_by text NOT NULL,
  phase text NOT NULL,
  cursor_id text,
  total bigint NOT NULL,
  done bigint DEFAULT 0 NOT NULL,
  batches bigint DEFAULT 0 NOT NULL,
  started_at timestamp with time zone DEFAULT now() NOT NULL,
  updated_at timestamp with time zone DEFAULT now() NOT NULL,
  finished_at timestamp with time zone,
  CONSTRAINT account_erasure_account_id_fkey FOREIGN KEY (account_id) REFERENCES account(account_id),
  CONSTRAINT account_erasure_check CHECK (((phase = 'done'::text) = (finished_at IS NOT NULL))),
  CONSTRAINT account_erasure_done_check CHECK ((done >= 0)),
  CONSTRAINT account_erasure_phase_check CHECK ((phase = ANY (ARRAY['posts'::text, 'comments'::text, 'post_likes'::text, 'comment_likes'::text, 'likes'::text, 'following'::text, 'followers'::text, 'blocks'::text, 'done'::text]))),
  CONSTRAINT account_erasure_pkey PRIMARY KEY (account_id),
  CONSTRAINT account_erasure_requested_by_check CHECK ((requested_by = ANY (ARRAY['self'::text, 'admin'::text, 'cli'::text]))),
  CONSTRAINT account_erasure_total_check CHECK ((total >= 0))
);
CREATE INDEX account_erasure_running ON public.account_erasure USING btree (account_id) WHERE (finished_at IS NULL);

CREATE TABLE account_outbox (
  part integer NOT NULL,
  seq bigint NOT NULL,
  account_id text NOT NULL,
  kind text NOT NULL,
  private boolean,
  hide_collections boolean,
  timeline integer DEFAULT ledger_timeline() NOT NULL,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT account_outbox_check CHECK (((private IS NULL) = (hide_collections IS NULL))),
  CONSTRAINT account_outbox_check1 CHECK (((kind <> 'erased'::text) OR (private IS NULL))),
  CONSTRAINT account_outbox_kind_check CHECK ((kind = ANY (ARRAY['created'::text, 'updated'::text, 'erased'::text]))),
  CONSTRAINT account_outbox_part_fkey FOREIGN KEY (part) REFERENCES account_seq(part),
  CONSTRAINT account_outbox_pkey PRIMARY KEY (part, seq),
  CONSTRAINT account_outbox_seq_check CHECK ((seq > 0))
);
CREATE INDEX account_outbox_by_account ON public.account_outbox USING btree (account_id);

CREATE TABLE account_seq (
  part integer NOT NULL,
  last bigint DEFAULT 0 NOT NULL,
  CONSTRAINT account_seq_last_check CHECK ((last >= 0)),
  CONSTRAINT account_seq_part_check CHECK ((part >= 0)),
  CONSTRAINT account_seq_pkey PRIMARY KEY (part)
);

CREATE TABLE audit_cursor (
  section text NOT NULL,
  part integer NOT NULL,
  audited_upto bigint NOT NULL,
  CONSTRAINT audit_cursor_audited_upto_check CHECK ((audited_upto >= 0)),
  CONSTRAINT audit_cursor_pkey PRIMARY KEY (section, part)
);

CREATE TABLE audit_key_baseline (
  section text NOT NULL,
  key text NOT NULL,
  part integer NOT NULL,
  truth bigint NOT NULL,
  upto bigint NOT NULL,
  CONSTRAINT audit_key_baseline_pkey PRIMARY KEY (section, key, part),
  CONSTRAINT audit_key_baseline_truth_check CHECK ((truth >= 0)),
  CONSTRAINT audit_key_baseline_upto_check CHECK ((upto >= 0))
);

CREATE TABLE audit_sample (
  section text NOT NULL,
  after_key text COLLATE "C" NOT NULL,
  CONSTRAINT audit_sample_pkey PRIMARY KEY (section)
);

CREATE TABLE block (
  blocker text NOT NULL,
  blocked text NOT NULL,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT block_blocked_fkey FOREIGN KEY (blocked) REFERENCES account(account_id),
  CONSTRAINT block_blocker_fkey FOREIGN KEY (blocker) REFERENCES account(account_id),
  CONSTRAINT block_check CHECK ((blocker <> blocked)),
  CONSTRAINT block_pkey PRIMARY KEY (blocker, blocked)
);
CREATE INDEX block_by_blocked ON public.block USING btree (blocked, blocker);
CREATE INDEX block_list ON public.block USING btree (blocker, created_at DESC, blocked DESC);
CREATE TRIGGER block_erasure_guard BEFORE INSERT OR UPDATE ON block FOR EACH ROW EXECUTE FUNCTION erasure_guard_block();
CREATE TRIGGER webhook_block_outbox AFTER INSERT OR DELETE ON block FOR EACH ROW EXECUTE FUNCTION webhook_block_outbox();

CREATE TABLE comment (
  comment_id text NOT NULL,
  post_id text NOT NULL,
  author text NOT NULL,
  parent_id text,
  root_id text NOT NULL,
  depth smallint NOT NULL,
  body text,
  part integer NOT NULL,
  acl_token bigint NOT NULL,
  idempotency_key text,
  version bigint NOT NULL,
  edit_count integer DEFAULT 0 NOT NULL,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  edited_at timestamp with time zone,
  deleted_at timestamp with time zone,
  deleted_by text,
  CONSTRAINT comment_acl_token_check CHECK ((acl_token >= 0)),
  CONSTRAINT comment_author_fkey FOREIGN KEY (author) REFERENCES account(account_id),
  CONSTRAINT comment_author_idempotency_key_key UNIQUE (author, idempotency_key),
  CONSTRAINT comment_check CHECK (((deleted_at IS NULL) = (body IS NOT NULL))),
  CONSTRAINT comment_check1 CHECK (((parent_id IS NULL) = (depth = 0))),
  CONSTRAINT comment_comment_id_fkey FOREIGN KEY (comment_id) REFERENCES item(item_id) DEFERRABLE INITIALLY DEFERRED,
  CONSTRAINT comment_depth_check CHECK (((depth >= 0) AND (depth <= 7))),
  CONSTRAINT comment_edit_count_check CHECK ((edit_count >= 0)),
  CONSTRAINT comment_parent_id_fkey FOREIGN KEY (parent_id) REFERENCES comment(comment_id),
  CONSTRAINT comment_pkey PRIMARY KEY (comment_id),
  CONSTRAINT comment_post_id_fkey FOREIGN KEY (post_id) REFERENCES post(post_id),
  CONSTRAINT comment_version_check CHECK ((version >= 1))
);
CREATE INDEX comment_by_author ON public.comment USING btree (author, comment_id);
CREATE INDEX comment_by_post ON public.comment USING btree (post_id);
CREATE INDEX comment_replies ON public.comment USING btree (parent_id, created_at, comment_id);
CREATE INDEX comment_top_level ON public.comment USING btree (post_id, created_at, comment_id) WHERE (parent_id IS NULL);
CREATE TRIGGER comment_erasure_guard BEFORE INSERT OR UPDATE ON comment FOR EACH ROW EXECUTE FUNCTION erasure_guard_content();

CREATE TABLE comment_count (
  post_id text NOT NULL,
  part integer NOT NULL,
  n bigint DEFAULT 0 NOT NULL,
  base_seq bigint DEFAULT 0 NOT NULL,
  CONSTRAINT comment_count_base_seq_check CHECK ((base_seq >= 0)),
  CONSTRAINT comment_count_part_fkey FOREIGN KEY (part) REFERENCES comment_seq(part),
  CONSTRAINT comment_count_pkey PRIMARY KEY (post_id, part),
  CONSTRAINT comment_count_post_id_fkey FOREIGN KEY (post_id) REFERENCES post(post_id)
);
CREATE INDEX comment_count_negative ON public.comment_count USING btree (post_id) WHERE (n < 0);

CREATE TABLE comment_outbox (
  part integer NOT NULL,
  seq bigint NOT NULL,
  comment_id text NOT NULL,
  post_id text NOT NULL,
  delta smallint NOT NULL,
  version bigint NOT NULL,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  timeline integer DEFAULT ledger_timeline() NOT NULL,
  CONSTRAINT comment_outbox_comment_id_version_key UNIQUE (comment_id, version),
  CONSTRAINT comment_outbox_delta_check CHECK ((delta = ANY (ARRAY['-1'::integer, 1]))),
  CONSTRAINT comment_outbox_part_fkey FOREIGN KEY (part) REFERENCES comment_seq(part),
  CONSTRAINT comment_outbox_pkey PRIMARY KEY (part, seq),
  CONSTRAINT comment_outbox_seq_check CHECK ((seq > 0)),
  CONSTRAINT comment_outbox_version_check CHECK ((version > 0))
);
CREATE INDEX comment_outbox_post_seq ON public.comment_outbox USING btree (post_id, part, seq);

CREATE TABLE comment_outbox_pruned (
  post_id text NOT NULL,
  delta_sum bigint NOT NULL,
  CONSTRAINT comment_outbox_pruned_pkey PRIMARY KEY (post_id)
);

CREATE TABLE comment_processed (
  part integer NOT NULL,
  seq bigint NOT NULL,
  how text NOT NULL,
  CONSTRAINT comment_processed_how_check CHECK ((how = ANY (ARRAY['APPLIED'::text, 'COVERED'::text]))),
  CONSTRAINT comment_processed_pkey PRIMARY KEY (part, seq)
);

CREATE TABLE comment_rebuild_drift (
  run_id bigint NOT NULL,
  post_id text NOT NULL,
  old_n bigint NOT NULL,
  new_n bigint NOT NULL,
  drift bigint NOT NULL,
  CONSTRAINT comment_rebuild_drift_pkey PRIMARY KEY (run_id, post_id),
  CONSTRAINT comment_rebuild_drift_run_id_fkey FOREIGN KEY (run_id) REFERENCES comment_rebuild_run(run_id)
);

CREATE TABLE comment_rebuild_run (
  run_id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
  started_at timestamp with time zone DEFAULT now() NOT NULL,
  snapshot_seqs bigint[] NOT NULL,
  keys_checked integer NOT NULL,
  keys_drifted integer NOT NULL,
  total_abs_drift bigint NOT NULL,
  CONSTRAINT comment_rebuild_run_pkey PRIMARY KEY (run_id)
);

CREATE TABLE comment_seq (
  part integer NOT NULL,
  last bigint DEFAULT 0 NOT NULL,
  CONSTRAINT comment_seq_last_check CHECK ((last >= 0)),
  CONSTRAINT comment_seq_part_check CHECK ((part >= 0)),
  CONSTRAINT comment_seq_pkey PRIMARY KEY (part)
);

CREATE TABLE comment_watermark (
  part integer NOT NULL,
  applied_upto bigint DEFAULT 0 NOT NULL,
  CONSTRAINT comment_watermark_applied_upto_check CHECK ((applied_upto >= 0)),
  CONSTRAINT comment_watermark_part_fkey FOREIGN KEY (part) REFERENCES comment_seq(part),
  CONSTRAINT comment_watermark_pkey PRIMARY KEY (part)
);

CREATE TABLE count_drift_history (
  id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
  kind text NOT NULL,
  origin text NOT NULL,
  target text NOT NULL,
  truth bigint NOT NULL,
  displayed bigint NOT NULL,
  drift bigint GENERATED ALWAYS AS ((truth - displayed)) STORED,
  found_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT count_drift_history_origin_check CHECK ((origin = ANY (ARRAY['reconcile'::text, 'rebuild'::text]))),
  CONSTRAINT count_drift_history_pkey PRIMARY KEY (id)
);
CREATE INDEX count_drift_history_recent ON public.count_drift_history USING btree (kind, found_at DESC);

CREATE TABLE counter_watermark (
  part integer NOT NULL,
  applied_upto bigint DEFAULT 0 NOT NULL,
  CONSTRAINT counter_watermark_applied_upto_check CHECK ((applied_upto >= 0)),
  CONSTRAINT counter_watermark_part_fkey FOREIGN KEY (part) REFERENCES like_seq(part),
  CONSTRAINT counter_watermark_pkey PRIMARY KEY (part)
);

CREATE TABLE event_seq (
  part integer NOT NULL,
  last bigint DEFAULT 0 NOT NULL,
  CONSTRAINT event_seq_last_check CHECK ((last >= 0)),
  CONSTRAINT event_seq_part_check CHECK ((part >= 0)),
  CONSTRAINT event_seq_pkey PRIMARY KEY (part)
);

CREATE TABLE feed_audit_run (
  run_id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
  at timestamp with time zone DEFAULT now() NOT NULL,
  extra integer NOT NULL,
  missing integer NOT NULL,
  skipped_readers integer NOT NULL,
  source text NOT NULL,
  CONSTRAINT feed_audit_run_extra_check CHECK ((extra >= 0)),
  CONSTRAINT feed_audit_run_missing_check CHECK ((missing >= 0)),
  CONSTRAINT feed_audit_run_pkey PRIMARY KEY (run_id),
  CONSTRAINT feed_audit_run_skipped_readers_check CHECK ((skipped_readers >= 0)),
  CONSTRAINT feed_audit_run_source_check CHECK ((source = ANY (ARRAY['periodic'::text, 'full'::text])))
);

CREATE TABLE feed_hot_author (
  author text NOT NULL,
  since timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT feed_hot_author_pkey PRIMARY KEY (author)
);

CREATE TABLE feed_inbox (
  reader text NOT NULL,
  post_id text NOT NULL,
  author text NOT NULL,
  at timestamp with time zone NOT NULL,
  CONSTRAINT feed_inbox_pkey PRIMARY KEY (reader, post_id)
);
CREATE INDEX feed_inbox_by_author ON public.feed_inbox USING btree (reader, author);
CREATE INDEX feed_inbox_by_post ON public.feed_inbox USING btree (post_id);
CREATE INDEX feed_inbox_page ON public.feed_inbox USING btree (reader, at DESC, post_id DESC);

CREATE TABLE feed_post_seen (
  part integer NOT NULL,
  seq bigint NOT NULL,
  CONSTRAINT feed_post_seen_pkey PRIMARY KEY (part, seq)
);

CREATE TABLE feed_post_watermark (
  part integer NOT NULL,
  applied_upto bigint DEFAULT 0 NOT NULL,
  CONSTRAINT feed_post_watermark_applied_upto_check CHECK ((applied_upto >= 0)),
  CONSTRAINT feed_post_watermark_part_fkey FOREIGN KEY (part) REFERENCES post_seq(part),
  CONSTRAINT feed_post_watermark_pkey PRIMARY KEY (part)
);

CREATE TABLE feed_reader (
  reader text NOT NULL,
  horizon_at timestamp with time zone,
  horizon_id text,
  last_read_at timestamp with time zone DEFAULT now() NOT NULL,
  skipped_since timestamp with time zone,
  CONSTRAINT feed_reader_check CHECK (((horizon_at IS NULL) = (horizon_id IS NULL))),
  CONSTRAINT feed_reader_pkey PRIMARY KEY (reader)
);
CREATE INDEX feed_reader_skipped ON public.feed_reader USING btree (reader) WHERE (skipped_since IS NOT NULL);

CREATE TABLE feed_rebuild_run (
  run_id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
  started_at timestamp with time zone DEFAULT now() NOT NULL,
  readers_checked integer NOT NULL,
  readers_drifted integer NOT NULL,
  rows_added integer NOT NULL,
  rows_removed integer NOT NULL,
  CONSTRAINT feed_rebuild_run_pkey PRIMARY KEY (run_id),
  CONSTRAINT feed_rebuild_run_readers_checked_check CHECK ((readers_checked >= 0)),
  CONSTRAINT feed_rebuild_run_readers_drifted_check CHECK ((readers_drifted >= 0)),
  CONSTRAINT feed_rebuild_run_rows_added_check CHECK ((rows_added >= 0)),
  CONSTRAINT feed_rebuild_run_rows_removed_check CHECK ((rows_removed >= 0))
);

CREATE TABLE feed_relation_seen (
  part integer NOT NULL,
  seq bigint NOT NULL,
  CONSTRAINT feed_relation_seen_pkey PRIMARY KEY (part, seq)
);

CREATE TABLE feed_relation_watermark (
  part integer NOT NULL,
  applied_upto bigint DEFAULT 0 NOT NULL,
  CONSTRAINT feed_relation_watermark_applied_upto_check CHECK ((applied_upto >= 0)),
  CONSTRAINT feed_relation_watermark_part_fkey FOREIGN KEY (part) REFERENCES event_seq(part),
  CONSTRAINT feed_relation_watermark_pkey PRIMARY KEY (part)
);

CREATE TABLE import_run (
  run_id bigint NOT NULL,
  digest text NOT NULL,
  lines bigint NOT NULL,
  imported_at timestamp with time zone NOT NULL,
  phase text NOT NULL,
  after_ord bigint DEFAULT 0 NOT NULL,
  applied jsonb DEFAULT '{}'::jsonb NOT NULL,
  likes_left bigint DEFAULT 0 NOT NULL,
  finished_at timestamp with time zone,
  CONSTRAINT import_run_digest_key UNIQUE (digest),
  CONSTRAINT import_run_lines_check CHECK ((lines >= 0)),
  CONSTRAINT import_run_phase_check CHECK ((phase = ANY (ARRAY['accounts'::text, 'items'::text, 'blocks'::text, 'follows'::text, 'likes'::text, 'follow_writes'::text, 'like_writes'::text, 'notifications'::text, 'caches'::text, 'done'::text]))),
  CONSTRAINT import_run_pkey PRIMARY KEY (run_id)
);

CREATE TABLE import_stage (
  run_id bigint NOT NULL,
  kind text NOT NULL,
  ord bigint NOT NULL,
  line bigint NOT NULL,
  a text NOT NULL,
  b text,
  state text,
  private boolean,
  hide boolean,
  at timestamp with time zone,
  CONSTRAINT import_stage_kind_check CHECK ((kind = ANY (ARRAY['account'::text, 'item'::text, 'like'::text, 'follow'::text, 'block'::text]))),
  CONSTRAINT import_stage_pkey PRIMARY KEY (run_id, kind, ord),
  CONSTRAINT import_stage_state_check CHECK ((state = ANY (ARRAY['ACTIVE'::text, 'PENDING'::text, 'ERASED'::text])))
);

CREATE TABLE item (
  item_id text NOT NULL,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  kind text NOT NULL,
  CONSTRAINT item_kind CHECK ((kind = ANY (ARRAY['plain'::text, 'post'::text, 'comment'::text]))),
  CONSTRAINT item_pkey PRIMARY KEY (item_id)
);

CREATE TABLE ledger_config (
  singleton boolean DEFAULT true NOT NULL,
  partitions integer NOT NULL,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT ledger_config_partitions_check CHECK (((partitions >= 1) AND (partitions <= 1024))),
  CONSTRAINT ledger_config_pkey PRIMARY KEY (singleton),
  CONSTRAINT ledger_config_singleton_check CHECK (singleton)
);

CREATE TABLE ledger_migration (
  id integer NOT NULL,
  name text NOT NULL,
  applied_at timestamp with time zone DEFAULT now() NOT NULL,
  checksum text,
  CONSTRAINT ledger_migration_pkey PRIMARY KEY (id)
);

CREATE TABLE like_count (
  item_id text NOT NULL,
  part integer NOT NULL,
  n bigint DEFAULT 0 NOT NULL,
  base_seq bigint DEFAULT 0 NOT NULL,
  CONSTRAINT like_count_base_seq_check CHECK ((base_seq >= 0)),
  CONSTRAINT like_count_item_id_fkey FOREIGN KEY (item_id) REFERENCES item(item_id),
  CONSTRAINT like_count_part_fkey FOREIGN KEY (part) REFERENCES like_seq(part),
  CONSTRAINT like_count_pkey PRIMARY KEY (item_id, part)
);

CREATE TABLE like_fact (
  user_id text NOT NULL,
  item_id text NOT NULL,
  liked boolean NOT NULL,
  version bigint NOT NULL,
  changed_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT like_fact_item_id_fkey FOREIGN KEY (item_id) REFERENCES item(item_id),
  CONSTRAINT like_fact_pkey PRIMARY KEY (user_id, item_id),
  CONSTRAINT like_fact_version_check CHECK ((version >= 0))
);
CREATE INDEX like_fact_liked_list ON public.like_fact USING btree (user_id, changed_at DESC, item_id DESC) WHERE liked;
CREATE INDEX like_fact_likers ON public.like_fact USING btree (item_id, changed_at DESC, user_id) WHERE liked;
CREATE TRIGGER like_fact_erasure_guard BEFORE INSERT ON like_fact FOR EACH ROW WHEN (current_setting('ledger.like_guarded'::text, true) IS DISTINCT FROM 'on'::text) EXECUTE FUNCTION erasure_guard_like();
CREATE TRIGGER like_fact_erasure_guard_update AFTER UPDATE ON like_fact FOR EACH ROW WHEN (current_setting('ledger.like_guarded'::text, true) IS DISTINCT FROM 'on'::text) EXECUTE FUNCTION erasure_guard_like();

CREATE TABLE like_outbox (
  part integer NOT NULL,
  seq bigint NOT NULL,
  user_id text NOT NULL,
  item_id text NOT NULL,
  delta smallint NOT NULL,
  version bigint NOT NULL,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  timeline integer DEFAULT ledger_timeline() NOT NULL,
  CONSTRAINT like_outbox_delta_check CHECK ((delta = ANY (ARRAY['-1'::integer, 1]))),
  CONSTRAINT like_outbox_part_fkey FOREIGN KEY (part) REFERENCES like_seq(part),
  CONSTRAINT like_outbox_pkey PRIMARY KEY (part, seq),
  CONSTRAINT like_outbox_seq_check CHECK ((seq > 0)),
  CONSTRAINT like_outbox_user_id_item_id_version_key UNIQUE (user_id, item_id, version),
  CONSTRAINT like_outbox_version_check CHECK ((version > 0))
);
CREATE INDEX like_outbox_item_seq ON public.like_outbox USING btree (item_id, part, seq);

CREATE TABLE like_outbox_pruned (
  user_id text NOT NULL,
  item_id text NOT NULL,
  events bigint NOT NULL,
  delta_sum bigint NOT NULL,
  max_version bigint NOT NULL,
  CONSTRAINT like_outbox_pruned_pkey PRIMARY KEY (user_id, item_id)
);
CREATE INDEX like_outbox_pruned_item ON public.like_outbox_pruned USING btree (item_id);

CREATE TABLE like_rebuild_drift (
  run_id bigint NOT NULL,
  item_id text NOT NULL,
  old_n bigint NOT NULL,
  new_n bigint NOT NULL,
  drift bigint NOT NULL,
  CONSTRAINT like_rebuild_drift_pkey PRIMARY KEY (run_id, item_id),
  CONSTRAINT like_rebuild_drift_run_id_fkey FOREIGN KEY (run_id) REFERENCES like_rebuild_run(run_id)
);

CREATE TABLE like_rebuild_run (
  run_id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
  started_at timestamp with time zone DEFAULT now() NOT NULL,
  snapshot_seqs bigint[] NOT NULL,
  items_checked integer NOT NULL,
  items_drifted integer NOT NULL,
  total_abs_drift bigint NOT NULL,
  CONSTRAINT like_rebuild_run_pkey PRIMARY KEY (run_id)
);

CREATE TABLE like_seq (
  part integer NOT NULL,
  last bigint DEFAULT 0 NOT NULL,
  CONSTRAINT like_seq_last_check CHECK ((last >= 0)),
  CONSTRAINT like_seq_part_check CHECK ((part >= 0)),
  CONSTRAINT like_seq_pkey PRIMARY KEY (part)
);

CREATE TABLE mention (
  item_id text NOT NULL,
  account text NOT NULL,
  CONSTRAINT mention_account_fkey FOREIGN KEY (account) REFERENCES account(account_id),
  CONSTRAINT mention_item_id_fkey FOREIGN KEY (item_id) REFERENCES item(item_id),
  CONSTRAINT mention_pkey PRIMARY KEY (item_id, account)
);

CREATE TABLE notification (
  source text NOT NULL,
  actor text NOT NULL,
  subject text NOT NULL,
  recipient text NOT NULL,
  type text NOT NULL,
  item_id text,
  active boolean NOT NULL,
  version bigint NOT NULL,
  at timestamp with time zone NOT NULL,
  id text COLLATE "C" NOT NULL,
  group_key text COLLATE "C" NOT NULL,
  part integer NOT NULL,
  seq bigint NOT NULL,
  CONSTRAINT notification_pkey PRIMARY KEY (source, actor, subject, recipient),
  CONSTRAINT notification_seq_check CHECK ((seq >= 0)),
  CONSTRAINT notification_source_check CHECK ((source = ANY (ARRAY['like'::text, 'relation'::text, 'comment'::text, 'post'::text]))),
  CONSTRAINT notification_type_check CHECK ((type = ANY (ARRAY['like'::text, 'follow'::text, 'follow_request'::text, 'comment'::text, 'reply'::text, 'mention'::text]))),
  CONSTRAINT notification_version_check CHECK ((version > 0))
);
CREATE INDEX notification_by_recipient ON public.notification USING btree (recipient, source, actor, subject);
CREATE INDEX notification_inbox ON public.notification USING btree (recipient, id DESC) WHERE active;

CREATE TABLE notification_comment_seen (
  part integer NOT NULL,
  seq bigint NOT NULL,
  CONSTRAINT notification_comment_seen_pkey PRIMARY KEY (part, seq)
);

CREATE TABLE notification_comment_watermark (
  part integer NOT NULL,
  applied_upto bigint DEFAULT 0 NOT NULL,
  CONSTRAINT notification_comment_watermark_applied_upto_check CHECK ((applied_upto >= 0)),
  CONSTRAINT notification_comment_watermark_part_fkey FOREIGN KEY (part) REFERENCES comment_seq(part),
  CONSTRAINT notification_comment_watermark_pkey PRIMARY KEY (part)
);

CREATE TABLE notification_like_seen (
  part integer NOT NULL,
  seq bigint NOT NULL,
  CONSTRAINT notification_like_seen_pkey PRIMARY KEY (part, seq)
);

CREATE TABLE notification_like_watermark (
  part integer NOT NULL,
  applied_upto bigint DEFAULT 0 NOT NULL,
  CONSTRAINT notification_like_watermark_applied_upto_check CHECK ((applied_upto >= 0)),
  CONSTRAINT notification_like_watermark_part_fkey FOREIGN KEY (part) REFERENCES like_seq(part),
  CONSTRAINT notification_like_watermark_pkey PRIMARY KEY (part)
);

CREATE TABLE notification_marker (
  recipient text NOT NULL,
  last_read_id text COLLATE "C" NOT NULL,
  updated_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT notification_marker_pkey PRIMARY KEY (recipient)
);

CREATE TABLE notification_post_seen (
  part integer NOT NULL,
  seq bigint NOT NULL,
  CONSTRAINT notification_post_seen_pkey PRIMARY KEY (part, seq)
);

CREATE TABLE notification_post_watermark (
  part integer NOT NULL,
  applied_upto bigint DEFAULT 0 NOT NULL,
  CONSTRAINT notification_post_watermark_applied_upto_check CHECK ((applied_upto >= 0)),
  CONSTRAINT notification_post_watermark_part_fkey FOREIGN KEY (part) REFERENCES post_seq(part),
  CONSTRAINT notification_post_watermark_pkey PRIMARY KEY (part)
);

CREATE TABLE notification_rebuild_run (
  run_id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
  started_at timestamp with time zone DEFAULT now() NOT NULL,
  snapshot_seqs jsonb NOT NULL,
  recipients_checked integer NOT NULL,
  rows_drifted integer NOT NULL,
  rows_pending integer NOT NULL,
  CONSTRAINT notification_rebuild_run_pkey PRIMARY KEY (run_id)
);

CREATE TABLE notification_relation_seen (
  part integer NOT NULL,
  seq bigint NOT NULL,
  CONSTRAINT notification_relation_seen_pkey PRIMARY KEY (part, seq)
);

CREATE TABLE notification_relation_watermark (
  part integer NOT NULL,
  applied_upto bigint DEFAULT 0 NOT NULL,
  CONSTRAINT notification_relation_watermark_applied_upto_check CHECK ((applied_upto >= 0)),
  CONSTRAINT notification_relation_watermark_part_fkey FOREIGN KEY (part) REFERENCES event_seq(part),
  CONSTRAINT notification_relation_watermark_pkey PRIMARY KEY (part)
);

CREATE TABLE post (
  post_id text NOT NULL,
  author text NOT NULL,
  visibility text NOT NULL,
  body text NOT NULL,
  part integer NOT NULL,
  acl_token bigint NOT NULL,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  deleted_at timestamp with time zone,
  CONSTRAINT post_acl_token_check CHECK ((acl_token >= 0)),
  CONSTRAINT post_author_fkey FOREIGN KEY (author) REFERENCES account(account_id),
  CONSTRAINT post_pkey PRIMARY KEY (post_id),
  CONSTRAINT post_post_id_fkey FOREIGN KEY (post_id) REFERENCES item(item_id),
  CONSTRAINT post_visibility_check CHECK ((visibility = ANY (ARRAY['PUBLIC'::text, 'FOLLOWERS'::text, 'SELF'::text])))
);
CREATE INDEX post_author_newest ON public.post USING btree (author, created_at DESC, post_id DESC) WHERE (deleted_at IS NULL);
CREATE INDEX post_by_author ON public.post USING btree (author, post_id);
CREATE TRIGGER post_erasure_guard BEFORE INSERT OR UPDATE ON post FOR EACH ROW EXECUTE FUNCTION erasure_guard_content();
CREATE TRIGGER post_outbox_created AFTER INSERT ON post FOR EACH ROW EXECUTE FUNCTION post_write_event();
CREATE TRIGGER post_outbox_deleted AFTER UPDATE OF deleted_at ON post FOR EACH ROW WHEN (old.deleted_at IS NULL AND new.deleted_at IS NOT NULL) EXECUTE FUNCTION post_write_event();

CREATE TABLE post_outbox (
  part integer NOT NULL,
  seq bigint NOT NULL,
  post_id text NOT NULL,
  author text NOT NULL,
  kind text NOT NULL,
  version bigint NOT NULL,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  timeline integer DEFAULT ledger_timeline() NOT NULL,
  CONSTRAINT post_outbox_kind_check CHECK ((kind = ANY (ARRAY['created'::text, 'deleted'::text]))),
  CONSTRAINT post_outbox_part_fkey FOREIGN KEY (part) REFERENCES post_seq(part),
  CONSTRAINT post_outbox_pkey PRIMARY KEY (part, seq),
  CONSTRAINT post_outbox_post_id_version_key UNIQUE (post_id, version),
  CONSTRAINT post_outbox_seq_check CHECK ((seq > 0)),
  CONSTRAINT post_outbox_version_check CHECK ((version = ANY (ARRAY[(1)::bigint, (2)::bigint])))
);

CREATE TABLE post_seq (
  part integer NOT NULL,
  last bigint DEFAULT 0 NOT NULL,
  CONSTRAINT post_seq_last_check CHECK ((last >= 0)),
  CONSTRAINT post_seq_part_check CHECK ((part >= 0)),
  CONSTRAINT post_seq_pkey PRIMARY KEY (part)
);

CREATE TABLE processed_event (
  part integer NOT NULL,
  seq bigint NOT NULL,
  how text NOT NULL,
  CONSTRAINT processed_event_how_check CHECK ((how = ANY (ARRAY['APPLIED'::text, 'COVERED'::text]))),
  CONSTRAINT processed_event_pkey PRIMARY KEY (part, seq)
);

CREATE TABLE proj_count (
  followee text NOT NULL,
  n bigint DEFAULT 0 NOT NULL,
  CONSTRAINT proj_count_pkey PRIMARY KEY (followee)
);

CREATE TABLE proj_follower (
  followee text NOT NULL,
  follower text NOT NULL,
  state text NOT NULL,
  version bigint NOT NULL,
  since timestamp with time zone NOT NULL,
  CONSTRAINT proj_follower_pkey PRIMARY KEY (followee, follower),
  CONSTRAINT proj_follower_state_check CHECK ((state = ANY (ARRAY['ACTIVE'::text, 'PENDING'::text, 'REMOVED'::text])))
);
CREATE INDEX proj_follower_list ON public.proj_follower USING btree (followee, since DESC, follower DESC) WHERE (state = 'ACTIVE'::text);

CREATE TABLE proj_seen (
  part integer NOT NULL,
  seq bigint NOT NULL,
  CONSTRAINT proj_seen_pkey PRIMARY KEY (part, seq)
);

CREATE TABLE proj_watermark (
  part integer NOT NULL,
  applied_upto bigint DEFAULT 0 NOT NULL,
  CONSTRAINT proj_watermark_applied_upto_check CHECK ((applied_upto >= 0)),
  CONSTRAINT proj_watermark_part_fkey FOREIGN KEY (part) REFERENCES event_seq(part),
  CONSTRAINT proj_watermark_pkey PRIMARY KEY (part)
);

CREATE TABLE relation (
  follower text NOT NULL,
  followee text NOT NULL,
  state text NOT NULL,
  version bigint NOT NULL,
  changed_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT relation_check CHECK ((follower <> followee)),
  CONSTRAINT relation_followee_fkey FOREIGN KEY (followee) REFERENCES account(account_id),
  CONSTRAINT relation_follower_fkey FOREIGN KEY (follower) REFERENCES account(account_id),
  CONSTRAINT relation_pkey PRIMARY KEY (follower, followee),
  CONSTRAINT relation_state_check CHECK ((state = ANY (ARRAY['ACTIVE'::text, 'PENDING'::text, 'REMOVED'::text]))),
  CONSTRAINT relation_version_check CHECK ((version >= 0))
);
CREATE INDEX relation_by_followee ON public.relation USING btree (followee, follower) WHERE (state = 'ACTIVE'::text);
CREATE INDEX relation_following_list ON public.relation USING btree (follower, changed_at DESC, followee DESC) WHERE (state = 'ACTIVE'::text);
CREATE INDEX relation_pending_by_followee ON public.relation USING btree (followee, follower) WHERE (state = 'PENDING'::text);
CREATE INDEX relation_request_list ON public.relation USING btree (followee, changed_at DESC, follower DESC) WHERE (state = 'PENDING'::text);
CREATE TRIGGER relation_erasure_guard BEFORE INSERT ON relation FOR EACH ROW EXECUTE FUNCTION erasure_guard_relation();
CREATE TRIGGER relation_erasure_guard_update AFTER UPDATE ON relation FOR EACH ROW WHEN (current_setting('ledger.relation_guarded'::text, true) IS DISTINCT FROM 'on'::text) EXECUTE FUNCTION erasure_guard_relation();

CREATE TABLE relation_event (
  part integer NOT NULL,
  seq bigint NOT NULL,
  follower text NOT NULL,
  followee text NOT NULL,
  state text NOT NULL,
  version bigint NOT NULL,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  timeline integer DEFAULT ledger_timeline() NOT NULL,
  CONSTRAINT relation_event_follower_followee_version_key UNIQUE (follower, followee, version),
  CONSTRAINT relation_event_part_fkey FOREIGN KEY (part) REFERENCES event_seq(part),
  CONSTRAINT relation_event_pkey PRIMARY KEY (part, seq),
  CONSTRAINT relation_event_seq_check CHECK ((seq > 0)),
  CONSTRAINT relation_event_state_check CHECK ((state = ANY (ARRAY['ACTIVE'::text, 'PENDING'::text, 'REMOVED'::text]))),
  CONSTRAINT relation_event_version_check CHECK ((version > 0))
);

CREATE TABLE relation_event_pruned (
  follower text NOT NULL,
  followee text NOT NULL,
  events bigint NOT NULL,
  max_version bigint NOT NULL,
  last_state text NOT NULL,
  CONSTRAINT relation_event_pruned_last_state_check CHECK ((last_state = ANY (ARRAY['ACTIVE'::text, 'PENDING'::text, 'REMOVED'::text]))),
  CONSTRAINT relation_event_pruned_pkey PRIMARY KEY (follower, followee)
);

CREATE TABLE relay_watermark (
  kind text NOT NULL,
  part integer NOT NULL,
  published_upto bigint DEFAULT 0 NOT NULL,
  updated_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT relay_watermark_kind_check CHECK ((kind = ANY (ARRAY['likes'::text, 'relations'::text, 'comments'::text, 'posts'::text]))),
  CONSTRAINT relay_watermark_part_check CHECK ((part >= 0)),
  CONSTRAINT relay_watermark_pkey PRIMARY KEY (kind, part),
  CONSTRAINT relay_watermark_published_upto_check CHECK ((published_upto >= 0))
);

CREATE TABLE retention_floor (
  kind text NOT NULL,
  part integer NOT NULL,
  pruned_upto bigint DEFAULT 0 NOT NULL,
  pruned_events bigint DEFAULT 0 NOT NULL,
  pruned_max_seq bigint DEFAULT 0 NOT NULL,
  misplaced_events bigint DEFAULT 0 NOT NULL,
  illegal_transitions bigint DEFAULT 0 NOT NULL,
  keys_pruned_upto bigint DEFAULT 0 NOT NULL,
  pruned_at timestamp with time zone,
  CONSTRAINT retention_floor_keys_pruned_upto_check CHECK ((keys_pruned_upto >= 0)),
  CONSTRAINT retention_floor_kind_check CHECK ((kind = ANY (ARRAY['likes'::text, 'relations'::text, 'comments'::text, 'posts'::text, 'blocks'::text, 'accounts'::text]))),
  CONSTRAINT retention_floor_part_check CHECK ((part >= 0)),
  CONSTRAINT retention_floor_pkey PRIMARY KEY (kind, part),
  CONSTRAINT retention_floor_pruned_upto_check CHECK ((pruned_upto >= 0))
);

CREATE TABLE retention_hold (
  holder text NOT NULL,
  kind text NOT NULL,
  part integer NOT NULL,
  upto bigint NOT NULL,
  updated_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT retention_hold_kind_check CHECK ((kind = ANY (ARRAY['likes'::text, 'relations'::text, 'comments'::text, 'posts'::text, 'blocks'::text, 'accounts'::text]))),
  CONSTRAINT retention_hold_part_check CHECK ((part >= 0)),
  CONSTRAINT retention_hold_pkey PRIMARY KEY (holder, kind, part),
  CONSTRAINT retention_hold_upto_check CHECK ((upto >= 0))
);

CREATE TABLE webhook_block_event (
  part integer NOT NULL,
  seq bigint NOT NULL,
  blocker text,
  blocked text,
  state text NOT NULL,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  timeline integer DEFAULT ledger_timeline() NOT NULL,
  CONSTRAINT webhook_block_event_part_fkey FOREIGN KEY (part) REFERENCES webhook_block_seq(part),
  CONSTRAINT webhook_block_event_pkey PRIMARY KEY (part, seq),
  CONSTRAINT webhook_block_event_seq_check CHECK ((seq > 0)),
  CONSTRAINT webhook_block_event_state_check CHECK ((((state = ANY (ARRAY['BLOCKED'::text, 'UNBLOCKED'::text])) AND (blocker IS NOT NULL) AND (blocked IS NOT NULL)) OR ((state = 'ERASED'::text) AND (blocker IS NULL) AND (blocked IS NULL))))
);
CREATE INDEX webhook_block_event_blocked ON public.webhook_block_event USING btree (blocked);
CREATE INDEX webhook_block_event_blocker ON public.webhook_block_event USING btree (blocker);

CREATE TABLE webhook_block_seq (
  part integer NOT NULL,
  last bigint DEFAULT 0 NOT NULL,
  CONSTRAINT webhook_block_seq_last_check CHECK ((last >= 0)),
  CONSTRAINT webhook_block_seq_part_check CHECK ((part >= 0)),
  CONSTRAINT webhook_block_seq_pkey PRIMARY KEY (part)
);

CREATE TABLE webhook_cursor (
  endpoint_id text NOT NULL,
  source text NOT NULL,
  part integer NOT NULL,
  delivered_upto bigint NOT NULL,
  attempts integer DEFAULT 0 NOT NULL,
  next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
  failing_since timestamp with time zone,
  last_error text,
  last_status integer,
  delivered_at timestamp with time zone,
  CONSTRAINT webhook_cursor_attempts_check CHECK ((attempts >= 0)),
  CONSTRAINT webhook_cursor_delivered_upto_check CHECK ((delivered_upto >= 0)),
  CONSTRAINT webhook_cursor_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES webhook_endpoint(endpoint_id) ON DELETE CASCADE,
  CONSTRAINT webhook_cursor_part_check CHECK ((part >= 0)),
  CONSTRAINT webhook_cursor_pkey PRIMARY KEY (endpoint_id, source, part),
  CONSTRAINT webhook_cursor_source_check CHECK ((source = ANY (ARRAY['likes'::text, 'relations'::text, 'comments'::text, 'blocks'::text, 'posts'::text, 'accounts'::text])))
);
CREATE INDEX webhook_cursor_due ON public.webhook_cursor USING btree (next_attempt_at);

CREATE TABLE webhook_endpoint (
  endpoint_id text NOT NULL,
  url text NOT NULL,
  events text[] NOT NULL,
  paused boolean DEFAULT false NOT NULL,
  secret text NOT NULL,
  previous_secret text,
  previous_secret_until timestamp with time zone,
  created_at timestamp with time zone DEFAULT now() NOT NULL,
  updated_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT webhook_endpoint_check CHECK (((previous_secret IS NULL) = (previous_secret_until IS NULL))),
  CONSTRAINT webhook_endpoint_events_check CHECK (((cardinality(events) >= 1) AND (cardinality(events) <= 64))),
  CONSTRAINT webhook_endpoint_pkey PRIMARY KEY (endpoint_id),
  CONSTRAINT webhook_endpoint_previous_secret_check CHECK ((previous_secret ~~ 'whsec\_%'::text)),
  CONSTRAINT webhook_endpoint_secret_check CHECK ((secret ~~ 'whsec\_%'::text))
);

CREATE TABLE webhook_lost_delivery (
  endpoint_id text NOT NULL,
  webhook_id text NOT NULL,
  source text NOT NULL,
  part integer NOT NULL,
  seq bigint NOT NULL,
  timeline integer NOT NULL,
  delivered_at timestamp with time zone NOT NULL,
  detected_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT webhook_lost_delivery_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES webhook_endpoint(endpoint_id) ON DELETE CASCADE,
  CONSTRAINT webhook_lost_delivery_part_check CHECK ((part >= 0)),
  CONSTRAINT webhook_lost_delivery_pkey PRIMARY KEY (endpoint_id, webhook_id),
  CONSTRAINT webhook_lost_delivery_seq_check CHECK ((seq > 0)),
  CONSTRAINT webhook_lost_delivery_source_check CHECK ((source = ANY (ARRAY['likes'::text, 'relations'::text, 'comments'::text, 'blocks'::text, 'posts'::text, 'accounts'::text])))
);

-- Views

CREATE VIEW counted_comment AS
 SELECT comment_id,
    post_id,
    author,
    parent_id,
    root_id,
    depth,
    body,
    part,
    acl_token,
    idempotency_key,
    version,
    edit_count,
    created_at,
    edited_at,
    deleted_at,
    deleted_by
   FROM comment
  WHERE comment_counted(deleted_at);

CREATE VIEW feed_truth AS
 SELECT r.follower AS reader,
    p.post_id,
    p.author,
    p.created_at AS at
   FROM relation r
     JOIN post p ON p.author = r.followee
  WHERE r.state = 'ACTIVE'::text AND p.deleted_at IS NULL AND NOT (EXISTS ( SELECT 1
           FROM feed_hot_author h
          WHERE h.author = r.followee)) AND post_readable(r.follower, p.author, p.visibility, p.part, p.acl_token, 'TRUTH'::text)
UNION ALL
 SELECT p.author AS reader,
    p.post_id,
    p.author,
    p.created_at AS at
   FROM post p
  WHERE p.deleted_at IS NULL;

CREATE VIEW notification_item_author AS
 SELECT p.post_id AS item_id,
    p.author
   FROM post p
UNION ALL
 SELECT c.comment_id AS item_id,
    c.author
   FROM comment c;

CREATE VIEW notification_truth AS
 SELECT 'like'::text AS source,
    f.user_id AS actor,
    f.item_id AS subject,
    a.author AS recipient,
    'like'::text AS type,
    f.item_id,
    f.liked AS active,
    f.version,
    f.changed_at AS at
   FROM like_fact f
     JOIN notification_item_author a ON a.item_id = f.item_id
  WHERE a.author <> f.user_id AND f.version > 0
UNION ALL
 SELECT 'relation'::text AS source,
    r.follower AS actor,
    r.followee AS subject,
    r.followee AS recipient,
        CASE r.state
            WHEN 'PENDING'::text THEN 'follow_request'::text
            ELSE 'follow'::text
        END AS type,
    NULL::text AS item_id,
    r.state <> 'REMOVED'::text AS active,
    r.version,
    r.changed_at AS at
   FROM relation r
  WHERE r.version > 0
UNION ALL
 SELECT 'comment'::text AS source,
    c.author AS actor,
    c.comment_id AS subject,
    n.recipient,
    n.type,
    c.comment_id AS item_id,
    comment_counted(c.deleted_at) AS active,
    c.version,
        CASE
            WHEN comment_counted(c.deleted_at) THEN c.created_at
            ELSE c.deleted_at
        END AS at
   FROM comment c
     JOIN post p ON p.post_id = c.post_id
     CROSS JOIN LATERAL notification_comment_recipients(c.comment_id, c.author, p.author, c.parent_id) n(recipient, type)
UNION ALL
 SELECT 'post'::text AS source,
    p.author AS actor,
    p.post_id AS subject,
    m.account AS recipient,
    'mention'::text AS type,
    p.post_id AS item_id,
    p.deleted_at IS NULL AS active,
        CASE
            WHEN p.deleted_at IS NULL THEN 1
            ELSE 2
        END::bigint AS version,
    COALESCE(p.deleted_at, p.created_at) AS at
   FROM post p
     JOIN mention m ON m.item_id = p.post_id
  WHERE m.account <> p.author;

-- Functions and procedures

CREATE OR REPLACE FUNCTION public.account_inserted_events()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_ids text[];
  v_private boolean[];
  v_hide boolean[];
BEGIN
  SELECT array_agg(n.account_id ORDER BY n.account_id), array_agg(n.private ORDER BY n.account_id),
         array_agg(n.hide_collections ORDER BY n.account_id)
    INTO v_ids, v_private, v_hide
    FROM new_accounts n WHERE n.erased_state IS NULL;
  PERFORM account_outbox_append(v_ids, array_fill('created'::text, ARRAY[coalesce(cardinality(v_ids), 0)]), v_private, v_hide);
  RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION public.account_outbox_append(p_ids text[], p_kinds text[], p_private boolean[], p_hide boolean[])
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_partitions integer;
BEGIN
  IF coalesce(cardinality(p_ids), 0) = 0 THEN
    RETURN;
  END IF;
  SELECT c.partitions INTO v_partitions FROM ledger_config c;
  INSERT INTO account_seq (part)
    SELECT DISTINCT ledger_partition(x, v_partitions) FROM unnest(p_ids) AS x ORDER BY 1
    ON CONFLICT (part) DO NOTHING;
  PERFORM 1 FROM account_seq s
    WHERE s.part IN (SELECT ledger_partition(x, v_partitions) FROM unnest(p_ids) AS x)
    ORDER BY s.part FOR UPDATE;
  WITH ev AS (
    SELECT e.id, e.kind, e.private, e.hide, e.ord, ledger_partition(e.id, v_partitions) AS part
      FROM unnest(p_ids, p_kinds, p_private, p_hide) WITH ORDINALITY AS e(id, kind, private, hide, ord)),
  bumped AS (
    UPDATE account_seq s SET last = s.last + k.n
      FROM (SELECT ev.part, count(*) AS n FROM ev GROUP BY ev.part) k
     WHERE s.part = k.part
    RETURNING s.part, s.last - k.n AS base)
  INSERT INTO account_outbox (part, seq, account_id, kind, private, hide_collections)
  SELECT ev.part, b.base + row_number() OVER (PARTITION BY ev.part ORDER BY ev.ord), ev.id, ev.kind, ev.private, ev.hide
    FROM ev JOIN bumped b ON b.part = ev.part;
END
$function$;

CREATE OR REPLACE FUNCTION public.account_updated_events()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_ids text[];
  v_kinds text[];
  v_private boolean[];
  v_hide boolean[];
BEGIN
  WITH changed AS (
    SELECT n.account_id, n.private, n.hide_collections,
           CASE WHEN n.erased_state = 'ERASED' AND o.erased_state IS DISTINCT FROM 'ERASED' THEN 'erased'
                WHEN n.erased_state IS NULL
                 AND (n.private IS DISTINCT FROM o.private OR n.hide_collections IS DISTINCT FROM o.hide_collections) THEN 'updated'
           END AS kind
      FROM new_accounts n JOIN old_accounts o ON o.account_id = n.account_id)
  SELECT array_agg(c.account_id ORDER BY c.account_id), array_agg(c.kind ORDER BY c.account_id),
         array_agg(CASE WHEN c.kind = 'updated' THEN c.private END ORDER BY c.account_id),
         array_agg(CASE WHEN c.kind = 'updated' THEN c.hide_collections END ORDER BY c.account_id)
    INTO v_ids, v_kinds, v_private, v_hide
    FROM changed c WHERE c.kind IS NOT NULL;
  IF 'erased' = ANY (v_kinds) THEN
    UPDATE account_outbox o SET private = NULL, hide_collections = NULL
     WHERE o.account_id IN (SELECT x.id FROM unnest(v_ids, v_kinds) AS x(id, kind) WHERE x.kind = 'erased')
       AND o.private IS NOT NULL;
  END IF;
  PERFORM account_outbox_append(v_ids, v_kinds, v_private, v_hide);
  RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION public.author_posts_page(p_reader text, p_authors text[], p_before_at timestamp with time zone, p_before_id text, p_limit integer)
 RETURNS TABLE(post_id text, author text, visibility text, body text, acl_token bigint, created_at timestamp with time zone)
 LANGUAGE sql
 STABLE
AS $function$
  SELECT p.post_id, p.author, p.visibility, p.body, p.acl_token, p.created_at
    FROM (SELECT DISTINCT a.author FROM unnest(p_authors) AS a(author)) a
    CROSS JOIN LATERAL (
      SELECT q.post_id, q.author, q.visibility, q.body, q.acl_token, q.created_at
        FROM post q
       WHERE q.author = a.author AND q.deleted_at IS NULL
         AND (q.created_at, q.post_id) < (coalesce(p_before_at, 'infinity'::timestamptz), coalesce(p_before_id, ''))
         AND CASE
               WHEN p_reader IS NOT NULL AND p_reader = a.author THEN true
               WHEN q.visibility = 'PUBLIC' THEN p_reader IS NULL OR NOT EXISTS (
                 SELECT 1 FROM block b
                  WHERE (b.blocker = p_reader AND b.blocked = a.author) OR (b.blocker = a.author AND b.blocked = p_reader))
               WHEN q.visibility <> 'FOLLOWERS' OR p_reader IS NULL THEN false
               WHEN (SELECT w.applied_upto FROM proj_watermark w WHERE w.part = q.part) >= q.acl_token THEN EXISTS (
                 SELECT 1 FROM proj_follower f WHERE f.followee = a.author AND f.follower = p_reader AND f.state = 'ACTIVE')
               ELSE EXISTS (
                 SELECT 1 FROM relation r WHERE r.follower = p_reader AND r.followee = a.author AND r.state = 'ACTIVE')
             END
       ORDER BY q.created_at DESC, q.post_id DESC
       LIMIT p_limit) p
   ORDER BY p.created_at DESC, p.post_id DESC
   LIMIT p_limit
$function$;

CREATE OR REPLACE FUNCTION public.comment_counted(deleted_at timestamp with time zone)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT deleted_at IS NULL $function$;

CREATE OR REPLACE FUNCTION public.erasure_erased_refuse(p_account text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'SLE02',
    MESSAGE = 'account ' || p_account || ' was erased: its id can never act again, and no new fact may name it';
END
$function$;

CREATE OR REPLACE FUNCTION public.erasure_guard_account()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  IF erasure_writing() THEN
    RETURN NEW;
  END IF;
  IF OLD.erased_state = 'ERASING' THEN
    PERFORM erasure_refuse(OLD.account_id);
  END IF;
  IF OLD.erased_state = 'ERASED' THEN
    PERFORM erasure_erased_refuse(OLD.account_id);
  END IF;
  RETURN NEW;
END
$function$;

CREATE OR REPLACE FUNCTION public.erasure_guard_accounts(p_ids text[], p_constraints text[], p_op text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_hit record;
BEGIN
  SELECT a.account_id, a.erased_state, i.ord INTO v_hit
    FROM unnest(p_ids) WITH ORDINALITY AS i(id, ord) JOIN account a ON a.account_id = i.id
   WHERE a.erased_state IS NOT NULL ORDER BY i.ord LIMIT 1;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  IF v_hit.erased_state = 'ERASING' THEN
    PERFORM erasure_refuse(v_hit.account_id);
  END IF;
  -- An erased account's tombstones and REMOVED rows may still change (a post's author deletes
  -- a tombstoned reply); only a new row is refused.
  IF p_op <> 'INSERT' THEN
    RETURN;
  END IF;
  PERFORM erasure_erased_refuse(v_hit.account_id);
END
$function$;

CREATE OR REPLACE FUNCTION public.erasure_guard_block()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  IF erasure_writing() THEN
    RETURN NEW;
  END IF;
  IF TG_OP = 'INSERT' AND current_setting('ledger.tombstone_blocks', true) = 'on'
     AND EXISTS (SELECT 1 FROM account a WHERE a.account_id = NEW.blocked AND a.erased_state = 'ERASED') THEN
    PERFORM erasure_guard_accounts(ARRAY[NEW.blocker], ARRAY['block_blocker_fkey'], TG_OP);
    RETURN NEW;
  END IF;
  PERFORM erasure_guard_accounts(ARRAY[NEW.blocker, NEW.blocked], ARRAY['block_blocker_fkey', 'block_blocked_fkey'], TG_OP);
  RETURN NEW;
END
$function$;

CREATE OR REPLACE FUNCTION public.erasure_guard_content()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  IF NOT erasure_writing() THEN
    PERFORM erasure_guard_accounts(ARRAY[NEW.author], ARRAY[TG_TABLE_NAME || '_author_fkey'], TG_OP);
    IF TG_TABLE_NAME = 'comment' AND EXISTS (
         SELECT 1 FROM post p JOIN account_erasure e ON e.account_id = p.author AND e.finished_at IS NULL WHERE p.post_id = NEW.post_id) THEN
      PERFORM erasure_refuse((SELECT author FROM post WHERE post_id = NEW.post_id));
    END IF;
  END IF;
  RETURN NEW;
END
$function$;

CREATE OR REPLACE FUNCTION public.erasure_guard_like()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_author text;
BEGIN
  IF erasure_writing() THEN
    RETURN NEW;
  END IF;
  IF EXISTS (SELECT 1 FROM account a WHERE a.account_id = NEW.user_id AND a.erased_state = 'ERASED') THEN
    PERFORM erasure_erased_refuse(NEW.user_id);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM account_erasure WHERE finished_at IS NULL) THEN
    RETURN NEW;
  END IF;
  IF EXISTS (SELECT 1 FROM account_erasure WHERE account_id = NEW.user_id AND finished_at IS NULL) THEN
    PERFORM erasure_refuse(NEW.user_id);
  END IF;
  SELECT coalesce((SELECT p.author FROM post p WHERE p.post_id = NEW.item_id), (SELECT c.author FROM comment c WHERE c.comment_id = NEW.item_id))
    INTO v_author;
  IF EXISTS (SELECT 1 FROM account_erasure WHERE account_id = v_author AND finished_at IS NULL) THEN
    PERFORM erasure_refuse(v_author);
  END IF;
  RETURN NEW;
END
$function$;

CREATE OR REPLACE FUNCTION public.erasure_guard_relation()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  IF NOT erasure_writing() THEN
    PERFORM erasure_guard_accounts(ARRAY[NEW.follower, NEW.followee], ARRAY['relation_follower_fkey', 'relation_followee_fkey'], TG_OP);
  END IF;
  RETURN NEW;
END
$function$;

CREATE OR REPLACE FUNCTION public.erasure_leftovers()
 RETURNS TABLE(account_id text, what text, n bigint)
 LANGUAGE sql
 STABLE
AS $function$
  SELECT a.account_id, r.phase, r.n FROM account a CROSS JOIN LATERAL erasure_remaining(a.account_id) r
   WHERE a.erased_state = 'ERASED' AND r.n > 0
  UNION ALL
  SELECT a.account_id, 'block_events', e.n FROM account a
   CROSS JOIN LATERAL (SELECT (SELECT count(*) FROM webhook_block_event x WHERE x.blocker = a.account_id)
                            + (SELECT count(*) FROM webhook_block_event x WHERE x.blocked = a.account_id) AS n) e
   WHERE a.erased_state = 'ERASED' AND e.n > 0
$function$;

CREATE OR REPLACE FUNCTION public.erasure_refuse(p_account text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'SLE01',
    MESSAGE = 'account ' || p_account || ' is being erased: writes by or towards it are refused until the erasure completes';
END
$function$;

CREATE OR REPLACE FUNCTION public.erasure_remaining(p_account text)
 RETURNS TABLE(phase text, n bigint)
 LANGUAGE sql
 STABLE
AS $function$
  SELECT 'posts', count(*) FROM post WHERE author = p_account AND deleted_at IS NULL
  UNION ALL SELECT 'comments', count(*) FROM comment WHERE author = p_account AND (comment_counted(deleted_at) OR idempotency_key IS NOT NULL)
  UNION ALL SELECT 'post_likes', count(*) FROM post p JOIN like_fact f ON f.item_id = p.post_id AND f.liked WHERE p.author = p_account
  UNION ALL SELECT 'comment_likes', count(*) FROM comment c JOIN like_fact f ON f.item_id = c.comment_id AND f.liked WHERE c.author = p_account
  -- its likes of its own posts and comments are counted (and turned off) with those.
  UNION ALL SELECT 'likes', count(*) FROM like_fact f WHERE f.user_id = p_account AND f.liked
    AND NOT EXISTS (SELECT 1 FROM post p WHERE p.post_id = f.item_id AND p.author = p_account)
    AND NOT EXISTS (SELECT 1 FROM comment c WHERE c.comment_id = f.item_id AND c.author = p_account)
  UNION ALL SELECT 'following', count(*) FROM relation WHERE follower = p_account AND state <> 'REMOVED'
  UNION ALL SELECT 'followers', count(*) FROM relation WHERE followee = p_account AND state <> 'REMOVED'
  UNION ALL SELECT 'blocks', count(*) FROM block WHERE blocker = p_account
$function$;

CREATE OR REPLACE FUNCTION public.erasure_remove_relations(p_followers text[], p_followees text[], p_versions bigint[], p_partitions integer)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_events integer;
BEGIN
  UPDATE relation r SET state = 'REMOVED', version = x.version + 1, changed_at = now()
    FROM unnest(p_followers, p_followees, p_versions) AS x(follower, followee, version)
   WHERE r.follower = x.follower AND r.followee = x.followee;
  IF current_setting('ledger.test_hooks', true) = 'on' THEN
    PERFORM ledger_hook('erasure.beforeSequences', jsonb_build_object('seq', 'event_seq',
      'parts', (SELECT jsonb_agg(DISTINCT ledger_partition(x, p_partitions)) FROM unnest(p_followees) AS x)));
  END IF;
  PERFORM 1 FROM event_seq s
   WHERE s.part IN (SELECT DISTINCT ledger_partition(x, p_partitions) FROM unnest(p_followees) AS x)
   ORDER BY s.part FOR UPDATE;
  PERFORM set_config('ledger.erasure_sequences_at', clock_timestamp()::text, true);
  WITH pairs AS (
    SELECT x.follower, x.followee, x.version + 1 AS version, ledger_partition(x.followee, p_partitions) AS part
      FROM unnest(p_followers, p_followees, p_versions) AS x(follower, followee, version)),
  numbered AS (SELECT p.*, row_number() OVER (PARTITION BY p.part ORDER BY p.follower, p.followee) AS k FROM pairs p),
  moved AS (
    UPDATE event_seq q SET last = q.last + c.n FROM (SELECT p.part, count(*) AS n FROM pairs p GROUP BY p.part) c
     WHERE q.part = c.part RETURNING q.part, q.last, c.n),
  ev AS (
    INSERT INTO relation_event (part, seq, follower, followee, state, version)
    SELECT nb.part, m.last - m.n + nb.k, nb.follower, nb.followee, 'REMOVED', nb.version FROM numbered nb JOIN moved m USING (part)
    RETURNING 1)
  SELECT count(*) INTO v_events FROM ev;
  RETURN v_events;
END
$function$;

CREATE OR REPLACE FUNCTION public.erasure_start(p_account text, p_requested_by text)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_state text;
  v_total bigint;
BEGIN
  SELECT a.erased_state INTO v_state FROM account a WHERE a.account_id = p_account FOR UPDATE;
  IF NOT FOUND THEN
    RETURN 'NOT_FOUND';
  END IF;
  IF v_state = 'ERASING' THEN
    RETURN 'RUNNING';
  END IF;
  SELECT sum(r.n) INTO v_total FROM erasure_remaining(p_account) r;
  IF v_state = 'ERASED' AND v_total = 0
     AND NOT EXISTS (SELECT 1 FROM webhook_block_event x WHERE x.blocker = p_account OR x.blocked = p_account) THEN
    RETURN 'ERASED';
  END IF;
  PERFORM set_config('ledger.erasure', p_account, true);
  UPDATE account SET erased_state = 'ERASING' WHERE account_id = p_account;
  INSERT INTO account_erasure (account_id, requested_by, phase, total) VALUES (p_account, p_requested_by, 'posts', v_total)
    ON CONFLICT (account_id) DO UPDATE SET requested_by = EXCLUDED.requested_by, phase = 'posts', cursor_id = NULL, total = EXCLUDED.total,
      done = 0, batches = 0, started_at = now(), updated_at = now(), finished_at = NULL;
  RETURN 'STARTED';
END
$function$;

CREATE OR REPLACE FUNCTION public.erasure_step(p_account text, p_limit integer, p_partitions integer)
 RETURNS TABLE(phase text, facts integer, next_phase text, sequences_held_ms double precision)
 LANGUAGE plpgsql
AS $function$
DECLARE
  e account_erasure%ROWTYPE;
  v_part integer := ledger_partition(p_account, p_partitions);
  v_picked integer := 0;
  v_facts integer := 0;
  v_cursor text;
  v_users text[];
  v_items text[];
  v_versions bigint[];
  v_next text;
  v_left bigint;
BEGIN
  SELECT * INTO e FROM account_erasure a WHERE a.account_id = p_account FOR UPDATE;
  IF NOT FOUND OR e.phase = 'done' THEN
    RETURN QUERY SELECT coalesce(e.phase, 'none'), 0, coalesce(e.phase, 'none'), NULL::double precision;
    RETURN;
  END IF;
  PERFORM set_config('ledger.erasure', p_account, true);
  PERFORM set_config('ledger.erasure_sequences_at', '', true);
  v_cursor := e.cursor_id;
  CASE e.phase
  WHEN 'posts' THEN
    -- Tombstones, as DELETE /v1/posts/{id} makes them (migration 006).
    WITH picked AS (
      SELECT p.post_id FROM post p WHERE p.author = p_account AND p.deleted_at IS NULL ORDER BY p.post_id LIMIT p_limit FOR UPDATE),
    upd AS (UPDATE post p SET body = '', deleted_at = now() FROM picked WHERE p.post_id = picked.post_id RETURNING 1)
    SELECT count(*) INTO v_picked FROM upd;
    v_facts := v_picked;
  WHEN 'comments' THEN
    -- Tombstones, as CommentService.delete makes them: a counted comment's version + 1 and one
    -- comment_outbox event of delta -1 in its (the author's) partition. The idempotency key goes
    -- too, so a new account of the same id never finds an old comment by its key.
    WITH picked AS (
      SELECT c.comment_id, comment_counted(c.deleted_at) AS counted FROM comment c
       WHERE c.author = p_account AND (comment_counted(c.deleted_at) OR c.idempotency_key IS NOT NULL)
       ORDER BY c.comment_id LIMIT p_limit FOR UPDATE),
    upd AS (
      UPDATE comment c SET deleted_at = coalesce(c.deleted_at, now()), deleted_by = coalesce(c.deleted_by, p_account), body = NULL,
             idempotency_key = NULL, version = c.version + picked.counted::int
        FROM picked WHERE c.comment_id = picked.comment_id
      RETURNING c.comment_id, c.post_id, c.version, picked.counted),
    numbered AS (SELECT u.*, row_number() OVER (ORDER BY u.comment_id) AS k, count(*) OVER () AS n FROM upd u WHERE u.counted),
    moved AS (UPDATE comment_seq s SET last = s.last + (SELECT count(*) FROM numbered) WHERE s.part = v_part AND EXISTS (SELECT 1 FROM numbered) RETURNING s.last),
    ev AS (
      INSERT INTO comment_outbox (part, seq, comment_id, post_id, delta, version)
      SELECT v_part, m.last - nb.n + nb.k, nb.comment_id, nb.post_id, -1, nb.version FROM numbered nb, moved m RETURNING 1)
    SELECT (SELECT count(*) FROM upd), (SELECT count(*) FROM ev) INTO v_picked, v_facts;
  WHEN 'post_likes', 'comment_likes' THEN
    -- Every like of its posts (or comments), by anyone, turned off by its liker's own sequence.
    -- Keyset on the item: an item with more likers than a batch is resumed at the same item.
    IF e.phase = 'post_likes' THEN
      SELECT array_agg(t.user_id ORDER BY t.item_id, t.user_id), array_agg(t.item_id ORDER BY t.item_id, t.user_id), max(t.item_id)
        INTO v_users, v_items, v_cursor
        FROM (SELECT f.user_id, f.item_id FROM post p JOIN like_fact f ON f.item_id = p.post_id AND f.liked
               WHERE p.author = p_account AND p.post_id >= coalesce(e.cursor_id, '')
               ORDER BY p.post_id, f.user_id LIMIT p_limit FOR UPDATE OF f) t;
    ELSE
      SELECT array_agg(t.user_id ORDER BY t.item_id, t.user_id), array_agg(t.item_id ORDER BY t.item_id, t.user_id), max(t.item_id)
        INTO v_users, v_items, v_cursor
        FROM (SELECT f.user_id, f.item_id FROM comment c JOIN like_fact f ON f.item_id = c.comment_id AND f.liked
               WHERE c.author = p_account AND c.comment_id >= coalesce(e.cursor_id, '')
               ORDER BY c.comment_id, f.user_id LIMIT p_limit FOR UPDATE OF f) t;
    END IF;
    v_picked := coalesce(cardinality(v_users), 0);
    IF v_picked > 0 THEN
      v_facts := erasure_unlike(v_users, v_items, p_partitions);
    END IF;
  WHEN 'likes' THEN
    SELECT array_agg(t.user_id ORDER BY t.item_id), array_agg(t.item_id ORDER BY t.item_id), max(t.item_id)
      INTO v_users, v_items, v_cursor
      FROM (SELECT f.user_id, f.item_id FROM like_fact f
             WHERE f.user_id = p_account AND f.liked AND f.item_id > coalesce(e.cursor_id, '')
             ORDER BY f.item_id LIMIT p_limit FOR UPDATE) t;
    v_picked := coalesce(cardinality(v_users), 0);
    IF v_picked > 0 THEN
      v_facts := erasure_unlike(v_users, v_items, p_partitions);
    END IF;
  WHEN 'following', 'followers' THEN
    -- Follows and follow requests, each way, REMOVED as relation_write_event removes one (the
    -- projector consumes the events), by erasure_remove_relations: the pair rows are locked
    -- here, the sequence rows of their followees' partitions only after the pair rows are written.
    IF e.phase = 'following' THEN
      SELECT array_agg(t.follower ORDER BY t.followee), array_agg(t.followee ORDER BY t.followee), array_agg(t.version ORDER BY t.followee), max(t.followee)
        INTO v_users, v_items, v_versions, v_cursor
        FROM (SELECT r.follower, r.followee, r.version FROM relation r
               WHERE r.follower = p_account AND r.state <> 'REMOVED' AND r.followee > coalesce(e.cursor_id, '')
               ORDER BY r.followee LIMIT p_limit FOR UPDATE) t;
    ELSE
      -- Keyset on the follower too: the index entries of the rows earlier batches REMOVED are
      -- not walked again by every later batch.
      SELECT array_agg(t.follower ORDER BY t.follower), array_agg(t.followee ORDER BY t.follower), array_agg(t.version ORDER BY t.follower), max(t.follower)
        INTO v_users, v_items, v_versions, v_cursor
        FROM (SELECT r.follower, r.followee, r.version FROM relation r
               WHERE r.followee = p_account AND r.state IN ('ACTIVE', 'PENDING') AND r.follower > coalesce(e.cursor_id, '')
               ORDER BY r.follower LIMIT p_limit FOR UPDATE) t;
    END IF;
    v_picked := coalesce(cardinality(v_users), 0);
    IF v_picked > 0 THEN
      PERFORM erasure_remove_relations(v_users, v_items, v_versions, p_partitions);
    END IF;
    v_facts := v_picked;
  WHEN 'blocks' THEN
    -- The blocks it made. A block made against it is its blocker's decision and data: it stays,
    -- and the account, a tombstone, can never lift it. (The block outbox's trigger writes the
    -- deletions' events redacted: the account is ERASING.)
    WITH picked AS (
      SELECT b.blocker, b.blocked FROM block b WHERE b.blocker = p_account LIMIT p_limit),
    del AS (DELETE FROM block b USING picked WHERE b.blocker = picked.blocker AND b.blocked = picked.blocked RETURNING 1)
    SELECT count(*) INTO v_picked FROM del;
    v_facts := v_picked;
  END CASE;

  v_next := e.phase;
  IF v_picked < p_limit THEN
    v_next := CASE e.phase
      WHEN 'posts' THEN 'comments' WHEN 'comments' THEN 'post_likes' WHEN 'post_likes' THEN 'comment_likes'
      WHEN 'comment_likes' THEN 'likes' WHEN 'likes' THEN 'following' WHEN 'following' THEN 'followers'
      WHEN 'followers' THEN 'blocks' ELSE 'done' END;
    v_cursor := NULL;
  END IF;
  IF v_next = 'done' THEN
    -- A write whose statement began before the erasure was visible may have added a fact since.
    SELECT sum(r.n) INTO v_left FROM erasure_remaining(p_account) r;
    IF v_left > 0 THEN
      v_next := 'posts';
      UPDATE account_erasure a SET total = a.total + v_left WHERE a.account_id = p_account;
    ELSE
      UPDATE account SET erased_state = 'ERASED', private = false, hide_collections = false WHERE account_id = p_account;
      -- Its block history: who it blocked and who blocked it is no webhook's to replay.
      UPDATE webhook_block_event x SET blocker = NULL, blocked = NULL, state = 'ERASED' WHERE x.blocker = p_account;
      UPDATE webhook_block_event x SET blocker = NULL, blocked = NULL, state = 'ERASED' WHERE x.blocked = p_account;
    END IF;
  END IF;
  -- A batch's commit does not wait for its WAL flush (it would hold the sequence rows through
  -- it): a batch lost in a server crash is lost with its progress row, and WAL is flushed in
  -- order, so no later commit survives it; the erasure redoes it. The finish is flushed before
  -- it answers: an erasure reported done stays done.
  IF v_next <> 'done' THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  UPDATE account_erasure a SET phase = v_next, cursor_id = v_cursor, done = a.done + v_facts, batches = a.batches + 1,
         updated_at = now(), finished_at = CASE WHEN v_next = 'done' THEN now() END
   WHERE a.account_id = p_account;
  IF current_setting('ledger.test_hooks', true) = 'on' THEN
    PERFORM ledger_hook('erasure.beforeCommit', jsonb_build_object('account', p_account, 'phase', e.phase, 'facts', v_facts));
    PERFORM ledger_hook('erasure.beforeCommit.' || e.phase, jsonb_build_object('account', p_account, 'facts', v_facts));
  END IF;
  RETURN QUERY SELECT e.phase, v_facts, v_next,
    extract(epoch FROM clock_timestamp() - nullif(current_setting('ledger.erasure_sequences_at', true), '')::timestamptz)::double precision * 1000;
END
$function$;

CREATE OR REPLACE FUNCTION public.erasure_unlike(p_users text[], p_items text[], p_partitions integer)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_users text[];
  v_items text[];
  v_versions bigint[];
  v_parts integer[];
  v_events integer;
BEGIN
  WITH upd AS (
    UPDATE like_fact f SET liked = false, version = f.version + 1, changed_at = now()
      FROM unnest(p_users, p_items) AS x(user_id, item_id)
     WHERE f.user_id = x.user_id AND f.item_id = x.item_id AND f.liked
    RETURNING f.user_id, f.item_id, f.version, ledger_partition(f.user_id, p_partitions) AS part)
  SELECT array_agg(u.user_id ORDER BY u.part, u.user_id, u.item_id), array_agg(u.item_id ORDER BY u.part, u.user_id, u.item_id),
         array_agg(u.version ORDER BY u.part, u.user_id, u.item_id), array_agg(u.part ORDER BY u.part, u.user_id, u.item_id)
    INTO v_users, v_items, v_versions, v_parts
    FROM upd u;
  IF v_users IS NULL THEN
    RETURN 0;
  END IF;
  IF current_setting('ledger.test_hooks', true) = 'on' THEN
    PERFORM ledger_hook('erasure.beforeSequences', jsonb_build_object('seq', 'like_seq', 'parts', (SELECT jsonb_agg(DISTINCT x) FROM unnest(v_parts) AS x)));
  END IF;
  PERFORM 1 FROM like_seq s WHERE s.part IN (SELECT DISTINCT x FROM unnest(v_parts) AS x) ORDER BY s.part FOR UPDATE;
  PERFORM set_config('ledger.erasure_sequences_at', clock_timestamp()::text, true);
  WITH written AS (SELECT * FROM unnest(v_users, v_items, v_versions, v_parts) AS x(user_id, item_id, version, part)),
  numbered AS (SELECT w.*, row_number() OVER (PARTITION BY w.part ORDER BY w.user_id, w.item_id) AS k FROM written w),
  moved AS (
    UPDATE like_seq q SET last = q.last + c.n FROM (SELECT w.part, count(*) AS n FROM written w GROUP BY w.part) c
     WHERE q.part = c.part RETURNING q.part, q.last, c.n),
  ev AS (
    INSERT INTO like_outbox (part, seq, user_id, item_id, delta, version)
    SELECT nb.part, m.last - m.n + nb.k, nb.user_id, nb.item_id, -1, nb.version FROM numbered nb JOIN moved m USING (part)
    RETURNING 1)
  SELECT count(*) INTO v_events FROM ev;
  RETURN v_events;
END
$function$;

CREATE OR REPLACE FUNCTION public.erasure_writing()
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$ SELECT coalesce(current_setting('ledger.erasure', true), '') <> '' $function$;

CREATE OR REPLACE FUNCTION public.feed_audit(p_max integer)
 RETURNS TABLE(readers integer, extra integer, missing integer, over_cap integer, below_horizon integer, explained_by_pending integer, lag integer)
 LANGUAGE sql
 STABLE
AS $function$
  SELECT * FROM feed_audit_readers(
    ARRAY(SELECT i.reader FROM feed_inbox i
          UNION SELECT r.follower FROM relation r WHERE r.state = 'ACTIVE'
          UNION SELECT p.author FROM post p WHERE p.deleted_at IS NULL),
    p_max)
$function$;

CREATE OR REPLACE FUNCTION public.feed_audit_readers(p_readers text[], p_max integer)
 RETURNS TABLE(readers integer, extra integer, missing integer, over_cap integer, below_horizon integer, explained_by_pending integer, lag integer)
 LANGUAGE sql
 STABLE
AS $function$
  WITH rd AS (SELECT DISTINCT x AS reader FROM unnest(p_readers) AS x WHERE x IS NOT NULL),
  -- The accounts whose posts can be in a reader's truth: those it follows ACTIVE, and itself.
  authors AS (
    SELECT rd.reader, r.followee AS author FROM rd JOIN relation r ON r.follower = rd.reader AND r.state = 'ACTIVE'
    UNION SELECT rd.reader, rd.reader FROM rd),
  above AS MATERIALIZED (
    SELECT t.* FROM authors a LEFT JOIN feed_reader h ON h.reader = a.reader CROSS JOIN LATERAL (
      SELECT t.reader, t.post_id, t.author, t.at FROM feed_truth t
       WHERE t.reader = a.reader AND t.author = a.author
         AND (h.horizon_at IS NULL OR (t.at, t.post_id) > (h.horizon_at, h.horizon_id))
      OFFSET 0) t),
  -- Readers with an event not applied yet that can change their inbox: a post event of an author
  -- in their truth's authors, or a relation event of theirs. At the cap, such an event moves the
  -- cut: a new post pending pushes the inbox's oldest row out of the truth's newest cap (extra), a
  -- deletion pending pulls an older one in (missing). Those rows are lag, not lies.
  -- The pending events are read from each partition's range above the feed's watermark (the
  -- outboxes' primary keys), a few rows under lag, before they are matched with the readers.
  pending_authors AS MATERIALIZED (
    SELECT DISTINCT o.author FROM feed_post_watermark w
      JOIN post_outbox o ON o.part = w.part AND o.seq > w.applied_upto
     WHERE NOT EXISTS (SELECT 1 FROM feed_post_seen s WHERE s.part = o.part AND s.seq = o.seq)),
  pending_followers AS MATERIALIZED (
    SELECT DISTINCT o.follower FROM feed_relation_watermark w
      JOIN relation_event o ON o.part = w.part AND o.seq > w.applied_upto
     WHERE NOT EXISTS (SELECT 1 FROM feed_relation_seen s WHERE s.part = o.part AND s.seq = o.seq)),
  lagging AS (
    SELECT a.reader FROM authors a JOIN pending_authors p ON p.author = a.author
    UNION
    SELECT rd.reader FROM rd JOIN pending_followers f ON f.follower = rd.reader),
  ranked AS (SELECT a.*, row_number() OVER (PARTITION BY a.reader ORDER BY a.at DESC, a.post_id DESC) AS rn FROM above a),
  truth AS (SELECT reader, post_id, author FROM ranked WHERE rn <= p_max),
  inbox AS MATERIALIZED (
    SELECT i.* FROM rd CROSS JOIN LATERAL (
      SELECT i.reader, i.post_id, i.author, i.at FROM feed_inbox i WHERE i.reader = rd.reader OFFSET 0) i),
  diff AS (
    SELECT coalesce(t.reader, i.reader) AS reader, coalesce(t.post_id, i.post_id) AS post_id,
           coalesce(t.author, i.author) AS author, t.reader IS NULL AS extra
      FROM truth t FULL JOIN inbox i ON i.reader = t.reader AND i.post_id = t.post_id
     WHERE t.reader IS NULL OR i.reader IS NULL),
  judged AS (
    SELECT d.extra,
           EXISTS (SELECT 1 FROM feed_reader f WHERE f.reader = d.reader AND f.skipped_since IS NOT NULL)
             AND (NOT d.extra OR EXISTS (SELECT 1 FROM above a WHERE a.reader = d.reader AND a.post_id = d.post_id)) AS skipped,
           EXISTS (SELECT 1 FROM post_outbox o JOIN feed_post_watermark w USING (part)
                    WHERE o.post_id = d.post_id AND o.seq > w.applied_upto
                      AND NOT EXISTS (SELECT 1 FROM feed_post_seen s WHERE s.part = o.part AND s.seq = o.seq))
        OR EXISTS (SELECT 1 FROM relation_event o JOIN feed_relation_watermark w USING (part)
                    WHERE o.follower = d.reader AND o.followee = d.author AND o.seq > w.applied_upto
                      AND NOT EXISTS (SELECT 1 FROM feed_relation_seen s WHERE s.part = o.part AND s.seq = o.seq))
        OR EXISTS (SELECT 1 FROM lagging l WHERE l.reader = d.reader) AS pending
      FROM diff d)
  SELECT (SELECT count(DISTINCT reader) FROM (SELECT reader FROM inbox UNION SELECT reader FROM truth) r)::int,
         count(*) FILTER (WHERE extra AND NOT pending AND NOT skipped)::int,
         count(*) FILTER (WHERE NOT extra AND NOT pending AND NOT skipped)::int,
         (SELECT count(*) FROM (SELECT 1 FROM inbox GROUP BY reader HAVING count(*) > p_max) o)::int,
         (SELECT count(*) FROM inbox i JOIN feed_reader h ON h.reader = i.reader
           WHERE (i.at, i.post_id) <= (h.horizon_at, h.horizon_id))::int,
         count(*) FILTER (WHERE pending AND NOT skipped)::int,
         ((SELECT coalesce(sum(s.last - w.applied_upto), 0) FROM post_seq s JOIN feed_post_watermark w USING (part))
        + (SELECT coalesce(sum(s.last - w.applied_upto), 0) FROM event_seq s JOIN feed_relation_watermark w USING (part)))::int
    FROM judged
$function$;

CREATE OR REPLACE FUNCTION public.feed_entry_visible(p_reader text, p_author text, p_visibility text, p_part integer, p_token bigint, p_deleted_at timestamp with time zone)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
  SELECT p_deleted_at IS NULL AND (p_reader = p_author OR (
    EXISTS (SELECT 1 FROM relation r WHERE r.follower = p_reader AND r.followee = p_author AND r.state = 'ACTIVE')
    AND post_readable(p_reader, p_author, p_visibility, p_part, p_token, 'CONTENT_TOKEN')))
$function$;

CREATE OR REPLACE FUNCTION public.feed_hot_followees(p_reader text)
 RETURNS text[]
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
  RETURN (SELECT coalesce(array_agg(h.author ORDER BY h.author), '{}')
            FROM feed_hot_author h JOIN relation r ON r.follower = p_reader AND r.followee = h.author AND r.state = 'ACTIVE');
END
$function$;

CREATE OR REPLACE FUNCTION public.feed_hot_transition_plan(p_heated text[], p_cooled text[], p_max integer)
 RETURNS TABLE(op text, reader text, post_id text, author text)
 LANGUAGE sql
 STABLE
AS $function$
  SELECT 'remove', i.reader, i.post_id, i.author
    FROM unnest(p_heated) AS a(author)
    JOIN relation r ON r.followee = a.author AND r.state = 'ACTIVE'
    JOIN feed_inbox i ON i.reader = r.follower AND i.author = a.author
  UNION ALL
  SELECT 'add', r.follower, t.post_id, t.author
    FROM unnest(p_cooled) AS a(author)
    JOIN relation r ON r.followee = a.author AND r.state = 'ACTIVE'
    CROSS JOIN LATERAL (
      SELECT t.post_id, t.author FROM feed_truth t
       WHERE t.reader = r.follower AND t.author = a.author ORDER BY t.at DESC, t.post_id DESC LIMIT p_max) t
$function$;

CREATE OR REPLACE FUNCTION public.feed_install_reader(p_reader text, p_max integer)
 RETURNS TABLE(added integer, removed integer)
 LANGUAGE sql
AS $function$
  WITH truth AS (
    SELECT t.post_id, t.author, t.at, row_number() OVER (ORDER BY t.at DESC, t.post_id DESC) AS rn
      FROM feed_truth t WHERE t.reader = p_reader),
  keep AS (SELECT * FROM truth WHERE rn <= p_max),
  cut AS (SELECT at, post_id FROM truth WHERE rn = p_max + 1),
  removed AS (
    DELETE FROM feed_inbox i WHERE i.reader = p_reader AND NOT EXISTS (SELECT 1 FROM keep k WHERE k.post_id = i.post_id)
    RETURNING 1),
  added AS (
    INSERT INTO feed_inbox (reader, post_id, author, at) SELECT p_reader, k.post_id, k.author, k.at FROM keep k ORDER BY k.post_id
    ON CONFLICT DO NOTHING RETURNING 1),
  horizon AS (
    UPDATE feed_reader SET horizon_at = (SELECT at FROM cut), horizon_id = (SELECT post_id FROM cut) WHERE reader = p_reader
    RETURNING 1)
  SELECT (SELECT count(*) FROM added)::int, (SELECT count(*) FROM removed)::int FROM (SELECT count(*) FROM horizon) h
$function$;

CREATE OR REPLACE FUNCTION public.feed_judge_hot_authors(p_authors text[], p_threshold integer)
 RETURNS TABLE(author text, hot boolean)
 LANGUAGE sql
AS $function$
  WITH judged AS (
    SELECT a.author, coalesce((SELECT c.n FROM proj_count c WHERE c.followee = a.author), 0) >= p_threshold AS hot,
           EXISTS (SELECT 1 FROM feed_hot_author h WHERE h.author = a.author) AS was_hot
      FROM (SELECT DISTINCT x AS author FROM unnest(p_authors) AS x) a),
  heated AS (
    INSERT INTO feed_hot_author (author) SELECT j.author FROM judged j WHERE j.hot AND NOT j.was_hot ORDER BY 1
    ON CONFLICT DO NOTHING RETURNING feed_hot_author.author),
  cooled AS (
    DELETE FROM feed_hot_author h USING judged j WHERE h.author = j.author AND NOT j.hot RETURNING h.author)
  SELECT heated.author, true FROM heated
  UNION ALL
  SELECT cooled.author, false FROM cooled
$function$;

CREATE OR REPLACE FUNCTION public.feed_reader_truth(p_reader text, p_max integer)
 RETURNS TABLE(post_id text, author text, at timestamp with time zone)
 LANGUAGE sql
 STABLE
AS $function$
  SELECT t.post_id, t.author, t.at
    FROM feed_truth t LEFT JOIN feed_reader h ON h.reader = p_reader
   WHERE t.reader = p_reader AND (h.horizon_at IS NULL OR (t.at, t.post_id) > (h.horizon_at, h.horizon_id))
   ORDER BY t.at DESC, t.post_id DESC
   LIMIT p_max
$function$;

CREATE OR REPLACE FUNCTION public.feed_return_reader(p_reader text, p_max integer)
 RETURNS TABLE(rebuilt boolean, added integer, removed integer)
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_skipped boolean;
BEGIN
  SELECT f.skipped_since IS NOT NULL INTO v_skipped FROM feed_reader f WHERE f.reader = p_reader;
  IF v_skipped THEN
    SELECT i.added, i.removed INTO added, removed FROM feed_install_reader(p_reader, p_max) i;
  ELSE
    added := 0;
    removed := 0;
  END IF;
  UPDATE feed_reader f SET last_read_at = now(), skipped_since = NULL WHERE f.reader = p_reader;
  rebuilt := coalesce(v_skipped, false);
  RETURN NEXT;
END
$function$;

CREATE OR REPLACE FUNCTION public.feed_skip_absent(p_readers text[], p_absent_ms bigint)
 RETURNS TABLE(reader text)
 LANGUAGE sql
AS $function$
  WITH marked AS (
    UPDATE feed_reader f SET skipped_since = now()
     WHERE f.reader = ANY (p_readers) AND f.skipped_since IS NULL
       AND f.last_read_at < now() - make_interval(secs => p_absent_ms / 1000.0)
    RETURNING f.reader)
  SELECT m.reader FROM marked m
  UNION ALL
  SELECT f.reader FROM feed_reader f WHERE f.reader = ANY (p_readers) AND f.skipped_since IS NOT NULL
$function$;

CREATE OR REPLACE FUNCTION public.item_state(p_reader text, p_item text, p_mode text)
 RETURNS text
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
  v_kind text;
  v_post record;
  v_comment record;
BEGIN
  SELECT i.kind INTO v_kind FROM item i WHERE i.item_id = p_item;
  IF NOT FOUND THEN
    RETURN 'MISSING';
  END IF;
  CASE v_kind
    WHEN 'plain' THEN
      RETURN 'VISIBLE';
    WHEN 'post' THEN
      SELECT p.author, p.visibility, p.part, p.acl_token INTO v_post FROM post p WHERE p.post_id = p_item AND p.deleted_at IS NULL;
      IF NOT FOUND THEN
        RETURN 'MISSING';
      END IF;
      RETURN CASE WHEN post_readable(p_reader, v_post.author, v_post.visibility, v_post.part, v_post.acl_token, p_mode) THEN 'VISIBLE' ELSE 'HIDDEN' END;
    WHEN 'comment' THEN
      SELECT c.author AS comment_author, c.acl_token, p.author, p.visibility, p.part INTO v_comment
        FROM comment c JOIN post p ON p.post_id = c.post_id
       WHERE c.comment_id = p_item AND c.deleted_at IS NULL AND p.deleted_at IS NULL;
      IF NOT FOUND THEN
        RETURN 'MISSING';
      END IF;
      RETURN CASE
        WHEN post_readable(p_reader, v_comment.author, v_comment.visibility, v_comment.part, v_comment.acl_token, p_mode)
         AND (p_reader IS NULL OR NOT relation_blocked_either_way(p_reader, v_comment.comment_author))
        THEN 'VISIBLE' ELSE 'HIDDEN' END;
    ELSE
      RETURN 'MISSING';
  END CASE;
END
$function$;

CREATE OR REPLACE FUNCTION public.ledger_hook(p_point text, p_context jsonb)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_key integer;
BEGIN
  IF current_setting('ledger.test_hooks', true) IS DISTINCT FROM 'on' THEN
    RETURN;
  END IF;
  v_key := hashtext(p_point);
  -- Not armed: nobody holds the point's lock exclusively. Nothing is kept.
  IF pg_try_advisory_lock_shared(1752133483, v_key) THEN
    PERFORM pg_advisory_unlock_shared(1752133483, v_key);
    RETURN;
  END IF;
  -- Armed, and another transaction is parked here already: pass.
  IF NOT pg_try_advisory_xact_lock(1752133484, v_key) THEN
    RETURN;
  END IF;
  RAISE NOTICE USING MESSAGE = 'ledger_hook ' || p_point,
    DETAIL = (p_context || jsonb_build_object('pid', pg_backend_pid()))::text;
  PERFORM pg_advisory_xact_lock_shared(1752133483, v_key);
END
$function$;

CREATE OR REPLACE FUNCTION public.ledger_partition(key text, partitions integer)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$ SELECT (('x' || substr(md5(key), 1, 8))::bit(32)::bigint % partitions)::integer $function$;

CREATE OR REPLACE FUNCTION public.ledger_timeline()
 RETURNS integer
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
  SELECT CASE WHEN pg_is_in_recovery() THEN (SELECT timeline_id FROM pg_control_checkpoint())
              ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END
$function$;

CREATE OR REPLACE FUNCTION public.ledger_timeline_history(present integer)
 RETURNS TABLE(timeline integer, switched_at pg_lsn)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
  SELECT (line.m[1])::integer, (line.m[2])::pg_lsn
  FROM regexp_matches(
         coalesce(pg_read_file('pg_wal/' || upper(lpad(to_hex(present), 8, '0')) || '.history', true), ''),
         '^\s*([0-9]+)\s+([0-9A-Fa-f]+/[0-9A-Fa-f]+)', 'gn') AS line(m)
  WHERE present > 1
$function$;

CREATE OR REPLACE FUNCTION public.like_erasure_refusal(p_user text, p_item text)
 RETURNS text
 LANGUAGE sql
 STABLE
AS $function$
  SELECT CASE
    WHEN EXISTS (SELECT 1 FROM account_erasure e WHERE e.account_id = p_user AND e.finished_at IS NULL) THEN p_user
    ELSE (SELECT e.account_id FROM account_erasure e
           WHERE e.finished_at IS NULL
             AND e.account_id = coalesce((SELECT p.author FROM post p WHERE p.post_id = p_item),
                                         (SELECT c.author FROM comment c WHERE c.comment_id = p_item)))
  END
$function$;

CREATE OR REPLACE FUNCTION public.like_set(p_user text, p_item text, p_want boolean, p_part integer)
 RETURNS TABLE(outcome text, liked boolean, version bigint, seq bigint, code text, account text)
 LANGUAGE sql
AS $function$
  SELECT b.outcome, b.liked, b.version, b.seq, b.code, b.account
    FROM like_set_batch(ARRAY[p_user], ARRAY[p_item], ARRAY[p_want], ARRAY[p_part], ARRAY[false]) b
$function$;

CREATE OR REPLACE FUNCTION public.like_set_batch(p_users text[], p_items text[], p_wants boolean[], p_parts integer[], p_checked boolean[])
 RETURNS TABLE(ord integer, outcome text, liked boolean, version bigint, seq bigint, code text, account text)
 LANGUAGE plpgsql
AS $function$
DECLARE
  n            integer := coalesce(cardinality(p_users), 0);
  -- Per write: NULL (to decide), 'REJECTED'; its answer.
  o_outcome    text[] := array_fill(NULL::text, ARRAY[n]);
  o_liked      boolean[] := array_fill(false, ARRAY[n]);
  o_version    bigint[] := array_fill(0::bigint, ARRAY[n]);
  o_seq        bigint[] := array_fill(0::bigint, ARRAY[n]);
  o_code       text[] := array_fill(NULL::text, ARRAY[n]);
  o_account    text[] := array_fill(NULL::text, ARRAY[n]);
  -- An unlike on a HIDDEN item: allowed only while the pair is liked (decided in apply order).
  v_if_liked   boolean[] := array_fill(false, ARRAY[n]);
  v_erasing    boolean := EXISTS (SELECT 1 FROM account_erasure WHERE finished_at IS NULL) AND NOT erasure_writing();
  v_erased     text[];
  v_state      text;
  v_who        text;
  v_pair       record;
  v_found      boolean;
  cur_liked    boolean;
  cur_version  bigint;
  new_liked    boolean;
  new_version  bigint;
  v_changes    integer;
  v_item_known boolean;
  i            integer;
  k            integer;
  v_part       record;
  v_next       bigint;
  v_last_ord   integer := 0;
BEGIN
  IF cardinality(p_items) IS DISTINCT FROM n OR cardinality(p_wants) IS DISTINCT FROM n
     OR cardinality(p_parts) IS DISTINCT FROM n OR cardinality(p_checked) IS DISTINCT FROM n THEN
    RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'like_set_batch: the five arrays must have the same length';
  END IF;
  IF n = 0 THEN
    RETURN;
  END IF;

  v_erased := ARRAY(SELECT a.account_id FROM account a WHERE a.account_id = ANY (p_users) AND a.erased_state = 'ERASED' AND NOT erasure_writing());
  -- What each write may do, decided before any lock, as like_set_if_visible and the erasure guard do.
  FOR i IN 1 .. n LOOP
    IF p_users[i] = ANY (v_erased) THEN
      o_outcome[i] := 'REJECTED'; o_code[i] := 'ACCOUNT_ERASED'; o_account[i] := p_users[i];
      CONTINUE;
    END IF;
    IF p_checked[i] THEN
      v_state := item_state(p_users[i], p_items[i], 'TRUTH');
      IF v_state = 'MISSING'
         OR (v_state = 'HIDDEN' AND (p_wants[i] OR NOT EXISTS (SELECT 1 FROM like_fact f WHERE f.user_id = p_users[i] AND f.item_id = p_items[i] AND f.liked))) THEN
        o_outcome[i] := 'REJECTED'; o_code[i] := 'ITEM_NOT_FOUND';
        CONTINUE;
      END IF;
      v_if_liked[i] := v_state = 'HIDDEN';
    END IF;
    IF v_erasing THEN
      v_who := like_erasure_refusal(p_users[i], p_items[i]);
      IF v_who IS NOT NULL THEN
        o_outcome[i] := 'REJECTED'; o_code[i] := 'ACCOUNT_BEING_ERASED'; o_account[i] := v_who;
      END IF;
    END IF;
  END LOOP;

  PERFORM set_config('ledger.like_guarded', 'on', true);
  -- Each pair once, in the global order; its writes applied in arrival order.
  FOR v_pair IN
    SELECT w.user_id, w.item_id, array_agg(w.ord ORDER BY w.ord) AS ords, bool_and(w.checked) AS all_checked
      FROM unnest(p_users, p_items, o_outcome, p_checked) WITH ORDINALITY AS w(user_id, item_id, decided, checked, ord)
     WHERE w.decided IS NULL
     GROUP BY w.user_id, w.item_id
     ORDER BY w.item_id COLLATE "C", w.user_id COLLATE "C"
  LOOP
    IF cardinality(v_pair.ords) = 1 THEN
      -- One write of this pair: it changes the row iff the row's newest committed state differs
      -- from what it wants (an existing row also proves the item exists; an unlike on a HIDDEN
      -- item changes only a liked row, which is this condition too).
      i := v_pair.ords[1];
      UPDATE like_fact f SET liked = p_wants[i], version = f.version + 1, changed_at = now()
       WHERE f.user_id = v_pair.user_id AND f.item_id = v_pair.item_id AND f.liked <> p_wants[i]
      RETURNING f.version INTO new_version;
      IF FOUND THEN
        o_outcome[i] := 'CHANGED'; o_liked[i] := p_wants[i]; o_version[i] := new_version;
        CONTINUE;
      END IF;
    END IF;
    <<apply>>
    LOOP
      SELECT f.liked, f.version INTO cur_liked, cur_version
        FROM like_fact f WHERE f.user_id = v_pair.user_id AND f.item_id = v_pair.item_id;
      v_found := FOUND;
      v_item_known := v_found OR v_pair.all_checked;
      IF NOT v_found THEN
        cur_liked := false; cur_version := 0;
        IF NOT v_item_known THEN
          v_item_known := EXISTS (SELECT 1 FROM item it WHERE it.item_id = v_pair.item_id);
        END IF;
      END IF;
      new_liked := cur_liked; new_version := cur_version; v_changes := 0;
      FOREACH i IN ARRAY v_pair.ords LOOP
        IF NOT v_item_known AND NOT p_checked[i] THEN
          o_outcome[i] := 'REJECTED'; o_code[i] := 'ITEM_NOT_FOUND';
        ELSIF v_if_liked[i] AND NOT new_liked THEN
          o_outcome[i] := 'REJECTED'; o_code[i] := 'ITEM_NOT_FOUND';
        ELSIF p_wants[i] = new_liked THEN
          o_outcome[i] := 'NOOP'; o_liked[i] := new_liked; o_version[i] := new_version;
        ELSE
          new_liked := p_wants[i]; new_version := new_version + 1; v_changes := v_changes + 1;
          o_outcome[i] := 'CHANGED'; o_liked[i] := new_liked; o_version[i] := new_version;
        END IF;
      END LOOP;
      -- Nothing to change: answered from the committed row just read, no lock taken, nothing written.
      EXIT apply WHEN v_changes = 0;
      IF v_found THEN
        UPDATE like_fact f SET liked = new_liked, version = new_version, changed_at = now()
         WHERE f.user_id = v_pair.user_id AND f.item_id = v_pair.item_id
           AND f.liked = cur_liked AND f.version = cur_version;
      ELSE
        -- A new pair is written once, in its final state (migration 008's first write).
        INSERT INTO like_fact (user_id, item_id, liked, version) VALUES (v_pair.user_id, v_pair.item_id, new_liked, new_version)
          ON CONFLICT DO NOTHING;
      END IF;
      EXIT apply WHEN FOUND;
      -- Another transaction changed or created the pair and has committed: decide again from its row.
    END LOOP apply;
  END LOOP;
  PERFORM set_config('ledger.like_guarded', '', true);

  -- The numbers: one update per partition, ascending, each taking that partition's count at once.
  FOR v_part IN
    SELECT w.part, count(*) AS n FROM unnest(p_parts, o_outcome) AS w(part, outcome)
     WHERE w.outcome = 'CHANGED' GROUP BY w.part ORDER BY w.part
  LOOP
    UPDATE like_seq s SET last = s.last + v_part.n WHERE s.part = v_part.part RETURNING s.last - v_part.n INTO v_next;
    FOR i IN 1 .. n LOOP
      IF o_outcome[i] = 'CHANGED' AND p_parts[i] = v_part.part THEN
        v_next := v_next + 1;
        o_seq[i] := v_next;
        v_last_ord := greatest(v_last_ord, i);
      END IF;
    END LOOP;
  END LOOP;

  IF v_last_ord > 0 THEN
    INSERT INTO like_outbox (part, seq, user_id, item_id, delta, version)
    SELECT w.part, w.seq, w.user_id, w.item_id, CASE WHEN w.liked THEN 1 ELSE -1 END, w.version
      FROM unnest(p_parts, o_seq, p_users, p_items, o_liked, o_version, o_outcome) AS w(part, seq, user_id, item_id, liked, version, outcome)
     WHERE w.outcome = 'CHANGED';
    IF current_setting('ledger.test_hooks', true) = 'on' THEN
      -- Once per batch, with every lock held. The context is the batch's first event's: its seq is
      -- one above the committed last of its partition, its version one above its pair's committed one.
      k := array_position(o_outcome, 'CHANGED');
      PERFORM ledger_hook('like.beforeCommit', jsonb_build_object(
        'userId', p_users[k], 'itemId', p_items[k], 'part', p_parts[k], 'seq', o_seq[k], 'version', o_version[k],
        'events', (SELECT count(*) FROM unnest(o_outcome) AS x(o) WHERE x.o = 'CHANGED')));
    END IF;
  END IF;

  RETURN QUERY SELECT w.ord::integer, w.outcome, w.liked, w.version, w.seq, w.code, w.account
    FROM unnest(o_outcome, o_liked, o_version, o_seq, o_code, o_account) WITH ORDINALITY AS w(outcome, liked, version, seq, code, account, ord);
END
$function$;

CREATE OR REPLACE FUNCTION public.like_set_if_visible(p_user text, p_item text, p_want boolean, p_part integer)
 RETURNS TABLE(outcome text, liked boolean, version bigint, seq bigint, code text, account text)
 LANGUAGE sql
AS $function$
  SELECT b.outcome, b.liked, b.version, b.seq, b.code, b.account
    FROM like_set_batch(ARRAY[p_user], ARRAY[p_item], ARRAY[p_want], ARRAY[p_part], ARRAY[true]) b
$function$;

CREATE OR REPLACE FUNCTION public.notification_comment_recipients(p_comment text, p_author text, p_post_author text, p_parent text)
 RETURNS TABLE(recipient text, type text)
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
  SELECT DISTINCT ON (r.recipient) r.recipient, r.type FROM (
    SELECT p_post_author AS recipient, 'comment'::text AS type, 1 AS rank
    UNION ALL
    SELECT pc.author, 'reply', 2 FROM comment pc WHERE pc.comment_id = p_parent
    UNION ALL
    SELECT m.account, 'mention', 3 FROM mention m WHERE m.item_id = p_comment) r
   WHERE r.recipient <> p_author
   ORDER BY r.recipient, r.rank
$function$;

CREATE OR REPLACE FUNCTION public.notification_group_key(p_type text, p_item text, p_at timestamp with time zone, p_id text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT CASE p_type
    WHEN 'like' THEN 'like-' || p_item || '-' || floor(extract(epoch FROM p_at) / 43200)::bigint::text
    WHEN 'follow' THEN 'follow-' || floor(extract(epoch FROM p_at) / 43200)::bigint::text
    ELSE 'ungrouped-' || p_id
  END
$function$;

CREATE OR REPLACE FUNCTION public.notification_id(p_at timestamp with time zone, p_source text, p_actor text, p_subject text, p_version bigint)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT lpad(floor(extract(epoch FROM p_at) * 1000000)::bigint::text, 16, '0') || '-'
      || substr(md5(p_source || '/' || p_actor || '/' || p_subject || '/' || p_version::text), 1, 12)
$function$;

CREATE OR REPLACE FUNCTION public.post_readable(p_reader text, p_author text, p_visibility text, p_part integer, p_token bigint, p_mode text)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
  SELECT CASE
    WHEN p_reader IS NOT NULL AND p_reader = p_author THEN true
    WHEN p_visibility = 'PUBLIC' THEN p_reader IS NULL OR NOT relation_blocked_either_way(p_reader, p_author)
    WHEN p_visibility <> 'FOLLOWERS' OR p_reader IS NULL THEN false
    WHEN p_mode = 'TRUTH' THEN EXISTS (SELECT 1 FROM relation r WHERE r.follower = p_reader AND r.followee = p_author AND r.state = 'ACTIVE')
    WHEN p_mode = 'PROJECTION_ONLY'
      OR (SELECT w.applied_upto FROM proj_watermark w WHERE w.part = p_part)
         >= CASE WHEN p_mode = 'CONTENT_TOKEN' THEN p_token ELSE (SELECT s.last FROM event_seq s WHERE s.part = p_part) END
      THEN EXISTS (SELECT 1 FROM proj_follower f WHERE f.followee = p_author AND f.follower = p_reader AND f.state = 'ACTIVE')
    ELSE EXISTS (SELECT 1 FROM relation r WHERE r.follower = p_reader AND r.followee = p_author AND r.state = 'ACTIVE')
  END
$function$;

CREATE OR REPLACE FUNCTION public.post_write_event()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_seq bigint;
BEGIN
  UPDATE post_seq SET last = last + 1 WHERE part = NEW.part RETURNING last INTO v_seq;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'post_seq has no row for partition %: the ledger is not initialised', NEW.part;
  END IF;
  INSERT INTO post_outbox (part, seq, post_id, author, kind, version)
  VALUES (NEW.part, v_seq, NEW.post_id, NEW.author,
          CASE WHEN TG_OP = 'INSERT' THEN 'created' ELSE 'deleted' END, CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE 2 END);
  RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION public.relation_block(p_blocker text, p_blocked text, p_partitions integer)
 RETURNS TABLE(outcome text, state text, version bigint, seq bigint, reason text, code text)
 LANGUAGE plpgsql
AS $function$
DECLARE
  -- Both rows in (follower, followee) order, byte-wise like the caller's, the same for every transaction.
  v_first_is_blocker boolean := p_blocker COLLATE "C" < p_blocked COLLATE "C";
  v_f1 text := CASE WHEN v_first_is_blocker THEN p_blocker ELSE p_blocked END;
  v_e1 text := CASE WHEN v_first_is_blocker THEN p_blocked ELSE p_blocker END;
  cur1 record;
  cur2 record;
  v_inserted integer;
  v_state text;
  v_version bigint;
  v_seq bigint := 0;
  v_new_seq bigint;
  v_change record;
BEGIN
  SELECT * INTO cur1 FROM relation_lock_pair(v_f1, v_e1);
  SELECT * INTO cur2 FROM relation_lock_pair(v_e1, v_f1);
  IF current_setting('ledger.test_hooks', true) = 'on' THEN
    PERFORM ledger_hook('block.afterLock', jsonb_build_object('blocker', p_blocker, 'blocked', p_blocked));
  END IF;
  INSERT INTO block (blocker, blocked) VALUES (p_blocker, p_blocked) ON CONFLICT DO NOTHING;
  GET DIAGNOSTICS v_inserted = ROW_COUNT;
  -- The blocked user's follow of the blocker, as it is before any change.
  IF v_first_is_blocker THEN
    v_state := cur2.state; v_version := cur2.version;
  ELSE
    v_state := cur1.state; v_version := cur1.version;
  END IF;
  FOR v_change IN
    SELECT c.follower, c.followee, c.cur_version
      FROM (VALUES (1, v_f1, v_e1, cur1.state, cur1.version), (2, v_e1, v_f1, cur2.state, cur2.version))
           AS c(ord, follower, followee, cur_state, cur_version)
     WHERE c.cur_state <> 'REMOVED'
     ORDER BY ledger_partition(c.followee, p_partitions), c.ord
  LOOP
    v_new_seq := relation_write_event(v_change.follower, v_change.followee, 'REMOVED', v_change.cur_version + 1, p_partitions);
    IF v_change.follower = p_blocked THEN
      v_state := 'REMOVED'; v_version := v_change.cur_version + 1;
    END IF;
    v_seq := greatest(v_seq, v_new_seq);
  END LOOP;
  IF current_setting('ledger.test_hooks', true) = 'on' THEN
    PERFORM ledger_hook('block.beforeCommit', jsonb_build_object('blocker', p_blocker, 'blocked', p_blocked, 'seq', v_seq));
  END IF;
  IF v_inserted = 0 AND v_seq = 0 THEN
    RETURN QUERY SELECT 'NOOP', v_state, v_version, 0::bigint, 'already blocked', NULL::text;
    RETURN;
  END IF;
  RETURN QUERY SELECT 'CHANGED', v_state, v_version, v_seq, 'blocked', NULL::text;
END
$function$;

CREATE OR REPLACE FUNCTION public.relation_blocked_either_way(p_a text, p_b text)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
  SELECT EXISTS (SELECT 1 FROM block WHERE (blocker = p_a AND blocked = p_b) OR (blocker = p_b AND blocked = p_a))
$function$;

CREATE OR REPLACE FUNCTION public.relation_decide(p_followee text, p_follower text, p_approve boolean, p_partitions integer)
 RETURNS TABLE(outcome text, state text, version bigint, seq bigint, reason text, code text)
 LANGUAGE sql
AS $function$
  SELECT b.outcome, b.state, b.version, b.seq, b.reason, b.code
    FROM relation_set_batch(ARRAY['decide'], ARRAY[p_followee], ARRAY[p_follower], ARRAY[p_approve], p_partitions) b
$function$;

CREATE OR REPLACE FUNCTION public.relation_follow(p_follower text, p_followee text, p_partitions integer)
 RETURNS TABLE(outcome text, state text, version bigint, seq bigint, reason text, code text)
 LANGUAGE sql
AS $function$
  SELECT b.outcome, b.state, b.version, b.seq, b.reason, b.code
    FROM relation_set_batch(ARRAY['follow'], ARRAY[p_follower], ARRAY[p_followee], ARRAY[NULL::boolean], p_partitions) b
$function$;

CREATE OR REPLACE FUNCTION public.relation_lock_pair(p_follower text, p_followee text, OUT state text, OUT version bigint)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
BEGIN
  INSERT INTO relation (follower, followee, state, version) VALUES (p_follower, p_followee, 'REMOVED', 0)
    ON CONFLICT DO NOTHING;
  SELECT r.state, r.version INTO state, version
    FROM relation r WHERE r.follower = p_follower AND r.followee = p_followee FOR UPDATE;
END
$function$;

CREATE OR REPLACE FUNCTION public.relation_pair_refusal(p_follower text, p_followee text, p_a text, p_b text, OUT code text, OUT account text, OUT missing text)
 RETURNS record
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
  v_hit record;
BEGIN
  IF NOT erasure_writing() THEN
    SELECT a.account_id, a.erased_state INTO v_hit
      FROM unnest(ARRAY[p_follower, p_followee]) WITH ORDINALITY AS i(id, ord) JOIN account a ON a.account_id = i.id
     WHERE a.erased_state IS NOT NULL ORDER BY i.ord LIMIT 1;
    IF FOUND AND v_hit.erased_state = 'ERASING' THEN
      code := 'ACCOUNT_BEING_ERASED'; account := v_hit.account_id;
      RETURN;
    END IF;
    IF NOT FOUND AND (SELECT count(*) FROM account a WHERE a.account_id IN (p_follower, p_followee)) = 2 THEN
      RETURN;
    END IF;
  ELSIF (SELECT count(*) FROM account a WHERE a.account_id IN (p_follower, p_followee)) = 2 THEN
    RETURN;
  END IF;
  SELECT string_agg(i.id, ', ' ORDER BY i.ord) INTO missing
    FROM unnest(ARRAY[p_a, p_b]) WITH ORDINALITY AS i(id, ord)
   WHERE NOT EXISTS (SELECT 1 FROM account a WHERE a.account_id = i.id AND a.erased_state IS NULL);
  code := 'ACCOUNT_NOT_FOUND';
  missing := coalesce(missing, p_a || ', ' || p_b);
END
$function$;

CREATE OR REPLACE FUNCTION public.relation_set_batch(p_ops text[], p_as text[], p_bs text[], p_approves boolean[], p_partitions integer)
 RETURNS TABLE(ord integer, outcome text, state text, version bigint, seq bigint, reason text, code text, account text)
 LANGUAGE plpgsql
AS $function$
DECLARE
  n          integer := coalesce(cardinality(p_ops), 0);
  v_follower text[] := array_fill(NULL::text, ARRAY[n]);
  v_followee text[] := array_fill(NULL::text, ARRAY[n]);
  v_part     integer[] := array_fill(0, ARRAY[n]);
  -- Per write: which locked pair it is about (index into the pair arrays); its answer.
  v_pair_of  integer[] := array_fill(0, ARRAY[n]);
  o_outcome  text[] := array_fill(NULL::text, ARRAY[n]);
  o_state    text[] := array_fill('REMOVED'::text, ARRAY[n]);
  o_version  bigint[] := array_fill(0::bigint, ARRAY[n]);
  o_seq      bigint[] := array_fill(0::bigint, ARRAY[n]);
  o_reason   text[] := array_fill(NULL::text, ARRAY[n]);
  o_code     text[] := array_fill(NULL::text, ARRAY[n]);
  o_account  text[] := array_fill(NULL::text, ARRAY[n]);
  -- Per locked pair: ids, the state and version as locked, and as the batch's writes leave them.
  k_follower text[] := '{}';
  k_followee text[] := '{}';
  k_version0 bigint[] := '{}';
  k_state    text[] := '{}';
  k_version  bigint[] := '{}';
  v_refusal  record;
  v_pair     record;
  v_cur      record;
  v_target   text;
  v_k        integer;
  v_j        integer;
  v_parts    record;
  v_next     bigint;
  i          integer;
  v_hooks    boolean := current_setting('ledger.test_hooks', true) = 'on';
  v_hit      record;
BEGIN
  IF cardinality(p_as) IS DISTINCT FROM n OR cardinality(p_bs) IS DISTINCT FROM n OR cardinality(p_approves) IS DISTINCT FROM n THEN
    RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'relation_set_batch: the four arrays must have the same length';
  END IF;
  IF n = 0 THEN
    RETURN;
  END IF;

  -- Which pair each write is about, and whether its accounts let it write at all (before any lock,
  -- as the single functions' first INSERT meets the guard and the foreign keys).
  FOR i IN 1 .. n LOOP
    IF p_ops[i] IS NULL OR p_ops[i] NOT IN ('follow', 'unfollow', 'decide') OR p_as[i] IS NULL OR p_bs[i] IS NULL
       OR p_as[i] = p_bs[i] OR (p_ops[i] = 'decide' AND p_approves[i] IS NULL) THEN
      RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'relation_set_batch: write ' || i || ' is not a follow, unfollow or decide of two accounts';
    END IF;
    IF p_ops[i] = 'decide' THEN
      v_follower[i] := p_bs[i]; v_followee[i] := p_as[i];
    ELSE
      v_follower[i] := p_as[i]; v_followee[i] := p_bs[i];
    END IF;
    v_part[i] := ledger_partition(v_followee[i], p_partitions);
    SELECT * INTO v_refusal FROM relation_pair_refusal(v_follower[i], v_followee[i], p_as[i], p_bs[i]);
    IF v_refusal.code = 'ACCOUNT_BEING_ERASED' THEN
      o_outcome[i] := 'REJECTED'; o_code[i] := v_refusal.code; o_account[i] := v_refusal.account;
      o_reason[i] := 'account ' || v_refusal.account || ' is being erased';
    ELSIF v_refusal.code = 'ACCOUNT_NOT_FOUND' THEN
      o_outcome[i] := 'REJECTED'; o_code[i] := 'ACCOUNT_NOT_FOUND'; o_reason[i] := v_refusal.missing;
    END IF;
  END LOOP;

  -- Each pair once, in the global order (relation_lock_pair: placeholder, then FOR UPDATE).
  FOR v_pair IN
    SELECT w.follower, w.followee, array_agg(w.ord ORDER BY w.ord) AS ords
      FROM unnest(v_follower, v_followee, o_outcome) WITH ORDINALITY AS w(follower, followee, decided, ord)
     WHERE w.decided IS NULL
     GROUP BY w.follower, w.followee
     ORDER BY w.follower COLLATE "C", w.followee COLLATE "C"
  LOOP
    SELECT * INTO v_cur FROM relation_lock_pair(v_pair.follower, v_pair.followee);
    k_follower := k_follower || v_pair.follower;
    k_followee := k_followee || v_pair.followee;
    k_version0 := k_version0 || v_cur.version;
    k_state := k_state || v_cur.state;
    k_version := k_version || v_cur.version;
    v_k := cardinality(k_follower);
    FOREACH v_j IN ARRAY v_pair.ords LOOP
      v_pair_of[v_j] := v_k;
    END LOOP;
  END LOOP;

  -- The writes in arrival order, each on its pair's state as the earlier writes left it.
  FOR i IN 1 .. n LOOP
    CONTINUE WHEN o_outcome[i] IS NOT NULL;
    v_k := v_pair_of[i];
    o_state[i] := k_state[v_k]; o_version[i] := k_version[v_k];
    IF p_ops[i] = 'follow' THEN
      IF v_hooks THEN
        PERFORM ledger_hook('follow.afterLock', jsonb_build_object('follower', v_follower[i], 'followee', v_followee[i]));
      END IF;
      -- After the pair's lock: a block must take the same row lock first (chapter 30, 30-H/30-I).
      IF relation_blocked_either_way(v_follower[i], v_followee[i]) THEN
        o_outcome[i] := 'REJECTED'; o_reason[i] := 'blocked'; o_code[i] := 'BLOCKED';
        CONTINUE;
      END IF;
      IF k_state[v_k] = 'ACTIVE' THEN
        o_outcome[i] := 'NOOP'; o_reason[i] := 'already ACTIVE';
        CONTINUE;
      END IF;
      SELECT CASE WHEN a.private THEN 'PENDING' ELSE 'ACTIVE' END INTO v_target FROM account a WHERE a.account_id = v_followee[i];
      IF v_target = 'PENDING' THEN
        -- As relation_follow: the share lock waits for an unlock in progress and re-reads the flag after it.
        SELECT CASE WHEN a.private THEN 'PENDING' ELSE 'ACTIVE' END INTO v_target FROM account a WHERE a.account_id = v_followee[i] FOR SHARE;
      END IF;
      IF k_state[v_k] = v_target THEN
        o_outcome[i] := 'NOOP'; o_reason[i] := 'already ' || v_target;
        CONTINUE;
      END IF;
    ELSIF p_ops[i] = 'unfollow' THEN
      IF k_state[v_k] = 'REMOVED' THEN
        o_outcome[i] := 'NOOP'; o_reason[i] := 'already REMOVED';
        CONTINUE;
      END IF;
      v_target := 'REMOVED';
    ELSE
      IF k_state[v_k] <> 'PENDING' THEN
        o_outcome[i] := 'REJECTED'; o_reason[i] := 'not PENDING (' || k_state[v_k] || ')'; o_code[i] := 'NOT_PENDING';
        CONTINUE;
      END IF;
      v_target := CASE WHEN p_approves[i] THEN 'ACTIVE' ELSE 'REMOVED' END;
    END IF;
    o_outcome[i] := 'CHANGED'; o_reason[i] := k_state[v_k] || '->' || v_target;
    o_state[i] := v_target; o_version[i] := k_version[v_k] + 1;
    k_state[v_k] := v_target; k_version[v_k] := k_version[v_k] + 1;
  END LOOP;

  -- Each changed pair's row once, in its final state (rows the batch holds: no new lock). Just
  -- before its UPDATE, the pair is asked what the UPDATE guard (erasure_guard_relation through
  -- erasure_guard_accounts, TG_OP 'UPDATE') asks of the row, in a statement of its own, so with a
  -- snapshot as new as the trigger's would be: the first of follower, followee with an
  -- erased_state refuses it if that state is ERASING. An erasure that started after the first
  -- check (or while the batch waited for a lock) is caught here, as the trigger caught it; the
  -- pair's writes are then REJECTED rows, as the first check answers them, and its row is not
  -- written, where the trigger's exception aborted the whole batch. So the trigger is skipped for
  -- these UPDATEs only (ledger.relation_guarded, migration 026); the placeholder INSERTs of
  -- relation_lock_pair still meet the INSERT guard.
  PERFORM set_config('ledger.relation_guarded', 'on', true);
  FOR v_k IN 1 .. coalesce(cardinality(k_follower), 0) LOOP
    CONTINUE WHEN k_version[v_k] = k_version0[v_k];
    IF NOT erasure_writing() THEN
      SELECT a.account_id, a.erased_state INTO v_hit
        FROM unnest(ARRAY[k_follower[v_k], k_followee[v_k]]) WITH ORDINALITY AS x(id, ord) JOIN account a ON a.account_id = x.id
       WHERE a.erased_state IS NOT NULL ORDER BY x.ord LIMIT 1;
      IF FOUND AND v_hit.erased_state = 'ERASING' THEN
        FOR i IN 1 .. n LOOP
          CONTINUE WHEN v_pair_of[i] <> v_k;
          o_outcome[i] := 'REJECTED'; o_code[i] := 'ACCOUNT_BEING_ERASED'; o_account[i] := v_hit.account_id;
          o_reason[i] := 'account ' || v_hit.account_id || ' is being erased';
          o_state[i] := 'REMOVED'; o_version[i] := 0;
        END LOOP;
        CONTINUE;
      END IF;
    END IF;
    UPDATE relation r SET state = k_state[v_k], version = k_version[v_k], changed_at = now()
     WHERE r.follower = k_follower[v_k] AND r.followee = k_followee[v_k];
  END LOOP;
  PERFORM set_config('ledger.relation_guarded', '', true);

  -- The numbers: one update per partition, ascending, each taking that partition's count at once.
  FOR v_parts IN
    SELECT w.part, count(*) AS k FROM unnest(v_part, o_outcome) AS w(part, outcome)
     WHERE w.outcome = 'CHANGED' GROUP BY w.part ORDER BY w.part
  LOOP
    UPDATE event_seq s SET last = s.last + v_parts.k WHERE s.part = v_parts.part RETURNING s.last - v_parts.k INTO v_next;
    FOR i IN 1 .. n LOOP
      IF o_outcome[i] = 'CHANGED' AND v_part[i] = v_parts.part THEN
        v_next := v_next + 1;
        o_seq[i] := v_next;
      END IF;
    END LOOP;
  END LOOP;

  INSERT INTO relation_event (part, seq, follower, followee, state, version)
  SELECT w.part, w.seq, w.follower, w.followee, w.state, w.version
    FROM unnest(v_part, o_seq, v_follower, v_followee, o_state, o_version, o_outcome) AS w(part, seq, follower, followee, state, version, outcome)
   WHERE w.outcome = 'CHANGED';

  IF v_hooks THEN
    -- relation_write_event's point, once per event in arrival order, every event written and
    -- every lock held: the first to park is the batch's first event, one above its partition's
    -- committed last, its version one above its pair's committed one.
    FOR i IN 1 .. n LOOP
      CONTINUE WHEN o_outcome[i] IS DISTINCT FROM 'CHANGED';
      PERFORM ledger_hook('relation.afterEvent', jsonb_build_object(
        'follower', v_follower[i], 'followee', v_followee[i], 'state', o_state[i], 'version', o_version[i], 'part', v_part[i], 'seq', o_seq[i]));
    END LOOP;
  END IF;

  RETURN QUERY SELECT w.ord::integer, w.outcome, w.state, w.version, w.seq, w.reason, w.code, w.account
    FROM unnest(o_outcome, o_state, o_version, o_seq, o_reason, o_code, o_account) WITH ORDINALITY AS w(outcome, state, version, seq, reason, code, account, ord);
END
$function$;

CREATE OR REPLACE FUNCTION public.relation_unblock(p_blocker text, p_blocked text)
 RETURNS TABLE(outcome text, state text, version bigint, seq bigint, reason text, code text)
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_missing text;
  v_erasing text;
  v_deleted integer;
  v_state text := 'REMOVED';
  v_version bigint := 0;
BEGIN
  SELECT string_agg(id, ', ' ORDER BY ord) INTO v_missing
    FROM unnest(ARRAY[p_blocker, p_blocked]) WITH ORDINALITY AS i(id, ord)
   WHERE NOT EXISTS (SELECT 1 FROM account a WHERE a.account_id = i.id AND a.erased_state IS DISTINCT FROM 'ERASED');
  IF v_missing IS NOT NULL THEN
    RETURN QUERY SELECT 'REJECTED', v_state, v_version, 0::bigint, v_missing, 'ACCOUNT_NOT_FOUND';
    RETURN;
  END IF;
  SELECT a.account_id INTO v_erasing FROM account a WHERE a.account_id IN (p_blocker, p_blocked) AND a.erased_state = 'ERASING' LIMIT 1;
  IF v_erasing IS NOT NULL THEN
    PERFORM erasure_refuse(v_erasing);
  END IF;
  DELETE FROM block b WHERE b.blocker = p_blocker AND b.blocked = p_blocked;
  GET DIAGNOSTICS v_deleted = ROW_COUNT;
  SELECT r.state, r.version INTO v_state, v_version FROM relation r WHERE r.follower = p_blocked AND r.followee = p_blocker;
  IF NOT FOUND THEN
    v_state := 'REMOVED'; v_version := 0;
  END IF;
  IF v_deleted = 0 THEN
    RETURN QUERY SELECT 'NOOP', v_state, v_version, 0::bigint, 'not blocked', NULL::text;
    RETURN;
  END IF;
  RETURN QUERY SELECT 'CHANGED', v_state, v_version, 0::bigint, 'unblocked', NULL::text;
END
$function$;

CREATE OR REPLACE FUNCTION public.relation_unfollow(p_follower text, p_followee text, p_partitions integer)
 RETURNS TABLE(outcome text, state text, version bigint, seq bigint, reason text, code text)
 LANGUAGE sql
AS $function$
  SELECT b.outcome, b.state, b.version, b.seq, b.reason, b.code
    FROM relation_set_batch(ARRAY['unfollow'], ARRAY[p_follower], ARRAY[p_followee], ARRAY[NULL::boolean], p_partitions) b
$function$;

CREATE OR REPLACE FUNCTION public.relation_write_event(p_follower text, p_followee text, p_target text, p_version bigint, p_partitions integer)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_part integer := ledger_partition(p_followee, p_partitions);
  v_seq  bigint;
BEGIN
  UPDATE relation r SET state = p_target, version = p_version, changed_at = now()
   WHERE r.follower = p_follower AND r.followee = p_followee;
  UPDATE event_seq s SET last = s.last + 1 WHERE s.part = v_part RETURNING s.last INTO v_seq;
  INSERT INTO relation_event (part, seq, follower, followee, state, version)
    VALUES (v_part, v_seq, p_follower, p_followee, p_target, p_version);
  IF current_setting('ledger.test_hooks', true) = 'on' THEN
    PERFORM ledger_hook('relation.afterEvent', jsonb_build_object(
      'follower', p_follower, 'followee', p_followee, 'state', p_target, 'version', p_version, 'part', v_part, 'seq', v_seq));
  END IF;
  RETURN v_seq;
END
$function$;

CREATE OR REPLACE FUNCTION public.webhook_block_outbox()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_blocker text := CASE WHEN TG_OP = 'INSERT' THEN NEW.blocker ELSE OLD.blocker END;
  v_blocked text := CASE WHEN TG_OP = 'INSERT' THEN NEW.blocked ELSE OLD.blocked END;
  v_erased  boolean;
  v_part    integer;
  v_seq     bigint;
BEGIN
  SELECT ledger_partition(v_blocker, c.partitions) INTO v_part FROM ledger_config c;
  v_erased := EXISTS (SELECT 1 FROM account a WHERE a.account_id IN (v_blocker, v_blocked) AND a.erased_state IS NOT NULL);
  INSERT INTO webhook_block_seq AS s (part, last) VALUES (v_part, 1)
    ON CONFLICT (part) DO UPDATE SET last = s.last + 1
    RETURNING s.last INTO v_seq;
  INSERT INTO webhook_block_event (part, seq, blocker, blocked, state)
    VALUES (v_part, v_seq, CASE WHEN NOT v_erased THEN v_blocker END, CASE WHEN NOT v_erased THEN v_blocked END,
            CASE WHEN v_erased THEN 'ERASED' WHEN TG_OP = 'INSERT' THEN 'BLOCKED' ELSE 'UNBLOCKED' END);
  RETURN NULL;
END
$function$;
