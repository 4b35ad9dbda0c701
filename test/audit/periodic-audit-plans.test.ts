/**
 * Nothing periodic may grow with the history: three statements of the periodic audit read what
 * changed, not their whole table, once the tables are large enough for the planner to prefer a
 * scan. Over 20,000 likes (one per item, as like_set writes them), 80,000 like_count rows and
 * 20,000 follows, and a handful of live likes and follows through the ledger, EXPLAIN ANALYZE counts the rows each
 * statement reads from the table that grew with the history:
 *  - the like read side's count rows: only the changed keys' (the form before b3b8a3e, joined to
 *    the whole table, is hashed: the control);
 *  - the notification audit's truth: the changed pairs' relation rows (without OFFSET 0 the
 *    per-pair lookup is flattened into a hash join over every relation row: the control);
 *  - the rotating sample's walk: one page of the item key (the `COLLATE "C"` walk sorted every
 *    item: the control).
 * Each control also answers the same rows as the fixed form, so the fix changed only the plan.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { SAMPLE_WALK_SQL } from "../../src/audit/incremental-audit.ts";
import {
  LIKE_READ_SIDE_INCREMENTAL_SQL,
  NOTIFICATION_AUDIT_INCREMENTAL_SQL,
} from "../../src/audit/incremental-invariants.ts";
import { openLedger, type Ledger } from "../../src/ledger.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";
import { explainAnalyze, rowsRead } from "../support/explain.ts";

const HISTORY = 20_000;
const PARTITIONS = 4;

let db: TestDatabase;
let ledger: Ledger;
/** like_seq's last per partition before the change: the like range starts there. */
let lastBefore: number[];

before(async () => {
  db = await createTestDatabase({ partitions: PARTITIONS });
  ledger = await openLedger(db.pool);
  await db.pool.query(
    `INSERT INTO item (item_id, kind) SELECT 'i' || lpad(g::text, 6, '0'), 'plain' FROM generate_series(1, $1::int) g`,
    [HISTORY],
  );
  // A like per item, written as like_set leaves it (fact, outbox event, sequence) so the outbox has
  // a history the audited range is a small part of, and consumed as far as the watermarks say.
  await db.pool.query(
    `WITH h AS (SELECT g, 'h' || (g % 97) AS user_id, 'i' || lpad(g::text, 6, '0') AS item_id FROM generate_series(1, $1::int) g),
     f AS (INSERT INTO like_fact (user_id, item_id, liked, version) SELECT user_id, item_id, true, 1 FROM h)
     INSERT INTO like_outbox (part, seq, user_id, item_id, delta, version)
     SELECT p, row_number() OVER (PARTITION BY p ORDER BY g), user_id, item_id, 1, 1
       FROM (SELECT h.*, ledger_partition(h.user_id, $2::int) AS p FROM h) x`,
    [HISTORY, PARTITIONS],
  );
  await db.pool.query("UPDATE like_seq s SET last = (SELECT count(*) FROM like_outbox o WHERE o.part = s.part)");
  await db.pool.query("UPDATE counter_watermark w SET applied_upto = s.last FROM like_seq s WHERE s.part = w.part");
  await db.pool.query(
    "UPDATE notification_like_watermark w SET applied_upto = s.last FROM like_seq s WHERE s.part = w.part",
  );
  await db.pool.query(
    `INSERT INTO like_count (item_id, part, n) SELECT 'i' || lpad(g::text, 6, '0'), p, 0 FROM generate_series(1, $1::int) g, generate_series(0, $2::int - 1) p
     ON CONFLICT DO NOTHING`,
    [HISTORY, PARTITIONS],
  );
  lastBefore = (await db.pool.query<{ last: number }>("SELECT last FROM like_seq ORDER BY part")).rows.map(
    (r) => r.last,
  );
  await db.pool.query(
    `INSERT INTO account (account_id) SELECT 'a' || lpad(g::text, 6, '0') FROM generate_series(1, $1::int + 1) g`,
    [HISTORY],
  );
  await db.pool.query(
    `INSERT INTO relation (follower, followee, state, version)
     SELECT 'a' || lpad(g::text, 6, '0'), 'a' || lpad((g + 1)::text, 6, '0'), 'ACTIVE', 1 FROM generate_series(1, $1::int) g`,
    [HISTORY],
  );
  // The change since the last run: the relation and comment outboxes hold nothing else.
  for (let i = 1; i <= 8; i++) {
    await ledger.likes.like(`u${i}`, `i${String(i * 997).padStart(6, "0")}`);
    await ledger.relations.follow(`a${String(i * 1999).padStart(6, "0")}`, `a${String(i * 13).padStart(6, "0")}`);
  }
  await ledger.likeConsumer.drain();
  await ledger.projector.drain();
  await ledger.notifications.drain();
  await db.pool.query("ANALYZE");
});

after(async () => {
  await db?.close();
});

/** The range arguments of one outbox: every partition from `from` (default 0) to its last sequence number. */
async function range(
  sequence: "like_seq" | "event_seq" | "comment_seq" | "post_seq",
  from?: number[],
): Promise<[number[], number[], number[]]> {
  const { rows } = await db.pool.query<{ part: number; last: number }>(
    `SELECT part, last FROM ${sequence} ORDER BY part`,
  );
  return [rows.map((r) => r.part), rows.map((r, i) => from?.[i] ?? 0), rows.map((r) => r.last)];
}

/** Rows `sql` reads from `table`, and its answer, for the fixed form and the form before the fix. */
async function compare(fixed: string, before: string, values: unknown[], table: string) {
  assert.notEqual(before, fixed, "the control must differ from the fixed form");
  const read = {
    fixed: rowsRead(await explainAnalyze(db.pool, fixed, values), table),
    before: rowsRead(await explainAnalyze(db.pool, before, values), table),
  };
  const answers = {
    fixed: (await db.pool.query(fixed, values)).rows,
    before: (await db.pool.query(before, values)).rows,
  };
  return { read, answers };
}

test("the like read side reads the changed keys' count rows; joined to the whole table (control) it reads every one", async (t) => {
  const before = LIKE_READ_SIDE_INCREMENTAL_SQL.replace(
    "LEFT JOIN (SELECT * FROM like_count WHERE item_id = ANY (ARRAY(SELECT key FROM keys))) c ON",
    "LEFT JOIN like_count c ON",
  );
  const { read, answers } = await compare(
    LIKE_READ_SIDE_INCREMENTAL_SQL,
    before,
    [...(await range("like_seq", lastBefore)), [], null],
    "like_count",
  );
  t.diagnostic(`like_count rows read: fixed ${read.fixed}, before ${read.before} (of ${HISTORY * PARTITIONS})`);
  assert.ok(read.fixed <= 8 * PARTITIONS * 2, `the fixed form read ${read.fixed} count rows for 8 changed items`);
  assert.ok(read.before >= HISTORY * PARTITIONS, `control: the whole-table join reads the history (${read.before})`);
  assert.deepEqual(answers.fixed, answers.before);
});

test("the notification audit looks up the changed pairs' truth; flattened (control) it reads every relation row", async (t) => {
  const before = NOTIFICATION_AUDIT_INCREMENTAL_SQL.replace("AND t.active OFFSET 0) t)", "AND t.active) t)");
  const values = [
    ...(await range("like_seq", lastBefore)),
    ...(await range("event_seq")),
    ...(await range("comment_seq")),
    ...(await range("post_seq")),
  ];
  const { read, answers } = await compare(NOTIFICATION_AUDIT_INCREMENTAL_SQL, before, values, "relation");
  t.diagnostic(`relation rows read: fixed ${read.fixed}, before ${read.before} (of ${HISTORY + 8})`);
  assert.ok(read.fixed <= 8 * 4, `the fixed form read ${read.fixed} relation rows for 8 changed pairs`);
  assert.ok(read.before >= HISTORY, `control: the flattened lookup reads the history (${read.before})`);
  assert.deepEqual(answers.fixed, answers.before);
});

test('the rotating sample reads one page of the item key; walked in COLLATE "C" order (control) it reads every item', async (t) => {
  const before = SAMPLE_WALK_SQL.likes.replace(
    "WHERE item_id > $1 ORDER BY item_id",
    `WHERE item_id COLLATE "C" > $1 ORDER BY item_id COLLATE "C"`,
  );
  const { read, answers } = await compare(SAMPLE_WALK_SQL.likes, before, ["i010000", 100], "item");
  t.diagnostic(`item rows read: fixed ${read.fixed}, before ${read.before} (of ${HISTORY})`);
  assert.ok(read.fixed <= 101, `the fixed walk read ${read.fixed} items for a sample of 100`);
  assert.ok(
    read.before >= HISTORY / 2,
    `control: the "C" walk reads the items past the cursor at least (${read.before})`,
  );
  // The ids here are ASCII digits, which sort alike in every collation: the same page either way.
  assert.deepEqual(answers.fixed, answers.before);
  assert.equal(answers.fixed.length, 100);
  assert.equal((answers.fixed[0] as { key: string }).key, "i010001");
});
