/**
 * A product's history as NDJSON at a realistic shape (docs/import.md, "Figures"): accounts (a tenth
 * private, a few erased), items, likes whose items are heavy-tailed (a few hot items take a large
 * share) and whose users are heavy-tailed, follows whose followees are heavy-tailed (a Zipf law:
 * the first accounts have thousands of followers, most have one or none), follows of private
 * accounts PENDING or ACTIVE (approved), and blocks. Deterministic for a seed; no pair is given
 * twice and no line is bad, as a product's export would be.
 */
import { createWriteStream } from "node:fs";

export interface RealisticShape {
  accounts: number;
  items: number;
  likes: number;
  follows: number;
  blocks: number;
  seed?: number;
}

/** The shape: 20,000 accounts, 100,000 items, 200,000 likes, 40,000 follows (and 1,000 blocks). */
export const REALISTIC: RealisticShape = {
  accounts: 20_000,
  items: 100_000,
  likes: 200_000,
  follows: 40_000,
  blocks: 1_000,
};

export interface ShapeCounts {
  lines: number;
  accounts: number;
  items: number;
  likes: number;
  follows: number;
  blocks: number;
  tombstones: number;
}

/** mulberry32: a small deterministic generator (the same file for the same seed). */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A Zipf-like rank in [0, n): P(rank k) about proportional to 1 / (k + 1) (inverse of the harmonic CDF, approximately). */
function zipf(rand: () => number, n: number): number {
  return Math.min(n - 1, Math.floor(Math.exp(rand() * Math.log(n + 1)) - 1));
}

/** The number of hot items, and the share of likes that go to them. */
const HOT_ITEMS = 5;
const HOT_SHARE = 0.2;
export const HOT_SHARE_TEXT = `${HOT_SHARE * 100}% of them on ${HOT_ITEMS} hot items`;

export const accountId = (k: number): string => `acct-${k}`;
export const itemId = (k: number): string => `item-${k}`;

/** Writes the file; what it holds, per kind. */
export async function writeRealisticFile(file: string, shape: RealisticShape): Promise<ShapeCounts> {
  const rand = random(shape.seed ?? 33);
  const out = createWriteStream(file);
  let chunk = "";
  let lines = 0;
  const emit = async (line: string): Promise<void> => {
    chunk += line + "\n";
    lines++;
    if (chunk.length < 1 << 20) return;
    const text = chunk;
    chunk = "";
    if (!out.write(text)) await new Promise<void>((resolve) => out.once("drain", () => resolve()));
  };
  const base = Date.UTC(2023, 0, 1);
  const at = (): string => new Date(base + Math.floor(rand() * 365 * 86_400_000)).toISOString();
  // A few accounts were erased; they appear as their tombstone line only (and as the blocked side of blocks).
  const erased = new Set<number>();
  for (let k = shape.accounts - 1; k >= 0 && erased.size < Math.ceil(shape.accounts / 2000); k -= 997) erased.add(k);
  const isPrivate = (k: number) => !erased.has(k) && k % 10 === 3;
  for (let k = 0; k < shape.accounts; k++) {
    if (erased.has(k)) await emit(`{"kind":"account","id":"${accountId(k)}","erased":true}`);
    else
      await emit(
        `{"kind":"account","id":"${accountId(k)}","private":${isPrivate(k)},"hideCollections":${k % 17 === 5}}`,
      );
  }
  for (let k = 0; k < shape.items; k++) await emit(`{"kind":"item","id":"${itemId(k)}"}`);
  const live = (pick: () => number): number => {
    for (;;) {
      const k = pick();
      if (!erased.has(k)) return k;
    }
  };
  const seen = new Set<string>();
  let likes = 0;
  while (likes < shape.likes) {
    const user = live(() => zipf(rand, shape.accounts));
    const item = rand() < HOT_SHARE ? Math.floor(rand() * HOT_ITEMS) : Math.floor(rand() * shape.items);
    const key = `${user} ${item}`;
    if (seen.has(key)) continue;
    seen.add(key);
    likes++;
    await emit(`{"kind":"like","user":"${accountId(user)}","item":"${itemId(item)}","at":"${at()}"}`);
  }
  seen.clear();
  // Blocks first in the generator's own bookkeeping, so no follow is given between a blocked pair.
  const blocked = new Set<string>();
  let blocks = 0;
  while (blocks < shape.blocks) {
    const blocker = live(() => Math.floor(rand() * shape.accounts));
    const target = rand() < 0.05 && erased.size > 0 ? [...erased][blocks % erased.size]! : zipf(rand, shape.accounts);
    if (blocker === target || blocked.has(`${blocker} ${target}`)) continue;
    blocked.add(`${blocker} ${target}`);
    blocked.add(`${target} ${blocker}`);
    blocks++;
    await emit(`{"kind":"block","blocker":"${accountId(blocker)}","blocked":"${accountId(target)}","at":"${at()}"}`);
  }
  let follows = 0;
  while (follows < shape.follows) {
    const follower = live(() => Math.floor(rand() * shape.accounts));
    const followee = live(() => zipf(rand, shape.accounts));
    const key = `${follower} ${followee}`;
    if (follower === followee || seen.has(key) || blocked.has(key)) continue;
    seen.add(key);
    follows++;
    const state = isPrivate(followee) && rand() < 0.3 ? "PENDING" : "ACTIVE";
    await emit(
      `{"kind":"follow","follower":"${accountId(follower)}","followee":"${accountId(followee)}","state":"${state}","at":"${at()}"}`,
    );
  }
  if (chunk) out.write(chunk);
  await new Promise((resolve) => out.end(resolve));
  return {
    lines,
    accounts: shape.accounts,
    items: shape.items,
    likes,
    follows,
    blocks,
    tombstones: erased.size,
  };
}
