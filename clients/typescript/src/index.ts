export {
  createLedgerClient,
  type LedgerClient,
  type LedgerClientOptions,
  type PagedPath,
  type ResponseOf,
} from "./client.ts";
export {
  LedgerApiError,
  RateLimitedError,
  ServiceUnavailableError,
  errorOf,
  statusOfCode,
  type ErrorBody,
} from "./errors.ts";
export { ERROR_CODES, type ErrorCode } from "./error-codes.ts";
export type { components, operations, paths } from "./schema.ts";
