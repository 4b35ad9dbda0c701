/**
 * The scale bench's start-up figure: the real service process (`node --import tsx src/server.ts`,
 * what `npm start` runs) on the bench's database, timed from spawn until GET /readyz answers 200,
 * then stopped with SIGTERM. The service's own periodic jobs start with it, as in production.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { freePort } from "../src/db/embedded-cluster.ts";

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

export interface StartupFigure {
  /** Spawn to the first 200 of /readyz. */
  readySeconds: number;
  /** SIGTERM to exit. */
  stopSeconds: number;
}

export async function startupFigure(databaseUrl: string, timeoutMs = 600_000): Promise<StartupFigure> {
  const port = await freePort();
  const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: databaseUrl, PORT: String(port), LOG_LEVEL: "warn" };
  for (const name of ["REDIS_URL", "NATS_URL", "DATABASE_REPLICA_URLS", "LEDGER_DATA_DIR", "NODE_OPTIONS"])
    delete env[name];
  const t0 = performance.now();
  const child = spawn(process.execPath, ["--import", "tsx", "src/server.ts"], {
    cwd: REPO_ROOT,
    env,
    stdio: ["ignore", "ignore", "pipe"],
  });
  // Its stderr is shown only when it fails to become ready (the last lines say why).
  let stderr = "";
  child.stderr.on("data", (chunk: Buffer) => (stderr = (stderr + chunk.toString("utf8")).slice(-4000)));
  const exited = once(child, "exit");
  try {
    for (;;) {
      if (child.exitCode !== null)
        throw new Error(`the service exited with ${child.exitCode} before it was ready:\n${stderr}`);
      if (performance.now() - t0 > timeoutMs)
        throw new Error(`the service was not ready within ${timeoutMs / 1000} s:\n${stderr}`);
      const ok = await fetch(`http://127.0.0.1:${port}/readyz`).then(
        (r) => r.status === 200,
        () => false,
      );
      if (ok) break;
      // A readiness probe's interval, as an orchestrator polls it: the figure's resolution.
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const readySeconds = (performance.now() - t0) / 1000;
    const s0 = performance.now();
    child.kill("SIGTERM");
    await exited;
    return { readySeconds, stopSeconds: (performance.now() - s0) / 1000 };
  } finally {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGKILL");
      await exited;
    }
  }
}
