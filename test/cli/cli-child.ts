/**
 * The `social-ledger` CLI as real child processes (bin/social-ledger.mjs under this node),
 * for the process tests. Synchronisation is on stdout lines and process exits, each with a
 * deadline; nothing sleeps.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

export const REPO_ROOT = fileURLToPath(new URL("../../", import.meta.url));
export const BIN = path.join(REPO_ROOT, "bin", "social-ledger.mjs");

/** Variables of the parent that would point a child somewhere else than the test says. */
const SCRUBBED = ["DATABASE_URL", "LEDGER_DATA_DIR", "LEDGER_JWT_SECRET", "LEDGER_PARTITIONS", "LEDGER_WRITES_PER_MINUTE", "PORT", "LOG_LEVEL", "NODE_OPTIONS"];

export function childEnv(vars: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of SCRUBBED) delete env[name];
  return { ...env, ...vars };
}

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

async function withDeadline<T>(promise: Promise<T>, ms: number, what: () => string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what()}: no result within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/** A long-running CLI child (serve, worker) whose stdout lines can be awaited. */
export class CliChild {
  readonly proc: ChildProcess;
  readonly lines: string[] = [];
  readonly exited: Promise<Exit>;
  stderr = "";
  private exitInfo: Exit | undefined;
  private readonly waiters: { pattern: RegExp; resolve: (line: string) => void; reject: (err: Error) => void }[] = [];

  constructor(
    readonly name: string,
    readonly args: readonly string[],
    env: NodeJS.ProcessEnv,
  ) {
    this.proc = spawn(process.execPath, [BIN, ...args], { cwd: REPO_ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
    this.proc.stderr!.setEncoding("utf8").on("data", (chunk: string) => (this.stderr += chunk));
    const stdoutClosed = new Promise<void>((resolve) => {
      const rl = createInterface({ input: this.proc.stdout! });
      rl.on("line", (line) => this.onLine(line));
      rl.on("close", resolve);
    });
    const processExited = new Promise<Exit>((resolve) => this.proc.on("exit", (code, signal) => resolve({ code, signal })));
    // Reported after the last stdout line has been delivered.
    this.exited = Promise.all([processExited, stdoutClosed]).then(([info]) => {
      this.exitInfo = info;
      for (const w of this.waiters.splice(0)) w.reject(this.failure(`exited without printing ${w.pattern}`));
      return info;
    });
  }

  get pid(): number {
    return this.proc.pid!;
  }

  failure(what: string): Error {
    return new Error(
      `${this.name} (${this.args.join(" ")}) ${what} [code=${this.exitInfo?.code} signal=${this.exitInfo?.signal}]\n` +
        `stdout:\n${this.lines.join("\n")}\nstderr:\n${this.stderr}`,
    );
  }

  private onLine(line: string): void {
    this.lines.push(line);
    for (let i = this.waiters.length - 1; i >= 0; i--) {
      const w = this.waiters[i]!;
      if (w.pattern.test(line)) {
        this.waiters.splice(i, 1);
        w.resolve(line);
      }
    }
  }

  /** The first stdout line matching `pattern`, already printed or still to come, within `ms`. */
  waitFor(pattern: RegExp, ms = 45_000): Promise<string> {
    const seen = this.lines.find((l) => pattern.test(l));
    if (seen !== undefined) return Promise.resolve(seen);
    if (this.exitInfo) return Promise.reject(this.failure(`exited without printing ${pattern}`));
    const line = new Promise<string>((resolve, reject) => this.waiters.push({ pattern, resolve, reject }));
    return withDeadline(line, ms, () => this.failure(`did not print ${pattern}`).message);
  }

  /** Sends `signal` and waits (bounded) for the exit. */
  async stop(signal: NodeJS.Signals, ms = 30_000): Promise<Exit> {
    if (this.alive()) this.proc.kill(signal);
    return withDeadline(this.exited, ms, () => this.failure(`did not exit after ${signal}`).message);
  }

  alive(): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null;
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
    const exit = await withDeadline(done, ms, () => `social-ledger ${args.join(" ")}\nstdout:\n${stdout}\nstderr:\n${stderr}`);
    return { ...exit, stdout, stderr };
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  }
}

/** Whether a process exists (EPERM: it does, under another user, e.g. postgres started as root). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** The postmaster pid of a cluster's data directory, when its pid file exists. */
export function postmasterPid(pgData: string): number | undefined {
  const file = path.join(pgData, "postmaster.pid");
  if (!existsSync(file)) return undefined;
  const pid = Number(readFileSync(file, "utf8").split("\n")[0]);
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

/** Bounded poll of `read` until `done` (a short pause between attempts); throws with the last value at the deadline. */
export async function pollUntil<T>(what: string, read: () => Promise<T>, done: (value: T) => boolean, ms = 30_000, intervalMs = 25): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not reached within ${ms} ms; last: ${JSON.stringify(value)}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/** A small JSON-over-HTTP client for the service under test. */
export function httpClient(base: string) {
  return async function call<T = Record<string, unknown>>(
    method: string,
    urlPath: string,
    token?: string,
    body?: unknown,
  ): Promise<{ status: number; body: T }> {
    const headers: Record<string, string> = {};
    if (token) headers.authorization = `Bearer ${token}`;
    if (body !== undefined) headers["content-type"] = "application/json";
    const response = await fetch(new URL(urlPath, base), { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await response.text();
    return { status: response.status, body: (text ? JSON.parse(text) : {}) as T };
  };
}
