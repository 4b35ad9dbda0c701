/**
 * Every error this library throws on purpose is a LedgerError with a stable `code`,
 * so callers (and later the HTTP layer) can branch on the code instead of the message.
 */
export class LedgerError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

/** Input that fails validation; raised before any statement is sent, so nothing is written. */
export class InvalidInputError extends LedgerError {
  readonly field: string;
  constructor(field: string, message: string) {
    super("INVALID_INPUT", `${field}: ${message}`);
    this.field = field;
  }
}

/** The database was initialised with a different partition count than the caller expects. */
export class PartitionConfigError extends LedgerError {
  constructor(message: string) {
    super("PARTITION_CONFIG", message);
  }
}
