import type { Pool } from "../db/pool.ts";

/**
 * The erasure's invariant, one SQL statement (docs/erasure.md, "The audit's leftover check"): an
 * ERASED account holds no fact its erasure turns off, and no block outbox event names it.
 * erasure_leftovers() lists them per account and kind; this counts them. 0 means healthy; an
 * erasure request on the account (DELETE /v1/accounts/{id}, `erase`) turns them off.
 */
export const ERASURE_INVARIANTS = {
  leftovers: "SELECT coalesce(sum(n), 0)::int AS n FROM erasure_leftovers()",
} as const;

export type ErasureAudit = Record<keyof typeof ERASURE_INVARIANTS, number>;

export async function auditErasure(pool: Pool): Promise<ErasureAudit> {
  const out = {} as ErasureAudit;
  for (const key of Object.keys(ERASURE_INVARIANTS) as (keyof ErasureAudit)[]) {
    out[key] = (await pool.query<{ n: number }>(ERASURE_INVARIANTS[key])).rows[0]!.n;
  }
  return out;
}

export function erasureAuditClean(audit: ErasureAudit): boolean {
  return Object.values(audit).every((n) => n === 0);
}
