/**
 * `npm start`: the service on its defaults. With DATABASE_URL it uses that PostgreSQL;
 * otherwise an embedded PostgreSQL 16 whose data lives in LEDGER_DATA_DIR (./data) and
 * survives restarts. HTTP on PORT (8080), consumers in the same process.
 */
import { serviceBanner } from "./cli/banner.ts";
import { loadConfig } from "./config.ts";
import { startService } from "./runtime/service.ts";
import { runUntilSignal } from "./runtime/signals.ts";

const config = loadConfig();
const service = await startService(config);
process.stdout.write(serviceBanner(service));
await runUntilSignal(service.stop, (line, level = "info") => service.app.log[level](line), { fatal: service.fatal });
