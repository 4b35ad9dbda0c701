import { performance } from "node:perf_hooks";
import pg from "pg";
import { CheckoutWaits } from "./checkout-waits.ts";
import { QueryDeadlineError, mapPgError } from "./errors.ts";

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;

// int8 columns (sequence numbers, counts, versions) stay far below 2^53 in this system,
// so they are parsed as numbers rather than strings.
pg.types.setTypeParser(pg.types.builtins.INT8, (value) => Number(value));

export interface PoolOptions {
  connectionString: string;
  max?: number;
  applicationName?: string;
  /** How long a checkout waits for a connection, opening one included, before failing with ConnectionLostError (default 5 s; 0: forever). */
  connectionTimeoutMs?: number;
  /**
   * A statement's deadline (LEDGER_PG_QUERY_TIMEOUT_MS): unanswered after this long, its
   * connection is destroyed and it fails with ConnectionLostError. Default: none, for the
   * library's callers and the one-shot commands (a migration, an audit or an import may run
   * long); the service's processes pass the configured one. COPY streams have none.
   */
  queryTimeoutMs?: number;
  /** TCP keepalive's idle time before the first probe (default 10 s; 0: off). */
  keepAliveMs?: number;
  /** An idle connection is closed after this long (default 10 s). */
  idleMs?: number;
  /**
   * While it runs a statement, the server checks this often whether the connection is still
   * open, and cancels the statement when it is not (client_connection_check_interval; default
   * 1 s; 0: off). Without it a statement whose connection was destroyed (a deadline, a killed
   * process) runs to its end: a periodic audit past its deadline left one more query running on
   * every period.
   */
  serverClientCheckMs?: number;
}

/**
 * The connection string with `-c client_connection_check_interval=<ms>` added to the options
 * it sends the server, after any the string (or PGOPTIONS) already carries: pg takes the
 * string's `options` over the config's, so the setting must travel in the string.
 */
export function withClientCheck(connectionString: string, ms: number): string {
  if (ms <= 0) return connectionString;
  let url: URL;
  try {
    url = new URL(connectionString);
  } catch {
    return connectionString;
  }
  const given = url.searchParams.get("options") ?? process.env.PGOPTIONS ?? "";
  const own = `-c client_connection_check_interval=${Math.round(ms)}`;
  url.searchParams.set("options", given ? `${given} ${own}` : own);
  return url.toString();
}

/**
 * pg.Client with a deadline on every statement. pg's own query_timeout rejects the statement
 * but keeps the connection for the next one, whose answer would then be read after the
 * abandoned one's; destroying the socket instead fails whatever else is queued on it, and
 * pg-pool never hands out a client that has failed so.
 */
function clientWithDeadline(ms: number): typeof pg.Client {
  return class DeadlineClient extends pg.Client {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- forwards every overload of pg.Client#query unchanged
    override query(...args: any[]): any {
      const first = args[0] as { submit?: unknown } | undefined;
      // A Submittable (a COPY stream) runs as long as its data flows.
      if (typeof first?.submit === "function") return (super.query as (...a: unknown[]) => unknown)(...args);
      const timer = setTimeout(() => this.destroyConnection(new QueryDeadlineError(ms)), ms);
      const last = args.length - 1;
      if (typeof args[last] === "function") {
        const callback = args[last] as (...a: unknown[]) => void;
        args[last] = (...results: unknown[]) => {
          clearTimeout(timer);
          callback(...results);
        };
        return (super.query as (...a: unknown[]) => unknown)(...args);
      }
      const result = (super.query as (...a: unknown[]) => unknown)(...args);
      if (result instanceof Promise) return result.finally(() => clearTimeout(timer));
      clearTimeout(timer);
      return result;
    }

    private destroyConnection(err: Error): void {
      (this as unknown as { connection?: { stream?: { destroy(err?: Error): void } } }).connection?.stream?.destroy(
        err,
      );
    }
  };
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
  const keepAliveMs = options.keepAliveMs ?? 10_000;
  const queryTimeoutMs = options.queryTimeoutMs ?? 0;
  const pool = new MappedPool({
    connectionString: withClientCheck(options.connectionString, options.serverClientCheckMs ?? 1_000),
    max: options.max ?? 10,
    application_name: options.applicationName ?? "social-ledger",
    // pg's default is to wait forever: with the database gone, requests would hang instead of
    // answering 503. A checkout that opens a connection is bounded too (pg-pool destroys its socket).
    connectionTimeoutMillis: options.connectionTimeoutMs ?? 5_000,
    idleTimeoutMillis: options.idleMs ?? 10_000,
    // An idle connection to a host that vanished without a reset is noticed by the kernel's
    // probes (after this idle time, then net.ipv4.tcp_keepalive_intvl x _probes); a busy one by
    // the statement deadline.
    keepAlive: keepAliveMs > 0,
    keepAliveInitialDelayMillis: keepAliveMs,
    ...(queryTimeoutMs > 0 ? { Client: clientWithDeadline(queryTimeoutMs) } : {}),
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
