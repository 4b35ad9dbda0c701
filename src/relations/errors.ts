import { LedgerError } from "../errors.ts";

export class AccountNotFoundError extends LedgerError {
  constructor(detail: string) {
    super("ACCOUNT_NOT_FOUND", `unknown account: ${detail}`);
  }
}

export class PostNotFoundError extends LedgerError {
  constructor(postId: string) {
    super("POST_NOT_FOUND", `unknown post: ${postId}`);
  }
}
