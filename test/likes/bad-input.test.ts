import { test } from "node:test";
import assert from "node:assert/strict";
import { WriteGuard, invalidInput } from "../support/write-guard.ts";
import { initLedger } from "../../src/db/ledger-config.ts";
import { PartitionConfigError } from "../../src/errors.ts";
import { readCount } from "../../src/likes/like-audit.ts";
import { UnknownItemsError } from "../../src/likes/like-rebuild.ts";
import { ITEM_NOT_FOUND } from "../../src/likes/like-service.ts";
import type { LikeEvent } from "../../src/likes/types.ts";
import { likesFixture, user, type LikesFixture } from "./fixture.ts";

/**
 * Bad input never reaches the database: every public entry point rejects it with a typed
 * error naming the field, sends no statement, and leaves every table byte-for-byte as it
 * was. Inputs that are well-formed but refer to nothing (an unknown item, a partition count
 * the database was not created with) are rejected by the database and also write nothing.
 */

const PARTITIONS = 2;
const BRIEF_TABLES = [
  "like_fact",
  "like_outbox",
  "like_seq",
  "like_count",
  "processed_event",
  "item",
  "like_rebuild_run",
];

let f: LikesFixture;
let guard: WriteGuard;
let pendingByPart: LikeEvent[][];

test.before(async () => {
  f = await likesFixture(PARTITIONS);
  // Committed history: likes, an unlike, all consumed, one rebuild run recorded.
  const inPart = (p: number) =>
    Array.from({ length: 40 }, (_, i) => user(i + 1))
      .filter((u) => f.likes.partitionOf(u) === p)
      .slice(0, 4);
  const users = [...inPart(0), ...inPart(1)];
  assert.equal(users.length, 8, "users in both partitions");
  for (const u of users) await f.likes.like(u, "item-lab-01");
  for (const u of users.slice(0, 4)) await f.likes.like(u, "item-lab-02");
  await f.likes.unlike(users[0]!, "item-lab-01");
  await f.consumer.drain();
  await f.rebuild.rebuild();
  // Pending work in both partitions, so that a stray consumer batch or install would change rows.
  for (const u of [...inPart(0).slice(0, 2), ...inPart(1).slice(0, 2)]) await f.likes.like(u, "item-lab-03");
  await f.likes.unlike(users[5]!, "item-lab-01");
  pendingByPart = [await f.consumer.fetchPending(0, 100), await f.consumer.fetchPending(1, 100)];
  assert.ok(pendingByPart[0]!.length > 0 && pendingByPart[1]!.length > 0, "pending events in both partitions");
  guard = await WriteGuard.create(f.db.url, f.db.pool, {
    mustHave: BRIEF_TABLES,
    figures: {
      "like_seq.sum(last)": "SELECT sum(last) FROM like_seq",
      "counter_watermark.sum(applied_upto)": "SELECT sum(applied_upto) FROM counter_watermark",
      "like_count.sum(n)": "SELECT coalesce(sum(n), 0) FROM like_count",
    },
  });
  const s = await guard.snapshot();
  for (const t of BRIEF_TABLES)
    assert.notEqual(s[t]!.split(":")[0], "0", `${t} is not empty, so a stray write or delete is visible`);
});

test.after(async () => {
  await guard?.close();
  await f?.close();
});

const BAD_IDS: [string, unknown][] = [
  ["empty", ""],
  ["129 characters", "a".repeat(129)],
  ["leading space", " item-lab-01"],
  ["inner space", "item lab"],
  ["trailing space", "item-lab-01 "],
  ["tab", "item\tlab"],
  ["newline inside", "item\nlab"],
  ["trailing newline", "item-lab-01\n"],
  ["leading newline", "\nitem-lab-01"],
  ["slash", "item/lab"],
  ["path traversal", "../item-lab-01"],
  ["leading dash", "-item"],
  ["non-ASCII", "itém"],
  ["NUL", "item\u0000lab"],
  ["number 42", 42],
  ["null", null],
  ["undefined", undefined],
  ["object", { id: "item-lab-01" }],
  ["array", ["item-lab-01"]],
];

test("malformed ids: every entry point throws InvalidInputError naming the field, sends nothing, writes nothing", async () => {
  const u = user(1);
  const item = "item-lab-01";
  for (const [label, bad] of BAD_IDS) {
    const id = bad as string; // deliberately the wrong type at run time, as an untyped caller would pass it
    const calls: [string, string, () => Promise<unknown>][] = [
      ["like(userId)", "userId", () => f.likes.like(id, item)],
      ["like(itemId)", "itemId", () => f.likes.like(u, id)],
      ["unlike(userId)", "userId", () => f.likes.unlike(id, item)],
      ["unlike(itemId)", "itemId", () => f.likes.unlike(u, id)],
      ["hasLiked(userId)", "userId", () => f.likes.hasLiked(id, item)],
      ["hasLiked(itemId)", "itemId", () => f.likes.hasLiked(u, id)],
      ["readCount(itemId)", "itemId", () => readCount(f.db.pool, id, 0)],
      ["createItem(itemId)", "itemId", () => f.likes.createItem(id)],
      ["rebuild({items:[bad]})", "itemId", () => f.rebuild.rebuild({ items: [id] })],
      ["rebuild({items:[good, bad]})", "itemId", () => f.rebuild.rebuild({ items: [item, "item-lab-03", id] })],
    ];
    for (const [name, field, call] of calls) {
      await guard.rejectsWritingNothing(`${name} with ${label}`, call, invalidInput(field), { noStatements: true });
    }
  }
});

test("allowedLag must be a non-negative safe integer", async () => {
  for (const bad of [-1, -16, 1.5, 0.1, NaN, Infinity, -Infinity, 2 ** 53, "16", "0", null, undefined, true, {}]) {
    await guard.rejectsWritingNothing(
      `readCount allowedLag=${String(bad)}`,
      () => readCount(f.db.pool, "item-lab-01", bad as number),
      invalidInput("allowedLag"),
      { noStatements: true },
    );
  }
  // Positive control: the boundary values are accepted and read (statements are sent).
  guard.statements = 0;
  const reading = await readCount(f.db.pool, "item-lab-01", 0);
  assert.ok(guard.statements > 0);
  assert.equal(reading.stale, reading.lag > 0);
  assert.equal((await readCount(f.db.pool, "item-lab-01", Number.MAX_SAFE_INTEGER)).stale, false);
});

test("unknown item: like/unlike are REJECTED with ITEM_NOT_FOUND, rebuild throws UnknownItemsError; nothing written", async () => {
  const otherPartitionUser = Array.from({ length: 40 }, (_, i) => user(i + 1)).find(
    (u) => f.likes.partitionOf(u) !== f.likes.partitionOf(user(1)),
  )!;
  for (const [name, call] of [
    ["like", () => f.likes.like(user(1), "nope")],
    ["unlike", () => f.likes.unlike(user(1), "nope")],
    ["like (user of the other partition)", () => f.likes.like(otherPartitionUser, "no-such-item")],
  ] as const) {
    const before = await guard.snapshot();
    const result = await call();
    assert.equal(result.outcome, "REJECTED", name);
    assert.equal(result.code, ITEM_NOT_FOUND);
    assert.equal(result.seq, 0, "no sequence number was taken");
    assert.deepEqual(await guard.snapshot(), before, `${name}: nothing written (no fact, no event, no seq bump)`);
  }
  await guard.rejectsWritingNothing(
    "rebuild({items:['nope']})",
    () => f.rebuild.rebuild({ items: ["nope"] }),
    (err) => {
      assert.ok(err instanceof UnknownItemsError, String(err));
      assert.equal(err.code, ITEM_NOT_FOUND);
      assert.deepEqual(err.itemIds, ["nope"]);
      return true;
    },
    { noStatements: false },
  );
  // Known items listed before the unknown ones are not installed either: the check comes first.
  await guard.rejectsWritingNothing(
    "rebuild({items:[known..., unknown...]})",
    () => f.rebuild.rebuild({ items: ["item-lab-01", "item-lab-03", "nope-1", "nope-2"] }),
    (err) => err instanceof UnknownItemsError && err.itemIds.slice().sort().join(",") === "nope-1,nope-2",
    { noStatements: false },
  );
  const before = await guard.snapshot();
  assert.deepEqual(await f.likes.hasLiked(user(1), "nope"), { liked: false, version: 0 });
  assert.deepEqual(await guard.snapshot(), before);
});

test("initLedger: malformed partitions -> InvalidInputError; a different P than the database's -> PartitionConfigError", async () => {
  for (const bad of [0, -1, 1025, 2000, 1.5, NaN, Infinity, "2", null, true]) {
    await guard.rejectsWritingNothing(
      `initLedger({partitions: ${String(bad)}})`,
      () => initLedger(f.db.pool, { partitions: bad as number }),
      invalidInput("partitions"),
      { noStatements: true },
    );
  }
  for (const other of [1, 3, 4, 1024]) {
    await guard.rejectsWritingNothing(
      `initLedger({partitions: ${other}}) on a P=${PARTITIONS} database`,
      () => initLedger(f.db.pool, { partitions: other }),
      (err) => {
        assert.ok(err instanceof PartitionConfigError, String(err));
        assert.equal(err.code, "PARTITION_CONFIG");
        assert.match(err.message, new RegExp(`created with ${PARTITIONS} partition\\(s\\).*reopened with ${other}`));
        return true;
      },
      { noStatements: false },
    );
  }
  // Reopening with the same P, or without saying, is a no-op.
  const before = await guard.snapshot();
  assert.equal(await initLedger(f.db.pool, { partitions: PARTITIONS }), PARTITIONS);
  assert.equal(await initLedger(f.db.pool), PARTITIONS);
  assert.deepEqual(await guard.snapshot(), before);
});

test("LikeConsumer.applyBatch: a batch spanning two partitions, or an empty batch, is refused before anything is written", async () => {
  const [p0, p1] = pendingByPart as [LikeEvent[], LikeEvent[]];
  for (const [label, batch] of [
    ["p0 + p1", [...p0, ...p1]],
    ["p1 + one event of p0", [...p1, p0[0]!]],
    ["empty", []],
  ] as const) {
    await guard.rejectsWritingNothing(
      `applyBatch(${label})`,
      () => f.consumer.applyBatch(batch),
      invalidInput("events"),
      { noStatements: true },
    );
  }
});

test("negative controls: the snapshot and the statement counter see a single write", async () => {
  // The longest valid id is accepted and its insert is visible in the snapshot.
  let before = await guard.snapshot();
  guard.statements = 0;
  await f.likes.createItem("a".repeat(128));
  assert.ok(guard.statements > 0);
  let after = await guard.snapshot();
  assert.notDeepEqual(after, before);
  assert.notEqual(after.item, before.item);

  // A valid batch of one partition is applied: processed_event, like_count and the watermark move.
  before = after;
  const applied = await f.consumer.applyBatch(pendingByPart[0]!);
  assert.equal(applied.applied, pendingByPart[0]!.length);
  after = await guard.snapshot();
  for (const t of ["processed_event", "like_count", "counter_watermark"])
    assert.notEqual(after[t], before[t], `${t} changed`);

  // Rebuilding the known items alone installs them: the rejected mixed rebuild above would have shown this.
  before = after;
  await f.rebuild.rebuild({ items: ["item-lab-01", "item-lab-03"] });
  after = await guard.snapshot();
  assert.notEqual(after.like_count, before.like_count, "an install rewrites like_count rows");
  assert.notEqual(after.like_rebuild_run, before.like_rebuild_run, "a run is recorded");
});
