/**
 * While an account is being erased, a like or an unlike of its post or comment is refused on the
 * batched write path (like_set_batch, a batch of several writes sent straight to the function, as
 * group commit sends it) as on the single one (like_set, whose trigger refuses it): REJECTED
 * ACCOUNT_BEING_ERASED naming the author, nothing written, while the other writes of the same
 * batch go through. Controls: the same batch before the erasure starts changes every pair (the
 * items are likeable; a refusal is the erasure's), and the single path refuses the same like.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { AccountBeingErasedError } from "../../src/db/errors.ts";
import type { Pool } from "../../src/db/pool.ts";
import { openLedger } from "../../src/ledger.ts";
import { stablePartition } from "../../src/partition.ts";
import { createTestDatabase } from "../support/test-db.ts";

const P = 4;

interface Write {
  user: string;
  item: string;
  want: boolean;
  /** The API's write (item_state's visibility rule); otherwise like_set's (any existing item). */
  checked: boolean;
}

async function batch(pool: Pool, writes: readonly Write[]): Promise<string[]> {
  const { rows } = await pool.query<{ outcome: string; code: string | null; account: string | null }>(
    "SELECT outcome, code, account FROM like_set_batch($1::text[], $2::text[], $3::boolean[], $4::integer[], $5::boolean[]) ORDER BY ord",
    [
      writes.map((w) => w.user),
      writes.map((w) => w.item),
      writes.map((w) => w.want),
      writes.map((w) => stablePartition(w.user, P)),
      writes.map((w) => w.checked),
    ],
  );
  return rows.map((r) => `${r.outcome}${r.code ? ` ${r.code}` : ""}${r.account ? ` ${r.account}` : ""}`);
}

async function world() {
  const db = await createTestDatabase({ partitions: P });
  const ledger = await openLedger(db.pool);
  for (const a of ["eve", "carl", "u1", "u2", "u3"]) await ledger.relations.upsertAccount(a);
  const evePost = (await ledger.posts.createPost("eve", "PUBLIC", "eve's post")).postId;
  const carlPost = (await ledger.posts.createPost("carl", "PUBLIC", "carl's post")).postId;
  const eveComment = (await ledger.comments.create("eve", carlPost, "eve's comment")).id;
  // u3 liked eve's post and comment before the erasure: an unlike of them is a write towards eve too.
  await ledger.likes.like("u3", evePost);
  await ledger.likes.like("u3", eveComment);
  return { db, ledger, evePost, carlPost, eveComment };
}

/** The batch's writes by `liker`: likes of eve's post and comment (both rules), unlikes by u3, and a like of carl's post. */
function writes(w: Awaited<ReturnType<typeof world>>, liker: string): Write[] {
  return [
    { user: liker, item: w.evePost, want: true, checked: false },
    { user: liker, item: w.eveComment, want: true, checked: false },
    { user: liker, item: w.carlPost, want: true, checked: false },
    { user: "u3", item: w.evePost, want: false, checked: false },
    { user: "u3", item: w.eveComment, want: false, checked: true },
  ];
}

async function written(pool: Pool): Promise<{ facts: string[]; events: number }> {
  const { rows } = await pool.query<{ r: string }>(
    "SELECT user_id || ' ' || item_id || ' ' || liked || ' v' || version AS r FROM like_fact ORDER BY 1",
  );
  const events = Number((await pool.query<{ n: string }>("SELECT count(*) AS n FROM like_outbox")).rows[0]!.n);
  return { facts: rows.map((x) => x.r), events };
}

test("control: before the erasure starts, the same batch changes every pair (the items are likeable)", async (t) => {
  const w = await world();
  t.after(() => w.db.close());
  assert.deepEqual(await batch(w.db.pool, writes(w, "u1")), ["CHANGED", "CHANGED", "CHANGED", "CHANGED", "CHANGED"]);
});

test("while eve is being erased, like_set_batch refuses likes and unlikes of her post and comment (ACCOUNT_BEING_ERASED eve, nothing written) and writes the like of carl's post beside them", async (t) => {
  const w = await world();
  t.after(() => w.db.close());
  // Started, not run: every batch of the erasure is still to come.
  assert.equal((await w.ledger.erasure.start("eve", "admin")).outcome, "STARTED");
  // The single path's answer to the same like, for comparison.
  await assert.rejects(
    w.ledger.likes.like("u1", w.evePost),
    (err: unknown) =>
      err instanceof AccountBeingErasedError || (err as { code?: string }).code === "ACCOUNT_BEING_ERASED",
  );
  const before = await written(w.db.pool);
  const answers = await batch(w.db.pool, writes(w, "u1"));
  t.diagnostic(`note answers: ${answers.join(" | ")}`);
  assert.deepEqual(answers.slice(0, 4), [
    "REJECTED ACCOUNT_BEING_ERASED eve",
    "REJECTED ACCOUNT_BEING_ERASED eve",
    "CHANGED",
    "REJECTED ACCOUNT_BEING_ERASED eve",
  ]);
  // The API's rule may already answer eve's comment as missing (reads answer her as missing): refused either way.
  assert.match(answers[4]!, /^REJECTED (ACCOUNT_BEING_ERASED eve|ITEM_NOT_FOUND)$/);
  const after = await written(w.db.pool);
  assert.equal(after.events - before.events, 1, "one event: the like of carl's post");
  assert.deepEqual(
    after.facts.filter((f) => !f.startsWith(`u1 ${w.carlPost}`)),
    before.facts,
    "no fact of eve's items changed",
  );
});
