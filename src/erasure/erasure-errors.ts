import { LedgerError } from "../errors.ts";

/** No erasure of this account was ever started. */
export class ErasureNotFoundError extends LedgerError {
  constructor(accountId: string) {
    super("ERASURE_NOT_FOUND", `no erasure of account ${accountId}`);
  }
}
