/**
 * A small mixed workload for the transport tests (likes, follows, comments: every kind the relay
 * carries) and the checks that the derived side equals the facts once it has drained.
 */
import assert from "node:assert/strict";
import { fullAudit } from "../../src/api/routes/admin.ts";
import type { Pool } from "../../src/db/pool.ts";
import type { Ledger } from "../../src/ledger.ts";
import { transportLag } from "../../src/transport/relay-watermark.ts";
import { seededRandom } from "../support/concurrency.ts";

export const USERS = Array.from({ length: 10 }, (_, i) => `u${i}`);
export const ITEMS = ["i0", "i1", "i2", "i3"];

export interface Workload {
  posts: string[];
  comments: string[];
}

export async function setUp(ledger: Ledger): Promise<Workload> {
  for (const u of USERS) await ledger.relations.upsertAccount(u, { private: false });
  for (const i of ITEMS) await ledger.likes.createItem(i);
  const posts: string[] = [];
  for (const u of USERS.slice(0, 3)) posts.push((await ledger.posts.createPost(u, "PUBLIC", `post of ${u}`)).postId);
  // Applied here: a test whose workers run some kinds only starts with nothing pending in the others.
  await ledger.feed.drain();
  return { posts, comments: [] };
}

/** `n` writes, each one event at most: like/unlike, follow/unfollow, comment/delete a comment. */
export async function writeSome(ledger: Ledger, w: Workload, n: number, seed: number): Promise<void> {
  const rand = seededRandom(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  for (let i = 0; i < n; i++) {
    const u = pick(USERS);
    const r = rand();
    if (r < 0.45) {
      const item = pick(ITEMS);
      if (rand() < 0.65) await ledger.likes.like(u, item);
      else await ledger.likes.unlike(u, item);
    } else if (r < 0.8) {
      const other = pick(USERS);
      if (other === u) continue;
      if (rand() < 0.65) await ledger.relations.follow(u, other);
      else await ledger.relations.unfollow(u, other);
    } else if (r < 0.93 || w.comments.length === 0) {
      w.comments.push((await ledger.comments.create(u, pick(w.posts), `c${seed}-${i}`)).id);
    } else {
      const id = w.comments.splice(Math.floor(rand() * w.comments.length), 1)[0]!;
      const { rows } = await ledger.pool.query<{ author: string }>("SELECT author FROM comment WHERE comment_id = $1", [
        id,
      ]);
      await ledger.comments.delete(rows[0]!.author, id);
    }
  }
}

/** Σ over kinds and partitions of (last - applied_upto), one snapshot. */
export async function totalLag(pool: Pool): Promise<number> {
  return (await transportLag(pool)).reduce((a, r) => a + r.last - r.applied, 0);
}

/**
 * Drained: every watermark at its partition's last seq (so contiguous up to it, by construction of
 * advanceWatermark) and every processed key up to it present or pruned; counts equal the facts
 * (the project's audits, and the like counts against like_fact directly); the projection caught up.
 */
export async function assertConverged(ledger: Ledger): Promise<void> {
  for (const r of await transportLag(ledger.pool))
    assert.equal(r.applied, r.last, `${r.kind} partition ${r.part}: watermark ${r.applied} reached last ${r.last}`);
  const audit = await fullAudit(ledger);
  assert.equal(audit.relations.projectionCaughtUp, true, "the follower projection caught up");
  assert.ok(audit.clean, `audit clean: ${JSON.stringify(audit)}`);
  const { rows } = await ledger.pool.query<{ item_id: string; counted: string; facts: string }>(
    `SELECT i.item_id, coalesce((SELECT sum(n) FROM like_count c WHERE c.item_id = i.item_id), 0) AS counted,
            (SELECT count(*) FROM like_fact f WHERE f.item_id = i.item_id AND f.liked) AS facts
       FROM item i ORDER BY 1`,
  );
  for (const r of rows) assert.equal(Number(r.counted), Number(r.facts), `like count of ${r.item_id} equals its facts`);
}

/** Watermark contiguity from the dedup keys: after a drain every seq 1..last has its key (nothing is pruned in these tests). */
export async function assertDedupKeysComplete(pool: Pool): Promise<void> {
  const { rows } = await pool.query<{ view: string; part: number; last: string; keys: string }>(
    `SELECT 'likes' AS view, s.part, s.last, (SELECT count(*) FROM processed_event p WHERE p.part = s.part AND p.seq <= s.last) AS keys FROM like_seq s
     UNION ALL SELECT 'relations', s.part, s.last, (SELECT count(*) FROM proj_seen p WHERE p.part = s.part AND p.seq <= s.last) FROM event_seq s
     UNION ALL SELECT 'comments', s.part, s.last, (SELECT count(*) FROM comment_processed p WHERE p.part = s.part AND p.seq <= s.last) FROM comment_seq s`,
  );
  for (const r of rows)
    assert.equal(
      Number(r.keys),
      Number(r.last),
      `${r.view} partition ${r.part}: one dedup key for each of 1..${r.last}`,
    );
}
