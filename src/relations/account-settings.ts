import type { Pool } from "../db/pool.ts";
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
  const { rowCount } = await pool.query("UPDATE account SET hide_collections = $2 WHERE account_id = $1 AND erased_state IS DISTINCT FROM 'ERASED'", [accountId, hide]);
  if (rowCount === 0) throw new AccountNotFoundError(accountId);
}

/**
 * Creates a public account with the defaults of PUT /v1/accounts/{id} (no body) unless it exists;
 * changes nothing of an existing one. An erased account's id is created anew: its row (kept,
 * with the defaults, docs/erasure.md) is live again. One being erased stays as it is (the write
 * that follows is refused).
 */
export const ENSURE_ACCOUNT_SQL = `WITH revived AS (UPDATE account SET erased_state = NULL WHERE account_id = $1 AND erased_state = 'ERASED' RETURNING 1)
  INSERT INTO account (account_id, private) SELECT $1, false WHERE NOT EXISTS (SELECT 1 FROM revived) ON CONFLICT (account_id) DO NOTHING`;

/**
 * Before a relation write of `actor` towards `other`: when the actor has no account yet and the
 * other account exists, the actor's account is created (ENSURE_ACCOUNT_SQL), so a token user may
 * follow and block without creating an account first, as they may like (docs/api.md, "Accounts").
 * When the other account is missing nothing is created: the write answers it unknown and writes nothing.
 */
export async function ensureActingAccount(pool: Pool, actor: string, other: string): Promise<void> {
  validateId("accountId", actor);
  validateId("otherId", other);
  // An erased account is missing; one being erased exists (its write is refused as such).
  const { rows } = await pool.query<{ account_id: string }>(
    "SELECT account_id FROM account WHERE account_id = ANY($1::text[]) AND erased_state IS DISTINCT FROM 'ERASED'", [[actor, other]]);
  const found = new Set(rows.map((r) => r.account_id));
  if (found.has(actor) || !found.has(other)) return;
  await pool.query(ENSURE_ACCOUNT_SQL, [actor]);
}
