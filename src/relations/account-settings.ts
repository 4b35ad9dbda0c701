import type { Pool, PoolClient } from "../db/pool.ts";
import { AccountErasedError } from "../db/errors.ts";
import { InvalidInputError } from "../errors.ts";
import { validateId } from "../ids.ts";
import { AccountNotFoundError } from "./errors.ts";

/**
 * Whether an account hides its follower and following lists (and their counts) from everyone
 * else (Mastodon's hide_collections). A setting of the account, no part of the follow graph:
 * it writes no relation event and the projection does not carry it.
 */
export async function setHideCollections(pool: Pool, accountId: string, hide: boolean): Promise<void> {
  validateId("accountId", accountId);
  if (typeof hide !== "boolean") throw new InvalidInputError("hideCollections", "must be a boolean");
  const { rowCount } = await pool.query(
    "UPDATE account SET hide_collections = $2 WHERE account_id = $1 AND erased_state IS DISTINCT FROM 'ERASED'",
    [accountId, hide],
  );
  if (rowCount === 0) throw new AccountNotFoundError(accountId);
}

/**
 * Creates a public account with the defaults of PUT /v1/accounts/{id} (no body) unless it exists;
 * changes nothing of an existing one. An erased account's row is a tombstone (docs/erasure.md)
 * and stays one: the write that follows is refused (AccountErasedError), as is one of an account
 * being erased.
 */
export const ENSURE_ACCOUNT_SQL =
  "INSERT INTO account (account_id, private) VALUES ($1, false) ON CONFLICT (account_id) DO NOTHING";

/**
 * Before a relation write of `actor` towards `other`: when the actor has no account yet and the
 * other account exists, the actor's account is created (ENSURE_ACCOUNT_SQL), so a token user may
 * follow and block without creating an account first, as they may like (docs/api.md, "Accounts").
 * When the other account is missing nothing is created: the write answers it unknown and writes nothing.
 * An erased actor can never act again: AccountErasedError, nothing written.
 */
export async function ensureActingAccount(pool: Pool, actor: string, other: string): Promise<void> {
  validateId("accountId", actor);
  validateId("otherId", other);
  // An erased account is missing as the other side; one being erased exists (its write is refused as such).
  const { rows } = await pool.query<{ account_id: string; erased_state: string | null }>(
    "SELECT account_id, erased_state FROM account WHERE account_id = ANY($1::text[])",
    [[actor, other]],
  );
  if (rows.some((r) => r.account_id === actor && r.erased_state === "ERASED")) throw AccountErasedError.of(actor);
  const found = new Set(rows.filter((r) => r.erased_state !== "ERASED").map((r) => r.account_id));
  if (found.has(actor) || !found.has(other)) return;
  await pool.query(ENSURE_ACCOUNT_SQL, [actor]);
}

/** The ids of `ids` whose accounts are erased (tombstones). */
export async function erasedAccounts(db: Pool | PoolClient, ids: readonly string[]): Promise<string[]> {
  const { rows } = await db.query<{ account_id: string }>(
    "SELECT account_id FROM account WHERE account_id = ANY($1::text[]) AND erased_state = 'ERASED' ORDER BY account_id",
    [ids],
  );
  return rows.map((r) => r.account_id);
}
