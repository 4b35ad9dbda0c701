/**
 * The service survives its database dying, with real processes: `serve` as a child,
 * its PostgreSQL killed with -9 (embedded) or stopped with `-m immediate` (external, through
 * DATABASE_URL) while concurrent like/unlike clients run over HTTP. While the database is down
 * every answer is 503 DATABASE_UNAVAILABLE with Retry-After, never a 500; afterwards service
 * resumes without restarting node, and independent SQL finds every acknowledged write in the
 * facts, counts equal to the facts, and a clean audit. (The starts after a dead database are in
 * database-outage-next-start.test.ts.)
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import path from "node:path";
import { EmbeddedCluster, clusterTempDir } from "../../src/db/embedded-cluster.ts";
import { httpClient, postmasterPid, processAlive } from "./cli-child.ts";
import { LikeLoad } from "./like-load.ts";
import { CLIENTS, ITEMS, LOAD_BEFORE_FAULT, embeddedUrl, serve, setup, verifyNothingLost } from "./outage-setup.ts";

test(
  "embedded PostgreSQL killed with -9 under HTTP load: only 503s while it is down, the service restarts it and resumes without restarting node, nothing acknowledged lost",
  { timeout: 240_000 },
  async (t) => {
    const s = await setup(t);
    const { child: server, address } = await serve(s, "serve");
    const load = await LikeLoad.prepare(address, s.secret, { clients: CLIENTS, items: ITEMS });
    load.start();
    await load.until("load running", (f) => f.acknowledged >= LOAD_BEFORE_FAULT);
    const killed = postmasterPid(s.pgData)!;
    process.kill(killed, "SIGKILL");
    await server.waitFor(/embedded PostgreSQL exited unexpectedly; restarting it/);
    await server.waitFor(/embedded PostgreSQL is running again/, 60_000);
    const figures = await load.until(
      "service resumed",
      (f) => f.unavailable > 0 && f.acknowledgedAfterOutage >= LOAD_BEFORE_FAULT,
    );
    await load.stop();
    t.diagnostic(
      `note acknowledged=${figures.acknowledged} (after the outage ${figures.acknowledgedAfterOutage}) 503=${figures.unavailable} other=${figures.unexpected.length}`,
    );
    assert.deepEqual(figures.unexpected, [], "nothing but 200 and 503 DATABASE_UNAVAILABLE with Retry-After");
    assert.ok(figures.unavailable > 0, "the load saw the outage");
    assert.ok(server.alive(), "node was not restarted");
    const restarted = postmasterPid(s.pgData)!;
    assert.notEqual(restarted, killed, "a new postmaster");

    const health = await httpClient(address)<{
      status: string;
      database: { state: string; restarts: number; lastExit: string };
    }>("GET", "/healthz");
    assert.deepEqual(
      [health.status, health.body.database.state, health.body.database.restarts, health.body.database.lastExit],
      [200, "up", 1, "signal SIGKILL"],
    );
    assert.equal((await httpClient(address)("GET", "/readyz")).status, 200);
    await verifyNothingLost(t, s, load, await embeddedUrl(s), address);

    const consumerLines = server.lines.filter((l) => /consumer (paused|resumed|pass failed)/.test(l));
    const perLoop = new Map<string, number>();
    for (const line of consumerLines) {
      const { worker, msg } = JSON.parse(line) as { worker: string; msg: string };
      const key = `${worker} ${msg.split(":")[0]}`;
      perLoop.set(key, (perLoop.get(key) ?? 0) + 1);
    }
    t.diagnostic(
      `note consumer log lines over the outage: ${consumerLines.length} for ${new Set([...perLoop.keys()].map((k) => k.split(" ")[0])).size} loops`,
    );
    assert.deepEqual(
      [...perLoop].filter(([, n]) => n > 1),
      [],
      "one line per loop and state change (paused, resumed), not one per attempt",
    );
    assert.ok(
      !server.lines.some((l) => /"level":50/.test(l) && /consumer/.test(l)),
      "no consumer error (with stack) for an unavailable database",
    );

    const started = Date.now();
    assert.deepEqual(await server.stop("SIGTERM"), { code: 0, signal: null }, server.stderr);
    t.diagnostic(`note SIGTERM after recovery: exit 0 in ${Date.now() - started} ms`);
    assert.ok(server.lines.some((l) => /"msg":"stopped"/.test(l)));
    assert.equal(processAlive(restarted), false, "the restarted PostgreSQL stopped with serve");
  },
);

test(
  "external database (DATABASE_URL) stopped with -m immediate under HTTP load and started again: 503s while it is down, /readyz says so, service resumes without restarting node, nothing acknowledged lost",
  { timeout: 240_000 },
  async (t) => {
    const root = await clusterTempDir("ledger-outage-external-");
    const cluster = await EmbeddedCluster.start({ dataDir: path.join(root, "pgdata") });
    t.after(async () => {
      await cluster.stop();
      await rm(root, { recursive: true, force: true });
    });
    const s = await setup(t, { DATABASE_URL: cluster.connectionString() });
    const { child: server, address } = await serve(s, "serve");
    const call = httpClient(address);
    const load = await LikeLoad.prepare(address, s.secret, { clients: CLIENTS, items: ITEMS });
    load.start();
    await load.until("load running", (f) => f.acknowledged >= LOAD_BEFORE_FAULT);
    await cluster.crashImmediate();
    await load.until("the load sees the outage", (f) => f.unavailable >= CLIENTS);
    const ready = await call<{ error: { code: string } }>("GET", "/readyz");
    const live = await call<{ status: string; database: { kind: string; state: string } }>("GET", "/healthz");
    assert.deepEqual(
      [ready.status, ready.body.error.code, ready.headers.get("retry-after") !== null],
      [503, "DATABASE_UNAVAILABLE", true],
    );
    assert.deepEqual(
      [live.status, live.body.database.kind],
      [200, "external"],
      "liveness does not restart a process for a database outage",
    );
    await cluster.restart();
    const figures = await load.until("service resumed", (f) => f.acknowledgedAfterOutage >= LOAD_BEFORE_FAULT);
    await load.stop();
    t.diagnostic(
      `note acknowledged=${figures.acknowledged} (after the outage ${figures.acknowledgedAfterOutage}) 503=${figures.unavailable} other=${figures.unexpected.length}`,
    );
    assert.deepEqual(figures.unexpected, [], "nothing but 200 and 503 DATABASE_UNAVAILABLE with Retry-After");
    assert.ok(server.alive(), "node was not restarted");
    assert.equal((await call("GET", "/readyz")).status, 200);
    await verifyNothingLost(t, s, load, cluster.connectionString(), address);
    assert.deepEqual(await server.stop("SIGTERM"), { code: 0, signal: null }, server.stderr);
  },
);
