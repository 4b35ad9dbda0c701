import { InvalidInputError } from "./errors.ts";

/** A high surrogate not followed by a low one, or a low one not preceded by a high one (code units, no `u` flag). */
const UNPAIRED_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * Why a string cannot be stored as text, or undefined when it can. PostgreSQL's text cannot
 * hold NUL (22021), and an unpaired UTF-16 surrogate has no UTF-8 form: node-postgres would
 * send U+FFFD instead, so the client would read back something else than it wrote.
 */
export function unstorableText(value: string): string | undefined {
  if (value.includes("\u0000")) return "must not contain NUL characters";
  if (UNPAIRED_SURROGATE.test(value)) return "must not contain unpaired UTF-16 surrogates";
  return undefined;
}

/** Free text of a user (a post body): a string of at most `maxLength` characters that text can store exactly. */
export function validateText(field: string, value: unknown, maxLength: number): string {
  if (typeof value !== "string" || value.length > maxLength) {
    throw new InvalidInputError(field, `must be a string of at most ${maxLength} characters`);
  }
  const problem = unstorableText(value);
  if (problem) throw new InvalidInputError(field, problem);
  return value;
}
