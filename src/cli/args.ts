/**
 * Argument parsers of the CLI. They run while commander parses the command line, before any
 * command touches the data directory or the database, so a bad argument is reported (exit
 * code 2) with nothing written.
 */
import { InvalidArgumentError } from "commander";
import { MAX_PARTITIONS } from "../db/ledger-config.ts";
import { InvalidInputError } from "../errors.ts";
import { validateId, validateUserId } from "../ids.ts";

/** A usage error found after parsing (e.g. a partition the database does not have): exit code 2. */
export class UsageError extends Error {
  override readonly name = "UsageError";
}

function idOrThrow(field: string, raw: string, validate = validateId): string {
  try {
    return validate(field, raw);
  } catch (err) {
    if (err instanceof InvalidInputError) throw new InvalidArgumentError(err.message);
    throw err;
  }
}

/** `<userId>`: the id rules of the library (letters, digits, . _ : @ -, at most 128 characters), and not `me`. */
export function parseUserId(raw: string): string {
  return idOrThrow("userId", raw, validateUserId);
}

/** `--partitions 0,1,3`: distinct partition numbers, ascending. */
export function parsePartitions(raw: string): number[] {
  const fields = raw.split(",").map((f) => f.trim());
  if (fields.length === 0 || fields.some((f) => !/^\d{1,5}$/.test(f))) {
    throw new InvalidArgumentError(`expected a comma-separated list of partition numbers such as 0,1,3`);
  }
  const parts = fields.map(Number);
  const tooLarge = parts.find((p) => p >= MAX_PARTITIONS);
  if (tooLarge !== undefined)
    throw new InvalidArgumentError(`partition ${tooLarge} is out of range (a ledger has at most ${MAX_PARTITIONS})`);
  return [...new Set(parts)].sort((a, b) => a - b);
}

/** `--items a,b,c`: distinct item ids in the order given. */
export function parseItems(raw: string): string[] {
  const fields = raw.split(",").map((f) => f.trim());
  if (fields.some((f) => f === ""))
    throw new InvalidArgumentError("expected a comma-separated list of item ids such as item-1,item-2");
  return [...new Set(fields.map((f) => idOrThrow("itemId", f)))];
}

/** A positive integer option (`--ttl`, `--batch-size`, `--port`) within bounds. */
export function positiveInteger(name: string, max: number): (raw: string) => number {
  return (raw) => {
    if (!/^\d+$/.test(raw.trim())) throw new InvalidArgumentError(`${name} must be a positive integer`);
    const value = Number(raw);
    if (!Number.isSafeInteger(value) || value < 1 || value > max)
      throw new InvalidArgumentError(`${name} must be an integer in 1..${max}`);
    return value;
  };
}

/** The views a database-side rebuild repairs (the follower projection has none: it is versioned). */
export const REBUILD_KINDS = ["likes", "comments", "notifications", "feed"] as const;
export type RebuildKind = (typeof REBUILD_KINDS)[number];

/** A non-negative integer option (`--keep-last 0` is meaningful) within bounds. */
export function nonNegativeInteger(name: string, max: number): (raw: string) => number {
  return (raw) => {
    if (!/^\d+$/.test(raw.trim())) throw new InvalidArgumentError(`${name} must be a non-negative integer`);
    const value = Number(raw);
    if (!Number.isSafeInteger(value) || value > max)
      throw new InvalidArgumentError(`${name} must be an integer in 0..${max}`);
    return value;
  };
}
