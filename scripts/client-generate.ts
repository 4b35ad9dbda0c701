/**
 * `npm run client:generate`: regenerates the TypeScript client's generated files
 * (clients/typescript/src: schema.ts, error-codes.ts) from the OpenAPI document
 * the service serves, built here over a fresh embedded PostgreSQL 16 cluster of its own (a free
 * port, a temporary directory, removed after). Run it after changing a route or a schema and
 * commit the files; test/client/client-in-step.test.ts fails while they differ.
 */
import { rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { buildApp } from "../src/api/app.ts";
import { ERROR_CODES_BY_STATUS } from "../src/api/openapi.ts";
import { EmbeddedCluster, clusterTempDir } from "../src/db/embedded-cluster.ts";
import { initLedger } from "../src/db/ledger-config.ts";
import { migrate } from "../src/db/migrate.ts";
import { createPool } from "../src/db/pool.ts";
import { openLedger } from "../src/ledger.ts";
import { generateClientFiles } from "../clients/typescript/scripts/generate.ts";

const CLIENT_SRC = fileURLToPath(new URL("../clients/typescript/src/", import.meta.url));

const root = await clusterTempDir("social-ledger-client-");
try {
  const cluster = await EmbeddedCluster.start({ dataDir: path.join(root, "pgdata") });
  try {
    const admin = createPool({ connectionString: cluster.connectionString("postgres"), max: 1 });
    await admin.query("CREATE DATABASE ledger_client");
    await admin.end();
    const pool = createPool({ connectionString: cluster.connectionString("ledger_client"), max: 2 });
    try {
      await migrate(pool);
      await initLedger(pool, { partitions: 1 });
      const app = await buildApp({ ledger: await openLedger(pool), jwtSecret: new Uint8Array(32), logger: false });
      try {
        await app.ready();
        const files = await generateClientFiles(app.swagger(), ERROR_CODES_BY_STATUS);
        for (const [name, text] of files) await writeFile(path.join(CLIENT_SRC, name), text);
        process.stdout.write(`wrote ${[...files.keys()].map((f) => `clients/typescript/src/${f}`).join(", ")}\n`);
      } finally {
        await app.close();
      }
    } finally {
      await pool.end();
    }
  } finally {
    await cluster.stop();
  }
} finally {
  await rm(root, { recursive: true, force: true });
}
