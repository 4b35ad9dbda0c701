import type { Pool, PoolClient } from "./pool.ts";
import { DatabaseError, TransactionConflictError, mapPgError } from "./errors.ts";

export type IsolationLevel = "READ COMMITTED" | "REPEATABLE READ" | "SERIALIZABLE";

export interface TransactionOptions {
  isolation?: IsolationLevel;
  readOnly?: boolean;
  /** Total attempts including the first; only 40001/40P01 trigger another attempt. */
  maxAttempts?: number;
}

/** Retry counters, observable so tests and metrics can report how often the backstop fired. */
export const transactionStats = { retries: 0, conflictsGivenUp: 0 };

const BASE_BACKOFF_MS = 5;
const MAX_BACKOFF_MS = 200;

function backoffMs(attempt: number): number {
  const ceiling = Math.min(MAX_BACKOFF_MS, BASE_BACKOFF_MS * 2 ** attempt);
  return Math.random() * ceiling; // full jitter
}

function attachSuppressed(primary: unknown, later: unknown): void {
  if (primary instanceof DatabaseError) primary.suppressed.push(later);
  else if (primary instanceof Error) {
    const holder = primary as Error & { suppressed?: unknown[] };
    (holder.suppressed ??= []).push(later);
  }
}

/**
 * Runs `work` in one transaction on one pooled connection. The whole transaction is
 * retried on serialization failure or deadlock only; every other error is mapped to a
 * typed error and rethrown. If ROLLBACK itself fails, the original error is kept and
 * the rollback error is attached to it, and the broken connection is discarded.
 */
export async function withTransaction<T>(
  pool: Pool,
  work: (client: PoolClient) => Promise<T>,
  options: TransactionOptions = {},
): Promise<T> {
  const maxAttempts = options.maxAttempts ?? 5;
  const begin =
    `BEGIN ISOLATION LEVEL ${options.isolation ?? "READ COMMITTED"}` + (options.readOnly ? " READ ONLY" : "");
  for (let attempt = 1; ; attempt++) {
    let client: PoolClient;
    try {
      client = await pool.connect();
    } catch (err) {
      throw mapPgError(err);
    }
    // pg-pool removes its own 'error' listener while a client is checked out. If the backend
    // dies between two statements (pg_terminate_backend, idle_in_transaction_session_timeout,
    // failover), the client emits 'error' and, without a listener, that crashes the process.
    // The next statement on the client fails anyway and is handled below, so the event is ignored.
    const ignoreClientError = (): void => undefined;
    client.on("error", ignoreClientError);
    const release = (err?: Error): void => {
      client.removeListener("error", ignoreClientError);
      client.release(err);
    };
    let failure: unknown;
    try {
      await client.query(begin);
      const result = await work(client);
      await client.query("COMMIT");
      release();
      return result;
    } catch (raw) {
      failure = mapPgError(raw);
    }
    try {
      await client.query("ROLLBACK");
      release();
    } catch (rollbackError) {
      attachSuppressed(failure, mapPgError(rollbackError));
      // A connection that cannot roll back is not fit for reuse.
      release(rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError)));
    }
    if (!(failure instanceof TransactionConflictError)) throw failure;
    if (attempt >= maxAttempts) {
      transactionStats.conflictsGivenUp++;
      throw failure;
    }
    transactionStats.retries++;
    await new Promise((resolve) => setTimeout(resolve, backoffMs(attempt)));
  }
}

/**
 * Runs `work`, one autocommit statement (its own implicit transaction), with errors mapped and
 * the statement retried on serialization failure or deadlock, like withTransaction does.
 */
export async function withStatementRetry<T>(
  work: () => Promise<T>,
  options: { maxAttempts?: number } = {},
): Promise<T> {
  const maxAttempts = options.maxAttempts ?? 5;
  for (let attempt = 1; ; attempt++) {
    let failure: unknown;
    try {
      return await work();
    } catch (raw) {
      failure = mapPgError(raw);
    }
    if (!(failure instanceof TransactionConflictError)) throw failure;
    if (attempt >= maxAttempts) {
      transactionStats.conflictsGivenUp++;
      throw failure;
    }
    transactionStats.retries++;
    await new Promise((resolve) => setTimeout(resolve, backoffMs(attempt)));
  }
}

/** Runs one statement outside an explicit transaction, with errors mapped. */
export async function query<R extends Record<string, unknown> = Record<string, unknown>>(
  db: Pool | PoolClient,
  text: string,
  values: unknown[] = [],
): Promise<R[]> {
  try {
    const result = await db.query<R>(text, values);
    return result.rows;
  } catch (err) {
    throw mapPgError(err);
  }
}
