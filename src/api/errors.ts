import type { Duplex } from "node:stream";
import type { FastifyError, FastifyReply, FastifyRequest } from "fastify";
import { ConnectionLostError, DiskFullError, QueryDeadlineError } from "../db/errors.ts";
import { LedgerError } from "../errors.ts";
import { databaseRefusals } from "./database-refusals.ts";

/** Errors of the HTTP layer itself, with the same {code, message} shape as the library's. */
export class HttpError extends LedgerError {
  readonly statusCode: number;
  constructor(statusCode: number, code: string, message: string) {
    super(code, message);
    this.statusCode = statusCode;
  }
}

export const unauthenticated = (message: string) => new HttpError(401, "UNAUTHENTICATED", message);
export const forbidden = (message: string) => new HttpError(403, "FORBIDDEN", message);
/**
 * Missing, or not visible to the caller: the two are indistinguishable on purpose. The codes
 * are the library's (ITEM_NOT_FOUND, ...), so a missing target reads the same on every route.
 */
export const notFound = (what: "item" | "post" | "account" | "comment") =>
  new HttpError(404, `${what.toUpperCase()}_NOT_FOUND`, `${what} not found`);

/** Stable library codes -> HTTP status. Anything unlisted is a 500. */
const STATUS_BY_CODE: Record<string, number> = {
  INVALID_INPUT: 400,
  ITEM_NOT_FOUND: 404,
  ACCOUNT_NOT_FOUND: 404,
  POST_NOT_FOUND: 404,
  COMMENT_NOT_FOUND: 404,
  NOT_COMMENT_AUTHOR: 403,
  COMMENT_DELETED: 409,
  IDEMPOTENCY_KEY_REUSED: 409,
  SELF_FOLLOW: 409,
  SELF_BLOCK: 409,
  BLOCKED: 409,
  NOT_PENDING: 409,
  REBUILD_IN_PROGRESS: 409,
  ACCOUNT_BEING_ERASED: 409,
  ACCOUNT_ERASED: 410,
  ERASURE_NOT_FOUND: 404,
  PARTITION_CONFIG: 500,
  WEBHOOK_NOT_FOUND: 404,
  WEBHOOK_URL_REFUSED: 400,
  UNKNOWN_EVENT_TYPE: 400,
  REPLAY_BELOW_RETENTION: 409,
  REPLAY_BEYOND_END: 409,
};

/** Our codes for the 4xx answers of fastify and its plugins (e.g. @fastify/static's 403 for a path that leaves its root). */
const CODE_BY_STATUS: Record<number, string> = {
  400: "INVALID_INPUT",
  401: "UNAUTHENTICATED",
  403: "FORBIDDEN",
  404: "NOT_FOUND",
  405: "METHOD_NOT_ALLOWED",
  406: "NOT_ACCEPTABLE",
  408: "REQUEST_TIMEOUT",
  411: "LENGTH_REQUIRED",
  413: "PAYLOAD_TOO_LARGE",
  414: "URI_TOO_LONG",
  415: "UNSUPPORTED_MEDIA_TYPE",
  429: "RATE_LIMITED",
  431: "HEADERS_TOO_LARGE",
};

/**
 * Errors node's HTTP parser raises before fastify sees a request (headers too large, a request
 * line it cannot parse, a client too slow), answered on the raw socket in our shape; fastify's
 * default handler answers {"error","message","statusCode"}.
 */
export function handleClientError(err: NodeJS.ErrnoException, socket: Duplex): void {
  if (err.code === "ECONNRESET" || socket.destroyed) return;
  const [status, code, message] =
    err.code === "ERR_HTTP_REQUEST_TIMEOUT"
      ? [408, "REQUEST_TIMEOUT", "the request was not received in time"]
      : err.code === "HPE_HEADER_OVERFLOW"
        ? [431, "HEADERS_TOO_LARGE", "the request headers are too large"]
        : [400, "INVALID_INPUT", "the request could not be parsed as HTTP"];
  const body = JSON.stringify(errorBody(code, message));
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_TEXT[status]}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy(err);
}

const STATUS_TEXT: Record<number, string> = {
  400: "Bad Request",
  408: "Request Timeout",
  431: "Request Header Fields Too Large",
};

export interface ErrorBody {
  error: { code: string; message: string };
}

export function errorBody(code: string, message: string): ErrorBody {
  return { error: { code, message } };
}

/** Seconds a client should wait before retrying while the database is unavailable. */
export const DATABASE_RETRY_AFTER_S = 2;

/**
 * The answer while the database is down, restarting or recovering: 503 with Retry-After, never
 * a 500. A write answered this way may or may not have committed; every write of the API but
 * creating a post sets a target state, so repeating it is safe.
 */
export function databaseUnavailable(reply: FastifyReply): FastifyReply {
  return reply
    .status(503)
    .header("retry-after", String(DATABASE_RETRY_AFTER_S))
    .send(errorBody("DATABASE_UNAVAILABLE", `the database is unavailable; retry after ${DATABASE_RETRY_AFTER_S} s`));
}

/** The one error handler: every error body is {error: {code, message}} with a stable code. */
export function handleError(err: FastifyError | Error, request: FastifyRequest, reply: FastifyReply): void {
  if (err instanceof ConnectionLostError) {
    const reason = err.cause instanceof QueryDeadlineError ? "deadline" : "connection_lost";
    databaseRefusals[reason]++;
    request.log.warn({ reason: err.message, cause: reason }, "database unavailable");
    void databaseUnavailable(reply);
    return;
  }
  if (err instanceof DiskFullError) {
    databaseRefusals.disk_full++;
    request.log.error({ reason: err.message, sqlState: err.sqlState }, "database disk full: writes refused");
    void reply
      .status(503)
      .header("retry-after", String(DATABASE_RETRY_AFTER_S))
      .send(
        errorBody(
          "DATABASE_DISK_FULL",
          `the database's disk is full; nothing was written; retry after ${DATABASE_RETRY_AFTER_S} s`,
        ),
      );
    return;
  }
  if (err instanceof HttpError) {
    void reply.status(err.statusCode).send(errorBody(err.code, err.message));
    return;
  }
  if (err instanceof LedgerError) {
    const status = STATUS_BY_CODE[err.code] ?? 500;
    if (status >= 500) request.log.error({ err }, "ledger error");
    void reply
      .status(status)
      .send(errorBody(status >= 500 ? "INTERNAL" : err.code, status >= 500 ? "internal error" : err.message));
    return;
  }
  const fe = err as FastifyError;
  if (fe.validation) {
    void reply.status(400).send(errorBody("INVALID_INPUT", fe.message));
    return;
  }
  // Fastify's own 4xx (invalid or empty JSON body, bad Content-Length, ...) get our stable
  // codes rather than its FST_ERR_* ones.
  if (fe.statusCode === 400) {
    void reply.status(400).send(errorBody("INVALID_INPUT", fe.message));
    return;
  }
  if (fe.statusCode === 415) {
    void reply.status(415).send(errorBody("UNSUPPORTED_MEDIA_TYPE", fe.message));
    return;
  }
  if (fe.statusCode === 413) {
    void reply.status(413).send(errorBody("PAYLOAD_TOO_LARGE", fe.message));
    return;
  }
  if (fe.statusCode === 429) {
    void reply.status(429).send(errorBody("RATE_LIMITED", fe.message));
    return;
  }
  if (fe.statusCode && fe.statusCode >= 400 && fe.statusCode < 500) {
    void reply.status(fe.statusCode).send(errorBody(CODE_BY_STATUS[fe.statusCode] ?? "BAD_REQUEST", fe.message));
    return;
  }
  request.log.error({ err }, "unhandled error");
  void reply.status(500).send(errorBody("INTERNAL", "internal error"));
}
