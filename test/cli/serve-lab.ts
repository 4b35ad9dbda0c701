/**
 * A data directory of a test's own for `social-ledger serve` children (the embedded default),
 * on a free HTTP port, cleaned up after the test: every child killed, the PostgreSQL a killed
 * serve leaves behind ended (immediate shutdown), each child checked gone, the directory removed.
 */
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import path from "node:path";
import type { TestContext } from "node:test";
import { clusterTempDir, freePort } from "../../src/db/embedded-cluster.ts";
import { CliChild, childEnv, pollUntil, postmasterPid, processAlive } from "./cli-child.ts";

export interface ServeLab {
  dataDir: string;
  env: NodeJS.ProcessEnv;
  serve(name: string): CliChild;
}

/** `extraEnv` adds to the children's environment (LOG_LEVEL, REDIS_URL, ...). */
export async function serveLab(
  t: TestContext,
  prefix: string,
  extraEnv: Record<string, string> = {},
): Promise<ServeLab> {
  const dataDir = await clusterTempDir(prefix);
  const env = childEnv({ LEDGER_DATA_DIR: dataDir, PORT: String(await freePort()), ...extraEnv });
  const children: CliChild[] = [];
  t.after(async () => {
    for (const child of children) if (child.alive()) await child.stop("SIGKILL");
    const pgPid = postmasterPid(path.join(dataDir, "pg"));
    if (pgPid !== undefined && processAlive(pgPid)) {
      process.kill(pgPid, "SIGQUIT");
      await pollUntil(
        "leftover postmaster gone",
        async () => processAlive(pgPid),
        (alive) => !alive,
        15_000,
      );
    }
    for (const child of children)
      assert.equal(processAlive(child.pid), false, `${child.name} (pid ${child.pid}) is gone`);
    await rm(dataDir, { recursive: true, force: true });
  });
  return {
    dataDir,
    env,
    serve(name) {
      const child = new CliChild(name, ["serve"], env);
      children.push(child);
      return child;
    },
  };
}
