import { LedgerError } from "../errors.ts";

export class CommentNotFoundError extends LedgerError {
  constructor(commentId: string) {
    super("COMMENT_NOT_FOUND", `unknown comment: ${commentId}`);
  }
}

/** Editing another account's comment, or deleting it without being its author or the post's author. */
export class NotCommentAuthorError extends LedgerError {
  constructor(action: string) {
    super(
      "NOT_COMMENT_AUTHOR",
      `only the comment's author${action === "delete" ? " or the post's author" : ""} may ${action} it`,
    );
  }
}

export class CommentDeletedError extends LedgerError {
  constructor(commentId: string) {
    super("COMMENT_DELETED", `comment ${commentId} is deleted`);
  }
}

/** The same idempotency key was used by the same author for a different comment. */
export class IdempotencyKeyReusedError extends LedgerError {
  constructor() {
    super("IDEMPOTENCY_KEY_REUSED", "this idempotency key was already used for a different comment");
  }
}
