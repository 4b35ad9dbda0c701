import { backendPid, type Pool, type PoolClient } from "../db/pool.ts";
import { withTransaction } from "../db/transaction.ts";
import { readPartitions } from "../db/ledger-config.ts";
import { InvalidInputError } from "../errors.ts";
import { Hooks } from "../hooks.ts";
import { validateId } from "../ids.ts";
import { cursorTimeSql, decodeCursor, encodeCursor, validateLimit } from "../pagination.ts";
import { stablePartition } from "../partition.ts";
import { PostNotFoundError } from "./post-errors.ts";
import { recordMentions } from "./mentions.ts";
import { ENSURE_ACCOUNT_SQL } from "../relations/account-settings.ts";
import { READ_MODES, type ReadMode } from "./post-types.ts";
import { validateText } from "../text.ts";
import {
  CommentDeletedError,
  CommentNotFoundError,
  IdempotencyKeyReusedError,
  NotCommentAuthorError,
} from "./comment-errors.ts";

export const MAX_COMMENT_LENGTH = 10_000;
/** Depth of a top-level comment is 0; a reply deeper than this is refused (the table's CHECK says the same). */
export const MAX_COMMENT_DEPTH = 7;
export const MAX_IDEMPOTENCY_KEY_LENGTH = 128;

export interface Comment {
  id: string;
  postId: string;
  parentId: string | null;
  depth: number;
  /** null for a tombstone. */
  author: string | null;
  body: string | null;
  deleted: boolean;
  editCount: number;
  createdAt: Date;
  editedAt: Date | null;
  /** Replies that are counted (not deleted), from the facts. */
  replyCount: number;
}

export interface CommentPage {
  comments: Comment[];
  nextCursor?: string;
}

export type CommentOrder = "newest" | "oldest";

interface PostRow {
  author: string;
  visibility: string;
  part: number;
}

interface CommentRow {
  comment_id: string;
  post_id: string;
  parent_id: string | null;
  depth: number;
  author: string;
  body: string | null;
  deleted_at: Date | null;
  edit_count: number;
  created_at: Date;
  edited_at: Date | null;
  reply_count: number;
  idempotency_key: string | null;
}

const COMMENT_COLUMNS =
  "c.comment_id, c.post_id, c.parent_id, c.depth, c.author, c.body, c.deleted_at, c.edit_count, c.created_at, c.edited_at, c.idempotency_key";

function toComment(r: CommentRow): Comment {
  const deleted = r.deleted_at !== null;
  return {
    id: r.comment_id,
    postId: r.post_id,
    parentId: r.parent_id,
    depth: r.depth,
    author: deleted ? null : r.author,
    body: deleted ? null : r.body,
    deleted,
    editCount: r.edit_count,
    createdAt: r.created_at,
    editedAt: r.edited_at,
    replyCount: r.reply_count ?? 0,
  };
}

/**
 * Whether `$2` (the reader; NULL: a client without a token, who sees comments of PUBLIC posts
 * only, with no block to apply) may see comment `c` of post `p` in the same snapshot as the rows:
 * the post's read decision with the comment's own acl_token (so a comment created after a block
 * is judged by a token that includes the block), and no block either way between the reader
 * and the comment's author. $3 is the read mode.
 */
const VISIBLE_SQL = `
  ($2 = p.author
   OR (p.visibility = 'PUBLIC' AND NOT EXISTS (SELECT 1 FROM block b WHERE (b.blocker = $2 AND b.blocked = p.author) OR (b.blocker = p.author AND b.blocked = $2)))
   OR (p.visibility = 'FOLLOWERS' AND CASE
         WHEN $3 = 'TRUTH' THEN EXISTS (SELECT 1 FROM relation r WHERE r.follower = $2 AND r.followee = p.author AND r.state = 'ACTIVE')
         WHEN $3 = 'PROJECTION_ONLY'
           OR (SELECT w.applied_upto FROM proj_watermark w WHERE w.part = p.part)
              >= CASE WHEN $3 = 'CONTENT_TOKEN' THEN c.acl_token ELSE (SELECT s.last FROM event_seq s WHERE s.part = p.part) END
           THEN EXISTS (SELECT 1 FROM proj_follower f WHERE f.followee = p.author AND f.follower = $2 AND f.state = 'ACTIVE')
         ELSE EXISTS (SELECT 1 FROM relation r WHERE r.follower = $2 AND r.followee = p.author AND r.state = 'ACTIVE')
       END))
  AND NOT EXISTS (SELECT 1 FROM block b WHERE (b.blocker = $2 AND b.blocked = c.author) OR (b.blocker = c.author AND b.blocked = $2))
  AND (c.deleted_at IS NULL OR EXISTS (
    -- A tombstone stays in the thread only while a live comment is below it (not merely a
    -- deleted reply): its replies, their replies, ... (comment_replies index at every level).
    WITH RECURSIVE below AS (
      SELECT r.comment_id, r.deleted_at FROM comment r WHERE r.parent_id = c.comment_id
      UNION ALL
      SELECT r.comment_id, r.deleted_at FROM comment r JOIN below b ON r.parent_id = b.comment_id
    )
    SELECT 1 FROM below WHERE comment_counted(below.deleted_at)))`;

/**
 * Comments as facts (docs/comments.md): create with an idempotency key, edit by the author,
 * delete by the author or the post's author as a tombstone. Every change of a comment's counted
 * state (the SQL function comment_counted()) writes one comment_outbox event in the same
 * transaction, which the shared CounterConsumer turns into comment_count.
 */
export class CommentService {
  private constructor(
    private readonly pool: Pool,
    readonly partitions: number,
    private readonly hooks: Hooks,
  ) {}

  static async open(pool: Pool, options: { hooks?: Hooks } = {}): Promise<CommentService> {
    return new CommentService(pool, await readPartitions(pool), options.hooks ?? new Hooks());
  }

  /**
   * Creates a comment or reply. The post's author partition sequence row is read FOR SHARE
   * first (as createPost does): a block or unfollow in flight commits before the writer's
   * visibility is checked in the truth, and its seq is inside the comment's acl_token.
   * A retried create with the same idempotency key returns the first comment, created: false.
   */
  async create(
    author: string,
    postId: string,
    body: string,
    options: { parentId?: string; idempotencyKey?: string; ensureAuthor?: boolean } = {},
  ): Promise<Comment & { created: boolean }> {
    validateId("author", author);
    validateId("postId", postId);
    validateBody(body);
    if (options.parentId !== undefined) validateId("parentId", options.parentId);
    if (options.idempotencyKey !== undefined) {
      validateText("idempotencyKey", options.idempotencyKey, MAX_IDEMPOTENCY_KEY_LENGTH);
      if (options.idempotencyKey.length === 0) throw new InvalidInputError("idempotencyKey", "must not be empty");
    }
    const part = stablePartition(author, this.partitions);
    return withTransaction(this.pool, async (client) => {
      const post = await readPost(client, postId);
      // The API's token users comment without creating an account first; rolled back with a failed create.
      if (options.ensureAuthor) await client.query(ENSURE_ACCOUNT_SQL, [author]);
      const { rows: token } = await client.query<{ last: number }>(
        "SELECT last FROM event_seq WHERE part = $1 FOR SHARE",
        [post.part],
      );
      const aclToken = token[0]!.last;
      await this.hooks.at("comment.afterToken", { author, postId, aclToken, pid: backendPid(client) });
      if (!(await mayReadInTruth(client, author, post))) throw new PostNotFoundError(postId);
      let parent: { root_id: string; depth: number } | undefined;
      if (options.parentId !== undefined) parent = await this.readParent(client, author, postId, options.parentId);
      const { rows: inserted } = await client.query<CommentRow & { counted: boolean }>(
        `INSERT INTO comment AS c (comment_id, post_id, author, parent_id, root_id, depth, body, part, acl_token, idempotency_key, version)
         SELECT g.id, $1, $2, $3, coalesce($4, g.id), $5, $6, $7, $8, $9, 1 FROM (SELECT gen_random_uuid()::text AS id) g
         ON CONFLICT (author, idempotency_key) DO NOTHING
         RETURNING ${COMMENT_COLUMNS}, 0 AS reply_count, comment_counted(c.deleted_at) AS counted`,
        [
          postId,
          author,
          options.parentId ?? null,
          parent?.root_id ?? null,
          parent ? parent.depth + 1 : 0,
          body,
          part,
          aclToken,
          options.idempotencyKey ?? null,
        ],
      );
      const row = inserted[0];
      if (!row) return { ...(await this.readRetried(client, author, postId, body, options)), created: false };
      await client.query("INSERT INTO item (item_id, kind) VALUES ($1, 'comment')", [row.comment_id]);
      await recordMentions(client, row.comment_id, author, body);
      if (row.counted) await this.writeEvent(client, part, row.comment_id, postId, 1, 1);
      await this.hooks.at("comment.beforeCommit", { commentId: row.comment_id, pid: backendPid(client) });
      return { ...toComment(row), created: true };
    });
  }

  /** Edits the body; only the author, and not a deleted comment. The edit counter says how often. */
  async edit(caller: string, commentId: string, body: string): Promise<Comment> {
    validateId("caller", caller);
    validateId("commentId", commentId);
    validateBody(body);
    return withTransaction(this.pool, async (client) => {
      const { row } = await this.lockVisible(client, caller, commentId);
      if (row.author !== caller) throw new NotCommentAuthorError("edit");
      if (row.deleted_at !== null) throw new CommentDeletedError(commentId);
      const { rows } = await client.query<CommentRow>(
        `UPDATE comment c SET body = $2, edit_count = edit_count + 1, edited_at = now() WHERE comment_id = $1
         RETURNING ${COMMENT_COLUMNS}, (SELECT count(*) FROM counted_comment r WHERE r.parent_id = c.comment_id)::int AS reply_count`,
        [commentId, body],
      );
      return toComment(rows[0]!);
    });
  }

  /**
   * Deletes as a tombstone (body gone, the row and its place in the thread kept). The event's
   * delta is the change of comment_counted() across the update, so a repeated delete writes none.
   */
  async delete(caller: string, commentId: string): Promise<{ outcome: "CHANGED" | "NOOP"; comment: Comment }> {
    validateId("caller", caller);
    validateId("commentId", commentId);
    return withTransaction(this.pool, async (client) => {
      const { row, post } = await this.lockVisible(client, caller, commentId);
      if (row.author !== caller && post.author !== caller) throw new NotCommentAuthorError("delete");
      const { rows } = await client.query<CommentRow & { delta: number; version: number; part: number }>(
        `WITH old AS (SELECT comment_counted(deleted_at) AS was FROM comment WHERE comment_id = $1)
         UPDATE comment c SET deleted_at = coalesce(c.deleted_at, now()), deleted_by = coalesce(c.deleted_by, $2), body = NULL,
                version = c.version + (old.was::int - comment_counted(coalesce(c.deleted_at, now()))::int)
           FROM old WHERE c.comment_id = $1
         RETURNING ${COMMENT_COLUMNS}, c.version, c.part,
                   (comment_counted(c.deleted_at)::int - old.was::int) AS delta,
                   (SELECT count(*) FROM counted_comment r WHERE r.parent_id = c.comment_id)::int AS reply_count`,
        [commentId, caller],
      );
      const updated = rows[0]!;
      if (updated.delta !== 0)
        await this.writeEvent(client, updated.part, commentId, updated.post_id, updated.delta, updated.version);
      return { outcome: updated.delta !== 0 ? "CHANGED" : "NOOP", comment: toComment(updated) };
    });
  }

  /** The post of a comment that `reader` (null: no token) may see in the truth, or CommentNotFoundError. */
  async postOfVisibleComment(reader: string | null, commentId: string): Promise<string> {
    if (reader !== null) validateId("reader", reader);
    validateId("commentId", commentId);
    const { rows } = await this.pool.query<{ post_id: string }>(
      `SELECT c.post_id FROM comment c JOIN post p ON p.post_id = c.post_id WHERE c.comment_id = $1 AND p.deleted_at IS NULL AND ${VISIBLE_SQL}`,
      [commentId, reader, "TRUTH"],
    );
    if (!rows[0]) throw new CommentNotFoundError(commentId);
    return rows[0].post_id;
  }

  /**
   * One comment as it is listed under its post (a tombstone only while a live comment is below
   * it), if `reader` may see it by `mode` (the list rule, VISIBLE_SQL); else CommentNotFoundError.
   * The caller decides on the post first, as for a list.
   */
  async readVisible(reader: string | null, commentId: string, options: { mode?: ReadMode } = {}): Promise<Comment> {
    validateId("commentId", commentId);
    const page = await this.list(reader, "c.comment_id = $1", commentId, "oldest", { ...options, limit: 1 });
    const found = page.comments[0];
    if (!found) throw new CommentNotFoundError(commentId);
    return found;
  }

  /** Top-level comments of a post as `reader` may see them, each with its reply count (keyset on created_at, id). */
  async listTopLevel(
    reader: string | null,
    postId: string,
    options: { order?: CommentOrder; limit?: number; cursor?: string; mode?: ReadMode } = {},
  ): Promise<CommentPage> {
    validateId("postId", postId);
    const order = options.order ?? "newest";
    if (order !== "newest" && order !== "oldest")
      throw new InvalidInputError("order", `must be newest or oldest, got ${JSON.stringify(order)}`);
    return this.list(reader, "c.post_id = $1 AND c.parent_id IS NULL", postId, order, options);
  }

  /** Direct replies of a comment, oldest first. */
  async listReplies(
    reader: string | null,
    commentId: string,
    options: { limit?: number; cursor?: string; mode?: ReadMode } = {},
  ): Promise<CommentPage> {
    validateId("commentId", commentId);
    return this.list(reader, "c.parent_id = $1", commentId, "oldest", options);
  }

  private async list(
    reader: string | null,
    where: string,
    anchor: string,
    order: CommentOrder,
    options: { limit?: number; cursor?: string; mode?: ReadMode },
  ): Promise<CommentPage> {
    if (reader !== null) validateId("reader", reader);
    const mode = options.mode ?? "TRUTH";
    if (!READ_MODES.includes(mode))
      throw new InvalidInputError("mode", `must be one of ${READ_MODES.join(", ")}, got ${JSON.stringify(mode)}`);
    const limit = validateLimit(options.limit);
    const after = options.cursor === undefined ? null : decodeCursor(options.cursor);
    const [cmp, dir] = order === "newest" ? ["<", "DESC"] : [">", "ASC"];
    const { rows } = await this.pool.query<CommentRow & { at: string }>(
      `SELECT ${COMMENT_COLUMNS}, ${cursorTimeSql("c.created_at")} AS at,
              (SELECT count(*) FROM counted_comment r WHERE r.parent_id = c.comment_id)::int AS reply_count
         FROM comment c JOIN post p ON p.post_id = c.post_id
        WHERE ${where}
          AND ($4::timestamptz IS NULL OR (c.created_at, c.comment_id) ${cmp} ($4::timestamptz, $5::text))
          AND ${VISIBLE_SQL}
        ORDER BY c.created_at ${dir}, c.comment_id ${dir}
        LIMIT $6`,
      [anchor, reader, mode, after?.at ?? null, after?.id ?? null, limit + 1],
    );
    const page = rows.slice(0, limit);
    const last = page[page.length - 1];
    return {
      comments: page.map(toComment),
      ...(rows.length > limit && last ? { nextCursor: encodeCursor({ at: last.at, id: last.comment_id }) } : {}),
    };
  }

  /**
   * A parent must be on the same post, visible to the writer, not deleted, and not at the depth
   * limit. A parent the writer may not see is the same 404 as an unknown id, wherever it is; only
   * a comment they may see (item_state) is "on another post".
   */
  private async readParent(
    client: PoolClient,
    author: string,
    postId: string,
    parentId: string,
  ): Promise<{ root_id: string; depth: number }> {
    const { rows } = await client.query<{
      post_id: string;
      root_id: string;
      depth: number;
      deleted_at: Date | null;
      visible: boolean;
      visible_elsewhere: boolean;
    }>(
      `SELECT c.post_id, c.root_id, c.depth, c.deleted_at,
              NOT EXISTS (SELECT 1 FROM block b WHERE (b.blocker = $2 AND b.blocked = c.author) OR (b.blocker = c.author AND b.blocked = $2)) AS visible,
              c.post_id <> $3 AND item_state($2, c.comment_id, 'TRUTH') = 'VISIBLE' AS visible_elsewhere
         FROM comment c WHERE c.comment_id = $1 FOR SHARE`,
      [parentId, author, postId],
    );
    const parent = rows[0];
    if (!parent || (parent.post_id === postId ? !parent.visible : !parent.visible_elsewhere))
      throw new CommentNotFoundError(parentId);
    if (parent.post_id !== postId) throw new InvalidInputError("parentId", "is a comment on another post");
    if (parent.deleted_at !== null) throw new CommentDeletedError(parentId);
    if (parent.depth + 1 > MAX_COMMENT_DEPTH)
      throw new InvalidInputError("parentId", `replies may nest at most ${MAX_COMMENT_DEPTH} levels deep`);
    return { root_id: parent.root_id, depth: parent.depth };
  }

  /** The comment a retried create made first; the retry must ask for the same comment. */
  private async readRetried(
    client: PoolClient,
    author: string,
    postId: string,
    body: string,
    options: { parentId?: string; idempotencyKey?: string },
  ): Promise<Comment> {
    const { rows } = await client.query<CommentRow>(
      `SELECT ${COMMENT_COLUMNS}, (SELECT count(*) FROM counted_comment r WHERE r.parent_id = c.comment_id)::int AS reply_count
         FROM comment c WHERE c.author = $1 AND c.idempotency_key = $2`,
      [author, options.idempotencyKey],
    );
    const first = rows[0]!;
    const firstBody = first.body;
    if (
      first.post_id !== postId ||
      first.parent_id !== (options.parentId ?? null) ||
      (firstBody !== null && firstBody !== body)
    ) {
      throw new IdempotencyKeyReusedError();
    }
    return toComment(first);
  }

  /**
   * The comment locked FOR UPDATE with its post, if `caller` may see it (else the same 404 as
   * missing). A comment of a deleted post is gone with the post, as for every read.
   */
  private async lockVisible(
    client: PoolClient,
    caller: string,
    commentId: string,
  ): Promise<{ row: CommentRow; post: PostRow }> {
    const { rows } = await client.query<CommentRow & PostRow & { post_author: string }>(
      `SELECT ${COMMENT_COLUMNS}, 0 AS reply_count, p.author AS post_author, p.visibility, p.part
         FROM comment c JOIN post p ON p.post_id = c.post_id WHERE c.comment_id = $1 AND p.deleted_at IS NULL FOR UPDATE OF c`,
      [commentId],
    );
    const r = rows[0];
    if (!r) throw new CommentNotFoundError(commentId);
    const post = { author: r.post_author, visibility: r.visibility, part: r.part };
    if (!(await mayReadInTruth(client, caller, post))) throw new CommentNotFoundError(commentId);
    return { row: r, post };
  }

  private async writeEvent(
    client: PoolClient,
    part: number,
    commentId: string,
    postId: string,
    delta: number,
    version: number,
  ): Promise<void> {
    await client.query(
      `WITH s AS (UPDATE comment_seq SET last = last + 1 WHERE part = $1 RETURNING last)
       INSERT INTO comment_outbox (part, seq, comment_id, post_id, delta, version) SELECT $1, s.last, $2, $3, $4, $5 FROM s`,
      [part, commentId, postId, delta, version],
    );
  }
}

function validateBody(body: unknown): void {
  validateText("body", body, MAX_COMMENT_LENGTH);
  if ((body as string).trim().length === 0) throw new InvalidInputError("body", "must not be empty");
}

async function readPost(client: PoolClient, postId: string): Promise<PostRow> {
  // A deleted post (a tombstone: its body erased, its row kept) is gone for comments as for every other read.
  const { rows } = await client.query<PostRow>(
    "SELECT author, visibility, part FROM post WHERE post_id = $1 AND deleted_at IS NULL",
    [postId],
  );
  if (!rows[0]) throw new PostNotFoundError(postId);
  return rows[0];
}

/** canRead in TRUTH mode, on the caller's transaction: writes never ride on projection lag. */
async function mayReadInTruth(client: PoolClient, reader: string, post: PostRow): Promise<boolean> {
  if (reader === post.author) return true;
  if (post.visibility === "SELF") return false;
  const { rows } = await client.query<{ ok: boolean }>(
    post.visibility === "PUBLIC"
      ? "SELECT NOT EXISTS (SELECT 1 FROM block WHERE (blocker = $1 AND blocked = $2) OR (blocker = $2 AND blocked = $1)) AS ok"
      : "SELECT EXISTS (SELECT 1 FROM relation WHERE follower = $1 AND followee = $2 AND state = 'ACTIVE') AS ok",
    [reader, post.author],
  );
  return rows[0]!.ok;
}
