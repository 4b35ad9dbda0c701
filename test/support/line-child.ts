/**
 * A child process whose stdout lines can be awaited, each wait with a deadline: how tests
 * synchronise with the processes they start (the CLI, a consumer) without sleeping.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export async function withDeadline<T>(promise: Promise<T>, ms: number, what: () => string): Promise<T> {
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

export class LineChild {
  readonly proc: ChildProcess;
  /** stdout lines. */
  readonly lines: string[] = [];
  /** stderr lines. */
  readonly errorLines: string[] = [];
  readonly exited: Promise<Exit>;
  stderr = "";
  private exitInfo: Exit | undefined;
  private readonly waiters: { pattern: RegExp; resolve: (line: string) => void; reject: (err: Error) => void }[] = [];

  constructor(
    readonly name: string,
    /** Arguments after the node executable. */
    readonly argv: readonly string[],
    /**
     * `uid` / `gid` (as root): run the child as that OS user; `detached`: in a process group of its own;
     * `wrapper`: a command that execs node (`ip netns exec <name>`: node in a network namespace).
     */
    options: {
      cwd: string;
      env?: NodeJS.ProcessEnv;
      uid?: number;
      gid?: number;
      detached?: boolean;
      wrapper?: readonly string[];
    },
  ) {
    const [command, ...prefix] = [...(options.wrapper ?? []), process.execPath];
    this.proc = spawn(command!, [...prefix, ...argv], {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: ["ignore", "pipe", "pipe"],
      detached: options.detached ?? false,
      ...(options.uid === undefined ? {} : { uid: options.uid, gid: options.gid }),
    });
    this.proc.stderr!.setEncoding("utf8").on("data", (chunk: string) => (this.stderr += chunk));
    // stderr lines (serve's banner) can be awaited too; `lines` stays stdout (JSON logs) only.
    const stderrClosed = new Promise<void>((resolve) => {
      const rl = createInterface({ input: this.proc.stderr! });
      rl.on("line", (line) => this.onLine(line, this.errorLines));
      rl.on("close", resolve);
    });
    const stdoutClosed = new Promise<void>((resolve) => {
      const rl = createInterface({ input: this.proc.stdout! });
      rl.on("line", (line) => this.onLine(line, this.lines));
      rl.on("close", resolve);
    });
    const processExited = new Promise<Exit>((resolve) =>
      this.proc.on("exit", (code, signal) => resolve({ code, signal })),
    );
    // Reported after the last stdout line has been delivered.
    this.exited = Promise.all([processExited, stdoutClosed, stderrClosed]).then(([info]) => {
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
      `${this.name} (${this.argv.join(" ")}) ${what} [code=${this.exitInfo?.code} signal=${this.exitInfo?.signal}]\n` +
        `stdout:\n${this.lines.join("\n")}\nstderr:\n${this.stderr}`,
    );
  }

  private onLine(line: string, into: string[]): void {
    into.push(line);
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
    const seen = this.lines.find((l) => pattern.test(l)) ?? this.errorLines.find((l) => pattern.test(l));
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
