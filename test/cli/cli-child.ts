/**
 * The `social-ledger` CLI as real child processes (bin/social-ledger.mjs under this node),
 * for the process tests. Synchronisation is on stdout lines and process exits, each with a
 * deadline; nothing sleeps.
 */
import { execFileSync, spawn } from "node:child_process";
import { existsSync, readFileSync, realpathSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { processState } from "../../src/runtime/process-state.ts";
import { LineChild, withDeadline, type Exit } from "../support/line-child.ts";

export const REPO_ROOT = fileURLToPath(new URL("../../", import.meta.url));
export const BIN = path.join(REPO_ROOT, "bin", "social-ledger.mjs");

/** Variables of the parent that would point a child somewhere else than the test says. */
const SCRUBBED = [
  "DATABASE_URL",
  "LEDGER_DATA_DIR",
  "LEDGER_JWT_SECRET",
  "LEDGER_JWKS_URL",
  "LEDGER_JWT_ISSUER",
  "LEDGER_JWT_AUDIENCE",
  "LEDGER_JWT_USER_CLAIM",
  "LEDGER_JWT_ADMIN_CLAIM",
  "LEDGER_JWT_ADMIN_VALUE",
  "LEDGER_JWKS_COOLDOWN_MS",
  "LEDGER_JWKS_MAX_AGE_MS",
  "LEDGER_PARTITIONS",
  "LEDGER_WRITES_PER_MINUTE",
  "LEDGER_READS_PER_MINUTE",
  "LEDGER_CORS_ORIGINS",
  "REDIS_URL",
  "DATABASE_REPLICA_URLS",
  "NATS_URL",
  "LEDGER_NATS_STREAM",
  "LEDGER_PRUNE_EVERY_MS",
  "LEDGER_RETENTION_KEEP_EVENTS",
  "LEDGER_RETENTION_KEEP_MS",
  "PORT",
  "HOST",
  "LOG_LEVEL",
  "NODE_OPTIONS",
];

export function childEnv(vars: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of SCRUBBED) delete env[name];
  return { ...env, ...vars };
}

/** The environment of a user's shell: childEnv without the npm_* variables of the `npm test` running the tests. */
export function userEnv(vars: Record<string, string>): NodeJS.ProcessEnv {
  const env = childEnv(vars);
  for (const name of Object.keys(env)) if (/^npm_/i.test(name)) delete env[name];
  return env;
}

/** npm's and npx's own scripts (npm-cli.js, npx-cli.js): what the `npm` and `npx` commands run, to run under this node. */
export function npmScript(name: "npm" | "npx"): string {
  const npm = realpathSync(execFileSync("sh", ["-c", "command -v npm"], { encoding: "utf8" }).trim());
  return path.join(path.dirname(npm), `${name}-cli.js`);
}

export type { Exit } from "../support/line-child.ts";

/** A long-running CLI child (serve, worker) whose stdout lines can be awaited. */
export class CliChild extends LineChild {
  constructor(
    name: string,
    readonly args: readonly string[],
    env: NodeJS.ProcessEnv,
    runAs?: { uid: number; gid: number },
  ) {
    super(name, [BIN, ...args], { cwd: REPO_ROOT, env, ...runAs });
  }
}

export interface CliResult extends Exit {
  stdout: string;
  stderr: string;
}

/** Runs one short CLI command to its end (bounded). */
export async function runCli(args: readonly string[], env: NodeJS.ProcessEnv, ms = 45_000): Promise<CliResult> {
  const child = spawn(process.execPath, [BIN, ...args], { cwd: REPO_ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const done = new Promise<Exit>((resolve) => child.on("close", (code, signal) => resolve({ code, signal })));
  try {
    const exit = await withDeadline(
      done,
      ms,
      () => `social-ledger ${args.join(" ")}\nstdout:\n${stdout}\nstderr:\n${stderr}`,
    );
    return { ...exit, stdout, stderr };
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  }
}

/** Whether a process runs: a zombie (dead, not yet reaped by its parent) does not. */
export function processAlive(pid: number): boolean {
  return processState(pid) === "running";
}

/** The postmaster pid of a cluster's data directory, when its pid file exists. */
export function postmasterPid(pgData: string): number | undefined {
  const file = path.join(pgData, "postmaster.pid");
  if (!existsSync(file)) return undefined;
  const pid = Number(readFileSync(file, "utf8").split("\n")[0]);
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

export { pollUntil } from "../../support/poll.ts";

/** A small JSON-over-HTTP client for the service under test. */
export function httpClient(base: string) {
  return async function call<T = Record<string, unknown>>(
    method: string,
    urlPath: string,
    token?: string,
    body?: unknown,
  ): Promise<{ status: number; body: T; headers: Headers }> {
    const headers: Record<string, string> = {};
    if (token) headers.authorization = `Bearer ${token}`;
    if (body !== undefined) headers["content-type"] = "application/json";
    const response = await fetch(new URL(urlPath, base), {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: (text ? JSON.parse(text) : {}) as T, headers: response.headers };
  };
}
