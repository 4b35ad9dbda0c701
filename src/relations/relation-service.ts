import type { Pool, PoolClient } from "../db/pool.ts";
import { ForeignKeyViolationError } from "../db/errors.ts";
import { withStatementRetry, withTransaction } from "../db/transaction.ts";
import { readPartitions } from "../db/ledger-config.ts";
import { validateId } from "../ids.ts";
import { InvalidInputError } from "../errors.ts";
import { stablePartition } from "../partition.ts";
import { AccountNotFoundError } from "./errors.ts";
import { missingAccounts, pairRelationship } from "./relation-reads.ts";
import type { AccountSettings, RelationResult, RelationState, Relationship } from "./types.ts";

/** A row returned by the write functions of migration 007. */
interface WriteRow {
  outcome: "CHANGED" | "NOOP" | "REJECTED" | "ACCOUNT_NOT_FOUND";
  state: RelationState;
  version: number;
  seq: number;
  reason: string;
  code: string | null;
}

const RESULT_COLUMNS = "outcome, state, version, seq, reason, code";
const WRITE_FUNCTIONS = {
  follow: { name: "relation_follow", text: `SELECT ${RESULT_COLUMNS} FROM relation_follow($1, $2, $3)` },
  unfollow: { name: "relation_unfollow", text: `SELECT ${RESULT_COLUMNS} FROM relation_unfollow($1, $2, $3)` },
  decide: { name: "relation_decide", text: `SELECT ${RESULT_COLUMNS} FROM relation_decide($1, $2, $3, $4)` },
  block: { name: "relation_block", text: `SELECT ${RESULT_COLUMNS} FROM relation_block($1, $2, $3)` },
  unblock: { name: "relation_unblock", text: `SELECT ${RESULT_COLUMNS} FROM relation_unblock($1, $2)` },
} as const;

/**
 * The write side of chapter 30. Every operation is one READ COMMITTED transaction with a
 * fixed lock order: relation rows (lexicographic by (follower, followee)) -> the event_seq
 * rows of the partitions written (ascending). Two exceptions touch an account row: a follow
 * of a private account share-locks it after its relation row, and an unlock (upsertAccount)
 * locks it before the pending relation rows; the rare deadlock between a re-follow of a
 * pending request and the unlock of that account is a 40P01 that withTransaction retries. The block check runs *after* the relation row
 * lock: a block transaction must take the same row lock first, so what the check reads cannot
 * change before this transaction commits (the chapter's argument, test 30-H/30-I).
 *
 * Each operation runs as one server-side function call (migrations 007 and 016), one round
 * trip. The deterministic race tests pause inside those functions, at the hook points of
 * migration 016 (ledger_hook), so they race the statements production runs (docs/testing.md).
 */
export class RelationService {
  private constructor(
    private readonly pool: Pool,
    readonly partitions: number,
  ) {}

  static async open(pool: Pool): Promise<RelationService> {
    return new RelationService(pool, await readPartitions(pool));
  }

  partitionOf(followee: string): number {
    return stablePartition(followee, this.partitions);
  }

  /**
   * Creates an account, or changes only what `options` names: no option changes nothing (an
   * empty update never turns a private account public). Making a private account public
   * approves its pending follow requests in the same transaction, as Mastodon does.
   * Lock order: the account row, then the relation rows (by follower), then event_seq.
   */
  async upsertAccount(accountId: string, options: { private?: boolean } = {}): Promise<AccountSettings> {
    validateId("accountId", accountId);
    if (options.private !== undefined && typeof options.private !== "boolean") {
      throw new InvalidInputError("private", "must be a boolean");
    }
    return withTransaction(this.pool, async (client) => {
      // An erased account (its row kept, docs/erasure.md) is created anew: `created`, defaults.
      const before = await client.query<{ private: boolean }>(
        "SELECT private FROM account WHERE account_id = $1 AND erased_state IS DISTINCT FROM 'ERASED' FOR UPDATE", [accountId]);
      const { rows } = await client.query<{ private: boolean }>(
        `INSERT INTO account (account_id, private) VALUES ($1, coalesce($2, false))
         ON CONFLICT (account_id) DO UPDATE SET
           private = coalesce($2, CASE WHEN account.erased_state = 'ERASED' THEN false ELSE account.private END),
           erased_state = CASE WHEN account.erased_state = 'ERASED' THEN NULL ELSE account.erased_state END
         RETURNING private`,
        [accountId, options.private ?? null],
      );
      const created = before.rows.length === 0;
      const isPrivate = rows[0]!.private;
      let approved = 0;
      if (!created && before.rows[0]!.private && !isPrivate) {
        const pending = await client.query<{ follower: string; version: number }>(
          // A request of an account being erased is not approved: its erasure removes it (docs/erasure.md).
          `SELECT r.follower, r.version FROM relation r WHERE r.followee = $1 AND r.state = 'PENDING'
              AND NOT EXISTS (SELECT 1 FROM account a WHERE a.account_id = r.follower AND a.erased_state IS NOT NULL)
            ORDER BY r.follower FOR UPDATE OF r`,
          [accountId],
        );
        for (const row of pending.rows) {
          await this.approve(client, row.follower, accountId, row.version);
          approved++;
        }
      }
      return { accountId, private: isPrivate, created, approvedRequests: approved };
    });
  }

  follow(follower: string, followee: string): Promise<RelationResult> {
    return this.callWrite("follower", follower, "followee", followee, rejected("cannot follow yourself", "SELF_FOLLOW"), WRITE_FUNCTIONS.follow, [follower, followee, this.partitions]);
  }

  unfollow(follower: string, followee: string): Promise<RelationResult> {
    return this.callWrite("follower", follower, "followee", followee, rejected("cannot unfollow yourself", "SELF_FOLLOW"), WRITE_FUNCTIONS.unfollow, [follower, followee, this.partitions]);
  }

  /** The followee decides a pending request: approve -> ACTIVE, reject -> REMOVED. */
  async decide(followee: string, follower: string, approve: boolean): Promise<RelationResult> {
    if (typeof approve !== "boolean") throw new InvalidInputError("approve", "must be a boolean");
    return this.callWrite("followee", followee, "follower", follower, rejected("no request from yourself", "NOT_PENDING"), WRITE_FUNCTIONS.decide, [followee, follower, approve, this.partitions]);
  }

  /** blocker blocks blocked: writes the block row and removes both directions of the relation. */
  block(blocker: string, blocked: string): Promise<RelationResult> {
    return this.callWrite("blocker", blocker, "blocked", blocked, rejected("cannot block yourself", "SELF_BLOCK"), WRITE_FUNCTIONS.block, [blocker, blocked, this.partitions]);
  }

  /** Deletes the block row only; the relation stays REMOVED (invariant 4). */
  unblock(blocker: string, blocked: string): Promise<RelationResult> {
    return this.callWrite("blocker", blocker, "blocked", blocked, undefined, WRITE_FUNCTIONS.unblock, [blocker, blocked]);
  }

  /** The Mastodon-shaped relationship of a towards b, from the truth, in one statement (pairRelationship in relation-reads.ts). */
  async relationship(a: string, b: string): Promise<Relationship> {
    const { aExists, bExists, relationship } = await pairRelationship(this.pool, a, b);
    const missing = [...new Set([...(aExists ? [] : [a]), ...(bExists ? [] : [b])])];
    if (missing.length > 0) throw new AccountNotFoundError(missing.join(", "));
    return relationship;
  }

  /**
   * The one-round-trip path: validates both ids, answers a self-targeted call (`self`) without
   * asking the database, runs the write function as one retried autocommit statement, and maps
   * a missing account (FK violation, or the function's ACCOUNT_NOT_FOUND) to AccountNotFoundError.
   */
  private async callWrite(
    nameA: string, a: string, nameB: string, b: string,
    self: RelationResult | undefined,
    statement: { name: string; text: string },
    values: unknown[],
  ): Promise<RelationResult> {
    validateId(nameA, a);
    validateId(nameB, b);
    if (self && a === b) return self;
    let row: WriteRow;
    try {
      row = await withStatementRetry(async () => (await this.pool.query<WriteRow>({ ...statement, values })).rows[0]!);
    } catch (err) {
      // An error path: one more read names exactly the missing accounts, never the caller who exists (issue 11).
      if (err instanceof ForeignKeyViolationError && /^relation_follow(er|ee)_fkey$/.test(err.constraint ?? "")) {
        throw await accountNotFound(this.pool, [a, b]);
      }
      throw err;
    }
    if (row.outcome === "ACCOUNT_NOT_FOUND") throw new AccountNotFoundError(row.reason);
    const result: RelationResult = { outcome: row.outcome, state: row.state, version: row.version, seq: row.seq, reason: row.reason };
    return row.code === null ? result : { ...result, code: row.code };
  }

  /** An approval of the unlock: the state change and its event, by the write functions' own step (relation_write_event, which passes relation.afterEvent). */
  private async approve(client: PoolClient, follower: string, followee: string, version: number): Promise<void> {
    await client.query("SELECT relation_write_event($1, $2, 'ACTIVE', $3, $4)", [follower, followee, version + 1, this.partitions]);
  }
}

export async function blockedEitherWay(client: PoolClient | Pool, a: string, b: string): Promise<boolean> {
  const { rows } = await client.query<{ blocked: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM block WHERE (blocker = $1 AND blocked = $2) OR (blocker = $2 AND blocked = $1)) AS blocked`,
    [a, b],
  );
  return rows[0]!.blocked;
}

/**
 * `account` blocks `viewer` and `viewer` does not block `account`: the case in which the relation
 * routes answer as if `account` did not exist (docs/api.md, "What a blocked user learns").
 */
export async function blockedByOnly(db: PoolClient | Pool, viewer: string, account: string): Promise<boolean> {
  const { rows } = await db.query<{ hidden: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM block WHERE blocker = $2 AND blocked = $1)
        AND NOT EXISTS (SELECT 1 FROM block WHERE blocker = $1 AND blocked = $2) AS hidden`,
    [viewer, account],
  );
  return rows[0]!.hidden;
}

/** After a failure that says an account is missing: the missing ones (all, if they exist by now). */
async function accountNotFound(db: PoolClient | Pool, ids: string[]): Promise<AccountNotFoundError> {
  const missing = await missingAccounts(db, ids);
  return new AccountNotFoundError((missing.length > 0 ? missing : ids).join(", "));
}

/** A self-targeted call's answer, given without asking the database. */
function rejected(reason: string, code: string): RelationResult {
  return { outcome: "REJECTED", state: "REMOVED", version: 0, seq: 0, reason, code };
}
