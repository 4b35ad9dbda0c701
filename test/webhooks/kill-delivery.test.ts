/**
 * kill -9 mid-delivery, at a deterministic point: the receiver holds one request open (the
 * worker is inside its transaction, cursor row locked, waiting for the answer), the process is
 * killed, and a restarted one delivers every committed event at least once, in order per
 * partition, a repeat only under the same webhook-id. First `serve` itself (a real child on its
 * embedded PostgreSQL), then the negative control: a worker that commits the cursor before it
 * sends loses the held event at the same kill, and the same check reports it.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { signToken } from "../../src/api/auth.ts";
import { REPO_ROOT, httpClient } from "../cli/cli-child.ts";
import { serveLab } from "../cli/serve-lab.ts";
import { LineChild } from "../support/line-child.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { pollUntil } from "../../support/poll.ts";
import { EndpointRegistry } from "../../src/webhooks/endpoint-registry.ts";
import { openLedger } from "../../src/ledger.ts";
import { deliveryProblems } from "./delivery-check.ts";
import { TestReceiver } from "./receiver.ts";

const LISTENING = /^social-ledger listening on (http:\/\/\S+)$/;
const LIKES = 12;
/** The receiver accepts this many, then holds the next request open. */
const ACCEPT_BEFORE_HOLD = 5;

interface Cursor {
  source: string;
  partition: number;
  deliveredUpto: number;
  last: number;
}

test(
  "serve killed with -9 while a webhook request is held open: the restarted serve delivers every committed event, in order per partition, the held one again under its id",
  { timeout: 240_000 },
  async (t) => {
    const secret = randomBytes(32).toString("hex");
    const lab = await serveLab(t, "ledger-webhook-kill-", {
      LEDGER_JWT_SECRET: secret,
      LEDGER_PARTITIONS: "2",
      LOG_LEVEL: "warn",
      LEDGER_WRITES_PER_MINUTE: "1000000",
      LEDGER_WEBHOOK_ALLOW_PRIVATE: "1",
      LEDGER_WEBHOOK_RETRY_BASE_MS: "20",
      LEDGER_WEBHOOK_MAX_BACKOFF_MS: "1000",
      LEDGER_WEBHOOK_LOOPS: "2",
    });
    const receiver = await TestReceiver.start();
    t.after(() => receiver.close());
    const key = new TextEncoder().encode(secret);
    const admin = await signToken(key, "root", { admin: true });
    const serve1 = lab.serve("serve#1");
    const call = httpClient(LISTENING.exec(await serve1.waitFor(LISTENING, 90_000))![1]!);
    receiver.answer = () => "hold"; // nothing gets through until every like is committed
    const created = await call<{ id: string; secret: string }>("POST", "/v1/admin/webhooks", admin, {
      url: receiver.url,
      events: ["like.created"],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    receiver.secrets.push(created.body.secret);
    assert.equal((await call("PUT", "/v1/items/item-1", admin)).status, 200);
    for (let i = 0; i < LIKES; i++)
      assert.equal((await call("PUT", "/v1/items/item-1/likes/me", await signToken(key, `fan-${i}`))).status, 200);
    // Accept the first few, then hold one open: the kill comes while serve waits for that answer.
    let answered = 0;
    receiver.answer = () => (answered++ < ACCEPT_BEFORE_HOLD ? 200 : "hold");
    receiver.release(200);
    const held = await receiver.waitHeld(60_000);
    t.diagnostic(`note held ${held.id} after ${receiver.accepted().length} accepted; killing serve#1`);
    assert.deepEqual(await serve1.stop("SIGKILL"), { code: null, signal: "SIGKILL" });
    await receiver.waitCut();
    receiver.release(200); // drops the cut ones

    receiver.answer = () => 200;
    const serve2 = lab.serve("serve#2");
    const call2 = httpClient(LISTENING.exec(await serve2.waitFor(LISTENING, 90_000))![1]!);
    const lastOf = async () => {
      const res = await call2<{ cursors: Cursor[]; backlog: number }>(
        "GET",
        `/v1/admin/webhooks/${created.body.id}`,
        admin,
      );
      return res.body;
    };
    const { cursors } = await lastOf();
    const last = new Map(cursors.filter((c) => c.source === "likes").map((c) => [c.partition, c.last]));
    assert.equal(
      [...last.values()].reduce((a, b) => a + b, 0),
      LIKES,
      "every like committed an event",
    );
    const deadline = Date.now() + 60_000;
    while (
      deliveryProblems("likes", last, receiver.deliveries).some((p) => p.startsWith("missing")) &&
      Date.now() < deadline
    ) {
      await receiver
        .waitAccepted(receiver.accepted().length + 1, Math.max(1, deadline - Date.now()))
        .catch(() => undefined);
    }
    const problems = deliveryProblems("likes", last, receiver.deliveries);
    t.diagnostic(
      `note ${receiver.deliveries.length} requests for ${LIKES} events; repeats: ${receiver.deliveries.length - new Set(receiver.deliveries.map((d) => d.id)).size}`,
    );
    assert.deepEqual(problems, []);
    assert.ok(
      receiver.deliveries.filter((d) => d.id === held.id).length >= 2,
      "the held event was sent again, under the same id",
    );
    assert.ok(
      receiver.deliveries.every((d) => d.signedBy.length === 1),
      "every request signed",
    );
    // The receiver records its 200 before the worker commits the cursor move: wait for the commit.
    await pollUntil(
      "the last cursor move committed",
      async () => (await lastOf()).backlog,
      (n) => n === 0,
      30_000,
    );
  },
);

test(
  "negative control: a worker that commits the cursor before sending loses the held event at kill -9, and the check reports it; the real worker in the same place does not",
  { timeout: 120_000 },
  async (t) => {
    const runs: Record<string, string[]> = {};
    for (const mode of ["advance-before-send", "real"] as const) {
      const db = await createTestDatabase({ partitions: 1, poolSize: 4 });
      const receiver = await TestReceiver.start();
      const children: LineChild[] = [];
      t.after(async () => {
        for (const c of children) if (c.proc.exitCode === null && c.proc.signalCode === null) await c.stop("SIGKILL");
        await receiver.close();
        await db.close();
      });
      const ledger = await openLedger(db.pool);
      await ledger.likes.createItem("item-1");
      const { secret } = await new EndpointRegistry(db.pool, { allowPrivate: true }).create({
        url: receiver.url,
        events: ["like.created"],
      });
      receiver.secrets.push(secret);
      for (const u of ["u1", "u2", "u3", "u4"]) await ledger.likes.like(u, "item-1");
      let answered = 0;
      receiver.answer = () => (answered++ < 1 ? 200 : "hold");
      const env = { ...process.env, DATABASE_URL: db.url };
      const first = new LineChild(`${mode}#1`, ["--import", "tsx", "test/webhooks/delivery-child.ts", mode], {
        cwd: REPO_ROOT,
        env,
      });
      children.push(first);
      await first.waitFor(/^ready$/);
      const held = await receiver.waitHeld();
      assert.equal(held.id, "evt_likes_0_2");
      await first.stop("SIGKILL");
      await receiver.waitCut();
      receiver.release(200);
      receiver.answer = () => 200;
      const second = new LineChild("real#2", ["--import", "tsx", "test/webhooks/delivery-child.ts", "real"], {
        cwd: REPO_ROOT,
        env,
      });
      children.push(second);
      await second.waitFor(/^ready$/);
      // Done when the last event got through (the lost one never comes back: nothing waits for it).
      await receiver.waitAccepted(1, 30_000);
      await (async () => {
        const deadline = Date.now() + 30_000;
        while (!receiver.accepted().some((d) => d.id === "evt_likes_0_4") && Date.now() < deadline)
          await receiver.waitAccepted(receiver.accepted().length + 1, 30_000);
      })();
      runs[mode] = deliveryProblems("likes", new Map([[0, 4]]), receiver.deliveries);
      t.diagnostic(
        `note ${mode}: requests ${receiver.deliveries.map((d) => `${d.id}:${d.status ?? "cut"}`).join(" ")}; problems ${JSON.stringify(runs[mode])}`,
      );
    }
    assert.deepEqual(
      runs["advance-before-send"],
      ["missing evt_likes_0_2"],
      "the mutant lost the event it was sending when it died",
    );
    assert.deepEqual(runs.real, [], "the real worker sent it again");
  },
);
