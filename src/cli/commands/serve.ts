import { loadConfig } from "../../config.ts";
import { startService } from "../../runtime/service.ts";
import { runUntilSignal } from "../../runtime/signals.ts";
import { serviceBanner } from "../banner.ts";

/** `social-ledger serve`: what `npm start` does, with the options of the command line. Exits on SIGINT/SIGTERM. */
export async function serve(opts: { workers: boolean; host: string; port?: number; metricsPort?: number; metricsHost: string }): Promise<number> {
  const config = loadConfig();
  if (opts.port !== undefined) config.port = opts.port;
  const service = await startService(config, {
    workers: opts.workers, host: opts.host, ...(opts.metricsPort === undefined ? {} : { metricsPort: opts.metricsPort, metricsHost: opts.metricsHost }),
  });
  // The banner is for a person; stdout stays one JSON log object per line for machines.
  process.stderr.write(serviceBanner(service, config.jwks));
  await runUntilSignal(service.stop, (line, level = "info") => service.app.log[level](line), { fatal: service.fatal });
  return 0; // not reached: runUntilSignal exits the process
}
