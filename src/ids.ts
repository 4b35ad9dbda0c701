import { InvalidInputError } from "./errors.ts";

/**
 * Ids are opaque text chosen by the host application. We only insist that they are
 * printable, bounded and free of whitespace, so that they are safe in logs, URLs and cursors.
 */
export const MAX_ID_LENGTH = 128;
export const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:@-]*$/;

export function validateId(field: string, value: unknown): string {
  if (typeof value !== "string") throw new InvalidInputError(field, `must be a string, got ${typeof value}`);
  if (value.length === 0) throw new InvalidInputError(field, "must not be empty");
  if (value.length > MAX_ID_LENGTH) {
    throw new InvalidInputError(field, `must be at most ${MAX_ID_LENGTH} characters, got ${value.length}`);
  }
  if (!ID_PATTERN.test(value)) {
    throw new InvalidInputError(
      field,
      "may contain only letters, digits and . _ : @ - and must start with a letter or digit",
    );
  }
  return value;
}

/** `me` means "the caller" in every route of the API, so no user may be called that. */
export const RESERVED_USER_IDS: readonly string[] = ["me"];

/** An id that may name an acting user (a token's subject): a valid id that is not reserved. */
export function validateUserId(field: string, value: unknown): string {
  const id = validateId(field, value);
  if (RESERVED_USER_IDS.includes(id))
    throw new InvalidInputError(field, `'${id}' is reserved: it means "the caller" in every route`);
  return id;
}

export function validateNonNegativeInteger(field: string, value: unknown): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    throw new InvalidInputError(field, `must be a non-negative integer, got ${String(value)}`);
  }
  return value;
}
