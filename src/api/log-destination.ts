import pino from "pino";

/**
 * The service's stdout log, one write per turn of the event loop: the lines logged while one
 * batch of I/O callbacks runs (under load, several requests' "request" lines) are written
 * together at the end of that turn (setImmediate) instead of one write system call each. A line
 * waits for the current turn only, never for a timer; and on exit (process.exit, an uncaught
 * exception) what is pending is written synchronously. Only a SIGKILL in the middle of a turn
 * loses that turn's lines.
 */
export interface LogDestination {
  write(line: string): void;
  /** Writes what is pending now. */
  flushSync(): void;
}

let stdout: LogDestination | undefined;

/** One per process (there is one stdout), however many apps are built. */
export function batchedStdout(): LogDestination {
  if (stdout) return stdout;
  // pino's own stdout destination (sonic-boom, synchronous): it retries a full pipe (EAGAIN).
  const out = pino.destination({ dest: 1, sync: true });
  let pending = "";
  const flushSync = () => {
    if (pending === "") return;
    const lines = pending;
    pending = "";
    out.write(lines);
  };
  process.on("exit", flushSync);
  stdout = {
    write(line) {
      if (pending === "") setImmediate(flushSync);
      pending += line;
    },
    flushSync,
  };
  return stdout;
}
