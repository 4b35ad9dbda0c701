/**
 * `npm run db:schema`: writes src/db/schema.sql, the schema every migration makes of an empty
 * database, from a fresh embedded PostgreSQL 16 cluster of its own (a free port, a temporary
 * directory, removed after). Run it after adding or changing a migration and commit the file;
 * test/db/schema-file.test.ts fails while the file and the migrations differ.
 */
import { rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { EmbeddedCluster, clusterTempDir } from "../src/db/embedded-cluster.ts";
import { migrate } from "../src/db/migrate.ts";
import { createPool } from "../src/db/pool.ts";
import { dumpSchema } from "../src/db/schema-dump.ts";

const SCHEMA_FILE = fileURLToPath(new URL("../src/db/schema.sql", import.meta.url));

const root = await clusterTempDir("social-ledger-schema-");
try {
  const cluster = await EmbeddedCluster.start({ dataDir: path.join(root, "pgdata") });
  try {
    const admin = createPool({ connectionString: cluster.connectionString("postgres"), max: 1 });
    await admin.query("CREATE DATABASE ledger_schema");
    await admin.end();
    const pool = createPool({ connectionString: cluster.connectionString("ledger_schema"), max: 1 });
    try {
      const { applied } = await migrate(pool);
      await writeFile(SCHEMA_FILE, await dumpSchema(pool));
      process.stdout.write(`wrote ${path.relative(process.cwd(), SCHEMA_FILE)} (${applied.length} migrations)\n`);
    } finally {
      await pool.end();
    }
  } finally {
    await cluster.stop();
  }
} finally {
  await rm(root, { recursive: true, force: true });
}
