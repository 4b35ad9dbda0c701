import type { Pool, PoolClient } from "../../src/db/pool.ts";

/** The part of an EXPLAIN (ANALYZE, FORMAT JSON) plan node the plan tests read. */
export interface PlanNode {
  "Node Type": string;
  "Relation Name"?: string;
  "Index Name"?: string;
  "Actual Rows"?: number;
  "Actual Loops"?: number;
  "Rows Removed by Filter"?: number;
  "Rows Removed by Join Filter"?: number;
  "Rows Removed by Index Recheck"?: number;
  "Shared Hit Blocks"?: number;
  "Shared Read Blocks"?: number;
  Plans?: PlanNode[];
}

/** Every node of a plan, the root first, depth first. */
export function planNodes(node: PlanNode): PlanNode[] {
  return [node, ...(node.Plans ?? []).flatMap(planNodes)];
}

/** Runs `sql` under EXPLAIN (ANALYZE, FORMAT JSON) with `values` and returns its plan's root. */
export async function explainAnalyze(pool: Pool, sql: string, values: unknown[]): Promise<PlanNode> {
  const { rows } = await pool.query<{ "QUERY PLAN": [{ Plan: PlanNode }] }>(
    `EXPLAIN (ANALYZE, FORMAT JSON) ${sql}`,
    values,
  );
  return rows[0]!["QUERY PLAN"][0].Plan;
}

/** Rows read from a table across a plan (by its heap or any of its indexes): returned plus filtered out, times loops. */
export function rowsRead(node: PlanNode, table: string): number {
  const own =
    node["Relation Name"] === table
      ? ((node["Actual Rows"] ?? 0) + (node["Rows Removed by Filter"] ?? 0)) * (node["Actual Loops"] ?? 1)
      : 0;
  return own + (node.Plans ?? []).reduce((sum, p) => sum + rowsRead(p, table), 0);
}

/** Rows read through one index (Index Scan, Index Only Scan, Bitmap Index Scan) across a plan: returned plus filtered out, times loops. */
export function rowsReadVia(node: PlanNode, index: string): number {
  const own =
    node["Index Name"] === index
      ? ((node["Actual Rows"] ?? 0) + (node["Rows Removed by Filter"] ?? 0)) * (node["Actual Loops"] ?? 1)
      : 0;
  return own + (node.Plans ?? []).reduce((sum, p) => sum + rowsReadVia(p, index), 0);
}

/** Rows the joins of a plan compared and threw away (a nested loop's join filter), times loops. */
export function rowsRemovedByJoinFilters(node: PlanNode): number {
  const own = (node["Rows Removed by Join Filter"] ?? 0) * (node["Actual Loops"] ?? 1);
  return own + (node.Plans ?? []).reduce((sum, p) => sum + rowsRemovedByJoinFilters(p), 0);
}

/**
 * The executed generic plan of the named statement `name`, as the service runs it after five
 * custom plans: `run` sends it six times, each in a transaction rolled back, then EXPLAIN ANALYZE
 * EXECUTE runs it once more (also rolled back) with `literals`, its arguments as SQL literals
 * (EXECUTE takes no bind parameters; only the test's own numbers and ids go in).
 */
export async function executedGenericPlan(
  client: PoolClient,
  name: string,
  run: () => Promise<unknown>,
  literals: string,
): Promise<PlanNode> {
  for (let i = 0; i < 6; i++) {
    await client.query("BEGIN");
    await run();
    await client.query("ROLLBACK");
  }
  await client.query("BEGIN");
  try {
    const { rows } = await client.query<{ "QUERY PLAN": [{ Plan: PlanNode }] }>(
      `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE ${name}(${literals})`,
    );
    return rows[0]!["QUERY PLAN"][0].Plan;
  } finally {
    await client.query("ROLLBACK");
  }
}
