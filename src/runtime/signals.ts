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
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
  });
  log("stopped");
  process.exit(0);
}
