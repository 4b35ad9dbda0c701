/**
 * The set-based like batch (migration 027) answers and writes exactly what the per-pair loop
 * (migration 024's, kept in the same function for batches that repeat a pair) does. Two
 * databases get the same randomized batches one after the other: one with the production
 * function, one with that function forced onto the loop for every batch (`IF true THEN`). Per
 * write, every answer field must be equal (outcome, liked, version, seq, code, account); after
 * the run like_fact, like_outbox and like_seq must be equal row for row, and so must like_count
 * after the consumer has drained both. The batches mix, at P = 4: likes and unlikes of existing
 * and never-written pairs (NOOPs, an unlike of a never-liked pair), plain items, a public post
 * whose author blocked one reader (HIDDEN: a checked like REJECTED, a checked unlike allowed
 * only while liked), a post only its author may see, a deleted post (MISSING for a checked
 * write, an existing item for an unchecked one), an item that does not exist, the library's
 * rule and the API's (p_checked), and, for the second half, an erasure running (the eraser's
 * likes and likes of the eraser's post REJECTED / ACCOUNT_BEING_ERASED). Most batches have
 * distinct pairs (the set-based path), some repeat a pair (both databases take the loop).
 *
 * Negative controls, each seen by the same comparison: the set-based path answering every NOOP
 * with the version of the batch's first pair (outcomes shared between writes), and sequence
 * numbers handed out in reverse arrival order within a partition.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Pool } from "../../src/db/pool.ts";
import { writeSide, writeSideClean } from "../../src/likes/like-audit.ts";
import { LikeConsumer } from "../../src/likes/like-consumer.ts";
import { LikeService } from "../../src/likes/like-service.ts";
import { stablePartition } from "../../src/partition.ts";
import { seededRandom, shuffle } from "../support/concurrency.ts";
import { replaceFunctionText } from "../support/function-mutant.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";
import { user } from "./fixture.ts";

const SIGNATURE = "like_set_batch(text[], text[], boolean[], integer[], boolean[])";
const P = 4;
const USERS = [user(1), user(2), user(3), user(4), user(5), user(6), "author", "eraser"];
const ITEMS = ["item-a", "item-b", "item-c", "post-public", "post-self", "post-deleted", "post-eraser", "no-such-item"];

interface Write {
  user: string;
  item: string;
  want: boolean;
  checked: boolean;
}

/** Accounts, items and posts of the run, the same in both databases. */
async function seed(db: TestDatabase): Promise<void> {
  const likes = await LikeService.open(db.pool);
  for (const item of ["item-a", "item-b", "item-c"]) await likes.createItem(item);
  await db.pool.query("INSERT INTO account (account_id) SELECT unnest($1::text[])", [USERS]);
  await db.pool.query("INSERT INTO item (item_id, kind) VALUES ('post-public', 'post'), ('post-self', 'post'), ('post-deleted', 'post'), ('post-eraser', 'post')");
  await db.pool.query(
    `INSERT INTO post (post_id, author, visibility, body, part, acl_token) VALUES
       ('post-public', 'author', 'PUBLIC', 'x', 0, 0), ('post-self', 'author', 'SELF', 'x', 0, 0),
       ('post-deleted', 'author', 'PUBLIC', 'x', 0, 0), ('post-eraser', 'eraser', 'PUBLIC', 'x', 0, 0)`,
  );
  await db.pool.query("UPDATE post SET deleted_at = now() WHERE post_id = 'post-deleted'");
  // HIDDEN for user-05: the author blocked them.
  await db.pool.query("INSERT INTO block (blocker, blocked) VALUES ('author', $1)", [user(5)]);
}

/** The run's batches: seeded, so both databases and every run of the test get the same ones. */
function plan(seed: number, batches: number): Write[][] {
  const random = seededRandom(seed);
  const pairs = USERS.flatMap((u) => ITEMS.map((item) => ({ user: u, item })));
  return Array.from({ length: batches }, () => {
    const size = 1 + Math.floor(random() * 16);
    // Distinct pairs in most batches (the set-based path); a repeated pair in about one in six.
    let chosen = shuffle(pairs, random).slice(0, size);
    if (size > 1 && random() < 0.17) chosen = [...chosen, chosen[Math.floor(random() * chosen.length)]!];
    return chosen.map((p) => ({ ...p, want: random() < 0.55, checked: random() < 0.4 }));
  });
}

async function batch(pool: Pool, writes: readonly Write[]): Promise<string[]> {
  const { rows } = await pool.query<{ ord: number; outcome: string; liked: boolean; version: string; seq: string; code: string | null; account: string | null }>(
    `SELECT ord, outcome, liked, version, seq, code, account
       FROM like_set_batch($1::text[], $2::text[], $3::boolean[], $4::integer[], $5::boolean[]) ORDER BY ord`,
    [writes.map((w) => w.user), writes.map((w) => w.item), writes.map((w) => w.want), writes.map((w) => stablePartition(w.user, P)), writes.map((w) => w.checked)],
  );
  return rows.map((r) => `${r.ord}:${r.outcome}${r.code ? `:${r.code}` : ""}${r.account ? `:${r.account}` : ""} liked=${r.liked} v${r.version} seq${r.seq}`);
}

const TABLES: Record<string, string> = {
  like_fact: "SELECT user_id, item_id, liked, version FROM like_fact ORDER BY user_id, item_id",
  like_outbox: "SELECT part, seq, user_id, item_id, delta, version FROM like_outbox ORDER BY part, seq",
  like_seq: "SELECT part, last FROM like_seq ORDER BY part",
  like_count: "SELECT item_id, part, n FROM like_count WHERE n <> 0 ORDER BY item_id, part",
};

async function table(pool: Pool, sql: string): Promise<string[]> {
  return (await pool.query(sql)).rows.map((r) => JSON.stringify(r));
}

/**
 * Plays the plan on `subject` and on `reference` (forced onto the loop) and returns what differs,
 * with how many batches took which path and what they answered, for the note.
 */
async function differences(subject: TestDatabase, reference: TestDatabase, seed: number): Promise<{ problems: string[]; note: string }> {
  const problems: string[] = [];
  const batches = plan(seed, 160);
  const outcomes = new Map<string, number>();
  let distinct = 0;
  for (const [b, writes] of batches.entries()) {
    if (b === batches.length / 2) {
      // From here on an erasure of `eraser` is running (its likes and the likes of its post are refused).
      for (const db of [subject, reference]) {
        await db.pool.query("INSERT INTO account_erasure (account_id, requested_by, phase, total) VALUES ('eraser', 'admin', 'likes', 0)");
      }
    }
    if (new Set(writes.map((w) => `${w.user}\u0000${w.item}`)).size === writes.length) distinct++;
    const [got, want] = [await batch(subject.pool, writes), await batch(reference.pool, writes)];
    for (const row of want) {
      const key = row.split(" ")[0]!.split(":").slice(1).join(":");
      outcomes.set(key, (outcomes.get(key) ?? 0) + 1);
    }
    for (let i = 0; i < want.length; i++) {
      if (got[i] !== want[i]) problems.push(`batch ${b} (${JSON.stringify(writes[i])}): ${got[i]} instead of ${want[i]}`);
    }
  }
  for (const db of [subject, reference]) await new LikeConsumer(db.pool).drain();
  for (const [name, sql] of Object.entries(TABLES)) {
    const [got, want] = [await table(subject.pool, sql), await table(reference.pool, sql)];
    if (got.join("\n") !== want.join("\n")) {
      const extra = got.filter((r) => !want.includes(r)).slice(0, 3);
      const missing = want.filter((r) => !got.includes(r)).slice(0, 3);
      problems.push(`${name} differs: ${got.length} rows against ${want.length}; only in the subject ${extra.join(" ")}; only in the loop's ${missing.join(" ")}`);
    }
  }
  if (!writeSideClean(await writeSide(subject.pool))) problems.push("the subject's write-side audit is not clean");
  const note = `${batches.length} batches (${distinct} of distinct pairs), ${batches.flat().length} writes; answers ${[...outcomes].map(([k, n]) => `${k}=${n}`).join(" ")}`;
  return { problems, note };
}

async function pairOfDatabases(): Promise<[TestDatabase, TestDatabase]> {
  const subject = await createTestDatabase({ partitions: P });
  const reference = await createTestDatabase({ partitions: P });
  for (const db of [subject, reference]) await seed(db);
  await replaceFunctionText(reference.pool, SIGNATURE, [["IF NOT v_distinct THEN", "IF true THEN"]]);
  return [subject, reference];
}

for (const seed of [2701, 2702]) {
  test(`seed ${seed}: randomized batches at P=4 answer and write exactly what the per-pair loop answers and writes (facts, outbox, sequences, counts after the consumer)`, async (t) => {
    const [subject, reference] = await pairOfDatabases();
    t.after(async () => {
      await subject.close();
      await reference.close();
    });
    const { problems, note } = await differences(subject, reference, seed);
    t.diagnostic(`note ${note}`);
    assert.deepEqual(problems, []);
  });
}

const CONTROLS: { name: string; edits: [string, string][] }[] = [
  {
    // Outcomes shared: every NOOP the set-based path answers from its first read carries the
    // version of the batch's first pair in the global order instead of its own pair's.
    name: "NOOP answers share the first pair's version",
    edits: [["o_outcome[i] := 'NOOP'; o_liked[i] := s_liked[j]; o_version[i] := s_version[j];", "o_outcome[i] := 'NOOP'; o_liked[i] := s_liked[j]; o_version[i] := s_version[1];"]],
  },
  {
    // Sequence numbers handed out against arrival order within a partition (still gapless).
    name: "sequence numbers handed out in reverse arrival order",
    edits: [["FOR i IN 1 .. n LOOP\n      IF o_outcome[i] = 'CHANGED'", "FOR i IN REVERSE n .. 1 LOOP\n      IF o_outcome[i] = 'CHANGED'"]],
  },
];

for (const control of CONTROLS) {
  test(`negative control: ${control.name}: the comparison sees it`, async (t) => {
    const [subject, reference] = await pairOfDatabases();
    t.after(async () => {
      await subject.close();
      await reference.close();
    });
    await replaceFunctionText(subject.pool, SIGNATURE, control.edits);
    const { problems } = await differences(subject, reference, 2701);
    t.diagnostic(`note control: ${problems.length} problems, first: ${problems.slice(0, 2).join("; ")}`);
    assert.ok(problems.length > 0, "the comparison sees the broken variant");
  });
}
