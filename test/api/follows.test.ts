import { test } from "node:test";
import assert from "node:assert/strict";
import {
  assertError,
  createAccounts,
  ok,
  startApi,
  type FollowerPage,
  type Relationship,
  type RelationOutcome,
} from "./harness.ts";

const NOTHING: Relationship = {
  following: false,
  requested: false,
  followedBy: false,
  requestedBy: false,
  blocking: false,
};

for (const partitions of [1, 4]) {
  test(`api P=${partitions} follow flow: accounts, ACTIVE and PENDING follows, approve/reject, relationships, rule rejections as 409, followers from the projection`, async (t) => {
    const h = await startApi({ partitions });
    t.after(() => h.close());
    const admin = await h.as("admin-1", { admin: true });
    const alice = await h.as("alice");
    const bob = await h.as("bob");
    const carol = await h.as("carol");
    const dave = await h.as("dave");

    // Accounts: an admin for anyone, a user for itself only; "me" is reserved.
    assert.deepEqual(ok(await admin.put("/v1/accounts/alice", { private: false })), {
      id: "alice",
      private: false,
      hideCollections: false,
    });
    assert.deepEqual(ok(await bob.put("/v1/accounts/bob", { private: true })), {
      id: "bob",
      private: true,
      hideCollections: false,
    });
    assert.deepEqual(ok(await carol.put("/v1/accounts/carol", {})), {
      id: "carol",
      private: false,
      hideCollections: false,
    });
    assert.deepEqual(ok(await dave.put("/v1/accounts/dave", { private: false })), {
      id: "dave",
      private: false,
      hideCollections: false,
    });
    assert.deepEqual(
      ok(await (await h.as("frank")).put("/v1/accounts/frank")),
      { id: "frank", private: false, hideCollections: false },
      "no body: a public account",
    );
    assertError(await bob.put("/v1/accounts/alice", { private: true }), 403, "FORBIDDEN");
    assertError(
      await bob.put("/v1/accounts/ghost", { private: true }),
      403,
      "FORBIDDEN",
      "nobody creates an account for someone else",
    );
    assertError(await admin.put("/v1/accounts/me", {}), 400, "INVALID_INPUT");
    assertError(
      await alice.get("/v1/accounts/me/relationships/ghost"),
      404,
      "ACCOUNT_NOT_FOUND",
      "bob's 403 created nothing",
    );

    // A public account: ACTIVE at once; repeating is a NOOP.
    const f1 = ok(await alice.put<RelationOutcome>("/v1/accounts/me/following/carol"));
    assert.deepEqual(
      { outcome: f1.outcome, state: f1.state, version: f1.version },
      { outcome: "CHANGED", state: "ACTIVE", version: 1 },
    );
    assert.ok(f1.seq >= 1);
    const again = ok(await alice.put<RelationOutcome>("/v1/accounts/me/following/carol"));
    assert.deepEqual(
      { outcome: again.outcome, state: again.state, version: again.version, seq: again.seq },
      { outcome: "NOOP", state: "ACTIVE", version: 1, seq: 0 },
    );

    // A private account: PENDING, then approved.
    const f2 = ok(await alice.put<RelationOutcome>("/v1/accounts/me/following/bob"));
    assert.deepEqual({ outcome: f2.outcome, state: f2.state }, { outcome: "CHANGED", state: "PENDING" });
    const rel = ok(await alice.get<Relationship>("/v1/accounts/me/relationships/bob"));
    // No blockedBy: no route tells a user that someone blocks them (docs/api.md).
    assert.deepEqual(Object.keys(rel).sort(), ["blocking", "followedBy", "following", "requested", "requestedBy"]);
    assert.deepEqual(rel, { ...NOTHING, requested: true });
    const approved = ok(await bob.post<RelationOutcome>("/v1/accounts/me/follow-requests/alice/approve"));
    assert.deepEqual(
      { outcome: approved.outcome, state: approved.state, version: approved.version },
      { outcome: "CHANGED", state: "ACTIVE", version: 2 },
    );
    assert.deepEqual(ok(await alice.get("/v1/accounts/me/relationships/bob")), { ...NOTHING, following: true });
    assert.deepEqual(ok(await bob.get("/v1/accounts/me/relationships/alice")), { ...NOTHING, followedBy: true });
    assert.equal(
      ok(await bob.post<RelationOutcome>("/v1/accounts/me/follow-requests/alice/approve")).outcome,
      "NOOP",
      "approving twice: set-target-state",
    );
    assert.equal(
      ok(await bob.post<RelationOutcome>("/v1/accounts/me/follow-requests/dave/reject")).outcome,
      "NOOP",
      "rejecting where nothing was requested",
    );
    assertError(
      await bob.post("/v1/accounts/me/follow-requests/alice/reject"),
      409,
      "NOT_PENDING",
      "rejecting an approved follower",
    );

    // Reject: the request goes away.
    assert.equal(ok(await carol.put<RelationOutcome>("/v1/accounts/me/following/bob")).state, "PENDING");
    const rejected = ok(await bob.post<RelationOutcome>("/v1/accounts/me/follow-requests/carol/reject"));
    assert.deepEqual({ outcome: rejected.outcome, state: rejected.state }, { outcome: "CHANGED", state: "REMOVED" });
    assert.deepEqual(ok(await carol.get("/v1/accounts/me/relationships/bob")), NOTHING);

    // Rules: REJECTED is a 409 with the rule's code.
    assertError(await alice.put("/v1/accounts/me/following/alice"), 409, "SELF_FOLLOW");
    assertError(await alice.put("/v1/accounts/me/blocks/alice"), 409, "SELF_BLOCK");
    const blocked = ok(await bob.put<RelationOutcome>("/v1/accounts/me/blocks/dave"));
    assert.equal(blocked.outcome, "CHANGED");
    assert.equal(ok(await bob.put<RelationOutcome>("/v1/accounts/me/blocks/dave")).outcome, "NOOP");
    // To dave, whom bob blocks, bob answers as an account that does not exist (docs/api.md, "What a blocked user learns").
    assertError(
      await dave.put("/v1/accounts/me/following/bob"),
      404,
      "ACCOUNT_NOT_FOUND",
      "following someone who blocked you",
    );
    assertError(await bob.put("/v1/accounts/me/following/dave"), 409, "BLOCKED", "following someone you blocked");
    assert.deepEqual(ok(await bob.get("/v1/accounts/me/relationships/dave")), { ...NOTHING, blocking: true });
    assertError(
      await dave.get("/v1/accounts/me/relationships/bob"),
      404,
      "ACCOUNT_NOT_FOUND",
      "the relationship does not say blockedBy",
    );

    // Unknown accounts.
    assertError(await alice.put("/v1/accounts/me/following/ghost"), 404, "ACCOUNT_NOT_FOUND");
    assertError(await alice.delete("/v1/accounts/me/following/ghost"), 404, "ACCOUNT_NOT_FOUND");
    assertError(await alice.put("/v1/accounts/me/blocks/ghost"), 404, "ACCOUNT_NOT_FOUND");
    assertError(await alice.delete("/v1/accounts/me/blocks/ghost"), 404, "ACCOUNT_NOT_FOUND");
    assertError(await alice.post("/v1/accounts/me/follow-requests/ghost/approve"), 404, "ACCOUNT_NOT_FOUND");
    assertError(await alice.get("/v1/accounts/me/relationships/ghost"), 404, "ACCOUNT_NOT_FOUND");
    assertError(await alice.get("/v1/accounts/ghost/followers"), 404, "ACCOUNT_NOT_FOUND");
    assertError(await alice.get("/v1/accounts/ghost/follower-count"), 404, "ACCOUNT_NOT_FOUND");
    const ghost = await h.as("ghost");
    assertError(
      await ghost.put("/v1/accounts/me/following/nobody"),
      404,
      "ACCOUNT_NOT_FOUND",
      "a caller without an account, towards an unknown one",
    );

    // The projection: stale before the projector runs, exact after.
    const staleCount = ok(
      await alice.get<{ count: number; lag: number; stale: boolean }>("/v1/accounts/bob/follower-count?allowedLag=0"),
    );
    assert.equal(staleCount.stale, true, JSON.stringify(staleCount));
    assert.ok(staleCount.lag >= 1);
    await h.ledger.projector.drain();
    assert.deepEqual(ok(await alice.get("/v1/accounts/bob/follower-count?allowedLag=0")), {
      count: 1,
      lag: 0,
      stale: false,
      source: "database",
    });
    assert.deepEqual(ok(await alice.get("/v1/accounts/carol/follower-count")), {
      count: 1,
      lag: 0,
      stale: false,
      source: "database",
    });
    const followers = ok(await carol.get<FollowerPage>("/v1/accounts/bob/followers"));
    assert.deepEqual(
      followers.followers.map((f) => f.accountId),
      ["alice"],
    );
    assert.equal(followers.nextCursor, undefined);
    assert.ok(!Number.isNaN(Date.parse(followers.followers[0]!.since)));
    assertError(await alice.get("/v1/accounts/bob/follower-count?allowedLag=-1"), 400, "INVALID_INPUT");

    // Someone in a block with the account sees it as missing.
    assertError(await dave.get("/v1/accounts/bob/followers"), 404, "ACCOUNT_NOT_FOUND");
    assertError(await dave.get("/v1/accounts/bob/follower-count"), 404, "ACCOUNT_NOT_FOUND");
    assertError(await bob.get("/v1/accounts/dave/followers"), 404, "ACCOUNT_NOT_FOUND", "the blocker too");
    assert.equal(ok(await bob.delete<RelationOutcome>("/v1/accounts/me/blocks/dave")).outcome, "CHANGED");
    assert.equal(ok(await bob.delete<RelationOutcome>("/v1/accounts/me/blocks/dave")).outcome, "NOOP");
    assert.deepEqual(ok(await dave.get("/v1/accounts/me/relationships/bob")), NOTHING, "unblock restores nothing");
    assert.deepEqual(
      ok(await dave.get<FollowerPage>("/v1/accounts/bob/followers")).followers.map((f) => f.accountId),
      ["alice"],
    );

    // Unfollow: REMOVED, and gone from the projection after a drain.
    const unf = ok(await alice.delete<RelationOutcome>("/v1/accounts/me/following/carol"));
    assert.deepEqual(
      { outcome: unf.outcome, state: unf.state, version: unf.version },
      { outcome: "CHANGED", state: "REMOVED", version: 2 },
    );
    assert.equal(ok(await alice.delete<RelationOutcome>("/v1/accounts/me/following/carol")).outcome, "NOOP");
    await h.ledger.projector.drain();
    assert.deepEqual(ok(await alice.get("/v1/accounts/carol/follower-count")), {
      count: 0,
      lag: 0,
      stale: false,
      source: "database",
    });
    assert.deepEqual(ok(await alice.get("/v1/accounts/carol/followers")), { followers: [] });

    // A private account's request withdrawn with DELETE.
    await createAccounts(admin, ["erin"]);
    const erin = await h.as("erin");
    assert.equal(ok(await erin.put<RelationOutcome>("/v1/accounts/me/following/bob")).state, "PENDING");
    assert.equal(ok(await erin.delete<RelationOutcome>("/v1/accounts/me/following/bob")).state, "REMOVED");
    assertError(
      await bob.post("/v1/accounts/me/follow-requests/erin/approve"),
      409,
      "NOT_PENDING",
      "a withdrawn request",
    );
  });
}

for (const partitions of [1, 4]) {
  test(`api P=${partitions} a block between accounts that follow each other: both directions end REMOVED, neither can follow the other either way while it stands, and the followers lists drop both`, async (t) => {
    const h = await startApi({ partitions });
    t.after(() => h.close());
    const admin = await h.as("admin-1", { admin: true });
    await createAccounts(admin, ["pia", "quinn"]);
    await createAccounts(admin, ["ria"], { private: true });
    const pia = await h.as("pia");
    const quinn = await h.as("quinn");
    const ria = await h.as("ria");
    // pia <-> quinn follow each other; pia's follow of ria is a request, ria follows pia.
    ok(await pia.put("/v1/accounts/me/following/quinn"));
    ok(await quinn.put("/v1/accounts/me/following/pia"));
    assert.equal(ok(await pia.put<RelationOutcome>("/v1/accounts/me/following/ria")).state, "PENDING");
    ok(await ria.put("/v1/accounts/me/following/pia"));

    // The blocker's own follow and the blocked's follow of the blocker both go.
    const blocked = ok(await pia.put<RelationOutcome & { relationship: Relationship }>("/v1/accounts/me/blocks/quinn"));
    assert.deepEqual([blocked.outcome, blocked.state], ["CHANGED", "REMOVED"], "the result is quinn's follow of pia");
    assert.deepEqual(blocked.relationship, { ...NOTHING, blocking: true });
    // To the blocked user the blocker is an unknown account (docs/api.md, "What a blocked user learns").
    assertError(
      await quinn.get("/v1/accounts/me/relationships/pia"),
      404,
      "ACCOUNT_NOT_FOUND",
      "quinn asks about pia, who blocks him",
    );
    // A blocked account's request and its follow of the blocker go too (ria blocks pia).
    ok(await ria.put("/v1/accounts/me/blocks/pia"));
    assert.deepEqual(ok(await ria.get("/v1/accounts/me/relationships/pia")), { ...NOTHING, blocking: true });

    // Neither direction may follow while a block stands, whoever blocked whom: the blocker is told
    // of its own block, the blocked user sees an unknown account.
    for (const [who, other] of [
      [pia, "quinn"],
      [ria, "pia"],
    ] as const) {
      assertError(
        await who.put(`/v1/accounts/me/following/${other}`),
        409,
        "BLOCKED",
        `the blocker following ${other}`,
      );
    }
    for (const [who, other] of [
      [quinn, "pia"],
      [pia, "ria"],
    ] as const) {
      assertError(
        await who.put(`/v1/accounts/me/following/${other}`),
        404,
        "ACCOUNT_NOT_FOUND",
        `the blocked user following ${other}`,
      );
    }
    await h.drain();
    for (const id of ["pia", "quinn", "ria"]) {
      assert.deepEqual(
        ok(await admin.get<FollowerPage>(`/v1/accounts/${id}/followers`)).followers,
        [],
        `${id} has no followers left`,
      );
    }
    const states = await h.db.pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM relation WHERE state <> 'REMOVED'",
    );
    assert.equal(states.rows[0]!.n, 0, "every relation row between them is REMOVED");

    // Unblocking restores nothing, and following is allowed again.
    ok(await pia.delete("/v1/accounts/me/blocks/quinn"));
    assert.deepEqual(ok(await pia.get("/v1/accounts/me/relationships/quinn")), NOTHING);
    assert.equal(ok(await quinn.put<RelationOutcome>("/v1/accounts/me/following/pia")).state, "ACTIVE");
  });
}
