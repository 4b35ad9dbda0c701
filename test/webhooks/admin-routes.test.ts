/**
 * The webhook admin routes over real HTTP: register (the secret answered once), list, get with
 * cursors, change, pause/resume, rotate, replay, delete; admin only; typed errors that write
 * nothing; and a delivery of a like written through the API to a receiver registered through it.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { WebhookDelivery } from "../../src/webhooks/delivery-worker.ts";
import { WEBHOOK_SOURCES } from "../../src/webhooks/webhook-events.ts";
import { assertError, createAccounts, ok, startApi } from "../api/harness.ts";
import { WriteGuard } from "../support/write-guard.ts";
import { FAST_RETRIES, PUBLIC_URL } from "./fixture.ts";
import { TestReceiver } from "./receiver.ts";

interface Endpoint {
  id: string;
  url: string;
  events: string[];
  status: string;
  backlog: number;
  secret?: string;
  previousSecretValidUntil?: string;
  cursors?: { source: string; partition: number; deliveredUpto: number; last: number; attempts: number }[];
}

test("webhook admin routes: register, list, get, change, pause, resume, rotate, replay, delete; the secret only in the answers that make one", async (t) => {
  const h = await startApi({ partitions: 2, app: { webhooks: { allowPrivate: true } } });
  t.after(() => h.close());
  const receiver = await TestReceiver.start();
  t.after(() => receiver.close());
  const admin = await h.as("root", { admin: true });
  await createAccounts(admin, ["alice"]);
  ok(await admin.put("/v1/items/item-1"));

  const created = ok<Endpoint>(
    await admin.post("/v1/admin/webhooks", { url: receiver.url, events: ["like.created", "like.removed"] }),
    201,
  );
  assert.match(created.secret ?? "", /^whsec_/);
  assert.equal(created.status, "active");
  receiver.secrets.push(created.secret!);
  const listed = ok<{ endpoints: Endpoint[] }>(await admin.get("/v1/admin/webhooks"));
  assert.deepEqual(
    listed.endpoints.map((e) => [e.id, e.url, "secret" in e]),
    [[created.id, receiver.url, false]],
    "no secret in the list",
  );
  const one = ok<Endpoint>(await admin.get(`/v1/admin/webhooks/${created.id}`));
  assert.equal("secret" in one, false);
  assert.equal(one.cursors!.length, WEBHOOK_SOURCES.length * 2, "a cursor per outbox and partition");
  assert.equal(WEBHOOK_SOURCES.length, 6);

  const alice = await h.as("alice");
  ok(await alice.put("/v1/items/item-1/likes/me"));
  const delivery = new WebhookDelivery(h.db.pool, FAST_RETRIES);
  await delivery.pass();
  assert.deepEqual(
    receiver.deliveries.map((d) => [d.parsed.type, d.parsed.data.userId, d.signedBy.length]),
    [["like.created", "alice", 1]],
  );

  const changed = ok<Endpoint>(
    await h.request("PATCH", `/v1/admin/webhooks/${created.id}`, { token: admin.token, json: { events: ["*"] } }),
  );
  assert.deepEqual(changed.events, ["*"]);
  assert.equal(ok<Endpoint>(await admin.post(`/v1/admin/webhooks/${created.id}/pause`)).status, "paused");
  assert.equal(ok<Endpoint>(await admin.post(`/v1/admin/webhooks/${created.id}/resume`)).status, "active");
  const rotated = ok<Endpoint>(
    await admin.post(`/v1/admin/webhooks/${created.id}/rotate-secret`, { graceSeconds: 60 }),
  );
  assert.ok(rotated.secret && rotated.secret !== created.secret && rotated.previousSecretValidUntil);
  receiver.secrets.push(rotated.secret!);
  const again = ok<Endpoint>(await admin.post(`/v1/admin/webhooks/${created.id}/rotate-secret`)); // no body: the default grace
  receiver.secrets.push(again.secret!);

  const part = receiver.deliveries[0]!.parsed.data.partition;
  ok<Endpoint>(
    await admin.post(`/v1/admin/webhooks/${created.id}/replay`, { source: "likes", partition: part, fromSeq: 1 }),
  );
  await delivery.pass();
  assert.deepEqual(
    receiver.deliveries.map((d) => d.id),
    [receiver.deliveries[0]!.id, receiver.deliveries[0]!.id],
    "replayed under the same id",
  );
  assert.deepEqual(
    receiver.deliveries[1]!.signedBy.sort(),
    [rotated.secret!, again.secret!].sort(),
    "signed by the newest secret and the one before it (within its grace)",
  );

  assert.deepEqual(ok(await admin.delete(`/v1/admin/webhooks/${created.id}`)), { id: created.id, deleted: true });
  assertError(await admin.get(`/v1/admin/webhooks/${created.id}`), 404, "WEBHOOK_NOT_FOUND");
  assert.deepEqual(ok<{ endpoints: Endpoint[] }>(await admin.get("/v1/admin/webhooks")).endpoints, []);
});

test("webhook admin routes refuse with typed errors and write nothing: non-admin, unknown type, refused URL, unknown endpoint, replay out of range", async (t) => {
  // A name the service's resolver maps to an internal address: the answer must not say which.
  const resolver = async (host: string) => (host === "db.corp.test" ? [{ address: "10.20.30.40", family: 4 }] : []);
  const h = await startApi({ partitions: 1, app: { webhooks: { resolver } } });
  t.after(() => h.close());
  const admin = await h.as("root", { admin: true });
  const alice = await h.as("alice");
  const guard = await WriteGuard.create(h.db.url, h.db.pool, {
    mustHave: ["webhook_endpoint", "webhook_cursor", "retention_hold"],
  });
  t.after(() => guard.close());
  const empty = await guard.snapshot();
  assertError(await alice.post("/v1/admin/webhooks", { url: PUBLIC_URL, events: ["*"] }), 403, "FORBIDDEN");
  assertError(await h.request("GET", "/v1/admin/webhooks"), 401, "UNAUTHENTICATED");
  assertError(
    await admin.post("/v1/admin/webhooks", { url: PUBLIC_URL, events: ["like.exploded"] }),
    400,
    "INVALID_INPUT",
  );
  assertError(await admin.post("/v1/admin/webhooks", { url: PUBLIC_URL, events: [] }), 400, "INVALID_INPUT");
  const refused = assertError(
    await admin.post("/v1/admin/webhooks", { url: "http://127.0.0.1:8080/", events: ["*"] }),
    400,
    "WEBHOOK_URL_REFUSED",
  );
  assert.match(refused.error.message, /loopback/);
  const internal = assertError(
    await admin.post("/v1/admin/webhooks", { url: "https://db.corp.test/", events: ["*"] }),
    400,
    "WEBHOOK_URL_REFUSED",
  );
  assert.match(internal.error.message, /db\.corp\.test resolves to a refused address: private/);
  assert.doesNotMatch(
    JSON.stringify(internal),
    /10\.20\.30/,
    "the answer does not name the address the name resolves to",
  );
  assertError(
    await admin.post("/v1/admin/webhooks", { url: "gopher://8.8.8.8/", events: ["*"] }),
    400,
    "WEBHOOK_URL_REFUSED",
  );
  assert.deepEqual(await guard.snapshot(), empty, "no table changed");
  assertError(await admin.get("/v1/admin/webhooks/whe_nope"), 404, "WEBHOOK_NOT_FOUND");
  assertError(await admin.post("/v1/admin/webhooks/whe_nope/pause"), 404, "WEBHOOK_NOT_FOUND");
  assertError(await admin.delete("/v1/admin/webhooks/whe_nope"), 404, "WEBHOOK_NOT_FOUND");
  const created = ok<Endpoint>(await admin.post("/v1/admin/webhooks", { url: PUBLIC_URL, events: ["*"] }), 201);
  const registered = await guard.snapshot();
  assertError(
    await h.request("PATCH", `/v1/admin/webhooks/${created.id}`, {
      token: admin.token,
      json: { url: "http://[::ffff:10.0.0.1]/" },
    }),
    400,
    "WEBHOOK_URL_REFUSED",
  );
  assertError(
    await h.request("PATCH", `/v1/admin/webhooks/${created.id}`, { token: admin.token, json: {} }),
    400,
    "INVALID_INPUT",
  );
  assertError(
    await admin.post(`/v1/admin/webhooks/${created.id}/replay`, { source: "likes", partition: 0, fromSeq: 5 }),
    409,
    "REPLAY_BEYOND_END",
  );
  assertError(
    await admin.post(`/v1/admin/webhooks/${created.id}/replay`, { source: "likes", partition: 7, fromSeq: 1 }),
    400,
    "INVALID_INPUT",
  );
  assertError(
    await admin.post(`/v1/admin/webhooks/${created.id}/replay`, { source: "nope", partition: 0, fromSeq: 1 }),
    400,
    "INVALID_INPUT",
  );
  assert.deepEqual(await guard.snapshot(), registered, "refused changes and replays change nothing");
});
