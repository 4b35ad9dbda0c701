/**
 * Two of the import's refusals (docs/import.md), each with the line numbers a person needs to
 * fix the file, and nothing written:
 *  - a like line whose user is the reserved id `me` (it means "the caller" in every route), on
 *    each way a line is read (the fast parse of a like written exactly as the export writes it,
 *    and the general JSON parse) and on each import path (the empty-ledger load and the
 *    resumable batches);
 *  - a follow given twice in one file with different states: the later line, naming the earlier.
 * Controls: the same files with an ordinary user id, or with the follow repeated in the same
 * state, or with a different pair in another state, are imported.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { Readable } from "node:stream";
import type { Pool } from "../../src/db/pool.ts";
import { importFacts } from "../../src/portability/import.ts";
import { BadLinesError } from "../../src/portability/import-stage.ts";
import { createTestDatabase } from "../support/test-db.ts";

const text = (lines: readonly string[]) => Readable.from([lines.join("\n") + "\n"]);

async function written(pool: Pool): Promise<Record<string, number>> {
  const { rows } = await pool.query<Record<string, number>>(
    `SELECT (SELECT count(*) FROM import_stage)::int AS staged, (SELECT count(*) FROM import_run)::int AS runs,
            (SELECT count(*) FROM account)::int AS accounts, (SELECT count(*) FROM item)::int AS items,
            (SELECT count(*) FROM like_fact)::int AS likes, (SELECT count(*) FROM relation)::int AS follows`,
  );
  return rows[0]!;
}

/** Line 1 an item, line 2 an account, line 3 the like by `user`, in the export's exact form or with spaces (the general parse). */
function likeFile(user: string, form: "export" | "spaced"): string[] {
  const like =
    form === "export"
      ? JSON.stringify({ kind: "like", user, item: "i1" })
      : `{ "kind": "like", "user": ${JSON.stringify(user)}, "item": "i1" }`;
  return [JSON.stringify({ kind: "item", id: "i1" }), JSON.stringify({ kind: "account", id: "ann" }), like];
}

for (const path of ["empty-ledger", "resumable"] as const) {
  for (const form of ["export", "spaced"] as const) {
    test(`a like by the reserved id 'me' is refused on the ${path} path (${form === "export" ? "fast parse of the export's form" : "general parse"}), line 3 named, nothing written`, async (t) => {
      const db = await createTestDatabase({ partitions: 2, poolSize: 4 });
      t.after(() => db.close());
      const before = await written(db.pool);
      await assert.rejects(
        importFacts(db.pool, text(likeFile("me", form)), {
          emptyLedger: path === "empty-ledger" ? "require" : "never",
        }),
        (err: unknown) => {
          assert.ok(err instanceof BadLinesError, String(err));
          assert.deepEqual(
            err.badLines.map((b) => b.line),
            [3],
          );
          assert.match(err.message, /line 3: user: 'me' is reserved/);
          return true;
        },
      );
      assert.deepEqual(await written(db.pool), before);
    });

    test(`control: the same file with an ordinary user is imported on the ${path} path (${form})`, async (t) => {
      const db = await createTestDatabase({ partitions: 2, poolSize: 4 });
      t.after(() => db.close());
      const report = await importFacts(db.pool, text(likeFile("mel", form)), {
        emptyLedger: path === "empty-ledger" ? "require" : "never",
      });
      assert.equal(report.path, path);
      assert.equal((await written(db.pool)).likes, 1);
    });
  }
}

const follow = (follower: string, followee: string, state: string) =>
  JSON.stringify({ kind: "follow", follower, followee, state });
const account = (id: string) => JSON.stringify({ kind: "account", id });

test("a follow given twice with different states is refused at the later line, naming the earlier one; repeats in the same state and other pairs are not", async (t) => {
  const db = await createTestDatabase({ partitions: 2, poolSize: 4 });
  t.after(() => db.close());
  const lines = [
    account("ann"),
    account("bob"),
    account("cat"), // 1-3
    follow("ann", "bob", "ACTIVE"), // 4: the pair's first line
    follow("bob", "ann", "PENDING"), // 5: the other direction, another pair
    follow("ann", "cat", "PENDING"), // 6: the same follower, another pair
    follow("ann", "bob", "ACTIVE"), // 7: a repeat in the same state
    follow("ann", "bob", "PENDING"), // 8: a different state
  ];
  const before = await written(db.pool);
  await assert.rejects(importFacts(db.pool, text(lines)), (err: unknown) => {
    assert.ok(err instanceof BadLinesError, String(err));
    assert.deepEqual(err.badLines, [{ line: 8, message: "state: the follow ann -> bob is given as ACTIVE on line 4" }]);
    assert.equal(err.total, 1);
    return true;
  });
  assert.deepEqual(await written(db.pool), before);
});

test("control: the same file without its last line is imported (a repeat in the same state, the reverse pair and another followee are no conflict)", async (t) => {
  const db = await createTestDatabase({ partitions: 2, poolSize: 4 });
  t.after(() => db.close());
  const lines = [
    account("ann"),
    account("bob"),
    account("cat"),
    follow("ann", "bob", "ACTIVE"),
    follow("bob", "ann", "PENDING"),
    follow("ann", "cat", "PENDING"),
    follow("ann", "bob", "ACTIVE"),
  ];
  await importFacts(db.pool, text(lines));
  assert.equal((await written(db.pool)).follows, 3);
});
