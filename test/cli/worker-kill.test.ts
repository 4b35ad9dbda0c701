/**
 * Workers as separate processes, one of them killed -9 while requests flow: `serve --no-workers`
 * plus two `social-ledger worker` processes (one on every partition, one on 1 and 3) against
 * this file's database (DATABASE_URL, 4 partitions). Lanes of HTTP clients like/unlike and
 * follow/unfollow; the all-partition worker is killed -9 after it has logged a batch, traffic
 * goes on (partitions 0 and 2 now lag), a replacement starts, and after the drain every count
 * equals the facts, nothing was applied twice, and both GET /v1/admin/audit and `audit` are clean.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { signToken } from "../../src/api/auth.ts";
import { freePort } from "../../src/db/embedded-cluster.ts";
import { seededRandom } from "../support/concurrency.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { CliChild, childEnv, httpClient, pollUntil, processAlive, runCli } from "./cli-child.ts";

const PARTITIONS = 4;
const USERS = Array.from({ length: 12 }, (_, i) => `u${String(i).padStart(2, "0")}`);
const ITEMS = ["i0", "i1", "i2", "i3", "i4", "i5"];
const LANES = 4;
/** Operations per phase: before the kill, across it, after the replacement started. */
const PHASES = { before: 120, across: 180, after: 60 };
/** Operations of the second phase sent before the kill -9. */
const KILL_AFTER = 30;
const LISTENING = /^social-ledger listening on (http:\/\/\S+)$/;
const BATCH = /"msg":"batch"/;

interface WorkerLine {
  msg: string;
  consumer?: string;
  applied?: number;
}

test("worker processes: kill -9 one mid-stream, replace it, drain: audit clean, nothing applied twice", { timeout: 120_000 }, async (t) => {
  const db = await createTestDatabase({ partitions: PARTITIONS, poolSize: 4 });
  const dataDir = await mkdtemp(path.join(os.tmpdir(), "ledger-cli-workers-"));
  const secret = randomBytes(32).toString("hex");
  const env = childEnv({
    DATABASE_URL: db.url, LEDGER_JWT_SECRET: secret, LEDGER_DATA_DIR: dataDir, PORT: String(await freePort()),
    LOG_LEVEL: "warn", LEDGER_WRITES_PER_MINUTE: "1000000",
  });
  const children: CliChild[] = [];
  const start = (name: string, args: string[]) => {
    const child = new CliChild(name, args, env);
    children.push(child);
    return child;
  };
  t.after(async () => {
    for (const child of children) if (child.alive()) await child.stop("SIGKILL");
    for (const child of children) assert.equal(processAlive(child.pid), false, `${child.name} (pid ${child.pid}) is gone`);
    await db.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  const server = start("serve", ["serve", "--no-workers"]);
  const workerA = start("worker-A", ["worker"]);
  const workerB = start("worker-B", ["worker", "--partitions", "1,3"]);
  const address = LISTENING.exec(await server.waitFor(LISTENING))![1]!;
  assert.ok(server.lines.some((l) => /consumers: none in this process/.test(l)), "serve --no-workers runs no consumer");
  await Promise.all([workerA.waitFor(/"msg":"started"/), workerB.waitFor(/"msg":"started"/)]);

  const key = new TextEncoder().encode(secret);
  const admin = await signToken(key, "admin", { admin: true });
  const tokens = new Map(await Promise.all(USERS.map(async (u) => [u, await signToken(key, u)] as const)));
  const http = httpClient(address);
  for (const item of ITEMS) assert.equal((await http("PUT", `/v1/items/${item}`, admin)).status, 200);
  for (const u of USERS) assert.equal((await http("PUT", `/v1/accounts/${u}`, admin, { private: false })).status, 200);

  // The model, from the responses. Each user belongs to one lane, and a lane sends one request
  // at a time, so the last response for a pair is its state.
  const liked = new Map<string, boolean>();
  const following = new Map<string, boolean>();
  let sent = 0;
  const sentWaiters: { n: number; resolve: () => void }[] = [];
  const random = Array.from({ length: LANES }, (_, lane) => seededRandom(4000 + lane));

  async function lane(index: number, ops: number): Promise<void> {
    const r = random[index]!;
    const mine = USERS.filter((_, i) => i % LANES === index);
    for (let op = 0; op < ops; op++) {
      const u = mine[Math.floor(r() * mine.length)]!;
      const token = tokens.get(u)!;
      const on = r() < 0.6;
      if (r() < 0.6) {
        const item = ITEMS[Math.floor(r() * ITEMS.length)]!;
        const res = await http<{ liked: boolean }>(on ? "PUT" : "DELETE", `/v1/items/${item}/likes/me`, token);
        assert.equal(res.status, 200, JSON.stringify(res.body));
        liked.set(`${u}|${item}`, res.body.liked);
      } else {
        const others = USERS.filter((v) => v !== u);
        const v = others[Math.floor(r() * others.length)]!;
        const res = await http<{ state: string }>(on ? "PUT" : "DELETE", `/v1/accounts/me/following/${v}`, token);
        assert.equal(res.status, 200, JSON.stringify(res.body));
        following.set(`${u}|${v}`, res.body.state === "ACTIVE");
      }
      sent++;
      for (const w of sentWaiters.filter((w) => sent >= w.n)) {
        sentWaiters.splice(sentWaiters.indexOf(w), 1);
        w.resolve();
      }
    }
  }
  const phase = (ops: number) => Promise.all(Array.from({ length: LANES }, (_, i) => lane(i, Math.ceil(ops / LANES))));
  const sentAtLeast = (n: number) => new Promise<void>((resolve) => (sent >= n ? resolve() : sentWaiters.push({ n, resolve })));

  await phase(PHASES.before);
  await workerA.waitFor(BATCH);
  const across = phase(PHASES.across);
  await sentAtLeast(sent + KILL_AFTER);
  const killedAt = sent;
  const killed = await workerA.stop("SIGKILL");
  assert.deepEqual(killed, { code: null, signal: "SIGKILL" });
  await across;
  t.diagnostic(`note worker-A killed -9 after ${workerA.lines.filter((l) => BATCH.test(l)).length} logged batch(es), at request ${killedAt}; ${sent - killedAt} more sent`);

  type Status = { views: { view: string; part: number; last: number; appliedUpto: number; lag: number }[] };
  const status = async () => (await http<Status>("GET", "/v1/admin/status", admin)).body;
  const stalled = (await status()).views.filter((v) => v.lag > 0 && (v.part === 0 || v.part === 2));
  t.diagnostic(`note lag on partitions served only by the killed worker: ${JSON.stringify(stalled.map((v) => [v.view, v.part, v.lag]))}`);
  assert.ok(stalled.length > 0, "partitions 0 and 2 stopped advancing with worker-A gone");

  const workerA2 = start("worker-A2", ["worker"]);
  await workerA2.waitFor(/"msg":"started"/);
  await phase(PHASES.after);
  const drained = await pollUntil("every view caught up", status, (s) => s.views.every((v) => v.lag === 0), 30_000);
  assert.equal(drained.views.length, 2 * PARTITIONS);

  const audit = await http<{ clean: boolean }>("GET", "/v1/admin/audit", admin);
  assert.equal(audit.status, 200);
  assert.equal(audit.body.clean, true, JSON.stringify(audit.body));
  const cli = await runCli(["audit"], env);
  assert.equal(cli.code, 0, cli.stdout + cli.stderr);
  assert.match(cli.stdout, /^clean: no violation$/m);

  // Every count equals the model built from the responses, read from the derived views at lag 0.
  for (const item of ITEMS) {
    const expected = [...liked].filter(([k, v]) => v && k.endsWith(`|${item}`)).length;
    const res = await http<{ count: number; stale: boolean }>("GET", `/v1/items/${item}/like-count?allowedLag=0`, admin);
    assert.deepEqual({ count: res.body.count, stale: res.body.stale }, { count: expected, stale: false }, `like count of ${item}`);
  }
  for (const u of USERS) {
    const expected = [...following].filter(([k, v]) => v && k.endsWith(`|${u}`)).length;
    const res = await http<{ count: number; stale: boolean }>("GET", `/v1/accounts/${u}/follower-count?allowedLag=0`, admin);
    assert.deepEqual({ count: res.body.count, stale: res.body.stale }, { count: expected, stale: false }, `follower count of ${u}`);
  }
  // Exactly once: one processed row per event, each APPLIED (no rebuild ran), and the applied
  // counts the workers logged never add up to more than there were events.
  const { rows: [exact] } = await db.pool.query<{ likes: number; applied: number; relations: number; seen: number }>(
    `SELECT (SELECT count(*) FROM like_outbox)::int AS likes,
            (SELECT count(*) FROM processed_event WHERE how = 'APPLIED')::int AS applied,
            (SELECT count(*) FROM relation_event)::int AS relations,
            (SELECT count(*) FROM proj_seen)::int AS seen`,
  );
  assert.equal(exact!.applied, exact!.likes, "every like event applied exactly once");
  assert.equal(exact!.seen, exact!.relations, "every relation event projected exactly once");
  const workers = [workerA, workerB, workerA2];
  const logged = workers.flatMap((w) => w.lines.map((line) => JSON.parse(line) as WorkerLine)); // every line is JSON
  const appliedLogged = (consumer: string) =>
    logged.filter((l) => l.msg === "batch" && l.consumer === consumer).reduce((sum, l) => sum + (l.applied ?? 0), 0);
  t.diagnostic(
    `note events: likes=${exact!.likes} relations=${exact!.relations}; logged applied: like_count=${appliedLogged("like_count")} ` +
      `follower_projection=${appliedLogged("follower_projection")}; batches per worker: ` +
      workers.map((w) => `${w.name}=${w.lines.filter((l) => BATCH.test(l)).length}`).join(" "),
  );
  assert.ok(appliedLogged("like_count") <= exact!.likes);
  assert.ok(appliedLogged("follower_projection") <= exact!.relations);

  // Graceful stops: the current batch commits, exit 0.
  for (const child of [workerB, workerA2, server]) {
    assert.deepEqual(await child.stop("SIGTERM"), { code: 0, signal: null }, `${child.name}: ${child.stderr}`);
  }
  for (const w of [workerB, workerA2]) assert.match(w.lines.at(-1)!, /"msg":"stopped"/);
});
