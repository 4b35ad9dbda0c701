/**
 * The database-outage tests' shared parts: a `serve` child with a data directory of its own
 * under the like load, and the independent check that nothing acknowledged was lost.
 */
import type { TestContext } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readFile, rm } from "node:fs/promises";
import path from "node:path";
import { clusterTempDir, freePort } from "../../src/db/embedded-cluster.ts";
import { createPool } from "../../src/db/pool.ts";
import { embeddedSuperuserUrl } from "../../src/runtime/embedded-access.ts";
import { CliChild, childEnv, httpClient, pollUntil, postmasterPid, processAlive, runCli } from "./cli-child.ts";
import { LikeLoad, LOAD_SERVICE_ENV } from "./like-load.ts";

export const LISTENING = /^social-ledger listening on (http:\/\/\S+)$/;
export const CLIENTS = 8;
export const ITEMS = 16;
export const LOAD_BEFORE_FAULT = 150;

export interface Setup {
  dataDir: string;
  pgData: string;
  secret: string;
  env: NodeJS.ProcessEnv;
  children: CliChild[];
}

export async function setup(t: TestContext, vars: Record<string, string> = {}): Promise<Setup> {
  const dataDir = await clusterTempDir("ledger-outage-");
  const pgData = path.join(dataDir, "pg");
  const secret = randomBytes(32).toString("hex");
  const env = childEnv({
    LEDGER_DATA_DIR: dataDir,
    LEDGER_JWT_SECRET: secret,
    PORT: String(await freePort()),
    LOG_LEVEL: "info",
    ...LOAD_SERVICE_ENV,
    ...vars,
  });
  const children: CliChild[] = [];
  t.after(async () => {
    for (const child of children) if (child.alive()) await child.stop("SIGKILL");
    const pgPid = postmasterPid(pgData);
    if (pgPid !== undefined && processAlive(pgPid)) {
      process.kill(pgPid, "SIGQUIT");
      await pollUntil(
        "leftover postmaster gone",
        async () => processAlive(pgPid),
        (alive) => !alive,
        15_000,
      );
    }
    await rm(dataDir, { recursive: true, force: true });
  });
  return { dataDir, pgData, secret, env, children };
}

export async function serve(
  s: Setup,
  name: string,
  env: NodeJS.ProcessEnv = s.env,
): Promise<{ child: CliChild; address: string }> {
  const child = new CliChild(name, ["serve"], env);
  s.children.push(child);
  return { child, address: LISTENING.exec(await child.waitFor(LISTENING, 90_000))![1]! };
}

/** The superuser's URL of serve's embedded cluster, for the test's independent SQL. */
export async function embeddedUrl(s: Setup): Promise<string> {
  const port = Number((await readFile(path.join(s.dataDir, "pg-port"), "utf8")).trim());
  return embeddedSuperuserUrl(s.dataDir, port);
}

/**
 * With independent SQL: every acknowledged like/unlike is the state of its pair, counts (read
 * through the service with allowedLag=0, once caught up) equal the facts, and the audit is clean.
 */
export async function verifyNothingLost(
  t: TestContext,
  s: Setup,
  load: LikeLoad,
  url: string,
  address: string,
): Promise<void> {
  const pool = createPool({ connectionString: url, max: 2 });
  try {
    const { rows } = await pool.query<{ user_id: string; item_id: string; liked: boolean }>(
      "SELECT user_id, item_id, liked FROM like_fact WHERE user_id LIKE 'load-user-%'",
    );
    const stored = new Map(rows.map((r) => [`${r.user_id}/${r.item_id}`, r.liked]));
    const wrong = await load.mismatches(async (user, item) => stored.get(`${user}/${item}`) ?? false);
    assert.deepEqual(wrong, [], "acknowledged writes lost or resurrected");
    const facts = await pool.query<{ item_id: string; n: number }>(
      "SELECT item_id, count(*) FILTER (WHERE liked)::int AS n FROM like_fact WHERE item_id LIKE 'load-item-%' GROUP BY item_id",
    );
    const call = httpClient(address);
    const { signToken } = await import("../../src/api/auth.ts");
    const reader = await signToken(new TextEncoder().encode(s.secret), "reader");
    for (const { item_id: item, n } of facts.rows) {
      await pollUntil(
        `count of ${item} caught up`,
        () => call<{ count: number; stale: boolean }>("GET", `/v1/items/${item}/like-count?allowedLag=0`, reader),
        (res) => res.status === 200 && res.body.count === n && !res.body.stale,
        60_000,
      );
    }
    const checked = [...load.expected.values()].reduce((sum, m) => sum + m.size, 0);
    t.diagnostic(
      `note pairs checked=${checked} in doubt (last request unanswered)=${load.inDoubt.size}; items with counts equal to facts=${facts.rows.length}`,
    );
  } finally {
    await pool.end();
  }
  const audit = await runCli(["audit"], s.env);
  assert.equal(audit.code, 0, audit.stdout + audit.stderr);
}
