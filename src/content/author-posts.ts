import type { Pool, PoolClient } from "../db/pool.ts";
import { InvalidInputError } from "../errors.ts";
import { validateId } from "../ids.ts";
import { cursorTimeSql, decodeCursor, keysetPage, validateLimit, validateViewer } from "../pagination.ts";
import type { Visibility } from "./post-types.ts";

/** The most authors one merged page reads (each is one index range): a home timeline's hot authors fit. */
export const MAX_AUTHORS_PER_PAGE = 200;

/** A post on a list page: the post as GET /v1/posts/{id} shows it, its counts and the reader's like. */
export interface PostEntry {
  postId: string;
  author: string;
  visibility: Visibility;
  body: string;
  aclToken: number;
  createdAt: Date;
  /** The derived like count (like_count): may lag the facts by the like consumer's backlog. */
  likeCount: number;
  /** The derived comment count (comment_count): may lag by the comment consumer's backlog. */
  commentCount: number;
  /** The reader likes it, from the facts (read-your-writes); false without a reader. */
  liked: boolean;
}

export interface PostEntryPage {
  posts: PostEntry[];
  /** Opaque; absent on the last page. */
  nextCursor?: string;
}

interface EntryRow {
  post_id: string;
  author: string;
  visibility: Visibility;
  body: string;
  acl_token: number;
  created_at: Date;
  at: string;
  like_count: number;
  comment_count: number;
  liked: boolean;
}

/**
 * One page of the SQL function author_posts_page (the read rule, the per-author ranges and the
 * merge are there: src/db/schema.sql, docs/feed.md) with each post's counts and the
 * reader's like. $1 reader (NULL: no token), $2 authors, $3/$4 the keyset, $5 rows to fetch.
 */
const ENTRY_PAGE_SQL = `
  SELECT f.post_id, f.author, f.visibility, f.body, f.acl_token, f.created_at, ${cursorTimeSql("f.created_at")} AS at,
         (SELECT coalesce(sum(c.n), 0) FROM like_count c WHERE c.item_id = f.post_id)::bigint AS like_count,
         (SELECT coalesce(sum(c.n), 0) FROM comment_count c WHERE c.post_id = f.post_id)::bigint AS comment_count,
         EXISTS (SELECT 1 FROM like_fact l WHERE l.user_id = $1 AND l.item_id = f.post_id AND l.liked) AS liked
    FROM author_posts_page($1, $2::text[], $3::timestamptz, $4::text, $5::int) f
   ORDER BY f.created_at DESC, f.post_id DESC`;

/**
 * The newest posts of `authors` that `reader` (null: no token, PUBLIC posts only) may read,
 * merged newest first and keyset-paginated on (createdAt, postId): each post is judged when the
 * page is read. One author is an author's page (GET /v1/accounts/{id}/posts); several are the
 * read-time merge of a home timeline's hot authors.
 */
export async function readAuthorPosts(
  db: Pool | PoolClient,
  reader: string | null,
  authors: readonly string[],
  options: { limit?: number; cursor?: string } = {},
): Promise<PostEntryPage> {
  const viewer = validateViewer(reader);
  if (authors.length === 0 || authors.length > MAX_AUTHORS_PER_PAGE)
    throw new InvalidInputError("authors", `must name 1..${MAX_AUTHORS_PER_PAGE} accounts, got ${authors.length}`);
  for (const a of authors) validateId("author", a);
  const limit = validateLimit(options.limit);
  const after = options.cursor === undefined ? null : decodeCursor(options.cursor);
  const { rows } = await db.query<EntryRow>({
    name: "author_posts_page",
    text: ENTRY_PAGE_SQL,
    values: [viewer, authors, after?.at ?? null, after?.id ?? null, limit + 1],
  });
  const { page, nextCursor } = keysetPage(rows, limit, (r) => ({ at: r.at, id: r.post_id }));
  return {
    posts: page.map((r) => ({
      postId: r.post_id,
      author: r.author,
      visibility: r.visibility,
      body: r.body,
      aclToken: r.acl_token,
      createdAt: r.created_at,
      likeCount: r.like_count,
      commentCount: r.comment_count,
      liked: r.liked,
    })),
    ...(nextCursor ? { nextCursor } : {}),
  };
}
