/**
 * Bad input to the relations API writes nothing. Malformed arguments are refused with an
 * InvalidInputError naming the field before any statement is sent; well-formed arguments that
 * refer to nothing (an unknown account or post) are refused by the database with a typed error;
 * self-follow and self-block are REJECTED results with a code. In every case the row counts of
 * relation, block, relation_event, post, item, account, proj_follower and sum(event_seq.last),
 * and an md5 of every table, are the same before and after.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { WriteGuard, invalidInput } from "../support/write-guard.ts";
import { AccountNotFoundError } from "../../src/relations/errors.ts";
import { PostNotFoundError } from "../../src/content/post-errors.ts";
import { followerCount, listFollowers } from "../../src/relations/relation-reads.ts";
import type { RelationResult } from "../../src/relations/types.ts";
import type { ReadMode, Visibility } from "../../src/content/post-types.ts";
import { acct, relationsFixture, type RelationsFixture } from "./fixture.ts";

const PARTITIONS = 2;
const ACCOUNTS = 20;
const PRIVATE = 3;
/** The figures the brief names; each also gets an md5 over all rows of every table. */
const COUNTED = ["relation", "block", "relation_event", "post", "item", "account", "proj_follower"];

let f: RelationsFixture;
let guard: WriteGuard;
let followersPost: string; // a FOLLOWERS post of acct(1)

function accountNotFound(...ids: string[]) {
  return (err: unknown): boolean => {
    assert.ok(err instanceof AccountNotFoundError, `expected AccountNotFoundError, got ${String(err)}`);
    assert.equal(err.code, "ACCOUNT_NOT_FOUND");
    for (const id of ids) assert.ok(err.message.includes(id), `the message names ${id}: ${err.message}`);
    return true;
  };
}

/** A REJECTED result with a reason and the code, no event, and no row written. */
async function rejectedWritingNothing(
  label: string,
  action: () => Promise<RelationResult>,
  code: string,
): Promise<RelationResult> {
  const before = await guard.snapshot();
  const r = await action();
  assert.equal(r.outcome, "REJECTED", label);
  assert.equal(r.code, code, label);
  assert.ok(r.reason.length > 0, `${label}: a reason is given`);
  assert.equal(r.seq, 0, `${label}: no sequence number was taken`);
  assert.deepEqual(await guard.snapshot(), before, `${label}: nothing written`);
  return r;
}

test.before(async () => {
  f = await relationsFixture(PARTITIONS, ACCOUNTS, [PRIVATE]);
  // Committed, projected history in both partitions: follows, a pending request, a block, posts.
  for (let i = 2; i <= 8; i++) await f.rel.follow(acct(i), acct(1));
  await f.rel.follow(acct(1), acct(PRIVATE));
  await f.rel.follow(acct(4), acct(PRIVATE));
  await f.rel.decide(acct(PRIVATE), acct(4), true);
  await f.rel.follow(acct(5), acct(6));
  await f.rel.block(acct(6), acct(5));
  followersPost = (await f.posts.createPost(acct(1), "FOLLOWERS", "for followers")).postId;
  await f.posts.createPost(acct(PRIVATE), "PUBLIC", "public");
  await f.projector.drain();
  // Pending events, so that a stray projector run would change rows too.
  for (let i = 9; i <= 14; i++) await f.rel.follow(acct(i), acct(i + 1));
  await f.rel.unfollow(acct(2), acct(1));
  guard = await WriteGuard.create(f.db.url, f.db.pool, {
    mustHave: COUNTED,
    figures: {
      ...Object.fromEntries(COUNTED.map((t) => [`count(${t})`, `SELECT count(*) FROM ${t}`])),
      "sum(event_seq.last)": "SELECT sum(last) FROM event_seq",
    },
  });
  const s = await guard.snapshot();
  for (const t of COUNTED)
    assert.notEqual(Number(s[`count(${t})`]), 0, `${t} is not empty, so a stray write or delete is visible`);
  const { rows } = await guard.observer.query<{ parts: number; lag: number }>(
    `SELECT (SELECT count(DISTINCT part) FROM relation_event)::int AS parts,
            (SELECT sum(s.last - w.applied_upto) FROM event_seq s JOIN proj_watermark w USING (part))::int AS lag`,
  );
  assert.equal(rows[0]!.parts, PARTITIONS, "events in every partition");
  assert.ok(rows[0]!.lag > 0, "unprojected events exist");
});

test.after(async () => {
  await guard?.close();
  await f?.close();
});

test("30-bad-input self-follow and self-block are REJECTED with a reason and SELF_FOLLOW / SELF_BLOCK; nothing written", async (t) => {
  // acct(1) has followers and a post; acct(6) has blocked; acct(ACCOUNTS) has no history at all.
  for (const a of [acct(1), acct(6), acct(PRIVATE), acct(ACCOUNTS)]) {
    const follow = await rejectedWritingNothing(`follow(${a}, ${a})`, () => f.rel.follow(a, a), "SELF_FOLLOW");
    const block = await rejectedWritingNothing(`block(${a}, ${a})`, () => f.rel.block(a, a), "SELF_BLOCK");
    await rejectedWritingNothing(`unfollow(${a}, ${a})`, () => f.rel.unfollow(a, a), "SELF_FOLLOW");
    if (a === acct(1))
      t.diagnostic(
        `note self-follow: REJECTED ${follow.code} "${follow.reason}"; self-block: REJECTED ${block.code} "${block.reason}"`,
      );
  }
  const { rows } = await guard.observer.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM relation WHERE follower = followee",
  );
  assert.equal(rows[0]!.n, 0, "no self-pair row, not even a v0 placeholder");
});

test("30-bad-input unknown accounts: follow/unfollow/decide/block/unblock/createPost -> AccountNotFoundError; nothing written", async (t) => {
  const known = acct(1);
  const ghost = "ghost-0001";
  const ghost2 = "ghost-0002";
  const calls: [string, () => Promise<unknown>, string[]][] = [];
  for (const [label, a, b, named] of [
    ["unknown second", known, ghost, [ghost]],
    ["unknown first", ghost, known, [ghost]],
    ["unknown first, private second", ghost, acct(PRIVATE), [ghost]],
    ["both unknown", ghost, ghost2, [ghost, ghost2]],
  ] as const) {
    calls.push(
      [`follow (${label})`, () => f.rel.follow(a, b), [...named]],
      [`unfollow (${label})`, () => f.rel.unfollow(a, b), [...named]],
      [`decide approve (${label})`, () => f.rel.decide(a, b, true), [...named]],
      [`decide reject (${label})`, () => f.rel.decide(a, b, false), [...named]],
      [`block (${label})`, () => f.rel.block(a, b), [...named]],
      [`unblock (${label})`, () => f.rel.unblock(a, b), [...named]],
    );
  }
  calls.push([`createPost (unknown author)`, () => f.posts.createPost(ghost, "PUBLIC", "hello"), [ghost]]);
  calls.push([
    `createPost FOLLOWERS (unknown author)`,
    () => f.posts.createPost(ghost2, "FOLLOWERS", "hello"),
    [ghost2],
  ]);
  let sample = "";
  for (const [label, call, named] of calls) {
    await guard.rejectsWritingNothing(
      label,
      call,
      (err) => {
        sample ||= `${(err as Error).name} ${(err as AccountNotFoundError).code} "${(err as Error).message}"`;
        return accountNotFound(...named)(err);
      },
      { noStatements: false },
    );
  }
  t.diagnostic(`note ${calls.length} calls with unknown accounts, e.g. ${sample}`);
});

const BAD_IDS: [string, unknown][] = [
  ["empty", ""],
  ["129 characters", "a".repeat(129)],
  ["leading space", " user-0001"],
  ["inner space", "user 0001"],
  ["trailing space", "user-0001 "],
  ["tab", "user\t0001"],
  ["newline", "user-0001\n"],
  ["slash", "user/0001"],
  ["path traversal", "../user-0001"],
  ["leading dash", "-user"],
  ["non-ASCII", "usér-0001"],
  ["NUL", "user\u00000001"],
  ["number 42", 42],
  ["null", null],
  ["undefined", undefined],
  ["object", { id: "user-0001" }],
];

test("30-bad-input malformed ids: every operation throws InvalidInputError naming the field, sends nothing, writes nothing", async (t) => {
  const a = acct(1);
  const b = acct(2);
  let checked = 0;
  for (const [label, bad] of BAD_IDS) {
    const id = bad as string; // deliberately the wrong type at run time, as an untyped caller would pass it
    const calls: [string, string, () => Promise<unknown>][] = [
      ["follow(follower)", "follower", () => f.rel.follow(id, b)],
      ["follow(followee)", "followee", () => f.rel.follow(a, id)],
      ["unfollow(follower)", "follower", () => f.rel.unfollow(id, b)],
      ["unfollow(followee)", "followee", () => f.rel.unfollow(a, id)],
      ["decide(followee)", "followee", () => f.rel.decide(id, b, true)],
      ["decide(follower)", "follower", () => f.rel.decide(a, id, false)],
      ["block(blocker)", "blocker", () => f.rel.block(id, b)],
      ["block(blocked)", "blocked", () => f.rel.block(a, id)],
      ["unblock(blocker)", "blocker", () => f.rel.unblock(id, b)],
      ["unblock(blocked)", "blocked", () => f.rel.unblock(a, id)],
      ["upsertAccount(accountId)", "accountId", () => f.rel.upsertAccount(id, { private: true })],
      ["relationship(a)", "accountId", () => f.rel.relationship(id, b)],
      ["relationship(b)", "otherId", () => f.rel.relationship(a, id)],
      ["listFollowers(accountId)", "accountId", () => listFollowers(f.db.pool, id)],
      ["followerCount(accountId)", "accountId", () => followerCount(f.db.pool, id, 0)],
      ["createPost(author)", "author", () => f.posts.createPost(id, "PUBLIC", "x")],
      ["canRead(reader)", "reader", () => f.posts.canRead(id, followersPost, "TRUTH")],
      ["canRead(postId)", "postId", () => f.posts.canRead(a, id, "TRUTH")],
      ["getPost(postId)", "postId", () => f.posts.getPost(id)],
    ];
    for (const [name, field, call] of calls) {
      await guard.rejectsWritingNothing(`${name} with ${label}`, call, invalidInput(field), { noStatements: true });
      checked++;
    }
  }
  // Both ids bad: the first named one is reported.
  await guard.rejectsWritingNothing("follow(bad, bad)", () => f.rel.follow("", "a/b"), invalidInput("follower"), {
    noStatements: true,
  });
  t.diagnostic(
    `note ${checked} malformed-id calls (${BAD_IDS.length} ids x 19 entry points) refused before any statement`,
  );
});

test("30-bad-input unknown visibility and read mode -> InvalidInputError; unknown post -> PostNotFoundError; nothing written", async (t) => {
  for (const visibility of ["FRIENDS", "public", "", null, 1]) {
    await guard.rejectsWritingNothing(
      `createPost visibility=${JSON.stringify(visibility)}`,
      () => f.posts.createPost(acct(1), visibility as Visibility, "x"),
      invalidInput("visibility"),
      { noStatements: true },
    );
  }
  for (const mode of ["PROJECTION", "truth", "fresh_token", "", null]) {
    await guard.rejectsWritingNothing(
      `canRead mode=${JSON.stringify(mode)}`,
      () => f.posts.canRead(acct(2), followersPost, mode as ReadMode),
      invalidInput("mode"),
      { noStatements: true },
    );
  }
  let message = "";
  for (const postId of ["no-such-post", "00000000-0000-0000-0000-000000000000"]) {
    for (const mode of ["TRUTH", "PROJECTION_ONLY", "CONTENT_TOKEN", "FRESH_TOKEN"] as const) {
      await guard.rejectsWritingNothing(
        `canRead unknown post ${postId} ${mode}`,
        () => f.posts.canRead(acct(2), postId, mode),
        (err) => {
          assert.ok(err instanceof PostNotFoundError, String(err));
          assert.equal(err.code, "POST_NOT_FOUND");
          assert.ok(err.message.includes(postId));
          message = err.message;
          return true;
        },
        { noStatements: false },
      );
    }
  }
  t.diagnostic(`note unknown post: POST_NOT_FOUND "${message}"`);
});

test("30-bad-input decide with approve not a boolean -> InvalidInputError (a rejected promise, not a synchronous throw)", async () => {
  // acct(PRIVATE) has a PENDING request from acct(1): a stray decide would change it.
  for (const approve of ["true", "yes", 1, 0, null, undefined, {}]) {
    await guard.rejectsWritingNothing(
      `decide approve=${JSON.stringify(approve)}`,
      () => f.rel.decide(acct(PRIVATE), acct(1), approve as boolean),
      invalidInput("approve"),
      { noStatements: true },
    );
  }
  assert.deepEqual(await f.rel.relationship(acct(1), acct(PRIVATE)), {
    following: false,
    requested: true,
    followedBy: true,
    requestedBy: false,
    blocking: false,
    blockedBy: false,
  });
});

test("30-bad-input listFollowers limit 0/201/1.5 and forged cursors, followerCount allowedLag -1/1.5 -> InvalidInputError", async (t) => {
  for (const limit of [0, 201, 1.5, -1, NaN, Infinity, "10"]) {
    await guard.rejectsWritingNothing(
      `listFollowers limit=${String(limit)}`,
      () => listFollowers(f.db.pool, acct(1), { limit: limit as number }),
      invalidInput("limit"),
      { noStatements: true },
    );
  }
  const b64 = (s: string) => Buffer.from(s).toString("base64url");
  const forged: [string, unknown][] = [
    ["abc", "abc"],
    ["empty", ""],
    ["base64 of garbage", Buffer.from("\u0000\u00ffgarbage{[").toString("base64")],
    ["base64 of plain text", b64("hello world")],
    ["JSON object", b64(JSON.stringify({ since: "2020-01-01T00:00:00.000Z", follower: "user-0002" }))],
    ["one element", b64(JSON.stringify(["2020-01-01T00:00:00.000Z"]))],
    ["three elements", b64(JSON.stringify(["2020-01-01T00:00:00.000Z", "user-0002", "x"]))],
    ["number follower", b64(JSON.stringify(["2020-01-01T00:00:00.000Z", 2]))],
    ["not a date", b64(JSON.stringify(["yesterday", "user-0002"]))],
    // Date.parse accepts these; PostgreSQL does not (22007 / 22007 / 22009 / 22008): they must not reach it.
    ["date '1'", b64(JSON.stringify(["1", "user-0002"]))],
    ["date '2020'", b64(JSON.stringify(["2020", "user-0002"]))],
    ["year +275760", b64(JSON.stringify(["+275760-09-13T00:00:00.000Z", "user-0002"]))],
    ["year 0", b64(JSON.stringify(["0000-01-01T00:00:00.000Z", "user-0002"]))],
    ["30 February", b64(JSON.stringify(["2020-02-30T00:00:00.000Z", "user-0002"]))],
    ["malformed follower", b64(JSON.stringify(["2020-01-01T00:00:00.000Z", "user 0002/.."]))],
    ["number 42", 42],
    ["null", null],
  ];
  for (const [label, cursor] of forged) {
    await guard.rejectsWritingNothing(
      `listFollowers cursor=${label}`,
      () => listFollowers(f.db.pool, acct(1), { limit: 2, cursor: cursor as string }),
      invalidInput("cursor"),
      { noStatements: true },
    );
  }
  for (const allowedLag of [-1, 1.5, -0.5, NaN, Infinity, 2 ** 53, "0", null, undefined]) {
    await guard.rejectsWritingNothing(
      `followerCount allowedLag=${String(allowedLag)}`,
      () => followerCount(f.db.pool, acct(1), allowedLag as number),
      invalidInput("allowedLag"),
      { noStatements: true },
    );
  }
  t.diagnostic(
    `note listFollowers: 7 bad limits, ${forged.length} forged cursors; followerCount: 9 bad allowedLag values`,
  );
});

test("30-bad-input positive controls: valid calls are accepted, an issued cursor pages, and the snapshot sees a write", async (t) => {
  // Boundary values of the validated arguments are accepted (and the database is asked).
  guard.statements = 0;
  const count = await followerCount(f.db.pool, acct(1), 0);
  assert.ok(guard.statements > 0);
  assert.equal(count.stale, count.lag > 0);
  assert.equal((await followerCount(f.db.pool, acct(1), Number.MAX_SAFE_INTEGER)).stale, false);
  assert.equal((await listFollowers(f.db.pool, acct(1), { limit: 200 })).followers.length, 7);
  // Issued cursors page through all 7 projected followers of acct(1), 2 at a time, each once.
  const seen: string[] = [];
  let cursor: string | undefined;
  let pages = 0;
  do {
    const page: Awaited<ReturnType<typeof listFollowers>> = await listFollowers(f.db.pool, acct(1), {
      limit: 2,
      ...(cursor ? { cursor } : {}),
    });
    seen.push(...page.followers.map((x) => x.accountId));
    cursor = page.nextCursor;
    pages++;
  } while (cursor);
  t.diagnostic(`note issued cursors: ${pages} pages, followers ${seen.join(",")}`);
  assert.deepEqual(
    [...seen].sort(),
    Array.from({ length: 7 }, (_, i) => acct(i + 2)),
  );
  assert.equal(pages, 4);
  // The longest valid id is accepted and its insert is visible in the snapshot.
  const before = await guard.snapshot();
  await f.rel.upsertAccount("a".repeat(128));
  const after = await guard.snapshot();
  assert.equal(Number(after["count(account)"]), Number(before["count(account)"]) + 1);
  assert.notEqual(after.account, before.account);
  // A real follow moves relation, relation_event and event_seq: the snapshot would have caught a stray write.
  const r = await f.rel.follow("a".repeat(128), acct(1));
  assert.equal(r.outcome, "CHANGED");
  const later = await guard.snapshot();
  for (const key of ["count(relation)", "count(relation_event)", "sum(event_seq.last)", "event_seq"])
    assert.notEqual(later[key], after[key], `${key} changed`);
});
