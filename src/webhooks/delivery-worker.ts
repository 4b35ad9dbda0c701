import type { Pool, PoolClient } from "../db/pool.ts";
import { withTransaction } from "../db/transaction.ts";
import { holdRetention } from "../db/retention-boundary.ts";
import { Hooks } from "../hooks.ts";
import { PartitionWorker, type PartitionWorkerOptions } from "../workers/partition-worker.ts";
import { attempt, DEFAULT_LIMITS, type AttemptLimits, type AttemptResult } from "./delivery-http.ts";
import { holderOf } from "./endpoint-registry.ts";
import {
  bodyOf,
  CURSOR_END,
  CURSOR_END_JOINS,
  deliverable,
  readEvents,
  SOURCES,
  type WebhookEvent,
  type WebhookSource,
} from "./webhook-events.ts";
import { signatureHeader } from "./webhook-signature.ts";
import { currentTimeline } from "../transport/event-timeline.ts";
import { DeliveryMemory, lostDeliveries, recordLostDeliveries, type DeliveredEvent } from "./lost-deliveries.ts";

/**
 * The delivery worker (docs/webhooks.md): one step claims one due cursor with a row lock
 * (FOR UPDATE SKIP LOCKED: two workers, in one process or several, never hold the same
 * endpoint+partition), sends the partition's next subscribed event and, in the same
 * transaction, moves the cursor past it only after a 2xx. A crash or a lost connection before
 * the commit leaves the cursor where it was: the event is sent again, with the same id.
 */

export interface DeliveryOptions {
  limits?: Partial<AttemptLimits>;
  /** First retry after about this long; doubles per failed attempt, with jitter (default 1 s). */
  retryBaseMs?: number;
  /** Ceiling of the retry delay (default 1 h): a failing endpoint is still tried at least this often. */
  maxBackoffMs?: number;
  /** Events read per step (unsubscribed ones are passed over in one step). */
  pageSize?: number;
  hooks?: Hooks;
  /** Each attempt's outcome, for metrics. */
  onAttempt?: (endpointId: string, result: "delivered" | "failed") => void;
  /** Delivered messages whose event a promotion lost (docs/failover.md), once each, for the metric and the log. */
  onLost?: (lost: readonly DeliveredEvent[], timeline: { from: number; to: number }) => void;
}

export interface Claim {
  endpoint_id: string;
  source: WebhookSource;
  part: number;
  delivered_upto: number;
  attempts: number;
  url: string;
  events: string[];
  secret: string;
  previous_secret: string | null;
}

/**
 * The most overdue cursor with events past it, of an endpoint that is not paused. The sequence
 * tables say whether a partition has events past the cursor without touching the outboxes.
 */
export const CLAIM_SQL = `
  SELECT c.endpoint_id, c.source, c.part, c.delivered_upto, c.attempts, e.url, e.events, e.secret,
         CASE WHEN e.previous_secret_until > now() THEN e.previous_secret END AS previous_secret
    FROM webhook_cursor c
    JOIN webhook_endpoint e ON e.endpoint_id = c.endpoint_id
    ${CURSOR_END_JOINS}
   WHERE NOT e.paused AND c.next_attempt_at <= now()
     AND c.delivered_upto < ${CURSOR_END}
   ORDER BY c.next_attempt_at
   LIMIT 1
   FOR UPDATE OF c SKIP LOCKED`;

/**
 * A rotated-out secret whose grace period has ended is not kept: the claim already stops signing
 * with it at the end (CLAIM_SQL), and each pass of every delivery loop erases it from the row.
 */
export async function forgetExpiredSecrets(client: Pool | PoolClient): Promise<number> {
  const { rowCount } = await client.query(
    "UPDATE webhook_endpoint SET previous_secret = NULL, previous_secret_until = NULL WHERE previous_secret_until <= now()",
  );
  return rowCount ?? 0;
}

export class WebhookDelivery {
  private readonly limits: AttemptLimits;
  private readonly retryBaseMs: number;
  private readonly maxBackoffMs: number;
  protected readonly pageSize: number;
  readonly hooks: Hooks;
  private readonly memory = new DeliveryMemory();
  /** The database's timeline at the last pass; a change is a promotion (docs/failover.md). */
  private timeline: number | undefined;
  private realigning: Promise<void> | undefined;

  constructor(
    protected readonly pool: Pool,
    private readonly options: DeliveryOptions = {},
  ) {
    this.limits = { ...DEFAULT_LIMITS, ...options.limits };
    this.retryBaseMs = options.retryBaseMs ?? 1_000;
    this.maxBackoffMs = options.maxBackoffMs ?? 3_600_000;
    this.pageSize = options.pageSize ?? 100;
    this.hooks = options.hooks ?? new Hooks();
  }

  /** Forgets expired rotated-out secrets, then steps until nothing is due or `budget` events were handled; returns the events handled. */
  async pass(budget = 100): Promise<number> {
    await (this.realigning ??= this.realign().finally(() => (this.realigning = undefined)));
    await forgetExpiredSecrets(this.pool);
    let handled = 0;
    while (handled < budget) {
      const n = await this.step();
      if (n === 0) break;
      handled += n;
    }
    return handled;
  }

  /** One cursor, one transaction: returns the events handled (sent, failed or passed over), 0 when nothing is due. */
  step(): Promise<number> {
    return withTransaction(
      this.pool,
      async (client) => {
        // Named: planning this join of six sequence tables cost more than running it (every step claims).
        const { rows } = await client.query<Claim>({ name: "webhook_claim", text: CLAIM_SQL });
        const claim = rows[0];
        if (!claim) return 0;
        const page = await readEvents(client, claim.source, claim.part, claim.delivered_upto, this.pageSize);
        // Only the gapless run right after the cursor: an event missing further on is reached as
        // the next event in a later step, and stops the cursor there, never passed over.
        const gap = page.findIndex((e, i) => e.seq !== claim.delivered_upto + 1 + i);
        const events = gap < 0 ? page : page.slice(0, gap);
        if (events.length === 0) {
          // The next event is gone (deleted below this cursor's retention hold): never skip silently over what was lost.
          await this.fail(client, claim, claim.delivered_upto, {
            ok: false,
            error: `event ${claim.delivered_upto + 1} is no longer in the ${claim.source} outbox (deleted before this endpoint received it; it is not skipped)`,
          });
          return 1;
        }
        const index = events.findIndex((e) => deliverable(claim.events, e));
        if (index < 0) {
          await this.advance(client, claim, events.at(-1)!.seq);
          return events.length;
        }
        const event = events[index]!;
        const result = await this.send(claim, event);
        await this.hooks.at("webhooks.afterResponse", {
          endpointId: claim.endpoint_id,
          source: claim.source,
          part: claim.part,
          seq: event.seq,
          ok: result.ok,
        });
        if (result.ok) {
          // Remembered before the commit: the receiver has it, whether or not the cursor's advance survives.
          this.memory.remember({
            endpointId: claim.endpoint_id,
            source: claim.source,
            part: claim.part,
            seq: event.seq,
            timeline: event.timeline,
            webhookId: event.id,
            deliveredAt: new Date(),
          });
          await this.advance(client, claim, event.seq, result.status);
        } else await this.fail(client, claim, event.seq - 1, result);
        this.options.onAttempt?.(claim.endpoint_id, result.ok ? "delivered" : "failed");
        return index + 1;
      },
      { maxAttempts: 1 },
    );
  }

  /**
   * When the database's timeline changed since the last pass (a promotion), the messages delivered
   * before it whose event the new primary does not hold under the same id are reported: recorded in
   * webhook_lost_delivery (the audit's findings) and passed to onLost. The cursors need nothing: they
   * are the new primary's, and what they send again under an unchanged id the receiver already has.
   */
  private async realign(): Promise<void> {
    const now = await currentTimeline(this.pool);
    const before = this.timeline;
    if (before !== undefined && before !== now) {
      const lost = await lostDeliveries(this.pool, this.memory.take());
      await recordLostDeliveries(this.pool, lost);
      if (lost.length > 0) this.options.onLost?.(lost, { from: before, to: now });
    }
    this.timeline = now;
  }

  protected async send(claim: Claim, event: WebhookEvent): Promise<AttemptResult> {
    const body = bodyOf(event);
    const timestamp = Math.floor(Date.now() / 1000);
    const secrets = claim.previous_secret ? [claim.secret, claim.previous_secret] : [claim.secret];
    await this.hooks.at("webhooks.beforeSend", {
      endpointId: claim.endpoint_id,
      source: claim.source,
      part: claim.part,
      seq: event.seq,
    });
    return attempt(
      claim.url,
      {
        "webhook-id": event.id,
        "webhook-timestamp": String(timestamp),
        "webhook-signature": signatureHeader(secrets, event.id, timestamp, body),
      },
      body,
      this.limits,
    );
  }

  /** The cursor and the endpoint's retention hold move together. */
  protected async advance(client: PoolClient, claim: Claim, upto: number, status?: number): Promise<void> {
    await client.query(
      `UPDATE webhook_cursor SET delivered_upto = $4, attempts = 0, failing_since = NULL, next_attempt_at = now(), last_error = NULL,
              last_status = coalesce($5, last_status), delivered_at = CASE WHEN $5::int IS NULL THEN delivered_at ELSE now() END
        WHERE endpoint_id = $1 AND source = $2 AND part = $3`,
      [claim.endpoint_id, claim.source, claim.part, upto, status ?? null],
    );
    await this.hold(client, claim, upto);
  }

  /** The event stays next; the unsubscribed ones before it are passed over. */
  private async fail(
    client: PoolClient,
    claim: Claim,
    upto: number,
    result: AttemptResult & { ok: false },
  ): Promise<void> {
    const attempts = upto === claim.delivered_upto ? claim.attempts + 1 : 1;
    await client.query(
      `UPDATE webhook_cursor SET delivered_upto = $4, attempts = $5, failing_since = coalesce(failing_since, now()),
              next_attempt_at = now() + make_interval(secs => $6::float8 / 1000), last_error = $7, last_status = $8
        WHERE endpoint_id = $1 AND source = $2 AND part = $3`,
      [
        claim.endpoint_id,
        claim.source,
        claim.part,
        upto,
        attempts,
        this.backoffMs(attempts),
        result.error.slice(0, 500),
        result.status ?? null,
      ],
    );
    if (upto !== claim.delivered_upto) await this.hold(client, claim, upto);
  }

  private async hold(client: PoolClient, claim: Claim, upto: number): Promise<void> {
    await holdRetention(client, holderOf(claim.endpoint_id), SOURCES[claim.source].retentionKind, claim.part, upto);
  }

  /** Exponential with jitter: between half and all of base * 2^(attempts-1), capped. */
  private backoffMs(attempts: number): number {
    const ceiling = Math.min(this.maxBackoffMs, this.retryBaseMs * 2 ** Math.min(attempts - 1, 30));
    return ceiling / 2 + (Math.random() * ceiling) / 2;
  }
}

/** `loops` delivery loops over one WebhookDelivery: different endpoints and partitions proceed in parallel. */
export function webhookWorkers(
  delivery: WebhookDelivery,
  loops: number,
  options: PartitionWorkerOptions = {},
): PartitionWorker[] {
  return Array.from(
    { length: Math.max(1, loops) },
    (_, i) => new PartitionWorker(`webhook-delivery#${i}`, () => delivery.pass(), options),
  );
}
