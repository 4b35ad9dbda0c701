import assert from "node:assert/strict";
import type { Pool } from "../../src/db/pool.ts";

/**
 * Replaces a server-side function, in the test's own database only, by the definition it has
 * there with each `[from, to]` edit applied: how a test shows what a broken variant of a
 * production function does (a negative control) without keeping a second copy of it. Each
 * `from` must occur exactly once, so a change to the function that moves the text fails here
 * instead of leaving the control silently identical to production.
 */
export async function replaceFunctionText(
  pool: Pool,
  signature: string,
  edits: readonly [string, string][],
): Promise<void> {
  const { rows } = await pool.query<{ def: string }>("SELECT pg_get_functiondef($1::regprocedure) AS def", [signature]);
  let def = rows[0]!.def;
  for (const [from, to] of edits) {
    assert.equal(def.split(from).length - 1, 1, `${signature}: expected exactly one ${JSON.stringify(from)}`);
    def = def.replace(from, () => to);
  }
  await pool.query(def);
}
