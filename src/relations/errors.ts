import { LedgerError } from "../errors.ts";

export class AccountNotFoundError extends LedgerError {
  constructor(detail: string) {
    super("ACCOUNT_NOT_FOUND", `unknown account: ${detail}`);
  }
}
