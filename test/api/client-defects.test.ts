/**
 * Regression tests for the defects a new client developer found: text that
 * PostgreSQL cannot store, account updates that changed what they did not name, follow requests
 * left pending by an unlock, unlikes pinned by a block, error bodies in fastify's shape, and
 * metrics that only counted what the scraped process did itself.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "node:net";
import { InvalidInputError } from "../../src/errors.ts";
import { auditRelations, relationAuditClean } from "../../src/relations/relation-audit.ts";
import { waitForAnyLockWait } from "../support/pg-locks.ts";
import { SqlHook } from "../support/sql-hooks.ts";
import {
  assertError,
  createAccounts,
  ok,
  startApi,
  type LikeOutcome,
  type PostJson,
  type PostRead,
  type RelationOutcome,
  type Relationship,
} from "./harness.ts";

test("defect 1: NUL characters and unpaired surrogates in any text field are a 400 at the edge and write nothing; a paired surrogate round-trips", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice"]);
  const alice = await h.as("alice");
  const posts = async () => (await h.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM post")).rows[0]!.n;

  for (const body of ["a\u0000b", "x\ud800y", "\udc00 alone", "end\ud83d"]) {
    const res = await alice.post("/v1/posts", { visibility: "PUBLIC", body });
    const error = assertError(res, 400, "INVALID_INPUT", JSON.stringify(body));
    assert.match(error.error.message, /^body\.body must not contain (NUL characters|unpaired UTF-16 surrogates)$/);
  }
  assertError(
    await alice.get("/v1/items/x/like-count?allowedLag=1&note=%00"),
    400,
    "INVALID_INPUT",
    "a NUL in the query string",
  );
  assert.equal(await posts(), 0, "nothing written");

  const emoji = "paired \ud83d\ude00 stays";
  const created = ok(await alice.post<PostJson>("/v1/posts", { visibility: "PUBLIC", body: emoji }), 201);
  const read = ok(await alice.get<PostRead>(`/v1/posts/${created.id}`));
  assert.equal(read.post.body, emoji, "read back exactly as written");

  await assert.rejects(
    h.ledger.posts.createPost("alice", "PUBLIC", "a\u0000b"),
    (err: unknown) => err instanceof InvalidInputError && err.field === "body",
  );
  await assert.rejects(h.ledger.posts.createPost("alice", "PUBLIC", "x\ud800y"), InvalidInputError);
});

test("defect 2: PUT /v1/accounts/{id} changes only what its body names: {} or no body keeps a private account private", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const eve = await h.as("eve");
  assert.equal(ok(await eve.put<{ private: boolean }>("/v1/accounts/eve", { private: true })).private, true);
  for (const [what, res] of [
    ["{}", await eve.put<{ private: boolean }>("/v1/accounts/eve", {})],
    ["no body", await eve.put<{ private: boolean }>("/v1/accounts/eve")],
  ] as const) {
    assert.equal(ok(res).private, true, what);
  }
  const { rows } = await h.db.pool.query<{ private: boolean }>("SELECT private FROM account WHERE account_id = 'eve'");
  assert.deepEqual(rows, [{ private: true }]);
  assert.equal(
    ok(await (await h.as("frank")).put<{ private: boolean }>("/v1/accounts/frank")).private,
    false,
    "creating with no body: a public account",
  );
});

test("defect 3: unlocking a private account approves its pending requests (one event each); a request left PENDING towards a public account is approved by following again", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["a1", "a2", "a3", "late"]);
  await createAccounts(admin, ["star"], { private: true });
  for (const id of ["a1", "a2", "a3"])
    assert.equal(ok(await (await h.as(id)).put<RelationOutcome>("/v1/accounts/me/following/star")).state, "PENDING");
  const star = await h.as("star");
  assert.equal(ok(await star.put<{ private: boolean }>("/v1/accounts/star", { private: false })).private, false);
  for (const id of ["a1", "a2", "a3"]) {
    assert.equal(
      ok(await (await h.as(id)).get<Relationship>("/v1/accounts/me/relationships/star")).following,
      true,
      id,
    );
  }
  const events = await h.db.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM relation_event WHERE followee = 'star' AND state = 'ACTIVE'",
  );
  assert.equal(events.rows[0]!.n, 3, "one ACTIVE event per approval");

  // A PENDING row towards a public account, as an older version (or the race the share lock closes) left it.
  ok(await star.put("/v1/accounts/star", { private: true }));
  const late = await h.as("late");
  assert.equal(ok(await late.put<RelationOutcome>("/v1/accounts/me/following/star")).state, "PENDING");
  await h.db.pool.query("UPDATE account SET private = false WHERE account_id = 'star'");
  const again = ok(await late.put<RelationOutcome>("/v1/accounts/me/following/star"));
  assert.deepEqual([again.outcome, again.state], ["CHANGED", "ACTIVE"], "not NOOP 'already PENDING'");
  await h.drain();
  const audit = await auditRelations(h.db.pool);
  assert.ok(relationAuditClean(audit), JSON.stringify(audit));
});

test("defect 3, concurrent: a follow request committing while the account is unlocked is approved, never left PENDING (the unlock waits for the request's share lock)", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["fan"]);
  await createAccounts(admin, ["star"], { private: true });
  const fan = await h.as("fan");
  const star = await h.as("star");
  // A request asked again after a withdrawal: the pair's row exists, so only the share lock (not
  // a new row's foreign key check on the account) can make the unlock wait.
  ok(await fan.put("/v1/accounts/me/following/star"));
  ok(await fan.delete("/v1/accounts/me/following/star"));
  // The request parks inside relation_follow (relation.afterEvent): the statement
  // the route runs, its PENDING row and event written, its share lock on star's account row held.
  const gate = await SqlHook.arm(h.db.pool, "relation.afterEvent");
  const request = fan.put<RelationOutcome>("/v1/accounts/me/following/star");
  try {
    const parked = await gate.parked();
    assert.deepEqual(
      [parked.context.follower, parked.context.followee, parked.context.state],
      ["fan", "star", "PENDING"],
      "the request is written (PENDING) and not yet committed",
    );
    const unlock = star.put<{ private: boolean }>("/v1/accounts/star", { private: false });
    await waitForAnyLockWait(h.db.pool); // the unlock waits on the request's share lock of the account row
    await gate.release();
    assert.equal(ok(await request).state, "PENDING");
    assert.equal(ok(await unlock).private, false);
  } finally {
    await gate.release(); // a failed assertion must not leave the request parked (close() would wait for it)
  }
  const rel = ok(await fan.get<Relationship>("/v1/accounts/me/relationships/star"));
  assert.deepEqual(
    [rel.following, rel.requested],
    [true, false],
    "the unlock saw the request after waiting for it and approved it",
  );
});

test("defect 9: a like given before a block can be retracted by its author; an unlike with no like to retract still answers 404 to a reader the post is hidden from", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["author", "fan", "stranger"]);
  const author = await h.as("author");
  const fan = await h.as("fan");
  const post = ok(await author.post<PostJson>("/v1/posts", { visibility: "PUBLIC", body: "hello" }), 201);
  ok(await fan.put<LikeOutcome>(`/v1/items/${post.id}/likes/me`));
  ok(await author.put("/v1/accounts/me/blocks/fan"));
  ok(await author.put("/v1/accounts/me/blocks/stranger"));
  assertError(await fan.get(`/v1/posts/${post.id}`), 404, "POST_NOT_FOUND", "the block hides the post");
  const retracted = ok(await fan.delete<LikeOutcome>(`/v1/items/${post.id}/likes/me`));
  assert.deepEqual([retracted.outcome, retracted.liked], ["CHANGED", false]);
  assertError(await fan.delete(`/v1/items/${post.id}/likes/me`), 404, "ITEM_NOT_FOUND", "nothing left to retract");
  assertError(
    await (await h.as("stranger")).delete(`/v1/items/${post.id}/likes/me`),
    404,
    "ITEM_NOT_FOUND",
    "no probing of hidden posts",
  );
  assertError(await fan.put(`/v1/items/${post.id}/likes/me`), 404, "ITEM_NOT_FOUND", "liking again stays forbidden");
});

/** Sends raw bytes and returns the raw HTTP response text. */
function rawRequest(port: number, bytes: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1");
    let text = "";
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => (text += chunk));
    socket.on("close", () => resolve(text));
    socket.on("error", (err) => (text ? resolve(text) : reject(err)));
    socket.write(bytes);
  });
}

test("defect 7: every error has our {error: {code, message}} shape: a path leaving the docs root (403 FORBIDDEN), headers too large (431), an unparsable request (400), a text/plain body (415)", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const alice = await h.as("alice");
  const port = Number(new URL(h.baseUrl).port);
  const traversal = await rawRequest(
    port,
    "GET /docs/static/../../package.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
  );
  assert.match(traversal, /^HTTP\/1\.1 (403|404) /, traversal.split("\r\n")[0]);
  const status = Number(traversal.split(" ")[1]);
  assert.deepEqual(Object.keys(JSON.parse(traversal.slice(traversal.indexOf("\r\n\r\n") + 4)).error), [
    "code",
    "message",
  ]);
  assert.match(traversal, status === 403 ? /"code":"FORBIDDEN"/ : /"code":"NOT_FOUND"/);

  const huge = await rawRequest(port, `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`);
  assert.match(huge, /^HTTP\/1\.1 431 /);
  assert.match(huge, /\{"error":\{"code":"HEADERS_TOO_LARGE","message":"[^"]+"\}\}$/);
  const garbage = await rawRequest(port, "NOT A REQUEST\r\n\r\n");
  assert.match(garbage, /^HTTP\/1\.1 400 /);
  assert.match(garbage, /\{"error":\{"code":"INVALID_INPUT","message":"[^"]+"\}\}$/);

  const plain = await alice.post("/v1/posts", undefined, { raw: "hello", headers: { "content-type": "text/plain" } });
  assertError(plain, 415, "UNSUPPORTED_MEDIA_TYPE", "a text/plain body");
});

test("defects 5 and 6: drift of a rebuild run outside the HTTP API reaches /metrics; consumer failures have a 0 series from the start; transaction retries are a counter", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  // The figures from the database are read on a timer, not by the scrape: refreshed before each.
  const metrics = async () => {
    await h.app.metrics.refresh();
    return (await h.request("GET", "/metrics")).text;
  };
  const first = await metrics();
  assert.match(first, /^ledger_consumer_failures_total\{consumer="like_count"\} 0$/m);
  assert.match(first, /^ledger_consumer_failures_total\{consumer="follower_projection"\} 0$/m);
  assert.match(first, /^# TYPE ledger_transaction_retries_total counter$/m);
  assert.match(first, /^ledger_rebuild_drift_abs_total 0$/m);

  const admin = await h.as("admin-1", { admin: true });
  ok(await admin.put("/v1/items/item-1"));
  await createAccounts(admin, ["alice"]);
  ok(await (await h.as("alice")).put("/v1/items/item-1/likes/me"));
  await h.drain();
  await h.db.pool.query("UPDATE like_count SET n = n + 3 WHERE item_id = 'item-1'");
  const report = await h.ledger.likeRebuild.rebuild(); // as `social-ledger rebuild` does, not through the HTTP route
  assert.equal(report.totalAbsDrift, 3);
  const after = await metrics();
  assert.match(after, /^ledger_rebuild_drift_abs_total 3$/m);
  assert.match(after, /^ledger_rebuild_drifted_items_total 1$/m);
  assert.match(after, /^ledger_rebuild_runs_total 1$/m);
});
