/**
 * DELETE /v1/accounts/{id} over HTTP: who may erase (the account itself or an admin; anyone else
 * 403 before anything is looked up, as for PUT /v1/accounts/{id}), what a repeat and an unknown
 * id answer, and that every route answers the erased account as an unknown one. Then a big
 * erasure through serve: 202 with Location, progress in the erasure's record and in
 * /v1/admin/status, the background job's batches, a stop in the middle and a restart that
 * finishes it, exact counts and a clean audit.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { signToken } from "../../src/api/auth.ts";
import { fullAudit } from "../../src/api/routes/admin.ts";
import { loadConfig } from "../../src/config.ts";
import { freePort } from "../../src/db/embedded-cluster.ts";
import { Gate, Hooks } from "../../src/hooks.ts";
import { startService } from "../../src/runtime/service.ts";
import { createAccounts, ok, startApi } from "../api/harness.ts";
import { pollUntil } from "../../support/poll.ts";
import { buildWorld, drain, expectCounts, nonZero, readCounts } from "./fixture.ts";

test("DELETE /v1/accounts/{id}: self or admin (another user 403, no token 401), 200 when done at once, a repeat 200, unknown 404; the erased account is 404 on every route", async (t) => {
  const h = await startApi({ partitions: 2 });
  t.after(() => h.close());
  const admin = await h.as("admin-1", { admin: true });
  await createAccounts(admin, ["alice", "bob", "zed"]);
  const alice = await h.as("alice");
  const bob = await h.as("bob");
  ok(await alice.put("/v1/accounts/me/following/bob"));
  ok(await bob.put("/v1/accounts/me/following/alice"));
  const post = ok(await alice.post<{ id: string }>("/v1/posts", { visibility: "PUBLIC", body: "hi" }), 201);
  ok(await bob.put(`/v1/items/${post.id}/likes/me`));

  const other = await bob.delete("/v1/accounts/alice");
  assert.equal(other.status, 403);
  assert.equal((other.body as { error: { code: string } }).error.code, "FORBIDDEN");
  assert.equal((await bob.get("/v1/accounts/alice/erasure")).status, 403);
  assert.equal((await h.request("DELETE", "/v1/accounts/alice")).status, 401);
  // Nothing was erased by the refused calls.
  assert.equal((await bob.get("/v1/accounts/alice")).status, 200);
  assert.equal((await alice.get("/v1/accounts/me/erasure")).status, 404);
  assert.equal(
    (await alice.get("/v1/accounts/me/erasure")).body &&
      ((await alice.get("/v1/accounts/me/erasure")).body as { error: { code: string } }).error.code,
    "ERASURE_NOT_FOUND",
  );

  const erased = await alice.delete("/v1/accounts/me");
  assert.equal(erased.status, 200, erased.text);
  assert.deepEqual(
    (({ accountId, phase, done, remaining, requestedBy }) => ({ accountId, phase, done, remaining, requestedBy }))(
      erased.body as Record<string, unknown>,
    ),
    { accountId: "alice", phase: "done", done: 4, remaining: 0, requestedBy: "self" },
  );
  const again = await alice.delete("/v1/accounts/alice");
  assert.equal(again.status, 200);
  assert.equal((again.body as { finishedAt: string }).finishedAt, (erased.body as { finishedAt: string }).finishedAt);
  assert.equal((await admin.get("/v1/accounts/alice/erasure")).status, 200);
  const unknown = await admin.delete("/v1/accounts/nobody");
  assert.equal(unknown.status, 404);
  assert.equal((unknown.body as { error: { code: string } }).error.code, "ACCOUNT_NOT_FOUND");
  // An admin erases another account: requestedBy admin.
  assert.equal(((await admin.delete("/v1/accounts/zed")).body as { requestedBy: string }).requestedBy, "admin");

  await h.drain();
  const ghost = await bob.get("/v1/accounts/ghost-never");
  for (const path of [
    "/v1/accounts/alice",
    "/v1/accounts/alice/followers",
    "/v1/accounts/alice/following",
    "/v1/accounts/alice/follower-count",
    "/v1/accounts/me/relationships/alice",
    `/v1/posts/${post.id}`,
    `/v1/items/${post.id}/likes`,
    `/v1/items/${post.id}/like-count`,
  ]) {
    const res = await bob.get(path);
    assert.equal(res.status, 404, `${path}: ${res.text}`);
  }
  assert.deepEqual((await bob.get("/v1/accounts/ghost-never")).body, ghost.body);
  const follow = await bob.put("/v1/accounts/me/following/alice");
  assert.equal(follow.status, 404);
  assert.deepEqual(follow.body, { error: { code: "ACCOUNT_NOT_FOUND", message: "unknown account: alice" } });
  assert.deepEqual(ok(await bob.get<{ following: unknown[] }>("/v1/accounts/bob/following")).following, []);
  assert.deepEqual(ok(await bob.get<{ followers: unknown[] }>("/v1/accounts/bob/followers")).followers, []);
  assert.deepEqual(ok(await bob.get<{ likes: unknown[] }>("/v1/accounts/me/likes")).likes, []);
  // alice's token after it: a tombstone's, every write refused (docs/erasure.md); the account stays missing.
  const back = await alice.put("/v1/accounts/me/following/bob");
  assert.equal(back.status, 410, back.text);
  assert.equal((back.body as { error: { code: string } }).error.code, "ACCOUNT_ERASED");
  assert.equal((await bob.get("/v1/accounts/alice")).status, 404);
  assert.equal((await alice.get("/v1/accounts/me/erasure")).status, 200);
  await h.drain();
  assert.equal((await fullAudit(h.ledger)).clean, true);
});

test(
  "serve: a big erasure is 202 with Location, runs in the background in batches, is visible in /v1/admin/status, survives a restart, and ends exact",
  { timeout: 120_000 },
  async (t) => {
    const w = await buildWorld({ partitions: 2 });
    t.after(() => w.close());
    const before = await readCounts(w.db);
    const secret = randomBytes(32).toString("hex");
    const env = {
      DATABASE_URL: w.db.url,
      PORT: String(await freePort()),
      LEDGER_JWT_SECRET: secret,
      LEDGER_ERASURE_BATCH_SIZE: "2",
      LEDGER_PRUNE_EVERY_MS: "0",
    };
    const hooks = new Hooks();
    const gate = new Gate("erasure.betweenBatches");
    let batches = 0;
    hooks.on("erasure.betweenBatches", async (ctx) => {
      if (++batches === 4) await gate.handler(ctx);
    });
    const first = await startService(loadConfig(env), { logger: false, hooks });
    t.after(() => {
      gate.release();
      return first.stop();
    });
    const key = new TextEncoder().encode(secret);
    const adminToken = await signToken(key, "admin-1", { admin: true });
    const call = async (base: string, method: string, path: string) => {
      const res = await fetch(`${base}${path}`, { method, headers: { authorization: `Bearer ${adminToken}` } });
      return {
        status: res.status,
        location: res.headers.get("location"),
        body: (await res.json()) as Record<string, unknown>,
      };
    };
    const accepted = await call(first.address, "DELETE", "/v1/accounts/eve");
    assert.equal(accepted.status, 202);
    assert.equal(accepted.location, "/v1/accounts/eve/erasure");
    assert.equal(accepted.body.phase, "posts");
    assert.equal(accepted.body.remaining, 23);
    await gate.waitArrived();
    const progress = await call(first.address, "GET", accepted.location!);
    assert.equal(progress.status, 200);
    // Four batches of at most 2: posts 2 + 1 (fewer than 2: the phase is done), comments 2 + 1.
    assert.deepEqual([progress.body.phase, progress.body.done], ["post_likes", 6]);
    const status = await call(first.address, "GET", "/v1/admin/status");
    assert.deepEqual(
      (status.body.erasures as Record<string, unknown>[]).map((e) => [e.accountId, e.phase, e.done, e.remaining]),
      [["eve", "post_likes", 6, 17]],
    );
    // Stop in the middle: the parked batch has committed; the job may run a batch or two more
    // while the HTTP server closes, then stops.
    const stopping = first.stop();
    gate.release();
    await stopping;
    const mid = (await w.db.pool.query("SELECT phase, done FROM account_erasure WHERE account_id = 'eve'")).rows[0]!;
    assert.notEqual(mid.phase, "done");
    assert.notEqual(mid.phase, "done");
    assert.ok(mid.done >= 6 && mid.done < 23, JSON.stringify(mid));

    const second = await startService(loadConfig({ ...env, PORT: String(await freePort()) }), { logger: false });
    t.after(() => second.stop());
    const done = await pollUntil(
      "the restarted service finished the erasure",
      () => call(second.address, "GET", "/v1/accounts/eve/erasure"),
      (r) => r.body.phase === "done",
    );
    assert.deepEqual([done.body.done, done.body.remaining], [23, 0]);
    assert.equal((await call(second.address, "GET", "/v1/accounts/eve")).status, 404);
    await second.stop();
    await drain(w.ledger);
    const [p1, , p3] = w.evePosts;
    const [c1, , c3] = w.eveComments;
    assert.deepEqual(
      nonZero(await readCounts(w.db)),
      nonZero(
        expectCounts(before, {
          likes: {
            [w.carlPost]: -1,
            "plain-x": -1,
            [w.u1Comment]: -1,
            [p1!]: -3,
            [p3!]: -1,
            [c1!]: -1,
            [c3!]: -1,
            [w.eveDeletedPost]: -1,
          },
          comments: { [w.carlPost]: -2, [p1!]: -1 },
          followers: { carl: -1, u1: -1, eve: -2 },
          following: { eve: -2, u1: -1, u3: -1 },
          blocks: -1,
        }),
      ),
    );
    assert.equal((await fullAudit(w.ledger)).clean, true);
  },
);
