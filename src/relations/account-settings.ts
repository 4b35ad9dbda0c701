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
  const { rowCount } = await pool.query("UPDATE account SET hide_collections = $2 WHERE account_id = $1", [accountId, hide]);
  if (rowCount === 0) throw new AccountNotFoundError(accountId);
}
