/**
 * `npm start`: the service on its defaults. With DATABASE_URL it uses that PostgreSQL;
 * otherwise an embedded PostgreSQL 16 whose data lives in LEDGER_DATA_DIR (./data) and
 * survives restarts. HTTP on PORT (8080), consumers in the same process.
 */
import { loadConfig } from "./config.ts";
import { startService } from "./runtime/service.ts";
import { runUntilSignal } from "./runtime/signals.ts";

const config = loadConfig();
const service = await startService(config);
process.stdout.write(
  `social-ledger listening on ${service.address}\n` +
    `  API docs:  ${service.address}/docs   (OpenAPI: ${service.address}/openapi.json)\n` +
    `  database:  ${service.database.cluster ? `embedded PostgreSQL 16, data in ${service.database.cluster.dataDir}` : "DATABASE_URL"}\n` +
    `  a token:   npx social-ledger token <userId> [--admin]   (then: curl -H "Authorization: Bearer <token>" ...)\n`,
);
await runUntilSignal(service.stop, (line) => service.app.log.info(line));
