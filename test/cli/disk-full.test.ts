/**
 * PostgreSQL's data directory on a small file system (a size-limited tmpfs mounted by the test,
 * as root) filled up while likes run over HTTP. Writes answer 503 DATABASE_DISK_FULL (SQLSTATE
 * 53100, "could not extend file") or DATABASE_UNAVAILABLE (a WAL write that fails is a PANIC:
 * the server restarts), each with Retry-After; reads of what exists go on; a metric and a log
 * line say why; once space returns the same serve process writes again, and nothing
 * acknowledged is lost.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, mkdirSync, openSync, rmSync, writeSync } from "node:fs";
import { rm } from "node:fs/promises";
import path from "node:path";
import { EmbeddedCluster, clusterTempDir, freePort, postgresOsUser } from "../../src/db/embedded-cluster.ts";
import { signToken } from "../../src/api/auth.ts";
import { createPool } from "../../src/db/pool.ts";
import { LineChild } from "../support/line-child.ts";
import { BIN, REPO_ROOT, childEnv, httpClient, pollUntil } from "./cli-child.ts";
import { LikeLoad, LOAD_SERVICE_ENV, verifyLikesKept } from "./like-load.ts";

const LISTENING = /^social-ledger listening on (http:\/\/\S+)$/;
const CLIENTS = 8;
const ITEMS = 16;
const LOAD_BEFORE_FAULT = 100;
/** Room for initdb, the schema and a few WAL segments; the ballast takes the rest. */
const FILE_SYSTEM_SIZE = "256m";

/** Writes zeros to `file` until the file system refuses (ENOSPC): the disk is full. Returns the bytes written. */
function fillUp(file: string): number {
  const fd = openSync(file, "w");
  let written = 0;
  try {
    for (const size of [1 << 20, 1 << 12]) {
      const chunk = Buffer.alloc(size);
      for (;;) {
        try {
          written += writeSync(fd, chunk);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === "ENOSPC") break;
          throw err;
        }
      }
    }
  } finally {
    closeSync(fd);
  }
  return written;
}

/** ledger_database_refusals_total{reason} from serve's /metrics. */
async function refusals(address: string): Promise<Record<string, number>> {
  const text = await (await fetch(new URL("/metrics", address))).text();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^ledger_database_refusals_total\{reason="(\w+)"\} (\d+)/gm)) out[m[1]!] = Number(m[2]);
  return out;
}

/**
 * An external database's own supervisor (systemd, Patroni) starts a server that gave up; here the test
 * is it, until the server takes a connection. Once: a postmaster still in crash recovery when the space
 * returns may yet give up (its recovery needed the space before it was freed) after a single look found
 * it running, and nothing would start it again.
 */
async function superviseUntilUp(cluster: EmbeddedCluster): Promise<void> {
  await pollUntil(
    "PostgreSQL up again",
    async () => {
      if (!cluster.running) await cluster.restart();
      const probe = createPool({ connectionString: cluster.connectionString(), max: 1, connectionTimeoutMs: 2_000 });
      try {
        await probe.query("SELECT 1");
        return true;
      } catch {
        return false;
      } finally {
        await probe.end().catch(() => undefined);
      }
    },
    (up) => up,
    60_000,
    100,
  );
}

async function fillUnderLoad(t: TestContext, walSwitches: boolean): Promise<void> {
  {
    const root = await clusterTempDir("ledger-disk-full-");
    const mountPoint = path.join(root, "small");
    mkdirSync(mountPoint);
    const owner = postgresOsUser({ create: true });
    const ownerOption = owner ? `,uid=${owner.uid},gid=${owner.gid}` : "";
    execFileSync("mount", [
      "-t",
      "tmpfs",
      "-o",
      `size=${FILE_SYSTEM_SIZE},mode=0755${ownerOption}`,
      "tmpfs",
      mountPoint,
    ]);
    const owned: { cluster?: EmbeddedCluster; serve?: LineChild } = {};
    const ballast = path.join(mountPoint, "ballast");
    t.after(async () => {
      if (owned.serve?.alive()) await owned.serve.stop("SIGKILL");
      rmSync(ballast, { force: true });
      await owned.cluster?.stop();
      execFileSync("umount", [mountPoint]);
      await rm(root, { recursive: true, force: true });
    });
    const pgLog: string[] = [];
    const cluster = (owned.cluster = await EmbeddedCluster.start({
      dataDir: path.join(mountPoint, "pgdata"),
      onLog: (line) => pgLog.push(...String(line).split("\n")),
    }));
    const secret = randomBytes(32).toString("hex");
    const env = childEnv({
      DATABASE_URL: cluster.connectionString(),
      LEDGER_DATA_DIR: path.join(root, "data"),
      LEDGER_JWT_SECRET: secret,
      PORT: String(await freePort()),
      LOG_LEVEL: "info",
      LEDGER_AUDIT_EVERY_MS: "0",
      ...LOAD_SERVICE_ENV,
    });
    const serve = (owned.serve = new LineChild("serve", [BIN, "serve"], { cwd: REPO_ROOT, env }));
    const address = LISTENING.exec(await serve.waitFor(LISTENING, 90_000))![1]!;
    const call = httpClient(address);
    const reader = await signToken(new TextEncoder().encode(secret), "reader");

    const load = await LikeLoad.prepare(address, secret, { clients: CLIENTS, items: ITEMS });
    load.start();
    await load.until("load running", (f) => f.acknowledged >= LOAD_BEFORE_FAULT);
    const ballastBytes = fillUp(ballast);
    if (walSwitches) {
      // A fresh cluster has no recycled segment to switch into: the next segment must be written, and cannot be.
      const admin = createPool({ connectionString: cluster.connectionString(), max: 1, connectionTimeoutMs: 2_000 });
      for (let i = 0; i < 3 && cluster.running; i++) await admin.query("SELECT pg_switch_wal()").catch(() => undefined);
      await admin.end().catch(() => undefined);
    }
    const full = await load.until("writes refused", (f) => f.unavailable >= 4 * CLIENTS, 120_000);
    // Reads of what exists go on while the disk is full (PostgreSQL still up) or 503 while it restarts after a PANIC.
    const read = await call<{ count: number }>("GET", "/v1/items/load-item-0/like-count", reader);
    const byReason = await refusals(address);
    const diskFullLines = serve.lines.filter((l) => /"msg":"database disk full: writes refused"/.test(l));
    const panics = pgLog.filter((l) => /PANIC/.test(l));
    const upAfterPanic = cluster.running;
    rmSync(ballast);
    await superviseUntilUp(cluster);
    const after = await load
      .until("writes again", (f) => f.acknowledgedAfterOutage >= LOAD_BEFORE_FAULT, 120_000)
      .catch((err: unknown) => {
        // What the server and the service said is the only trace of why writes did not come back.
        t.diagnostic(`note PostgreSQL's last log lines:\n${pgLog.slice(-40).join("\n")}`);
        t.diagnostic(`note serve's last lines:\n${serve.lines.slice(-20).join("\n")}`);
        throw err;
      });
    await load.stop();
    t.diagnostic(
      `note ballast ${(ballastBytes / 2 ** 20).toFixed(0)} MiB; 503 while full=${full.unavailable}; refusals by reason ${JSON.stringify(byReason)}; read while full: ${read.status}; PostgreSQL PANIC lines: ${panics.length}; acknowledged after=${after.acknowledgedAfterOutage}`,
    );
    if (panics.length > 0)
      t.diagnostic(`note first PANIC: ${panics[0]}; postmaster running while still full: ${upAfterPanic}`);
    if (walSwitches) {
      assert.ok(panics.length > 0, "the WAL write that found no space was a PANIC");
      assert.ok((byReason.connection_lost ?? 0) > 0, "the crash's refusals are counted as connection_lost");
    }
    assert.deepEqual(
      after.unexpected,
      [],
      "nothing but 200 and 503 DATABASE_DISK_FULL / DATABASE_UNAVAILABLE with Retry-After",
    );
    // With the forced WAL switch PostgreSQL may PANIC before any write of the load gets its 53100:
    // then every refusal is the crash's (asserted above), and only without it is a 53100 certain.
    if (!walSwitches) {
      assert.ok((byReason.disk_full ?? 0) > 0, "ledger_database_refusals_total{reason=disk_full} counts the refusals");
      assert.ok(diskFullLines.length > 0, "a log line says the disk is full");
      assert.match(diskFullLines[0]!, /"sqlState":"53100"/);
    }
    if (panics.length === 0) assert.equal(read.status, 200, "a read of what exists is answered while the disk is full");
    assert.ok(serve.alive(), "node was not restarted");
    await pollUntil(
      "ready again",
      async () => (await call("GET", "/readyz")).status,
      (status) => status === 200,
      60_000,
    );
    await verifyLikesKept(t, load, { adminUrl: cluster.connectionString(), address, secret, env });
  }
}

test(
  "the data directory's file system fills up under HTTP load: writes answer 503 DATABASE_DISK_FULL (53100) with Retry-After, reads go on, the service writes again when space returns, nothing acknowledged lost",
  { timeout: 240_000 },
  (t) => fillUnderLoad(t, false),
);

test(
  "full disk and a new WAL segment needed (pg_switch_wal): PostgreSQL PANICs; every answer is 200 or 503 with Retry-After, and once space returns and the database is up again the same serve writes, nothing acknowledged lost",
  { timeout: 240_000 },
  (t) => fillUnderLoad(t, true),
);
