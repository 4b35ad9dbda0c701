import { test } from "node:test";
import assert from "node:assert/strict";
import { WriteGuard } from "../support/write-guard.ts";
import {
  assertError,
  createAccounts,
  ok,
  startApi,
  type ApiResponse,
  type Client,
  type RelationOutcome,
  type Relationship,
} from "./harness.ts";

interface IdJson {
  id: string;
}

const NOTHING: Relationship = {
  following: false,
  requested: false,
  followedBy: false,
  requestedBy: false,
  blocking: false,
};

/**
 * What a blocked user learns (docs/api.md, "What a blocked user learns"): to a user it blocks, an account
 * answers every route that names it exactly as an account that does not exist (status, code, and
 * the message with the id in it), writes nothing, and no answer carries blockedBy; a block is the
 * one write that stays allowed.
 */
function assertAnswersAsGhost(res: ApiResponse, ghostRes: ApiResponse, label: string): void {
  assert.equal(res.status, ghostRes.status, `${label}: ${res.status} ${res.text}`);
  assert.deepEqual(
    JSON.parse(res.text.replaceAll("alice", "<id>")),
    JSON.parse(ghostRes.text.replaceAll("ghost", "<id>")),
    `${label}: the same answer as for an unknown account`,
  );
}

/** Each route that names an account, as `who` towards `target`. */
function routesTowards(who: Client, target: string): [string, () => Promise<ApiResponse>][] {
  return [
    ["GET profile", () => who.get(`/v1/accounts/${target}`)],
    ["GET followers", () => who.get(`/v1/accounts/${target}/followers`)],
    ["GET following", () => who.get(`/v1/accounts/${target}/following`)],
    ["GET follower-count", () => who.get(`/v1/accounts/${target}/follower-count`)],
    ["GET relationship", () => who.get(`/v1/accounts/me/relationships/${target}`)],
    ["GET relationships batch", () => who.get(`/v1/accounts/me/relationships?id=${target}`)],
    ["PUT follow", () => who.put(`/v1/accounts/me/following/${target}`)],
    ["DELETE follow", () => who.delete(`/v1/accounts/me/following/${target}`)],
    ["POST approve", () => who.post(`/v1/accounts/me/follow-requests/${target}/approve`)],
    ["POST reject", () => who.post(`/v1/accounts/me/follow-requests/${target}/reject`)],
    ["DELETE block", () => who.delete(`/v1/accounts/me/blocks/${target}`)],
  ];
}

test("api blocked user: a blocker answers every account route as an unknown account, writes nothing, and never says blockedBy", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "bob", "carol"]);
  await createAccounts(admin, ["locked"], { private: true });
  const [alice, bob] = [await h.as("alice"), await h.as("bob")];
  // They followed each other; alice's block removes both follows.
  ok(await bob.put("/v1/accounts/me/following/alice"));
  ok(await alice.put("/v1/accounts/me/following/bob"));
  const post = ok(await alice.post<IdJson>("/v1/posts", { visibility: "PUBLIC", body: "alice's" }), 201);
  ok(await alice.put("/v1/accounts/me/blocks/bob"));
  await h.drain();

  const guard = await WriteGuard.create(h.db.url, h.db.pool, {
    mustHave: ["relation", "relation_event", "block", "account"],
  });
  t.after(() => guard.close());
  const before = await guard.snapshot();
  for (const [label, call] of routesTowards(bob, "alice")) {
    const ghost = routesTowards(bob, "ghost").find(([l]) => l === label)![1];
    assertAnswersAsGhost(await call(), await ghost(), label);
  }
  // Content answers as missing too (post, its comments, its item).
  assertError(await bob.get(`/v1/posts/${post.id}`), 404, "POST_NOT_FOUND");
  assertError(await bob.get(`/v1/posts/${post.id}/comments`), 404, "POST_NOT_FOUND");
  assertError(await bob.put(`/v1/items/${post.id}/likes/me`), 404, "ITEM_NOT_FOUND");
  // A batch with the blocker and others: the blocker is left out, as an unknown id is.
  assert.deepEqual(ok(await bob.get("/v1/accounts/me/relationships?id=carol&id=alice&id=ghost")), [
    { id: "carol", ...NOTHING },
  ]);
  assert.deepEqual(await guard.snapshot(), before, "nothing written");

  // The blocker sees its own block (never blockedBy).
  assert.deepEqual(ok(await alice.get("/v1/accounts/me/relationships/bob")), { ...NOTHING, blocking: true });
  assertError(await alice.put("/v1/accounts/me/following/bob"), 409, "BLOCKED", "following someone you block");

  // Blocking back is always allowed and answers as any block does; from then on bob sees his own block.
  const back = ok(await bob.put<RelationOutcome & { relationship: Relationship }>("/v1/accounts/me/blocks/alice"));
  const control = ok(await bob.put<RelationOutcome & { relationship: Relationship }>("/v1/accounts/me/blocks/carol"));
  assert.deepEqual(
    [back.outcome, back.relationship],
    [control.outcome, control.relationship],
    "blocking a blocker answers as blocking anyone",
  );
  assert.deepEqual(back.relationship, { ...NOTHING, blocking: true });
  assert.deepEqual(ok(await bob.get("/v1/accounts/me/relationships/alice")), { ...NOTHING, blocking: true });
  assertError(await bob.put("/v1/accounts/me/following/alice"), 409, "BLOCKED", "bob's own block");
  assertError(
    await bob.get("/v1/accounts/alice"),
    404,
    "ACCOUNT_NOT_FOUND",
    "accounts in a block never see each other's profile",
  );
  // Unblocking his own block answers, and alice is unknown to him again.
  assert.equal(ok(await bob.delete<RelationOutcome>("/v1/accounts/me/blocks/alice")).outcome, "CHANGED");
  assertError(await bob.get("/v1/accounts/me/relationships/alice"), 404, "ACCOUNT_NOT_FOUND");

  // Control: once alice unblocks, bob sees her again; nothing was restored.
  ok(await alice.delete("/v1/accounts/me/blocks/bob"));
  assert.deepEqual(ok(await bob.get("/v1/accounts/me/relationships/alice")), NOTHING);
  assert.equal(ok(await bob.put<RelationOutcome>("/v1/accounts/me/following/alice")).outcome, "CHANGED");
});

test("api blocked user: a private blocker's pending request and decisions tell the blocked user nothing", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["bob"]);
  await createAccounts(admin, ["locked"], { private: true });
  const [bob, locked] = [await h.as("bob"), await h.as("locked")];
  await createAccounts(admin, ["alice"], { private: true });
  const alice = await h.as("alice");
  // bob asks to follow alice, who is private; then she blocks him.
  assert.equal(ok(await bob.put<RelationOutcome>("/v1/accounts/me/following/alice")).state, "PENDING");
  ok(await alice.put("/v1/accounts/me/blocks/bob"));
  assert.deepEqual(
    ok(await alice.get<{ requests: unknown[] }>("/v1/accounts/me/follow-requests")).requests,
    [],
    "the block removed the request",
  );
  assertError(await bob.put("/v1/accounts/me/following/alice"), 404, "ACCOUNT_NOT_FOUND", "no new request");
  assert.deepEqual(ok(await alice.get<{ requests: unknown[] }>("/v1/accounts/me/follow-requests")).requests, []);
  // Control: a private account that does not block bob gets the request.
  assert.equal(ok(await bob.put<RelationOutcome>("/v1/accounts/me/following/locked")).state, "PENDING");
  assert.deepEqual(
    ok(await locked.get<{ requests: { accountId: string }[] }>("/v1/accounts/me/follow-requests")).requests.map(
      (r) => r.accountId,
    ),
    ["bob"],
  );
});
