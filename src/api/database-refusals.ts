/**
 * Requests answered 503 because of the database, by why (ledger_database_refusals_total): a
 * statement past its deadline (the database unreachable without a reset, or overloaded), a
 * connection lost or refused (down, restarting, crashed), or a full disk (SQLSTATE 53100).
 * Counted per process, as transactionStats is.
 */
export const DATABASE_REFUSAL_REASONS = ["deadline", "connection_lost", "disk_full"] as const;
export type DatabaseRefusalReason = (typeof DATABASE_REFUSAL_REASONS)[number];

export const databaseRefusals: Record<DatabaseRefusalReason, number> = {
  deadline: 0,
  connection_lost: 0,
  disk_full: 0,
};
