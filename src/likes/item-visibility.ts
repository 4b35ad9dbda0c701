import type { Pool } from "../db/pool.ts";
import { validateId } from "../ids.ts";

/** MISSING: no such item, or gone for everyone (deleted); HIDDEN: live, but not for this reader. */
export type ItemState = "MISSING" | "HIDDEN" | "VISIBLE";

/**
 * Whether `reader` (null: no token) may see an item, from the SQL function item_state (src/db/schema.sql): the one
 * rule for every item kind, in the truth. The like routes answer 404 unless VISIBLE, the same
 * for a hidden item as for a missing one (docs/security.md).
 */
export async function itemState(db: Pool, reader: string | null, itemId: string): Promise<ItemState> {
  if (reader !== null) validateId("reader", reader);
  validateId("itemId", itemId);
  // Named: on every like read, so parsed and planned once per connection.
  const { rows } = await db.query<{ state: ItemState }>({
    name: "item_state_truth",
    text: "SELECT item_state($1, $2, 'TRUTH') AS state",
    values: [reader, itemId],
  });
  return rows[0]!.state;
}
