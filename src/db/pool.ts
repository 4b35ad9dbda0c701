import { performance } from "node:perf_hooks";
import pg from "pg";
import { CheckoutWaits } from "./checkout-waits.ts";
import { mapPgError } from "./errors.ts";

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;

// int8 columns (sequence numbers, counts, versions) stay far below 2^53 in this system,
// so they are parsed as numbers rather than strings.
pg.types.setTypeParser(pg.types.builtins.INT8, (value) => Number(value));

export interface PoolOptions {
  connectionString: string;
  max?: number;
  applicationName?: string;
  /** How long a checkout waits for a connection before failing with ConnectionLostError (default 5 s). */
  connectionTimeoutMs?: number;
}

/**
 * A pg.Pool whose one-shot `query` rejects with the typed errors of errors.ts, so reads
 * outside withTransaction (which maps its own errors) fail the same way writes do, and which
 * times every checkout (pool.query checks out through connect too) for the pool's metrics.
 */
class MappedPool extends pg.Pool {
  readonly checkoutWaits = new CheckoutWaits();

  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- forwards both forms of pg.Pool#connect (callback, promise) unchanged
  override connect(...args: any[]): any {
    const started = performance.now();
    const observe = () => this.checkoutWaits.observe((performance.now() - started) / 1000);
    const callback = args[0] as
      ((err: Error | undefined, client?: pg.PoolClient, done?: (release?: unknown) => void) => void) | undefined;
    if (typeof callback === "function") {
      return super.connect((err, client, done) => {
        observe();
        callback(err, client, done);
      });
    }
    return super.connect().then(
      (client) => {
        observe();
        return client;
      },
      (err: unknown) => {
        observe();
        throw err;
      },
    );
  }

  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- forwards every overload of pg.Pool#query unchanged
  override query(...args: any[]): any {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const result = (super.query as (...a: any[]) => unknown)(...args);
    if (result instanceof Promise) return result.catch((err: unknown) => Promise.reject(mapPgError(err)));
    return result;
  }
}

export function createPool(options: PoolOptions): Pool {
  const pool = new MappedPool({
    connectionString: options.connectionString,
    max: options.max ?? 10,
    application_name: options.applicationName ?? "social-ledger",
    // pg's default is to wait forever: with the database gone, requests would hang instead of
    // answering 503.
    connectionTimeoutMillis: options.connectionTimeoutMs ?? 5_000,
  });
  // An idle client whose server went away emits 'error'; without a listener that crashes
  // the process. The next checkout gets a fresh connection, so logging is enough.
  pool.on("error", () => undefined);
  // pg-pool listens for a client's 'error' only while it is idle, and pool.query only until its
  // query answers (once). A client whose server dies while it is checked out, or a second error
  // after the first (the FATAL message, then the socket's end), emits with no listener, which
  // kills the process: seen when PostgreSQL was killed under load. Every client keeps a listener
  // for its whole life; the statement on it fails anyway, and that failure is what is handled.
  pool.on("connect", (client) => client.on("error", () => undefined));
  return pool;
}

/** How long this pool's checkouts waited; undefined for a pool createPool did not make. */
export function checkoutWaitsOf(pool: Pool): CheckoutWaits | undefined {
  return pool instanceof MappedPool ? pool.checkoutWaits : undefined;
}

/** The server process id of a pooled connection, for matching it in pg_locks / pg_stat_activity. */
export function backendPid(client: PoolClient): number | undefined {
  return (client as PoolClient & { processID?: number }).processID;
}
