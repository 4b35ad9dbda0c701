import { createHash } from "node:crypto";

/**
 * The partition of a key: the first 32 bits of md5(key) as an unsigned integer, mod P.
 * The SQL function ledger_partition(key, partitions) (src/db/schema.sql) computes the same
 * value, so audits can check every stored row against this rule.
 */
export function stablePartition(key: string, partitions: number): number {
  if (partitions === 1) return 0;
  const prefix = createHash("md5").update(key, "utf8").digest().readUInt32BE(0);
  return prefix % partitions;
}
