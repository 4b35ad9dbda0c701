import { createHash, createHmac, pbkdf2Sync, randomBytes } from "node:crypto";
import path from "node:path";
import pg from "pg";
import { DEFAULT_SUPERUSER_PASSWORD } from "../db/embedded-cluster.ts";
import { LedgerError } from "../errors.ts";
import { readOrCreateSecret } from "./secret.ts";

/**
 * Who may use the service's embedded PostgreSQL (docs/security.md, "The embedded PostgreSQL"): the superuser `postgres` has a
 * random password that only the process starting the cluster uses, to set up the role the
 * service runs as, `ledger_app`: LOGIN, no superuser, no CREATEDB / CREATEROLE / REPLICATION /
 * BYPASSRLS, owner of the schema `public` and of everything the migrations made in it. Both
 * passwords are files of the data directory (mode 0600, beside `jwt-secret`).
 */
export const APP_ROLE = "ledger_app";
const SUPERUSER = "postgres";
const DATABASE = "postgres";
const SCHEMA = "public";
export const SUPERUSER_PASSWORD_FILE = "pg-superuser-password";
export const APP_PASSWORD_FILE = "pg-app-password";

export interface EmbeddedCredentials {
  superuserPassword: string;
  appPassword: string;
}

/** The two passwords of a data directory, generated on first use. */
export async function embeddedCredentials(dataDir: string): Promise<EmbeddedCredentials> {
  return {
    superuserPassword: await readOrCreateSecret(dataDir, SUPERUSER_PASSWORD_FILE),
    appPassword: await readOrCreateSecret(dataDir, APP_PASSWORD_FILE),
  };
}

export function embeddedUrl(port: number, role: string, password: string): string {
  return `postgres://${encodeURIComponent(role)}:${encodeURIComponent(password)}@127.0.0.1:${port}/${DATABASE}`;
}

/** The superuser's connection string of a data directory's running cluster (for tests and operators' scripts). */
export async function embeddedSuperuserUrl(dataDir: string, port: number): Promise<string> {
  return embeddedUrl(port, SUPERUSER, await readOrCreateSecret(dataDir, SUPERUSER_PASSWORD_FILE));
}

/** The superuser password is neither the data directory's nor the old default `postgres` of data directories made before they were locked down. */
export class EmbeddedAccessError extends LedgerError {
  constructor(message: string) {
    super("EMBEDDED_ACCESS", message);
  }
}

/**
 * A SCRAM-SHA-256 verifier (RFC 7677, PostgreSQL's `rolpassword` format), so that the
 * password itself is never sent to the server or written to its log. Our passwords are
 * base64url, which SASLprep leaves as they are.
 */
export function scramVerifier(password: string, iterations = 4096): string {
  const salt = randomBytes(16);
  const salted = pbkdf2Sync(password, salt, iterations, 32, "sha256");
  const storedKey = createHash("sha256").update(createHmac("sha256", salted).update("Client Key").digest()).digest();
  const serverKey = createHmac("sha256", salted).update("Server Key").digest();
  return `SCRAM-SHA-256$${iterations}:${salt.toString("base64")}$${storedKey.toString("base64")}:${serverKey.toString("base64")}`;
}

const INVALID_PASSWORD = "28P01";

async function connect(port: number, role: string, password: string): Promise<pg.Client> {
  const client = new pg.Client({
    connectionString: embeddedUrl(port, role, password),
    connectionTimeoutMillis: 5_000,
    application_name: "social-ledger-setup",
  });
  client.on("error", () => undefined);
  try {
    await client.connect();
    return client;
  } catch (err) {
    await client.end().catch(() => undefined);
    throw err;
  }
}

function isInvalidPassword(err: unknown): boolean {
  return (err as { code?: string }).code === INVALID_PASSWORD;
}

/** Whether the role logs in with the password (a missing role fails the same way). */
async function logsIn(port: number, role: string, password: string): Promise<boolean> {
  try {
    const client = await connect(port, role, password);
    await client.end();
    return true;
  } catch (err) {
    if (isInvalidPassword(err)) return false;
    throw err;
  }
}

/**
 * One `ALTER ... OWNER TO` statement per object of the schema not owned by the role, written by
 * the server (format with %I, regclass, regprocedure, regtype quote every name): the schema, its
 * tables, views and sequences (indexes, TOAST tables, row types and the sequences of identity or
 * serial columns follow their table), its functions and procedures, and its own types.
 */
const OWNERSHIP_STATEMENTS = `
  SELECT format('ALTER SCHEMA %I OWNER TO %I', n.nspname, $1::text) AS statement
    FROM pg_namespace n WHERE n.nspname = $2 AND n.nspowner <> $1::regrole
  UNION ALL
  SELECT format('ALTER %s %s OWNER TO %I',
                CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'S' THEN 'SEQUENCE' WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END,
                c.oid::regclass, $1::text)
    FROM pg_class c
   WHERE c.relnamespace = $2::regnamespace AND c.relowner <> $1::regrole AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
     AND NOT (c.relkind = 'S' AND EXISTS (SELECT FROM pg_depend d
                                           WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                                             AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')))
  UNION ALL
  SELECT format('ALTER %s %s OWNER TO %I', CASE p.prokind WHEN 'a' THEN 'AGGREGATE' ELSE 'ROUTINE' END, p.oid::regprocedure, $1::text)
    FROM pg_proc p WHERE p.pronamespace = $2::regnamespace AND p.proowner <> $1::regrole
  UNION ALL
  SELECT format('ALTER %s %s OWNER TO %I', CASE t.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END, t.oid::regtype, $1::text)
    FROM pg_type t
   WHERE t.typnamespace = $2::regnamespace AND t.typowner <> $1::regrole
     AND (t.typtype IN ('e', 'd', 'r') OR (t.typtype = 'c' AND (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c'))`;

const ROLE_ATTRIBUTES = "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS";

/**
 * Run by the process that starts the embedded cluster, before it migrates. Brings any data
 * directory to the locked state and returns what it had to change (nothing on every start
 * after the first): connects as the superuser with the data directory's password, or, for a
 * data directory made before they were locked down, with the old default `postgres`; creates `ledger_app`
 * (or resets its attributes and password), hands it the schema and every object in it, and
 * only then, last, sets the superuser's new password. All of it is one transaction, so a
 * crash leaves the old state, and the next start (the password files are written before)
 * does it again.
 */
export async function secureEmbeddedRoles(
  dataDir: string,
  port: number,
  credentials: EmbeddedCredentials,
): Promise<string[]> {
  let superuser: pg.Client;
  let legacyPassword = false;
  try {
    superuser = await connect(port, SUPERUSER, credentials.superuserPassword);
  } catch (err) {
    if (!isInvalidPassword(err)) throw err;
    try {
      superuser = await connect(port, SUPERUSER, DEFAULT_SUPERUSER_PASSWORD);
      legacyPassword = true;
    } catch (legacyErr) {
      if (!isInvalidPassword(legacyErr)) throw legacyErr;
      throw new EmbeddedAccessError(
        `the embedded PostgreSQL in ${path.join(dataDir, "pg")} refuses the superuser password in ${path.join(dataDir, SUPERUSER_PASSWORD_FILE)}; ` +
          `the file was replaced, or the password changed by hand: put the cluster's superuser password back in that file`,
      );
    }
  }
  const changes: string[] = [];
  try {
    const appLogsIn = await logsIn(port, APP_ROLE, credentials.appPassword);
    await superuser.query("BEGIN");
    const execute = async (sql: string, params: unknown[], change: string) => {
      const { rows } = await superuser.query<{ statement: string }>(sql, params);
      for (const { statement } of rows) await superuser.query(statement);
      if (rows.length > 0) changes.push(change);
    };
    const role = await superuser.query<{ locked: boolean }>(
      `SELECT rolcanlogin AND NOT (rolsuper OR rolcreatedb OR rolcreaterole OR rolreplication OR rolbypassrls) AS locked FROM pg_roles WHERE rolname = $1`,
      [APP_ROLE],
    );
    if (role.rows.length === 0) {
      await execute(
        `SELECT format('CREATE ROLE %I ${ROLE_ATTRIBUTES} PASSWORD %L', $1::text, $2::text) AS statement`,
        [APP_ROLE, scramVerifier(credentials.appPassword)],
        `created role ${APP_ROLE}`,
      );
    } else {
      if (!role.rows[0]!.locked)
        await execute(
          `SELECT format('ALTER ROLE %I ${ROLE_ATTRIBUTES}', $1::text) AS statement`,
          [APP_ROLE],
          `reset the attributes of ${APP_ROLE}`,
        );
      if (!appLogsIn)
        await execute(
          "SELECT format('ALTER ROLE %I PASSWORD %L', $1::text, $2::text) AS statement",
          [APP_ROLE, scramVerifier(credentials.appPassword)],
          `set the password of ${APP_ROLE}`,
        );
    }
    await execute(OWNERSHIP_STATEMENTS, [APP_ROLE, SCHEMA], `gave ${APP_ROLE} the schema ${SCHEMA} and its objects`);
    if (legacyPassword) {
      await execute(
        "SELECT format('ALTER ROLE %I PASSWORD %L', $1::text, $2::text) AS statement",
        [SUPERUSER, scramVerifier(credentials.superuserPassword)],
        `replaced the default password of ${SUPERUSER}`,
      );
    }
    await superuser.query("COMMIT");
    return changes;
  } catch (err) {
    await superuser.query("ROLLBACK").catch(() => undefined);
    throw err;
  } finally {
    await superuser.end().catch(() => undefined);
  }
}
