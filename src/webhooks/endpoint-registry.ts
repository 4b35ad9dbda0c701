import { randomBytes } from "node:crypto";
import type { Pool, PoolClient } from "../db/pool.ts";
import { withTransaction } from "../db/transaction.ts";
import { InvalidInputError } from "../errors.ts";
import { holdRetention, releaseRetention, RetentionHoldBelowFloorError } from "../db/retention-boundary.ts";
import { resolveTarget, type Resolver } from "./address-policy.ts";
import { EVENT_TYPES, SOURCES, WEBHOOK_SOURCES, type WebhookSource } from "./webhook-events.ts";
import { newSecret } from "./webhook-signature.ts";
import {
  ReplayBelowRetentionError,
  ReplayBeyondEndError,
  UnknownEventTypeError,
  WebhookNotFoundError,
} from "./webhook-errors.ts";
import { CURSOR_STATE_SQL, type CursorState } from "./cursor-state.ts";

/**
 * The endpoint registry behind the admin routes: endpoints, their secrets and their cursors.
 * A new endpoint gets a cursor per (source, partition) at the partition's current end, and holds
 * retention there (retention_hold, holder `webhook:<id>`); every cursor move moves the hold in
 * the same transaction, and deleting the endpoint releases it.
 */

export type EndpointStatus = "active" | "paused" | "failing";

export interface WebhookEndpoint {
  id: string;
  url: string;
  events: string[];
  status: EndpointStatus;
  createdAt: string;
  updatedAt: string;
  /** While the previous secret still signs (after a rotation), until when. */
  previousSecretValidUntil?: string;
  /** Outbox events past no cursor of this endpoint yet (subscribed or not). */
  backlog: number;
  /** Age of the oldest such event, in seconds; absent when there is none. */
  oldestPendingSeconds?: number;
}

export interface RegistryOptions {
  /** LEDGER_WEBHOOK_ALLOW_PRIVATE: loopback and private addresses allowed (development, tests). */
  allowPrivate?: boolean;
  /** A cursor whose event failed this many attempts makes its endpoint `failing`. */
  failingAfter?: number;
  /** LEDGER_WEBHOOK_ROTATION_GRACE_MS: how long a rotated-out secret still signs. */
  rotationGraceSeconds?: number;
  resolver?: Resolver;
}

export const holderOf = (endpointId: string) => `webhook:${endpointId}`;

const MAX_URL_LENGTH = 2048;

export function validateEvents(events: unknown): string[] {
  if (!Array.isArray(events) || events.length === 0)
    throw new InvalidInputError("events", 'a non-empty list of event types, or ["*"]');
  const unknown = events.filter((e) => e !== "*" && !(EVENT_TYPES as readonly unknown[]).includes(e));
  if (unknown.length > 0) throw new UnknownEventTypeError(unknown.map(String), EVENT_TYPES);
  return [...new Set(events as string[])].sort();
}

interface EndpointRow {
  endpoint_id: string;
  url: string;
  events: string[];
  paused: boolean;
  failing: boolean;
  created_at: Date;
  updated_at: Date;
  previous_secret_until: Date | null;
}

const ENDPOINT_SQL = `
  SELECT e.endpoint_id, e.url, e.events, e.paused, e.created_at, e.updated_at,
         CASE WHEN e.previous_secret_until > now() THEN e.previous_secret_until END AS previous_secret_until,
         EXISTS (SELECT 1 FROM webhook_cursor c WHERE c.endpoint_id = e.endpoint_id AND c.attempts >= $1) AS failing
    FROM webhook_endpoint e`;

export class EndpointRegistry {
  readonly allowPrivate: boolean;
  readonly failingAfter: number;
  readonly rotationGraceSeconds: number;
  private readonly resolver: Resolver | undefined;

  constructor(
    private readonly pool: Pool,
    options: RegistryOptions = {},
  ) {
    this.allowPrivate = options.allowPrivate ?? false;
    this.failingAfter = options.failingAfter ?? 5;
    this.rotationGraceSeconds = options.rotationGraceSeconds ?? 86_400;
    this.resolver = options.resolver;
  }

  private async checkUrl(url: unknown): Promise<string> {
    if (typeof url !== "string" || url.length === 0 || url.length > MAX_URL_LENGTH)
      throw new InvalidInputError("url", `a URL of 1..${MAX_URL_LENGTH} characters`);
    await resolveTarget(url, this.allowPrivate, this.resolver);
    return url;
  }

  /** Registers an endpoint; its secret is answered here only. Events from now on are delivered. */
  async create(input: { url: unknown; events: unknown }): Promise<{ endpoint: WebhookEndpoint; secret: string }> {
    const events = validateEvents(input.events);
    const url = await this.checkUrl(input.url);
    const id = `whe_${randomBytes(12).toString("hex")}`;
    const secret = newSecret();
    await withTransaction(this.pool, async (client) => {
      await client.query("INSERT INTO webhook_endpoint (endpoint_id, url, events, secret) VALUES ($1, $2, $3, $4)", [
        id,
        url,
        events,
        secret,
      ]);
      for (const source of WEBHOOK_SOURCES) {
        const kind = SOURCES[source].retentionKind;
        // The floors first (FOR SHARE, as holdRetention takes them), then the ends: a prune that
        // committed before has its floor at or below the end read here, and one that has not yet
        // locked a floor sees this endpoint's hold. Read the other way round, a prune of an outbox
        // no endpoint holds could pass the end read here, and the hold would be refused.
        await client.query(
          `INSERT INTO retention_floor (kind, part)
           SELECT $1, p.part FROM generate_series(0, (SELECT partitions - 1 FROM ledger_config)) AS p(part)
           ON CONFLICT DO NOTHING`,
          [kind],
        );
        await client.query("SELECT 1 FROM retention_floor WHERE kind = $1 ORDER BY part FOR SHARE", [kind]);
        // The partition's end as committed now: an event committing later has a higher seq.
        const { rows } = await client.query<{ part: number; last: number }>(
          `SELECT p.part, coalesce(s.last, 0) AS last
             FROM generate_series(0, (SELECT partitions - 1 FROM ledger_config)) AS p(part)
             LEFT JOIN ${SOURCES[source].sequence} s ON s.part = p.part ORDER BY p.part`,
        );
        for (const r of rows) {
          await client.query(
            "INSERT INTO webhook_cursor (endpoint_id, source, part, delivered_upto) VALUES ($1, $2, $3, $4)",
            [id, source, r.part, r.last],
          );
          await holdRetention(client, holderOf(id), kind, r.part, r.last);
        }
      }
    });
    return { endpoint: await this.get(id), secret };
  }

  async list(): Promise<WebhookEndpoint[]> {
    const { rows } = await this.pool.query<EndpointRow>(`${ENDPOINT_SQL} ORDER BY e.created_at, e.endpoint_id`, [
      this.failingAfter,
    ]);
    const cursors = await this.cursors();
    return rows.map((r) =>
      this.toEndpoint(
        r,
        cursors.filter((c) => c.endpointId === r.endpoint_id),
      ),
    );
  }

  async get(id: string): Promise<WebhookEndpoint> {
    const { rows } = await this.pool.query<EndpointRow>(`${ENDPOINT_SQL} WHERE e.endpoint_id = $2`, [
      this.failingAfter,
      id,
    ]);
    if (rows.length === 0) throw new WebhookNotFoundError(id);
    return this.toEndpoint(rows[0]!, await this.cursors(id));
  }

  /** Every cursor (of one endpoint) with its partition's end and the age of its next event. */
  async cursors(endpointId?: string): Promise<CursorState[]> {
    const { rows } = await this.pool.query<CursorState>(CURSOR_STATE_SQL, [endpointId ?? null]);
    return rows;
  }

  private toEndpoint(r: EndpointRow, cursors: CursorState[]): WebhookEndpoint {
    const backlog = cursors.reduce((n, c) => n + Math.max(0, c.last - c.deliveredUpto), 0);
    const oldest = cursors.reduce<number | undefined>(
      (age, c) => (c.oldestPendingSeconds === null ? age : Math.max(age ?? 0, c.oldestPendingSeconds)),
      undefined,
    );
    return {
      id: r.endpoint_id,
      url: r.url,
      events: r.events,
      status: r.paused ? "paused" : r.failing ? "failing" : "active",
      createdAt: r.created_at.toISOString(),
      updatedAt: r.updated_at.toISOString(),
      ...(r.previous_secret_until ? { previousSecretValidUntil: r.previous_secret_until.toISOString() } : {}),
      backlog,
      ...(oldest === undefined ? {} : { oldestPendingSeconds: Math.floor(oldest) }),
    };
  }

  /** A changed URL or event list applies from the next delivery on. */
  async update(id: string, input: { url?: unknown; events?: unknown }): Promise<WebhookEndpoint> {
    if (input.url === undefined && input.events === undefined)
      throw new InvalidInputError("body", "name url, events or both");
    const events = input.events === undefined ? null : validateEvents(input.events);
    const url = input.url === undefined ? null : await this.checkUrl(input.url);
    const { rowCount } = await this.pool.query(
      "UPDATE webhook_endpoint SET url = coalesce($2, url), events = coalesce($3, events), updated_at = now() WHERE endpoint_id = $1",
      [id, url, events],
    );
    if (rowCount === 0) throw new WebhookNotFoundError(id);
    return this.get(id);
  }

  /** Paused: nothing is sent, the backlog and its retention hold stay. Resumed: every cursor is due at once. */
  async setPaused(id: string, paused: boolean): Promise<WebhookEndpoint> {
    await withTransaction(this.pool, async (client) => {
      const { rowCount } = await client.query(
        "UPDATE webhook_endpoint SET paused = $2, updated_at = now() WHERE endpoint_id = $1",
        [id, paused],
      );
      if (rowCount === 0) throw new WebhookNotFoundError(id);
      if (!paused) await client.query("UPDATE webhook_cursor SET next_attempt_at = now() WHERE endpoint_id = $1", [id]);
    });
    return this.get(id);
  }

  /** The endpoint, its cursors and its retention holds go. */
  async delete(id: string): Promise<void> {
    await withTransaction(this.pool, async (client) => {
      const { rowCount } = await client.query("DELETE FROM webhook_endpoint WHERE endpoint_id = $1", [id]);
      if (rowCount === 0) throw new WebhookNotFoundError(id);
      await releaseRetention(client, holderOf(id));
    });
  }

  /** A new secret (answered once); the old one signs too for the grace period. */
  async rotateSecret(
    id: string,
    graceSeconds: number = this.rotationGraceSeconds,
  ): Promise<{ endpoint: WebhookEndpoint; secret: string }> {
    const secret = newSecret();
    const { rowCount } = await this.pool.query(
      `UPDATE webhook_endpoint SET previous_secret = CASE WHEN $3::float8 > 0 THEN secret END,
              previous_secret_until = CASE WHEN $3::float8 > 0 THEN now() + make_interval(secs => $3::float8) END,
              secret = $2, updated_at = now()
        WHERE endpoint_id = $1`,
      [id, secret, graceSeconds],
    );
    if (rowCount === 0) throw new WebhookNotFoundError(id);
    return { endpoint: await this.get(id), secret };
  }

  /**
   * Delivers a partition again from `fromSeq` on (the events keep their ids). Waits for a delivery
   * in progress on the cursor (its row lock), and refuses a position retention has pruned: the
   * hold is set in the same transaction, under the floor's share lock, so a prune either sees it
   * or this sees the prune.
   */
  async replay(
    id: string,
    input: { source: WebhookSource; partition: number; fromSeq: number },
  ): Promise<WebhookEndpoint> {
    const { source, partition, fromSeq } = input;
    if (!WEBHOOK_SOURCES.includes(source))
      throw new InvalidInputError("source", `one of ${WEBHOOK_SOURCES.join(", ")}`);
    if (!Number.isSafeInteger(fromSeq) || fromSeq < 1) throw new InvalidInputError("fromSeq", "an integer >= 1");
    await withTransaction(this.pool, async (client) => {
      const { rows } = await client.query<{ delivered_upto: number }>(
        "SELECT delivered_upto FROM webhook_cursor WHERE endpoint_id = $1 AND source = $2 AND part = $3 FOR UPDATE",
        [id, source, partition],
      );
      if (rows.length === 0) {
        await this.requireEndpoint(client, id);
        throw new InvalidInputError("partition", `no partition ${partition}`);
      }
      const last = await partitionEnd(client, source, partition);
      if (fromSeq - 1 > last) throw new ReplayBeyondEndError(source, partition, fromSeq, last);
      const kind = SOURCES[source].retentionKind;
      try {
        await holdRetention(client, holderOf(id), kind, partition, fromSeq - 1);
      } catch (err) {
        if (err instanceof RetentionHoldBelowFloorError) {
          const floor = (
            await client.query<{ f: number }>(
              "SELECT pruned_upto AS f FROM retention_floor WHERE kind = $1 AND part = $2",
              [kind, partition],
            )
          ).rows[0]!.f;
          throw new ReplayBelowRetentionError(source, partition, fromSeq, floor);
        }
        throw err;
      }
      await client.query(
        `UPDATE webhook_cursor SET delivered_upto = $4, attempts = 0, failing_since = NULL, next_attempt_at = now(), last_error = NULL, last_status = NULL
          WHERE endpoint_id = $1 AND source = $2 AND part = $3`,
        [id, source, partition, fromSeq - 1],
      );
    });
    return this.get(id);
  }

  private async requireEndpoint(client: PoolClient, id: string): Promise<void> {
    const { rowCount } = await client.query("SELECT 1 FROM webhook_endpoint WHERE endpoint_id = $1", [id]);
    if (rowCount === 0) throw new WebhookNotFoundError(id);
  }
}

export async function partitionEnd(client: PoolClient | Pool, source: WebhookSource, part: number): Promise<number> {
  const { rows } = await client.query<{ last: number }>(
    `SELECT last FROM ${SOURCES[source].sequence} WHERE part = $1`,
    [part],
  );
  return rows[0]?.last ?? 0;
}
