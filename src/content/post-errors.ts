import { LedgerError } from "../errors.ts";

export class PostNotFoundError extends LedgerError {
  constructor(postId: string) {
    super("POST_NOT_FOUND", `unknown post: ${postId}`);
  }
}
