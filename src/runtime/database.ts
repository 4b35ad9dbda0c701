import { appendFileSync, existsSync, readFileSync } from "node:fs";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import pg from "pg";
import { numericDefault, type Config } from "../config.ts";
import { ClusterStartError, EmbeddedCluster, freePort } from "../db/embedded-cluster.ts";
import { initLedger } from "../db/ledger-config.ts";
import { migrate } from "../db/migrate.ts";
import { createPool, type Pool } from "../db/pool.ts";
import type { DatabaseHealth } from "../api/routes/health.ts";
import { checkDataDirectory, secureDataDirectory } from "./data-dir.ts";
import {
  APP_ROLE,
  embeddedCredentials,
  embeddedUrl,
  secureEmbeddedRoles,
  type EmbeddedCredentials,
} from "./embedded-access.ts";
import { EmbeddedSupervisor, type SupervisorOptions } from "./embedded-supervisor.ts";
import { isRunning } from "./process-state.ts";

export interface Database {
  pool: Pool;
  /**
   * For background statements that may rightly run longer than a request's (the periodic audit):
   * two connections whose deadline is `longStatementMs`, never shorter than the pool's. The pool
   * itself when no deadline applies or none was asked for.
   */
  longPool: Pool;
  url: string;
  /** The embedded cluster this process started, if any. */
  cluster: EmbeddedCluster | undefined;
  health(): DatabaseHealth;
  /** What this process changed to lock an embedded cluster down (`secureEmbeddedRoles`); empty on every start after the first. */
  accessChanges: readonly string[];
  /** Resolves when the embedded cluster this process runs cannot be brought back: exit non-zero. */
  fatal: Promise<Error>;
  /** Closes the pool and stops an embedded cluster this process runs; rejects when that cluster had died on its own. */
  close(): Promise<void>;
}

type Log = SupervisorOptions["log"];

/**
 * P of a database the service creates when LEDGER_PARTITIONS is not set (the library's own
 * default stays 1, the chapter's). 16: in `npm run bench -- --quick --partitions 1,4,16` on this
 * 2-core machine, idle, P = 16 wrote 4,449 like/unlike per second against 3,462 at P = 4 and 1,779
 * at P = 1, and over HTTP 2,467 against 1,939; at 16 the WAL flush, not the sequence row, is what
 * waits (docs/write-path.md, "The partition count of a new database").
 */
export const SERVICE_PARTITIONS_OF_NEW = numericDefault("LEDGER_PARTITIONS");

/** How long a start waits for a dying owner, a starting server or crash recovery before giving up. */
const ACQUIRE_DEADLINE_MS = 90_000;
const ACQUIRE_POLL_MS = 100;

/** The embedded cluster keeps one port for its data directory, so every command of ours finds it. */
async function embeddedPort(dataDir: string): Promise<number> {
  const file = path.join(dataDir, "pg-port");
  if (existsSync(file)) return Number((await readFile(file, "utf8")).trim());
  const port = await freePort();
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  await writeFile(file, `${port}\n`, { mode: 0o600 });
  return port;
}

function readPid(file: string): number | undefined {
  if (!existsSync(file)) return undefined;
  const pid = Number(readFileSync(file, "utf8").split("\n")[0]);
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

/**
 * Whether a server on the port lets the service's role in and answers a query (not starting up,
 * not recovering, and its owner has finished `secureEmbeddedRoles`).
 */
async function answers(port: number, credentials: EmbeddedCredentials): Promise<boolean> {
  const client = new pg.Client({
    connectionString: embeddedUrl(port, APP_ROLE, credentials.appPassword),
    connectionTimeoutMillis: 2_000,
  });
  client.on("error", () => undefined);
  try {
    await client.connect();
    await client.query("SELECT 1");
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * Decides who runs the embedded cluster of a data directory, by what the kernel and the server
 * say rather than by a pid file alone:
 * - a running postmaster (per /proc, so not a zombie, and a `postgres` process, so not a
 *   recycled pid) whose owner (`owner.pid`) is a running process: that owner's server; we use it
 *   once it answers a query (it may be starting up or recovering: we wait);
 * - a running postmaster whose owner is dead: an orphan of a killed server; fast shutdown (every
 *   acknowledged transaction is already durable), then we start it as ours;
 * - no running postmaster: we start it. A `postmaster.pid` left by a dead or zombie postmaster is
 *   removed first: PostgreSQL's own check takes a zombie for a live postmaster and would refuse
 *   until the zombie is reaped. Its other guard, the shared memory segment still attached by
 *   surviving backends, stays in force, and a start it refuses is retried.
 * Everything is retried until a deadline, so a start racing with a dying owner waits instead of failing.
 */
async function acquireEmbedded(
  dataDir: string,
  pgData: string,
  port: number,
  credentials: EmbeddedCredentials,
  log: Log,
): Promise<EmbeddedCluster | undefined> {
  const ownerFile = path.join(dataDir, "owner.pid");
  const lockFile = path.join(pgData, "postmaster.pid");
  const deadline = Date.now() + ACQUIRE_DEADLINE_MS;
  let lastReason = "";
  let stoppedOrphan: number | undefined;
  for (;;) {
    const postmaster = readPid(lockFile);
    const owner = readPid(ownerFile);
    if (isRunning(postmaster, "postgres")) {
      if (owner !== process.pid && isRunning(owner)) {
        if (await answers(port, credentials)) return undefined;
        lastReason = `PostgreSQL ${postmaster} of owner ${owner} does not answer yet`;
      } else if (stoppedOrphan !== postmaster) {
        log("warn", "stopping the embedded PostgreSQL left running by a dead owner", { postmaster, owner });
        process.kill(postmaster!, "SIGINT");
        stoppedOrphan = postmaster;
        lastReason = `orphaned PostgreSQL ${postmaster} is shutting down`;
      }
    } else {
      if (postmaster !== undefined) await rm(lockFile, { force: true });
      try {
        // Claimed before the start, so no other process of ours takes the new server for an orphan.
        await writeFile(ownerFile, `${process.pid}\n`, { mode: 0o600 });
        return await EmbeddedCluster.start({
          dataDir: pgData,
          port,
          superuserPassword: credentials.superuserPassword,
          onLog: serverLog(dataDir),
        });
      } catch (err) {
        await releaseEmbedded(dataDir);
        if (!(err instanceof ClusterStartError)) throw err;
        lastReason = err.message;
      }
    }
    if (Date.now() > deadline)
      throw new Error(
        `the embedded PostgreSQL in ${pgData} could not be started or reached within ${ACQUIRE_DEADLINE_MS / 1000} s: ${lastReason}`,
      );
    await new Promise((resolve) => setTimeout(resolve, ACQUIRE_POLL_MS));
  }
}

/** The embedded server's own output, appended to `postgresql.log` in the data directory (what an operator reads after a crash). */
function serverLog(dataDir: string): (text: string) => void {
  const file = path.join(dataDir, "postgresql.log");
  return (text) => {
    try {
      appendFileSync(file, text.endsWith("\n") ? text : `${text}\n`, { mode: 0o600 });
    } catch {
      // A log line that cannot be written must not take the database down with it.
    }
  };
}

async function releaseEmbedded(dataDir: string): Promise<void> {
  if (readPid(path.join(dataDir, "owner.pid")) === process.pid)
    await rm(path.join(dataDir, "owner.pid"), { force: true });
}

export interface OpenOptions {
  poolSize?: number;
  applicationName?: string;
  /** One line per state change of the embedded cluster; silent by default. */
  log?: Log;
  /**
   * Apply pending migrations and fix the partition count (default). False opens the database as
   * it is, for a command that only reports on it (`migrate --status`).
   */
  migrate?: boolean;
  /**
   * Bound every statement by LEDGER_PG_QUERY_TIMEOUT_MS (the long-running processes: serve,
   * worker, relay, whose requests and loops must answer while the database cannot be reached).
   * The one-shot commands (audit, rebuild, import, ...) and the migrations have no deadline: a
   * statement of theirs may rightly run long. Checkouts, keepalive and idle time apply to all.
   */
  statementDeadline?: boolean;
  /** With statementDeadline: open `longPool`, whose statements have this deadline (at least LEDGER_PG_QUERY_TIMEOUT_MS). */
  longStatementMs?: number;
}

/**
 * DATABASE_URL when set; otherwise the embedded PostgreSQL of the data directory, started by
 * this process unless another live process of ours (the server) already runs it. A cluster this
 * process starts is supervised (restarted when it dies). Migrates and fixes the partition
 * count (LEDGER_PARTITIONS, first start only) unless `migrate: false`.
 */
export async function openDatabase(config: Config, options: OpenOptions = {}): Promise<Database> {
  const log: Log = options.log ?? (() => undefined);
  let url = config.databaseUrl;
  let cluster: EmbeddedCluster | undefined;
  let started: { port: number; credentials: EmbeddedCredentials } | undefined;
  if (!url) {
    const pgData = path.join(config.dataDir, "pg");
    checkDataDirectory(config.dataDir);
    await secureDataDirectory(config.dataDir);
    const credentials = await embeddedCredentials(config.dataDir);
    const port = await embeddedPort(config.dataDir);
    cluster = await acquireEmbedded(config.dataDir, pgData, port, credentials, log);
    if (cluster) started = { port, credentials };
    url = embeddedUrl(port, APP_ROLE, credentials.appPassword);
  }
  const supervisor = cluster
    ? new EmbeddedSupervisor(cluster, { maxRestarts: config.embeddedRestarts, log })
    : undefined;
  const timeouts = config.postgres;
  const poolOptions = {
    connectionString: url,
    applicationName: options.applicationName ?? "social-ledger",
    connectionTimeoutMs: timeouts.connectTimeoutMs,
    keepAliveMs: timeouts.keepAliveMs,
    idleMs: timeouts.idleMs,
  };
  const pool = createPool({
    ...poolOptions,
    max: options.poolSize ?? 20,
    queryTimeoutMs: options.statementDeadline ? timeouts.queryTimeoutMs : 0,
  });
  const longPool =
    options.statementDeadline && options.longStatementMs !== undefined && timeouts.queryTimeoutMs > 0
      ? createPool({
          ...poolOptions,
          applicationName: `${poolOptions.applicationName}-long`,
          max: 2,
          queryTimeoutMs: Math.max(timeouts.queryTimeoutMs, options.longStatementMs),
        })
      : pool;
  const close = async () => {
    await supervisor?.stop();
    if (longPool !== pool) await longPool.end();
    await pool.end();
    if (!cluster) return;
    const exit = await cluster.stop();
    await releaseEmbedded(config.dataDir);
    if (exit && !exit.requested) {
      throw new Error(
        `the embedded PostgreSQL had died (${exit.signal ?? `exit code ${exit.code}`}) and was not running at shutdown; it recovers from its WAL at the next start`,
      );
    }
  };
  let accessChanges: string[] = [];
  try {
    if (started) accessChanges = await secureEmbeddedRoles(config.dataDir, started.port, started.credentials);
    if (options.migrate ?? true) {
      // A migration (an index build on a large table) may rightly run longer than a statement's deadline.
      const setupPool = options.statementDeadline ? createPool({ ...poolOptions, max: 2 }) : pool;
      try {
        await migrate(setupPool);
        await initLedger(
          setupPool,
          config.partitions === undefined
            ? { partitionsOfNew: SERVICE_PARTITIONS_OF_NEW }
            : { partitions: config.partitions },
        );
      } finally {
        if (setupPool !== pool) await setupPool.end();
      }
    }
  } catch (err) {
    await close().catch(() => undefined);
    throw err;
  }
  const kind = config.databaseUrl ? "external" : cluster ? "embedded" : "embedded-shared";
  const startedAt = new Date().toISOString();
  return {
    pool,
    longPool,
    url,
    cluster,
    accessChanges,
    fatal: supervisor?.fatal ?? new Promise<Error>(() => undefined),
    health: () => ({
      kind,
      state: supervisor?.state ?? "up",
      since: supervisor?.since.toISOString() ?? startedAt,
      restarts: supervisor?.restarts ?? 0,
      lastExit: supervisor?.lastExit,
    }),
    close,
  };
}
