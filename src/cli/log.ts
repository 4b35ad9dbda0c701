import { pino, type Logger } from "pino";
import { logLevel } from "../config.ts";

/**
 * The CLI's long-running commands (worker) log like `serve` does: fastify's logger is pino,
 * so this is pino with the same options (numeric level, epoch time, pid, hostname, msg), one
 * JSON object per line on stdout, and LOG_LEVEL applies to both.
 */
export function cliLogger(bindings: Record<string, unknown>): Logger {
  // Synchronous writes: the last lines ("totals", "stopped") come right before process.exit, and
  // pino's default asynchronous stdout could lose a write still in flight at the exit.
  return pino({ level: logLevel() }, pino.destination({ dest: 1, sync: true })).child(bindings);
}
