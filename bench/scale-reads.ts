/**
 * The scale bench's request-path figures on the generated population: the library's like write
 * rate and p99 on fresh pairs, count read p99, and the first and a deep cursor page of the hot
 * item's likers and of the hub's followers (src/likes/like-reads.ts, src/relations/relation-reads.ts).
 */
import type { Ledger } from "../src/ledger.ts";
import { readCount } from "../src/likes/like-audit.ts";
import { listLikers } from "../src/likes/like-reads.ts";
import { cursorTimeSql, encodeCursor } from "../src/pagination.ts";
import { listFollowers } from "../src/relations/relation-reads.ts";
import { runFixedCount, type Figures } from "./load.ts";
import { itemId, type Population } from "../support/scale-population.ts";

export interface ReadFigures {
  writes: Figures;
  countReads: Figures;
  likersFirst: Figures;
  likersDeep: Figures;
  followersFirst: Figures;
  followersDeep: Figures;
  /** How deep the deep pages start (rows skipped). */
  likersDepth: number;
  followersDepth: number;
}

/** The cursor a client holds after paging `depth` rows of a list (the row at that depth is the last one it saw). */
async function cursorAt(ledger: Ledger, text: string, key: string, depth: number): Promise<string> {
  const { rows } = await ledger.pool.query<{ at: string; id: string }>(text, [key, depth]);
  if (rows.length === 0) throw new Error(`no row at depth ${depth} of ${key}'s list`);
  return encodeCursor({ at: rows[0]!.at, id: rows[0]!.id });
}

const LIKER_AT = `SELECT ${cursorTimeSql("changed_at")} AS at, user_id AS id FROM like_fact WHERE item_id = $1 AND liked
                   ORDER BY changed_at DESC, user_id ASC OFFSET $2 LIMIT 1`;
const FOLLOWER_AT = `SELECT ${cursorTimeSql("since")} AS at, follower AS id FROM proj_follower WHERE followee = $1 AND state = 'ACTIVE'
                      ORDER BY since DESC, follower DESC OFFSET $2 LIMIT 1`;

export async function readFigures(
  ledger: Ledger,
  pop: Population,
  o: { writes: number; reads: number; workers: number },
): Promise<ReadFigures> {
  const { pool, likes } = ledger;
  // Fresh pairs: 1000 writer users, each on items it does not like yet.
  const writes = await runFixedCount(o.writes, o.workers, (k) =>
    likes.like(`wr${k % 1000}`, itemId(2 + ((Math.floor(k / 1000) * 7919 + k) % (pop.items - 1)))),
  );
  const countReads = await runFixedCount(o.reads, o.workers, (k) =>
    readCount(pool, itemId(1 + ((k * 7919) % pop.items)), 1_000_000_000),
  );
  const likersDepth = Math.floor(pop.accounts / 2);
  const followersDepth = Math.floor(pop.accounts / 4);
  const likerCursor = await cursorAt(ledger, LIKER_AT, pop.hotItem, likersDepth);
  const followerCursor = await cursorAt(ledger, FOLLOWER_AT, pop.hub, followersDepth);
  const pages = Math.max(200, Math.floor(o.reads / 5));
  return {
    writes,
    countReads,
    likersDepth,
    followersDepth,
    likersFirst: await runFixedCount(pages, o.workers, () => listLikers(pool, pop.hotItem, {})),
    likersDeep: await runFixedCount(pages, o.workers, () => listLikers(pool, pop.hotItem, { cursor: likerCursor })),
    followersFirst: await runFixedCount(pages, o.workers, () => listFollowers(pool, pop.hub, {})),
    followersDeep: await runFixedCount(pages, o.workers, () =>
      listFollowers(pool, pop.hub, { cursor: followerCursor }),
    ),
  };
}
