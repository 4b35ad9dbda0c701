import { backendPid, type Pool, type PoolClient } from "../db/pool.ts";
import { ForeignKeyViolationError } from "../db/errors.ts";
import { withTransaction } from "../db/transaction.ts";
import { readPartitions } from "../db/ledger-config.ts";
import { InvalidInputError } from "../errors.ts";
import { validateText } from "../text.ts";
import { Hooks } from "../hooks.ts";
import { validateId } from "../ids.ts";
import { stablePartition } from "../partition.ts";
import { AccountNotFoundError } from "../relations/errors.ts";
import { PostNotFoundError } from "./post-errors.ts";
import { recordMentions } from "./mentions.ts";
import { ENSURE_ACCOUNT_SQL } from "../relations/account-settings.ts";
import { blockedEitherWay } from "../relations/relation-service.ts";
import { READ_MODES, VISIBILITIES, type ReadDecision, type ReadMode, type Visibility } from "./post-types.ts";

export const MAX_BODY_LENGTH = 10_000;

export interface Post {
  postId: string;
  author: string;
  visibility: Visibility;
  body: string;
  part: number;
  aclToken: number;
  createdAt: Date;
}

/**
 * How createPost reads its token. "share" (ours): SELECT ... FOR SHARE waits for any
 * relation write of the author's partition that already holds the sequence row, so a block
 * that committed before the post is inside the token. "plain" is the chapter's unlocked read,
 * kept as the negative control that leaks a post to a concurrently blocked reader.
 */
export type TokenRead = "share" | "plain";

export class PostService {
  private constructor(
    private readonly pool: Pool,
    readonly partitions: number,
    private readonly hooks: Hooks,
    private readonly tokenRead: TokenRead,
  ) {}

  static async open(pool: Pool, options: { hooks?: Hooks; tokenRead?: TokenRead } = {}): Promise<PostService> {
    return new PostService(
      pool,
      await readPartitions(pool),
      options.hooks ?? new Hooks(),
      options.tokenRead ?? "share",
    );
  }

  /** `ensureAuthor`: create the author's account (public, defaults) in the same transaction when it does not exist (the API's token users). */
  async createPost(
    author: string,
    visibility: Visibility,
    body: string,
    options: { ensureAuthor?: boolean } = {},
  ): Promise<Post> {
    validateId("author", author);
    if (!VISIBILITIES.includes(visibility)) {
      throw new InvalidInputError(
        "visibility",
        `must be one of ${VISIBILITIES.join(", ")}, got ${JSON.stringify(visibility)}`,
      );
    }
    validateText("body", body, MAX_BODY_LENGTH);
    // As a comment's: a post of nothing but whitespace says nothing (docs/api.md).
    if (body.trim().length === 0) throw new InvalidInputError("body", "must not be empty");
    const part = stablePartition(author, this.partitions);
    try {
      return await withTransaction(this.pool, async (client) => {
        if (options.ensureAuthor) await client.query(ENSURE_ACCOUNT_SQL, [author]);
        const lock = this.tokenRead === "share" ? " FOR SHARE" : "";
        await this.hooks.at("post.beforeToken", { author, pid: backendPid(client) });
        const { rows } = await client.query<{ last: number }>(`SELECT last FROM event_seq WHERE part = $1${lock}`, [
          part,
        ]);
        const aclToken = rows[0]!.last;
        await this.hooks.at("post.afterToken", { author, aclToken });
        const { rows: ids } = await client.query<{ id: string }>("SELECT gen_random_uuid()::text AS id");
        const postId = ids[0]!.id;
        await client.query("INSERT INTO item (item_id, kind) VALUES ($1, 'post')", [postId]);
        const inserted = await client.query<{ created_at: Date }>(
          `INSERT INTO post (post_id, author, visibility, body, part, acl_token) VALUES ($1, $2, $3, $4, $5, $6)
           RETURNING created_at`,
          [postId, author, visibility, body, part, aclToken],
        );
        await recordMentions(client, postId, author, body);
        return { postId, author, visibility, body, part, aclToken, createdAt: inserted.rows[0]!.created_at };
      });
    } catch (err) {
      if (err instanceof ForeignKeyViolationError && err.constraint === "post_author_fkey")
        throw new AccountNotFoundError(author);
      throw err;
    }
  }

  async getPost(postId: string): Promise<Post> {
    const post = await readLivePost(this.pool, postId);
    if (!post) throw new PostNotFoundError(postId);
    return post;
  }

  /**
   * Deletes a post of `author`: a tombstone (body erased, deleted_at set) that every read
   * treats as missing. Its item, like facts and counts stay: they are the ledger's history
   * and its audits hold on them. NOOP when it was already deleted; PostNotFoundError when the
   * post is not the author's.
   */
  async deletePost(author: string, postId: string): Promise<{ outcome: "CHANGED" | "NOOP" }> {
    validateId("author", author);
    validateId("postId", postId);
    const { rows } = await this.pool.query<{ was_deleted: boolean }>(
      `UPDATE post SET body = '', deleted_at = coalesce(deleted_at, now()) WHERE post_id = $1 AND author = $2
       RETURNING (SELECT deleted_at IS NOT NULL FROM post WHERE post_id = $1) AS was_deleted`,
      [postId, author],
    );
    if (rows.length === 0) throw new PostNotFoundError(postId);
    return { outcome: rows[0]!.was_deleted ? "NOOP" : "CHANGED" };
  }

  /**
   * The one decision point for reading a post (AccessCheck.canRead of the chapter). The
   * author always reads; PUBLIC checks only blocks (they are truth and not projected); SELF
   * nobody else; FOLLOWERS by the mode (see ReadMode).
   */
  async canRead(reader: string, postId: string, mode: ReadMode): Promise<ReadDecision> {
    validateId("reader", reader);
    if (!READ_MODES.includes(mode))
      throw new InvalidInputError("mode", `must be one of ${READ_MODES.join(", ")}, got ${JSON.stringify(mode)}`);
    const post = await this.getPost(postId);
    if (reader === post.author) return { allowed: true, source: "author" };
    if (post.visibility === "SELF") return { allowed: false, source: "truth" };
    if (post.visibility === "PUBLIC") {
      return { allowed: !(await blockedEitherWay(this.pool, reader, post.author)), source: "public-block-check" };
    }
    switch (mode) {
      case "TRUTH":
        return { allowed: await followsInTruth(this.pool, reader, post.author), source: "truth" };
      case "PROJECTION_ONLY":
        return { allowed: await followsInProjection(this.pool, reader, post.author), source: "projection" };
      case "CONTENT_TOKEN":
      case "FRESH_TOKEN": {
        const { rows } = await this.pool.query<{ applied_upto: number; last: number }>(
          "SELECT w.applied_upto, s.last FROM proj_watermark w JOIN event_seq s USING (part) WHERE part = $1",
          [post.part],
        );
        const { applied_upto: watermark, last } = rows[0]!;
        const token = mode === "CONTENT_TOKEN" ? post.aclToken : last;
        if (watermark >= token)
          return { allowed: await followsInProjection(this.pool, reader, post.author), source: "projection" };
        return { allowed: await followsInTruth(this.pool, reader, post.author), source: "fallback-truth" };
      }
    }
  }
}

/**
 * A post that is not deleted, or undefined, read on `db`: the primary, or for an anonymous
 * reader of a PUBLIC post a replica (docs/read-replicas.md). No permission check.
 */
export async function readLivePost(db: Pool | PoolClient, postId: string): Promise<Post | undefined> {
  validateId("postId", postId);
  const { rows } = await db.query<{
    post_id: string;
    author: string;
    visibility: Visibility;
    body: string;
    part: number;
    acl_token: number;
    created_at: Date;
  }>(
    "SELECT post_id, author, visibility, body, part, acl_token, created_at FROM post WHERE post_id = $1 AND deleted_at IS NULL",
    [postId],
  );
  const r = rows[0];
  return (
    r && {
      postId: r.post_id,
      author: r.author,
      visibility: r.visibility,
      body: r.body,
      part: r.part,
      aclToken: r.acl_token,
      createdAt: r.created_at,
    }
  );
}

/** ACTIVE in the relation table; a block always leaves the relation REMOVED (invariant 3). */
async function followsInTruth(db: Pool | PoolClient, reader: string, author: string): Promise<boolean> {
  const { rows } = await db.query<{ ok: boolean }>(
    "SELECT EXISTS (SELECT 1 FROM relation WHERE follower = $1 AND followee = $2 AND state = 'ACTIVE') AS ok",
    [reader, author],
  );
  return rows[0]!.ok;
}

async function followsInProjection(db: Pool | PoolClient, reader: string, author: string): Promise<boolean> {
  const { rows } = await db.query<{ ok: boolean }>(
    "SELECT EXISTS (SELECT 1 FROM proj_follower WHERE followee = $2 AND follower = $1 AND state = 'ACTIVE') AS ok",
    [reader, author],
  );
  return rows[0]!.ok;
}
