import { randomBytes } from "node:crypto";
import { createPool, type Pool } from "../../src/db/pool.ts";
import { initLedger } from "../../src/db/ledger-config.ts";
import { enableSqlHooks, watchSqlHooks } from "./sql-hooks.ts";

export const TEMPLATE_DATABASE = "ledger_template";

export interface TestDatabase {
  pool: Pool;
  url: string;
  partitions: number;
  close(): Promise<void>;
}

function adminUrl(): string {
  const url = process.env.LEDGER_TEST_PG_URL;
  if (!url) throw new Error("LEDGER_TEST_PG_URL is not set: run the suite with `npm test`");
  return url;
}

export function databaseUrl(base: string, database: string): string {
  const url = new URL(base);
  url.pathname = `/${database}`;
  return url.toString();
}

/** A fresh database cloned from the migrated template, initialised with P partitions (`partitions: null`: left uninitialised, P = 0), its SQL hook points on (sql-hooks.ts) unless `sqlHooks: false` (as in production). */
export async function createTestDatabase(
  options: { partitions?: number | null; poolSize?: number; sqlHooks?: boolean } = {},
): Promise<TestDatabase> {
  const name = `t_${randomBytes(6).toString("hex")}`;
  const admin = createPool({ connectionString: adminUrl(), max: 1 });
  try {
    await admin.query(`CREATE DATABASE ${name} TEMPLATE ${TEMPLATE_DATABASE}`);
    if (options.sqlHooks ?? true) await enableSqlHooks(admin, name);
  } finally {
    await admin.end();
  }
  const url = databaseUrl(adminUrl(), name);
  const pool = createPool({ connectionString: url, max: options.poolSize ?? 20 });
  watchSqlHooks(pool);
  const partitions = options.partitions === null ? 0 : await initLedger(pool, { partitions: options.partitions ?? 1 });
  return {
    pool,
    url,
    partitions,
    async close() {
      await pool.end();
    },
  };
}

/** A new, EMPTY database (not cloned from the migrated template), for tests of the migration runner itself. */
export async function createEmptyDatabase(options: { poolSize?: number } = {}): Promise<TestDatabase> {
  const name = `e_${randomBytes(6).toString("hex")}`;
  const admin = createPool({ connectionString: adminUrl(), max: 1 });
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const url = databaseUrl(adminUrl(), name);
  const pool = createPool({ connectionString: url, max: options.poolSize ?? 2 });
  return {
    pool,
    url,
    partitions: 0,
    async close() {
      await pool.end();
      const dropper = createPool({ connectionString: adminUrl(), max: 1 });
      try {
        await dropper.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await dropper.end();
      }
    },
  };
}
