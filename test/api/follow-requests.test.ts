import { test } from "node:test";
import assert from "node:assert/strict";
import { assertError, createAccounts, ok, startApi, type Relationship, type RelationOutcome } from "./harness.ts";

/** A private account sees who asked to follow it, and decides from there. */

interface RequestPage {
  requests: { accountId: string; requestedAt: string }[];
  nextCursor?: string;
}

const NOTHING: Relationship = {
  following: false,
  requested: false,
  followedBy: false,
  requestedBy: false,
  blocking: false,
};

for (const partitions of [1, 4]) {
  test(`api P=${partitions} follow-request inbox: GET /v1/accounts/me/follow-requests lists pending requests newest first, requestedBy shows them in the relationship, and deciding removes them`, async (t) => {
    const h = await startApi({ partitions });
    t.after(() => h.close());
    const admin = await h.as("admin-1", { admin: true });
    await createAccounts(admin, ["alice", "carol", "dave"]);
    await createAccounts(admin, ["bob"], { private: true });
    const alice = await h.as("alice");
    const bob = await h.as("bob");
    const carol = await h.as("carol");
    const dave = await h.as("dave");

    assert.deepEqual(
      ok(await bob.get<RequestPage>("/v1/accounts/me/follow-requests")),
      { requests: [] },
      "an empty inbox",
    );
    for (const requester of [alice, carol, dave])
      assert.equal(ok(await requester.put<RelationOutcome>("/v1/accounts/me/following/bob")).state, "PENDING");
    const inbox = ok(await bob.get<RequestPage>("/v1/accounts/me/follow-requests"));
    assert.deepEqual(
      inbox.requests.map((r) => r.accountId),
      ["dave", "carol", "alice"],
      "newest first",
    );
    assert.ok(inbox.requests.every((r) => !Number.isNaN(Date.parse(r.requestedAt))));
    assert.deepEqual(
      ok(await alice.get<RequestPage>("/v1/accounts/me/follow-requests")),
      { requests: [] },
      "a request is in the followee's inbox only",
    );

    // The relationship view shows the request from both sides.
    assert.deepEqual(ok(await bob.get("/v1/accounts/me/relationships/alice")), { ...NOTHING, requestedBy: true });
    assert.deepEqual(ok(await alice.get("/v1/accounts/me/relationships/bob")), { ...NOTHING, requested: true });

    // Deciding from the inbox: the request leaves it.
    const approved = ok(
      await bob.post<RelationOutcome & { relationship: Relationship }>(
        `/v1/accounts/me/follow-requests/${inbox.requests[2]!.accountId}/approve`,
      ),
    );
    assert.deepEqual(
      approved.relationship,
      { ...NOTHING, followedBy: true },
      "the decision answers the resulting relationship",
    );
    ok(await bob.post("/v1/accounts/me/follow-requests/carol/reject"));
    assert.deepEqual(
      ok(await bob.get<RequestPage>("/v1/accounts/me/follow-requests")).requests.map((r) => r.accountId),
      ["dave"],
    );
    assert.deepEqual(ok(await bob.get("/v1/accounts/me/relationships/alice")), { ...NOTHING, followedBy: true });
    assert.deepEqual(ok(await bob.get("/v1/accounts/me/relationships/carol")), NOTHING);

    // A withdrawn request and a block take it out as well.
    ok(await dave.delete("/v1/accounts/me/following/bob"));
    assert.deepEqual(ok(await bob.get<RequestPage>("/v1/accounts/me/follow-requests")), { requests: [] });
    ok(await dave.put("/v1/accounts/me/following/bob"));
    ok(await bob.put("/v1/accounts/me/blocks/dave"));
    assert.deepEqual(ok(await bob.get<RequestPage>("/v1/accounts/me/follow-requests")), { requests: [] });
    assertError(await h.request("GET", "/v1/accounts/me/follow-requests"), 401, "UNAUTHENTICATED");
  });
}

test("api follow-request inbox pagination: 30 requests paged by 7 while new requests arrive and some are decided: no duplicate, no skip of an undecided older request", async (t) => {
  const h = await startApi({ partitions: 4 });
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  const fans = Array.from({ length: 30 }, (_, i) => `fan-${String(i + 1).padStart(3, "0")}`);
  const late = Array.from({ length: 10 }, (_, i) => `late-${String(i + 1).padStart(3, "0")}`);
  await createAccounts(admin, [...fans, ...late]);
  await createAccounts(admin, ["star"], { private: true });
  for (const id of fans) ok(await (await h.as(id)).put("/v1/accounts/me/following/star"));
  // Ties on the request time across a page boundary: the cursor's tiebreak is the id.
  await h.db.pool.query(
    `UPDATE relation SET changed_at = (SELECT changed_at FROM relation WHERE follower = 'fan-015' AND followee = 'star')
      WHERE followee = 'star' AND follower BETWEEN 'fan-010' AND 'fan-020'`,
  );
  const star = await h.as("star");
  const expected = ok(await star.get<RequestPage>("/v1/accounts/me/follow-requests?limit=200")).requests.map(
    (r) => r.accountId,
  );
  assert.equal(expected.length, 30);

  const seen: string[] = [];
  const decided = new Set<string>();
  let cursor: string | undefined;
  let pages = 0;
  for (;;) {
    const res = await star.get<RequestPage>(
      `/v1/accounts/me/follow-requests?limit=7${cursor ? `&cursor=${cursor}` : ""}`,
    );
    const page = ok(res);
    pages++;
    seen.push(...page.requests.map((r) => r.accountId));
    if (!page.nextCursor) {
      assert.equal(res.headers.get("link"), null, "no Link on the last page");
      break;
    }
    assert.equal(
      res.headers.get("link"),
      `</v1/accounts/me/follow-requests?limit=7&cursor=${page.nextCursor}>; rel="next"`,
    );
    cursor = page.nextCursor;
    // Between pages: a new request arrives, and the first request already seen is approved.
    ok(await (await h.as(late[pages - 1]!)).put("/v1/accounts/me/following/star"));
    const first = page.requests[0]!.accountId;
    decided.add(first);
    assert.equal(
      ok(await star.post<RelationOutcome>(`/v1/accounts/me/follow-requests/${first}/approve`)).outcome,
      "CHANGED",
    );
    assert.ok(pages < 20);
  }
  assert.equal(new Set(seen).size, seen.length, "no duplicate");
  assert.deepEqual(seen, expected, "every older request once, in order; newer ones never show up later");
  const after = ok(await star.get<RequestPage>("/v1/accounts/me/follow-requests?limit=200")).requests.map(
    (r) => r.accountId,
  );
  assert.deepEqual(after, [...late.slice(0, pages - 1).reverse(), ...expected.filter((id) => !decided.has(id))]);
});

test("api approve and reject set a target state: a repeat is a NOOP with the same state, not a 409", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "carol"]);
  await createAccounts(admin, ["bob"], { private: true });
  const alice = await h.as("alice");
  const bob = await h.as("bob");
  const carol = await h.as("carol");
  ok(await alice.put("/v1/accounts/me/following/bob"));
  ok(await carol.put("/v1/accounts/me/following/bob"));
  const first = ok(await bob.post<RelationOutcome>("/v1/accounts/me/follow-requests/alice/approve"));
  const again = ok(await bob.post<RelationOutcome>("/v1/accounts/me/follow-requests/alice/approve"));
  assert.deepEqual(
    { outcome: first.outcome, state: first.state, version: first.version },
    { outcome: "CHANGED", state: "ACTIVE", version: 2 },
  );
  assert.deepEqual(
    { outcome: again.outcome, state: again.state, version: again.version, seq: again.seq },
    { outcome: "NOOP", state: "ACTIVE", version: 2, seq: 0 },
  );
  const rejected = ok(await bob.post<RelationOutcome>("/v1/accounts/me/follow-requests/carol/reject"));
  const rejectedAgain = ok(await bob.post<RelationOutcome>("/v1/accounts/me/follow-requests/carol/reject"));
  assert.deepEqual({ outcome: rejected.outcome, state: rejected.state }, { outcome: "CHANGED", state: "REMOVED" });
  assert.deepEqual(
    { outcome: rejectedAgain.outcome, state: rejectedAgain.state, version: rejectedAgain.version },
    { outcome: "NOOP", state: "REMOVED", version: rejected.version },
  );
  // What cannot reach the target state is still a 409: approving where nothing was requested.
  assertError(await bob.post("/v1/accounts/me/follow-requests/carol/approve"), 409, "NOT_PENDING");
  const { rows } = await h.db.pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM relation_event WHERE followee = 'bob'",
  );
  assert.equal(rows[0]!.n, 4, "two requests and two decisions; the repeats wrote no event");
});
