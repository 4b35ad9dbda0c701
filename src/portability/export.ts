import type { Pool } from "../db/pool.ts";
import { validateUserId } from "../ids.ts";
import { AccountBeingErasedError, AccountErasedError } from "../db/errors.ts";
import { AccountNotFoundError } from "../relations/errors.ts";

/** `at` as the import reads it back: UTC with microseconds, so a round trip keeps every timestamp. */
const AT = (column: string) => `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

const PAGE = 5_000;

/** The account `column` names is erased or being erased: none of its facts is exported (an erasure turns them off). */
const ERASED = (column: string) =>
  `EXISTS (SELECT 1 FROM account e WHERE e.account_id = ${column} AND e.erased_state IS NOT NULL)`;

/** Keyset condition: (a, b) after ($1, $2), a range read on the table's primary key. */
const after = (a: string, b: string) => `(${a}, ${b}) > ($1, $2)`;

/**
 * One section of the export: a keyset-paged statement ($1, $2 the last key of the page before, '' at
 * first; $3 the page size; $4 the account, or NULL for all) and how a row becomes a line. Every
 * page is its own statement, so the export holds no snapshot open and no more than a page in memory.
 */
interface Section {
  sql: string;
  line: (r: Record<string, string | boolean>) => Record<string, unknown>;
  key: (r: Record<string, string | boolean>) => [string, string];
}

const SECTIONS: readonly Section[] = [
  {
    // All accounts with their settings; for one account, itself with its settings and the accounts
    // its follows and blocks name, by id only (their settings are not its data). An erased account
    // (or one being erased) is its tombstone line, {"erased": true} and no settings, never an
    // ordinary account: an import makes it a tombstone there too, so the blocks made against it
    // stay in force and the id never acts again (docs/erasure.md).
    sql: `SELECT x.account_id AS a, '' AS b, x.private, x.hide_collections AS hide, x.account_id = $4 OR $4::text IS NULL AS own,
                 x.erased_state IS NOT NULL AS erased
            FROM account x
           WHERE ${after("x.account_id", "''")}
             AND ($4::text IS NULL OR x.account_id = $4
                  OR EXISTS (SELECT 1 FROM relation r WHERE r.follower = $4 AND r.followee = x.account_id AND r.state <> 'REMOVED')
                  OR EXISTS (SELECT 1 FROM block k WHERE k.blocker = $4 AND k.blocked = x.account_id))
           ORDER BY x.account_id LIMIT $3`,
    line: (r) =>
      r.erased
        ? { kind: "account", id: r.a, erased: true }
        : r.own
          ? { kind: "account", id: r.a, private: r.private, hideCollections: r.hide }
          : { kind: "account", id: r.a },
    key: (r) => [r.a as string, ""],
  },
  {
    // Plain items: posts and comments are not exported yet (nor importable).
    sql: `SELECT i.item_id AS a, '' AS b FROM item i
           WHERE i.kind = 'plain' AND ${after("i.item_id", "''")}
             AND ($4::text IS NULL OR EXISTS (SELECT 1 FROM like_fact f WHERE f.user_id = $4 AND f.item_id = i.item_id AND f.liked))
           ORDER BY i.item_id LIMIT $3`,
    line: (r) => ({ kind: "item", id: r.a }),
    key: (r) => [r.a as string, ""],
  },
  {
    // Only the blocks an account made: who blocks it is never its data to read (docs/security.md).
    // Those made against an erased account are kept (their blockers'); an erased account made none.
    sql: `SELECT k.blocker AS a, k.blocked AS b, ${AT("k.created_at")} AS at FROM block k
           WHERE ${after("k.blocker", "k.blocked")} AND ($4::text IS NULL OR k.blocker = $4)
             AND NOT ${ERASED("k.blocker")}
           ORDER BY k.blocker, k.blocked LIMIT $3`,
    line: (r) => ({ kind: "block", blocker: r.a, blocked: r.b, at: r.at }),
    key: (r) => [r.a as string, r.b as string],
  },
  {
    sql: `SELECT r.follower AS a, r.followee AS b, r.state, ${AT("r.changed_at")} AS at FROM relation r
           WHERE r.state <> 'REMOVED' AND ${after("r.follower", "r.followee")} AND ($4::text IS NULL OR r.follower = $4)
             AND NOT ${ERASED("r.follower")} AND NOT ${ERASED("r.followee")}
           ORDER BY r.follower, r.followee LIMIT $3`,
    line: (r) => ({ kind: "follow", follower: r.a, followee: r.b, state: r.state, at: r.at }),
    key: (r) => [r.a as string, r.b as string],
  },
  {
    sql: `SELECT f.user_id AS a, f.item_id AS b, ${AT("f.changed_at")} AS at FROM like_fact f JOIN item i ON i.item_id = f.item_id AND i.kind = 'plain'
           WHERE f.liked AND ${after("f.user_id", "f.item_id")} AND ($4::text IS NULL OR f.user_id = $4) AND NOT ${ERASED("f.user_id")}
           ORDER BY f.user_id, f.item_id LIMIT $3`,
    line: (r) => ({ kind: "like", user: r.a, item: r.b, at: r.at }),
    key: (r) => [r.a as string, r.b as string],
  },
];

/**
 * Writes every fact (or one account's: `account`) in the import's format, one JSON line each:
 * accounts, items, blocks, follows (ACTIVE and PENDING), likes; waits for `out` to drain when it
 * backs up. Importing the output into an empty database gives the same facts and counts.
 * Returns the lines written.
 */
export async function exportFacts(
  pool: Pool,
  out: NodeJS.WritableStream,
  options: { account?: string } = {},
): Promise<number> {
  const account = options.account === undefined ? null : validateUserId("account", options.account);
  if (account !== null) {
    const { rows } = await pool.query<{ erased_state: string | null }>(
      "SELECT erased_state FROM account WHERE account_id = $1",
      [account],
    );
    if (rows.length === 0) throw new AccountNotFoundError(account);
    // An erased account has no data left to export; one being erased has less every moment.
    if (rows[0]!.erased_state === "ERASED") throw AccountErasedError.of(account);
    if (rows[0]!.erased_state === "ERASING") {
      throw new AccountBeingErasedError(
        "ACCOUNT_BEING_ERASED",
        `account ${account} is being erased: it cannot be exported`,
        undefined,
        "SLE01",
      );
    }
  }
  let lines = 0;
  for (const section of SECTIONS) {
    for (let last: [string, string] = ["", ""]; ;) {
      const { rows } = await pool.query<Record<string, string | boolean>>(section.sql, [
        last[0],
        last[1],
        PAGE,
        account,
      ]);
      if (rows.length === 0) break;
      const chunk = rows.map((r) => JSON.stringify(section.line(r))).join("\n") + "\n";
      lines += rows.length;
      if (!out.write(chunk)) await new Promise((resolve) => out.once("drain", resolve));
      last = section.key(rows[rows.length - 1]!);
    }
  }
  return lines;
}
