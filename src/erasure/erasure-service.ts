import type { Pool } from "../db/pool.ts";
import { withStatementRetry } from "../db/transaction.ts";
import { readPartitions } from "../db/ledger-config.ts";
import { Hooks } from "../hooks.ts";
import { validateId, validateNonNegativeInteger } from "../ids.ts";
import { InvalidInputError } from "../errors.ts";
import { AccountNotFoundError } from "../relations/errors.ts";
import { DEFAULT_PACING, Pacer, rest, type PacingOptions } from "../workers/pacer.ts";

/** The phases in the order an erasure runs them (docs/erasure.md). */
export const ERASURE_PHASES = [
  "posts",
  "comments",
  "post_likes",
  "comment_likes",
  "likes",
  "following",
  "followers",
  "blocks",
  "done",
] as const;
export type ErasurePhase = (typeof ERASURE_PHASES)[number];
export type ErasureRequester = "self" | "admin" | "cli";

export const DEFAULT_ERASURE_BATCH_SIZE = 500;
export const MAX_ERASURE_BATCH_SIZE = 10_000;
/** The smallest batch the pacing goes down to: below it a batch's fixed cost (its statement, its commit) is all there is. */
export const MIN_PACED_ERASURE_BATCH = 20;

export interface ErasureStatus {
  accountId: string;
  phase: ErasurePhase;
  /** Facts turned off so far. */
  done: number;
  /** Facts left, from the count taken at the start. */
  remaining: number;
  total: number;
  batches: number;
  requestedBy: ErasureRequester;
  startedAt: Date;
  updatedAt: Date;
  finishedAt: Date | null;
}

/** STARTED: this call began it; RUNNING: it was running already; ERASED: it was done already. Neither of the last two writes anything. */
export type ErasureStart = { outcome: "STARTED" | "RUNNING" | "ERASED"; status: ErasureStatus };

export interface ErasureBatch {
  phase: ErasurePhase;
  facts: number;
  nextPhase: ErasurePhase;
  /** Facts the batch was allowed (its limit), and how long it took, round trip and commit included. */
  size: number;
  ms: number;
  /** How long it held sequence rows (the locks live writes of those partitions wait for); null when it took none. */
  sequencesHeldMs: number | null;
}

interface StatusRow {
  account_id: string;
  phase: ErasurePhase;
  done: number;
  total: number;
  batches: number;
  requested_by: ErasureRequester;
  started_at: Date;
  updated_at: Date;
  finished_at: Date | null;
}

const STATUS_COLUMNS = "account_id, phase, done, total, batches, requested_by, started_at, updated_at, finished_at";

function toStatus(r: StatusRow): ErasureStatus {
  return {
    accountId: r.account_id,
    phase: r.phase,
    done: r.done,
    remaining: Math.max(0, r.total - r.done),
    total: r.total,
    batches: r.batches,
    requestedBy: r.requested_by,
    startedAt: r.started_at,
    updatedAt: r.updated_at,
    finishedAt: r.finished_at,
  };
}

export function validateBatchSize(value: unknown): number {
  validateNonNegativeInteger("batchSize", value);
  const n = value as number;
  if (n < 1 || n > MAX_ERASURE_BATCH_SIZE)
    throw new InvalidInputError("batchSize", `must be between 1 and ${MAX_ERASURE_BATCH_SIZE}, got ${n}`);
  return n;
}

/**
 * Erasing an account (docs/erasure.md): start() marks it ERASING (reads answer it missing, the
 * write guard (the erasure_guard_* triggers, src/db/schema.sql) refuses writes by or towards it) and counts its facts;
 * step() runs one bounded batch of the current phase as one statement (erasure_step), so each
 * batch is a short transaction; the state lives in account_erasure, so any process may run the
 * next batch, after a crash too. The hook point `erasure.betweenBatches` is reached after each
 * committed batch, with no transaction open. Batches are paced (src/workers/pacer.ts): each is
 * sized so that it holds the sequence rows (what live writes of its partitions wait for) about
 * the pacing's time budget, from the last full batch of the same phase, at most `batchSize`; and
 * run() rests after each in proportion to its whole duration.
 */
export class ErasureService {
  private constructor(
    private readonly pool: Pool,
    readonly partitions: number,
    private readonly hooks: Hooks,
    readonly batchSize: number,
    readonly pacer: Pacer,
  ) {}

  static async open(
    pool: Pool,
    options: { hooks?: Hooks; batchSize?: number; pacing?: PacingOptions } = {},
  ): Promise<ErasureService> {
    const batchSize = validateBatchSize(options.batchSize ?? DEFAULT_ERASURE_BATCH_SIZE);
    const pacer = new Pacer(options.pacing ?? DEFAULT_PACING, batchSize, Math.min(batchSize, MIN_PACED_ERASURE_BATCH));
    return new ErasureService(pool, await readPartitions(pool), options.hooks ?? new Hooks(), batchSize, pacer);
  }

  /** The phase each account's last batch here left it in: which phase's size the next batch takes. */
  private readonly lastPhase = new Map<string, ErasurePhase>();

  /**
   * Starts the erasure of `accountId`, or finds it running or done (ERASED: done, and the id holds
   * nothing now; an erased id that holds a fact again is erased again: STARTED). AccountNotFoundError
   * for an id that never had an account.
   */
  async start(accountId: string, requestedBy: ErasureRequester): Promise<ErasureStart> {
    validateId("accountId", accountId);
    const { rows } = await withStatementRetry(() =>
      this.pool.query<{ outcome: "NOT_FOUND" | ErasureStart["outcome"] }>("SELECT erasure_start($1, $2) AS outcome", [
        accountId,
        requestedBy,
      ]),
    );
    const outcome = rows[0]!.outcome;
    if (outcome === "NOT_FOUND") throw new AccountNotFoundError(accountId);
    return { outcome, status: (await this.status(accountId))! };
  }

  /**
   * One batch of the current phase (one short transaction): at most `batchSize` facts when given,
   * else the paced size of the phase. A batch that filled its limit teaches the pacer that
   * phase's cost.
   */
  async step(accountId: string, batchSize?: number): Promise<ErasureBatch> {
    validateId("accountId", accountId);
    const size =
      batchSize === undefined
        ? this.pacer.size(this.lastPhase.get(accountId) ?? "posts")
        : validateBatchSize(batchSize);
    const t0 = performance.now();
    const { rows } = await withStatementRetry(() =>
      this.pool.query<{
        phase: ErasurePhase;
        facts: number;
        next_phase: ErasurePhase;
        sequences_held_ms: number | null;
      }>("SELECT phase, facts, next_phase, sequences_held_ms FROM erasure_step($1, $2, $3)", [
        accountId,
        size,
        this.partitions,
      ]),
    );
    const ms = performance.now() - t0;
    const r = rows[0]!;
    const batch = {
      phase: r.phase,
      facts: r.facts,
      nextPhase: r.next_phase,
      size,
      ms,
      sequencesHeldMs: r.sequences_held_ms,
    };
    // Sized by how long it held what live writes wait for (the sequence rows), else by its whole duration.
    if (batchSize === undefined)
      this.pacer.record(batch.phase, size, batch.sequencesHeldMs ?? ms, batch.phase === batch.nextPhase);
    if (batch.nextPhase === "done" || (batch.nextPhase as string) === "none") this.lastPhase.delete(accountId);
    else this.lastPhase.set(accountId, batch.nextPhase);
    await this.hooks.at("erasure.betweenBatches", {
      accountId,
      phase: batch.phase,
      facts: batch.facts,
      nextPhase: batch.nextPhase,
      size,
    });
    return batch;
  }

  /** The rest the pacing asks for after `batch` (0 with a duty of 1). */
  restAfter(batch: ErasureBatch): number {
    return this.pacer.restMs(batch.ms);
  }

  /** Batches until the erasure is done (or `maxBatches` ran); the status afterwards. */
  async run(
    accountId: string,
    options: { maxBatches?: number; onBatch?: (batch: ErasureBatch, status: ErasureStatus) => void } = {},
  ): Promise<ErasureStatus> {
    for (let n = 0; options.maxBatches === undefined || n < options.maxBatches; n++) {
      const batch = await this.step(accountId);
      if (batch.phase === "done" || batch.nextPhase === "done" || (batch.phase as string) === "none") break;
      if (options.onBatch) options.onBatch(batch, (await this.status(accountId))!);
      await rest(this.restAfter(batch));
    }
    const status = await this.status(accountId);
    if (!status) throw new AccountNotFoundError(accountId);
    return status;
  }

  /** The erasure's record, or null when none was started. */
  async status(accountId: string): Promise<ErasureStatus | null> {
    validateId("accountId", accountId);
    const { rows } = await this.pool.query<StatusRow>(
      `SELECT ${STATUS_COLUMNS} FROM account_erasure WHERE account_id = $1`,
      [accountId],
    );
    return rows[0] ? toStatus(rows[0]) : null;
  }

  /** Running erasures, oldest first, and the last `finished` that are done. */
  async list(options: { finished?: number } = {}): Promise<ErasureStatus[]> {
    const { rows } = await this.pool.query<StatusRow>(
      `(SELECT ${STATUS_COLUMNS} FROM account_erasure WHERE finished_at IS NULL ORDER BY started_at, account_id)
       UNION ALL
       (SELECT ${STATUS_COLUMNS} FROM account_erasure WHERE finished_at IS NOT NULL ORDER BY finished_at DESC, account_id LIMIT $1)`,
      [options.finished ?? 20],
    );
    return rows.map(toStatus);
  }

  /** Accounts whose erasure is running, oldest first: the background job's work. */
  async running(): Promise<string[]> {
    const { rows } = await this.pool.query<{ account_id: string }>(
      "SELECT account_id FROM account_erasure WHERE finished_at IS NULL ORDER BY started_at, account_id",
    );
    return rows.map((r) => r.account_id);
  }
}
