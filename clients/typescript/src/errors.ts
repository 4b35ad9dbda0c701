import { ERROR_CODES, type ErrorCode } from "./error-codes.ts";

/** The body of every error answer: `{error: {code, message}}`. */
export interface ErrorBody {
  error: { code: string; message: string };
}

/**
 * An error answer of the API, as thrown by the client for every status outside 2xx. `code` is the
 * answer's `error.code` (ERROR_CODES lists them), `requestId` the X-Request-Id to quote in a
 * report, and `retryAfterSeconds` the Retry-After of a 429 or 503.
 */
export class LedgerApiError extends Error {
  override readonly name: string = "LedgerApiError";

  constructor(
    readonly status: number,
    readonly code: ErrorCode | (string & {}),
    message: string,
    readonly requestId: string | undefined,
    readonly retryAfterSeconds: number | undefined,
  ) {
    super(message);
  }

  /** True when the answer's code is `code` (narrows `code` for TypeScript). */
  is<C extends ErrorCode>(code: C): this is LedgerApiError & { code: C } {
    return this.code === code;
  }

  /** Whether repeating the request later may succeed: 429, and 503 (the database restarting, a server stopping). */
  get retryable(): boolean {
    return this.status === 429 || this.status === 503;
  }
}

/** 429 RATE_LIMITED: over the caller's budget; `retryAfterSeconds` says when to come back. */
export class RateLimitedError extends LedgerApiError {
  override readonly name = "RateLimitedError";
}

/** 503: the database is unavailable or the server is stopping; retry after `retryAfterSeconds`. */
export class ServiceUnavailableError extends LedgerApiError {
  override readonly name = "ServiceUnavailableError";
}

function isErrorBody(body: unknown): body is ErrorBody {
  const error = (body as ErrorBody | null)?.error;
  return typeof error?.code === "string" && typeof error.message === "string";
}

/** Retry-After as seconds (the API sends delta-seconds; an HTTP date is accepted too). */
function retryAfterOf(headers: Headers): number | undefined {
  const value = headers.get("retry-after");
  if (value === null) return undefined;
  if (/^\d+$/.test(value)) return Number(value);
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - Date.now()) / 1000));
}

/** The typed error of a response outside 2xx, from its status, headers and parsed body. */
export function errorOf(response: Response, body: unknown): LedgerApiError {
  const code = isErrorBody(body) ? body.error.code : `HTTP_${response.status}`;
  const message = isErrorBody(body)
    ? body.error.message
    : `${response.status} ${response.statusText} from ${response.url} (no error body)`;
  const args = [
    response.status,
    code,
    message,
    response.headers.get("x-request-id") ?? undefined,
    retryAfterOf(response.headers),
  ] as const;
  if (response.status === 429) return new RateLimitedError(...args);
  if (response.status === 503) return new ServiceUnavailableError(...args);
  return new LedgerApiError(...args);
}

/** The HTTP status the API answers `code` with, or undefined for a code this client does not know. */
export function statusOfCode(code: string): number | undefined {
  return (ERROR_CODES as Record<string, { status: number }>)[code]?.status;
}
