import assert from "node:assert/strict";
import type { TestContext } from "node:test";
import { ConnectionLostError, mapPgError } from "../../src/db/errors.ts";
import { LedgerError } from "../../src/errors.ts";

/** How one loop of a crash test (a writer, a consumer) ended when the database went away. */
export interface LoopEnd {
  who: string;
  /** The error as the loop received it. */
  error: unknown;
  /** Whether the library had already typed it (a LedgerError): transactions and one-shot pool queries both map driver errors. */
  typed: boolean;
  /** The error as mapPgError types it (unchanged when it was already typed). */
  mapped: unknown;
}

export function loopEnd(who: string, error: unknown): LoopEnd {
  return { who, error, typed: error instanceof LedgerError, mapped: mapPgError(error) };
}

export function sqlStateOf(err: unknown): string {
  return err instanceof ConnectionLostError
    ? (err.sqlState ?? "?")
    : err instanceof LedgerError
      ? err.code
      : String(err);
}

/** Prints one note line per loop and asserts that each ended with an already typed CONNECTION_LOST. */
export function assertAllLostConnection(t: TestContext, ends: readonly LoopEnd[], expected: number): void {
  for (const e of ends) {
    const m = e.mapped as Error & { code?: string };
    t.diagnostic(
      `note   ${e.who}: ${e.typed ? "typed" : "UNTYPED"} ${m.code ?? m.name} ${sqlStateOf(m)} ${m.message.split("\n")[0]}`,
    );
  }
  assert.equal(ends.length, expected);
  for (const e of ends) {
    assert.ok(e.mapped instanceof ConnectionLostError, `${e.who} ended with ${String(e.error)}`);
    assert.equal((e.mapped as ConnectionLostError).code, "CONNECTION_LOST");
    // Every loop, reads included, gets an already typed error from the library.
    assert.ok(e.typed, `${e.who} error is typed`);
  }
}
