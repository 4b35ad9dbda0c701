import assert from "node:assert/strict";
import { createPool, type Pool } from "../../src/db/pool.ts";
import { InvalidInputError } from "../../src/errors.ts";

/**
 * Proves that a rejected call wrote nothing: snapshots every table of the schema (row count
 * and an md5 over all rows, sequences' positions, plus named figures) in one statement from a
 * separate pool, and counts the statements the code under test sends on its own pool.
 */
export class WriteGuard {
  statements = 0;

  private constructor(
    /** A separate pool: its queries are not statements of the code under test. */
    readonly observer: Pool,
    private readonly sql: string,
  ) {}

  static async create(
    url: string,
    underTest: Pool,
    options: { mustHave: string[]; figures?: Record<string, string> },
  ): Promise<WriteGuard> {
    const observer = createPool({ connectionString: url, max: 2 });
    const { rows } = await observer.query<{ name: string; kind: string }>(
      `SELECT c.relname AS name, c.relkind::text AS kind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'S') ORDER BY c.relname`,
    );
    const tables = rows.filter((r) => r.kind === "r").map((r) => r.name);
    for (const t of options.mustHave) assert.ok(tables.includes(t), `schema has ${t}`);
    const parts = rows.map(({ name, kind }) =>
      kind === "r"
        ? `'${name}', (SELECT count(*) || ':' || coalesce(md5(string_agg(x::text, '|' ORDER BY x::text)), '-') FROM ${name} x)`
        : `'${name}', (SELECT last_value || ':' || is_called FROM ${name})`,
    );
    for (const [label, sql] of Object.entries(options.figures ?? {})) parts.push(`'${label}', (${sql})::text`);
    // jsonb_build_object takes at most 100 arguments (50 pairs): one object per 40 tables, joined.
    const objects = Array.from(
      { length: Math.ceil(parts.length / 40) },
      (_, i) => `jsonb_build_object(${parts.slice(i * 40, i * 40 + 40).join(", ")})`,
    );
    const guard = new WriteGuard(observer, `SELECT ${objects.join(" || ")} AS s`);
    guard.countStatementsOf(underTest);
    return guard;
  }

  /** Counts every query and checkout on the pool under test (pg-pool's query also checks out). */
  private countStatementsOf(pool: Pool): void {
    const target = pool as unknown as Record<"query" | "connect", (...args: unknown[]) => unknown>;
    for (const method of ["query", "connect"] as const) {
      const original = target[method];
      target[method] = (...args: unknown[]) => {
        this.statements++;
        return original.apply(pool, args);
      };
    }
  }

  async snapshot(): Promise<Record<string, string>> {
    const { rows } = await this.observer.query<{ s: Record<string, string> }>(this.sql);
    return rows[0]!.s;
  }

  /**
   * Calls `action`, which must return a promise (a synchronous throw is a failure of its own)
   * that rejects as `check` says, and asserts that nothing was written and, as asked, that no
   * statement was sent or that the database was asked.
   */
  async rejectsWritingNothing(
    label: string,
    action: () => Promise<unknown>,
    check: (err: unknown) => boolean,
    options: { noStatements: boolean },
  ): Promise<void> {
    const before = await this.snapshot();
    this.statements = 0;
    let pending: Promise<unknown>;
    try {
      pending = action();
    } catch (err) {
      assert.fail(`${label}: threw synchronously instead of returning a rejected promise: ${String(err)}`);
    }
    await assert.rejects(pending, (err: unknown) => check(err), label);
    if (options.noStatements) assert.equal(this.statements, 0, `${label}: refused before any statement was sent`);
    else assert.ok(this.statements > 0, `${label}: the database was asked`);
    assert.deepEqual(await this.snapshot(), before, `${label}: nothing written`);
  }

  async close(): Promise<void> {
    await this.observer.end();
  }
}

/** An assert.rejects check: InvalidInputError for `field`, with a message that names it. */
export function invalidInput(field: string) {
  return (err: unknown): boolean => {
    assert.ok(err instanceof InvalidInputError, `expected InvalidInputError for ${field}, got ${String(err)}`);
    assert.equal(err.code, "INVALID_INPUT");
    assert.equal(err.field, field);
    assert.ok(err.message.startsWith(`${field}: `), `the message names the field: ${err.message}`);
    return true;
  };
}
