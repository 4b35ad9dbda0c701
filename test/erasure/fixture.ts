/**
 * The erasure tests' world: an account `eve` with a fact of every kind (posts with likes and
 * comments of others, comments of her own with likes, likes, follows and follow requests both
 * ways, blocks both ways) and a control account `carl` with the same kinds, which an erasure of
 * eve must leave exactly as it is. Counts are read with SQL of the tests' own (not the service's).
 */
import { Hooks } from "../../src/hooks.ts";
import { openLedger, type Ledger } from "../../src/ledger.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";

export interface World {
  db: TestDatabase;
  ledger: Ledger;
  hooks: Hooks;
  /** eve's live posts, her tombstoned one, her comments, carl's post and the others' comments. */
  evePosts: string[];
  eveDeletedPost: string;
  eveComments: string[];
  carlPost: string;
  u1Comment: string;
  close(): Promise<void>;
}

export const OTHERS = ["u1", "u2", "u3", "u4", "u5", "u6"];

export async function buildWorld(options: { partitions?: number; batchSize?: number } = {}): Promise<World> {
  const db = await createTestDatabase({ partitions: options.partitions ?? 4 });
  const hooks = new Hooks();
  const ledger = await openLedger(db.pool, {
    hooks,
    ...(options.batchSize ? { erasureBatchSize: options.batchSize } : {}),
  });
  for (const a of ["eve", "carl", ...OTHERS]) await ledger.relations.upsertAccount(a);
  await ledger.relations.upsertAccount("u2", { private: true });
  await ledger.likes.createItem("plain-x");

  const carlPost = (await ledger.posts.createPost("carl", "PUBLIC", "carl's post")).postId;
  const evePosts = [
    (await ledger.posts.createPost("eve", "PUBLIC", "eve 1")).postId,
    (await ledger.posts.createPost("eve", "FOLLOWERS", "eve 2")).postId,
    (await ledger.posts.createPost("eve", "PUBLIC", "eve 3")).postId,
  ];
  const eveDeletedPost = (await ledger.posts.createPost("eve", "PUBLIC", "eve gone")).postId;
  const u1Comment = (await ledger.comments.create("u1", carlPost, "u1 on carl")).id;
  const eveComments = [
    (await ledger.comments.create("eve", carlPost, "eve on carl", { idempotencyKey: "k1" })).id,
    (await ledger.comments.create("eve", carlPost, "eve reply", { parentId: u1Comment })).id,
    (await ledger.comments.create("eve", evePosts[0]!, "eve on eve")).id,
  ];
  await ledger.comments.create("u3", evePosts[0]!, "u3 on eve");
  await ledger.comments.create("carl", carlPost, "carl on carl");

  // eve's likes; likes of eve's posts and comments by others (and one by eve herself).
  for (const item of [carlPost, "plain-x", u1Comment]) await ledger.likes.like("eve", item);
  for (const u of ["u1", "u3", "carl"]) await ledger.likes.like(u, evePosts[0]!);
  await ledger.likes.like("eve", evePosts[2]!);
  await ledger.likes.like("u1", eveComments[0]!);
  await ledger.likes.like("carl", eveComments[2]!);
  await ledger.likes.like("u1", eveDeletedPost);
  // the control's likes
  for (const u of ["u1", "u3"]) await ledger.likes.like(u, carlPost);
  await ledger.likes.like("carl", "plain-x");
  await ledger.posts.deletePost("eve", eveDeletedPost);

  // follows both ways, a request from eve (u2 is private), a request to eve (made private later).
  await ledger.relations.follow("eve", "carl");
  await ledger.relations.follow("eve", "u1");
  await ledger.relations.follow("eve", "u2");
  await ledger.relations.follow("u1", "eve");
  await ledger.relations.follow("u3", "eve");
  await ledger.relations.upsertAccount("eve", { private: true });
  await ledger.relations.follow("u4", "eve");
  // a follow of eve that was removed before: a REMOVED row the erasure leaves alone.
  await ledger.relations.follow("carl", "eve");
  await ledger.relations.unfollow("carl", "eve");
  // blocks both ways
  await ledger.relations.block("eve", "u5");
  await ledger.relations.block("u6", "eve");
  // the control's relations
  await ledger.relations.follow("u1", "carl");
  await ledger.relations.follow("u3", "carl");
  await ledger.relations.block("carl", "u6");
  await drain(ledger);
  return { db, ledger, hooks, evePosts, eveDeletedPost, eveComments, carlPost, u1Comment, close: () => db.close() };
}

export async function drain(ledger: Ledger): Promise<void> {
  await ledger.likeConsumer.drain();
  await ledger.projector.drain();
  await ledger.commentConsumer.drain();
}

export interface Counts {
  likes: Record<string, number>;
  comments: Record<string, number>;
  followers: Record<string, number>;
  following: Record<string, number>;
  blocks: number;
}

/** Every derived count of the database (like_count, comment_count, proj_count) and the truth's following counts, by key. */
export async function readCounts(db: TestDatabase): Promise<Counts> {
  const map = async (sql: string) =>
    Object.fromEntries((await db.pool.query<{ k: string; n: number }>(sql)).rows.map((r) => [r.k, Number(r.n)]));
  return {
    likes: await map("SELECT item_id AS k, sum(n) AS n FROM like_count GROUP BY item_id"),
    comments: await map("SELECT post_id AS k, sum(n) AS n FROM comment_count GROUP BY post_id"),
    followers: await map("SELECT followee AS k, n FROM proj_count"),
    following: await map("SELECT follower AS k, count(*) AS n FROM relation WHERE state = 'ACTIVE' GROUP BY follower"),
    blocks: Number((await db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM block")).rows[0]!.n),
  };
}

/** `before` with the given changes applied: what every count must be afterwards, key by key. */
export function expectCounts(
  before: Counts,
  delta: {
    likes?: Record<string, number>;
    comments?: Record<string, number>;
    followers?: Record<string, number>;
    following?: Record<string, number>;
    blocks?: number;
  },
): Counts {
  const apply = (base: Record<string, number>, d: Record<string, number> = {}) => {
    const out = { ...base };
    for (const [k, v] of Object.entries(d)) out[k] = (out[k] ?? 0) + v;
    return out;
  };
  return {
    likes: apply(before.likes, delta.likes),
    comments: apply(before.comments, delta.comments),
    followers: apply(before.followers, delta.followers),
    following: apply(before.following, delta.following),
    blocks: before.blocks + (delta.blocks ?? 0),
  };
}

/** Counts with zero entries left out (a count row may stay at 0 or be absent). */
export function nonZero(c: Counts): Counts {
  const strip = (r: Record<string, number>) => Object.fromEntries(Object.entries(r).filter(([, n]) => n !== 0));
  return {
    likes: strip(c.likes),
    comments: strip(c.comments),
    followers: strip(c.followers),
    following: strip(c.following),
    blocks: c.blocks,
  };
}
