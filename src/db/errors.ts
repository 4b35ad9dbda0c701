import { LedgerError } from "../errors.ts";

/**
 * The one place where PostgreSQL SQLSTATE codes become typed errors. Everything above
 * the db module branches on these classes, never on raw codes or messages.
 */
export class DatabaseError extends LedgerError {
  readonly sqlState: string | undefined;
  readonly constraint: string | undefined;
  /** Errors raised while cleaning up after this one (e.g. a failed ROLLBACK); never replace it. */
  readonly suppressed: unknown[] = [];

  constructor(code: string, message: string, cause: unknown, sqlState?: string, constraint?: string) {
    super(code, message, { cause });
    this.sqlState = sqlState;
    this.constraint = constraint;
  }
}

export class ForeignKeyViolationError extends DatabaseError {}
export class UniqueViolationError extends DatabaseError {}
export class CheckViolationError extends DatabaseError {}
/** 40001 and 40P01: the whole transaction may be retried. */
export class TransactionConflictError extends DatabaseError {}
/**
 * The database is unavailable: the connection or the server went away, or none could be made
 * in time (class 08, 57P01-57P03 including "starting up" and crash recovery, a refused or dropped
 * socket, the pool's connect timeout). A write that fails this way may or may not have committed.
 */
export class ConnectionLostError extends DatabaseError {}

/**
 * SQLSTATE 53100 (disk_full): PostgreSQL could not extend a file (a table, an index, a temporary
 * file). Nothing of the statement was written; writes fail until space returns, reads go on.
 */
export class DiskFullError extends DatabaseError {}

/**
 * A statement not answered within the pool's deadline (LEDGER_PG_QUERY_TIMEOUT_MS). The pool
 * destroys the connection rather than reuse it: the server may still answer the abandoned
 * statement, or nothing may come back at all (a partition drops packets without a reset).
 * Mapped to ConnectionLostError: whether it committed is unknown.
 */
export class QueryDeadlineError extends Error {
  readonly code = "QUERY_DEADLINE";
  constructor(readonly ms: number) {
    super(`PostgreSQL did not answer within ${ms} ms; the connection was destroyed`);
    this.name = "QueryDeadlineError";
  }
}

/**
 * SQLSTATE SLE01 of the erasure's write guard (src/erasure): a write by or towards an account
 * whose erasure is running. Nothing was written; it may be sent again once the erasure is done.
 */
export class AccountBeingErasedError extends DatabaseError {}

/**
 * SQLSTATE SLE02 of the erasure's write guard: a write by an erased account, or a new fact naming
 * one. An erased id is a tombstone (docs/erasure.md): it can never act again, so this is final.
 */
export class AccountErasedError extends DatabaseError {
  static of(accountId: string): AccountErasedError {
    return new AccountErasedError(
      "ACCOUNT_ERASED",
      `account ${accountId} was erased: its id can never act again, and no new fact may name it`,
      undefined,
      "SLE02",
    );
  }
}

export const RETRYABLE_SQLSTATES: ReadonlySet<string> = new Set(["40001", "40P01"]);

interface PgErrorShape {
  code?: unknown;
  constraint?: unknown;
  message?: unknown;
}

/**
 * Node socket error codes that mean the connection is gone or cannot be made. EPIPE also has the
 * shape of a SQLSTATE. The unreachable ones come from a partition: a connect whose address stops
 * answering ARP fails with EHOSTUNREACH, a link without its route with ENETUNREACH.
 */
const DROPPED_SOCKET_CODES: ReadonlySet<string> = new Set([
  "ECONNRESET",
  "ECONNREFUSED",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "EHOSTDOWN",
  "ENETUNREACH",
  "ENETDOWN",
]);

function sqlStateOf(err: unknown): string | undefined {
  const code = (err as PgErrorShape | null)?.code;
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) && !DROPPED_SOCKET_CODES.has(code) ? code : undefined;
}

function isDroppedSocket(err: unknown): boolean {
  const message = String((err as PgErrorShape | null)?.message ?? "");
  const code = (err as PgErrorShape | null)?.code;
  return (
    /Connection terminated|connection ended|Client has encountered a connection error|terminating connection|timeout exceeded when trying to connect/i.test(
      message,
    ) ||
    (typeof code === "string" && DROPPED_SOCKET_CODES.has(code))
  );
}

/** Maps a driver error to a typed error; an error that is already typed is returned unchanged. */
export function mapPgError(err: unknown): unknown {
  if (err instanceof LedgerError) return err;
  if (err instanceof QueryDeadlineError) return new ConnectionLostError("CONNECTION_LOST", err.message, err, "08006");
  const sqlState = sqlStateOf(err);
  const constraintValue = (err as PgErrorShape | null)?.constraint;
  const constraint = typeof constraintValue === "string" ? constraintValue : undefined;
  const message = String((err as PgErrorShape | null)?.message ?? err);
  switch (sqlState) {
    case "23503":
      return new ForeignKeyViolationError("FOREIGN_KEY_VIOLATION", message, err, sqlState, constraint);
    case "23505":
      return new UniqueViolationError("UNIQUE_VIOLATION", message, err, sqlState, constraint);
    case "23514":
      return new CheckViolationError("CHECK_VIOLATION", message, err, sqlState, constraint);
    case "SLE01":
      return new AccountBeingErasedError("ACCOUNT_BEING_ERASED", message, err, sqlState);
    case "SLE02":
      return new AccountErasedError("ACCOUNT_ERASED", message, err, sqlState);
    case "53100":
      return new DiskFullError("DATABASE_DISK_FULL", message, err, sqlState);
    case "40001":
    case "40P01":
      return new TransactionConflictError("TRANSACTION_CONFLICT", message, err, sqlState);
  }
  if (
    (sqlState && (sqlState.startsWith("08") || /^57P0[123]$/.test(sqlState))) ||
    (!sqlState && isDroppedSocket(err))
  ) {
    return new ConnectionLostError("CONNECTION_LOST", message, err, sqlState ?? "08006");
  }
  if (sqlState) return new DatabaseError("DATABASE_ERROR", message, err, sqlState, constraint);
  return err;
}
