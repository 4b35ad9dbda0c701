import type { PoolClient } from "../db/pool.ts";
import type { RetentionKind } from "../db/retention-boundary.ts";
import { previousRelationStateSql } from "../relations/relation-audit.ts";

/**
 * From outbox rows to webhook messages (docs/webhooks.md, "Events"). Each source is one outbox
 * with a gapless, commit-ordered sequence per partition; a message's id names its event
 * (evt_<source>_<partition>_<seq>, and _t<timeline> after a promotion: docs/failover.md), so every
 * attempt and every replay of an event carries the same id, and an event written after a promotion at
 * a position a lost event had used carries another.
 */

export type WebhookSource = "likes" | "relations" | "comments" | "blocks" | "posts" | "accounts";

export const EVENT_TYPES = [
  "like.created",
  "like.removed",
  "follow.created",
  "follow.requested",
  "follow.removed",
  "follow.request_removed",
  "block.created",
  "block.removed",
  "comment.created",
  "comment.deleted",
  "post.created",
  "post.deleted",
  "account.created",
  "account.updated",
  "account.erased",
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

/** Which outbox each type comes from: a cursor whose source has no subscribed type advances without sending. */
export const SOURCE_OF_TYPE: Record<EventType, WebhookSource> = {
  "like.created": "likes",
  "like.removed": "likes",
  "follow.created": "relations",
  "follow.requested": "relations",
  "follow.removed": "relations",
  "follow.request_removed": "relations",
  "block.created": "blocks",
  "block.removed": "blocks",
  "comment.created": "comments",
  "comment.deleted": "comments",
  "post.created": "posts",
  "post.deleted": "posts",
  "account.created": "accounts",
  "account.updated": "accounts",
  "account.erased": "accounts",
};

export interface SourceTables {
  /** The outbox's sequence table (part, last): how far each partition has gone. */
  sequence: string;
  /** The source's name in retention_floor / retention_hold: every cursor holds its outbox's retention (docs/webhooks.md). */
  retentionKind: RetentionKind;
}

export const SOURCES: Record<WebhookSource, SourceTables> = {
  likes: { sequence: "like_seq", retentionKind: "likes" },
  relations: { sequence: "event_seq", retentionKind: "relations" },
  comments: { sequence: "comment_seq", retentionKind: "comments" },
  blocks: { sequence: "webhook_block_seq", retentionKind: "blocks" },
  posts: { sequence: "post_seq", retentionKind: "posts" },
  accounts: { sequence: "account_seq", retentionKind: "accounts" },
};
export const WEBHOOK_SOURCES = Object.keys(SOURCES) as WebhookSource[];

/**
 * For SQL over webhook_cursor `c`: one LEFT JOIN per source's sequence table, and `last`, the
 * end of the cursor's partition (0 while its sequence row does not exist yet).
 */
export const CURSOR_END_JOINS = WEBHOOK_SOURCES.map(
  (source, i) => `LEFT JOIN ${SOURCES[source].sequence} s${i} ON c.source = '${source}' AND s${i}.part = c.part`,
).join("\n    ");
export const CURSOR_END = `coalesce(${WEBHOOK_SOURCES.map((_, i) => `s${i}.last`).join(", ")}, 0)`;

/** One outbox event as a webhook message. */
export interface WebhookEvent {
  id: string;
  source: WebhookSource;
  part: number;
  seq: number;
  /** The timeline the event was committed on (docs/failover.md). */
  timeline: number;
  type: EventType;
  /** The event's commit time (the outbox row's created_at), ISO 8601. */
  occurredAt: string;
  data: Record<string, unknown>;
  /**
   * A block event an erasure redacted (it named the erased account; docs/erasure.md), or a post or
   * account event of an erased account (but its account.erased): it keeps its place in the
   * sequence, carries nothing, and is never sent, on a replay neither.
   */
  redacted?: true;
}

/** The JSON body of a message: {type, timestamp, data} (the Standard Webhooks payload shape). */
export function bodyOf(event: WebhookEvent): string {
  return JSON.stringify({ type: event.type, timestamp: event.occurredAt, data: event.data });
}

/** Timeline 1 keeps the ids events always had; a later timeline is named, so no two events share an id. */
export function eventId(source: WebhookSource, part: number, seq: number, timeline: number): string {
  return timeline === 1 ? `evt_${source}_${part}_${seq}` : `evt_${source}_${part}_${seq}_t${timeline}`;
}

/** Each source's outbox table (fixed names, never input). */
export const OUTBOX_OF_SOURCE: Record<WebhookSource, string> = {
  likes: "like_outbox",
  relations: "relation_event",
  comments: "comment_outbox",
  blocks: "webhook_block_event",
  posts: "post_outbox",
  accounts: "account_outbox",
};

type Row = Record<string, unknown> & { seq: number; timeline: number; created_at: Date };

/** Per source: the events of partition $1 above seq $2, at most $3, in seq order, with the facts a message carries. */
const PAGE_SQL: Record<WebhookSource, string> = {
  likes: `SELECT seq, timeline, user_id, item_id, delta, version, created_at FROM like_outbox
           WHERE part = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
  // The previous state of the pair: its previous event, or the pruned prefix's newest state
  // (the audit's rule), so a request that ends is told apart from a follow that ends.
  relations: `SELECT e.seq, e.timeline, e.follower, e.followee, e.state, e.version, e.created_at, ${previousRelationStateSql("e", "p", "b")} AS previous_state
                FROM relation_event e
                LEFT JOIN relation_event p ON p.follower = e.follower AND p.followee = e.followee AND p.version = e.version - 1
                LEFT JOIN relation_event_pruned b ON b.follower = e.follower AND b.followee = e.followee
               WHERE e.part = $1 AND e.seq > $2 ORDER BY e.seq LIMIT $3`,
  comments: `SELECT o.seq, o.timeline, o.comment_id, o.post_id, o.delta, o.version, o.created_at, c.author, c.parent_id, c.deleted_by
               FROM comment_outbox o LEFT JOIN comment c ON c.comment_id = o.comment_id
              WHERE o.part = $1 AND o.seq > $2 ORDER BY o.seq LIMIT $3`,
  blocks: `SELECT seq, timeline, blocker, blocked, state, created_at FROM webhook_block_event
            WHERE part = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
  // The post row keeps its visibility and times as a tombstone; never its body (no body is sent).
  posts: `SELECT o.seq, o.timeline, o.post_id, o.author, o.kind, o.version, o.created_at, p.visibility,
                 p.created_at AS post_created_at, p.deleted_at, a.erased_state = 'ERASED' AS erased
            FROM post_outbox o
            LEFT JOIN post p ON p.post_id = o.post_id
            LEFT JOIN account a ON a.account_id = o.author
           WHERE o.part = $1 AND o.seq > $2 ORDER BY o.seq LIMIT $3`,
  accounts: `SELECT o.seq, o.timeline, o.account_id, o.kind, o.private, o.hide_collections, o.created_at,
                    a.erased_state = 'ERASED' AS erased
               FROM account_outbox o
               LEFT JOIN account a ON a.account_id = o.account_id
              WHERE o.part = $1 AND o.seq > $2 ORDER BY o.seq LIMIT $3`,
};

function relationType(state: string, previous: string): EventType {
  if (state === "ACTIVE") return "follow.created";
  if (state === "PENDING") return "follow.requested";
  return previous === "PENDING" ? "follow.request_removed" : "follow.removed";
}

function toEvent(source: WebhookSource, part: number, r: Row): WebhookEvent {
  const base = { partition: part, seq: r.seq };
  let type: EventType;
  let data: Record<string, unknown>;
  switch (source) {
    case "likes":
      type = r.delta === 1 ? "like.created" : "like.removed";
      data = { userId: r.user_id, itemId: r.item_id, liked: r.delta === 1, version: r.version, ...base };
      break;
    case "relations":
      type = relationType(String(r.state), String(r.previous_state));
      data = {
        follower: r.follower,
        followee: r.followee,
        state: r.state,
        previousState: r.previous_state,
        version: r.version,
        ...base,
      };
      break;
    case "comments":
      type = r.delta === 1 ? "comment.created" : "comment.deleted";
      data = {
        commentId: r.comment_id,
        postId: r.post_id,
        author: r.author ?? null,
        parentId: r.parent_id ?? null,
        ...(r.delta === -1 ? { deletedBy: r.deleted_by ?? null } : {}),
        version: r.version,
        ...base,
      };
      break;
    case "blocks":
      if (r.state === "ERASED") return redacted(source, part, r, "block.removed");
      type = r.state === "BLOCKED" ? "block.created" : "block.removed";
      data = { blocker: r.blocker, blocked: r.blocked, blocking: r.state === "BLOCKED", ...base };
      break;
    case "posts":
      type = r.kind === "created" ? "post.created" : "post.deleted";
      if (r.erased === true) return redacted(source, part, r, type);
      data = {
        postId: r.post_id,
        author: r.author,
        visibility: r.visibility ?? null,
        createdAt: r.post_created_at instanceof Date ? r.post_created_at.toISOString() : null,
        ...(r.kind === "deleted"
          ? { deletedAt: r.deleted_at instanceof Date ? r.deleted_at.toISOString() : null }
          : {}),
        version: r.version,
        ...base,
      };
      break;
    case "accounts":
      type = `account.${String(r.kind)}` as EventType;
      // account.erased is the one event about an erased account that is sent: it is the erasure's news.
      if (r.erased === true && type !== "account.erased") return redacted(source, part, r, type);
      data =
        type === "account.erased"
          ? { accountId: r.account_id, ...base }
          : { accountId: r.account_id, private: r.private, hideCollections: r.hide_collections, ...base };
      break;
  }
  return {
    id: eventId(source, part, r.seq, r.timeline),
    source,
    part,
    seq: r.seq,
    timeline: r.timeline,
    type,
    occurredAt: r.created_at.toISOString(),
    data,
  };
}

/** An event that keeps its place in the sequence and carries nothing: never sent. */
function redacted(source: WebhookSource, part: number, r: Row, type: EventType): WebhookEvent {
  return {
    id: eventId(source, part, r.seq, r.timeline),
    source,
    part,
    seq: r.seq,
    timeline: r.timeline,
    type,
    occurredAt: r.created_at.toISOString(),
    data: { partition: part, seq: r.seq },
    redacted: true,
  };
}

/** The partition's next events above `after`, in order. */
export async function readEvents(
  client: PoolClient,
  source: WebhookSource,
  part: number,
  after: number,
  limit: number,
): Promise<WebhookEvent[]> {
  const { rows } = await client.query<Row>({
    name: `webhook_page_${source}`,
    text: PAGE_SQL[source],
    values: [part, after, limit],
  });
  return rows.map((r) => toEvent(source, part, r));
}

/** Whether an endpoint subscribed to ["*"] or to this type. */
export function subscribed(events: readonly string[], type: EventType): boolean {
  return events.includes("*") || events.includes(type);
}

/** Whether an endpoint with these subscriptions is sent `event`: subscribed to its type, and not redacted. */
export function deliverable(events: readonly string[], event: WebhookEvent): boolean {
  return event.redacted !== true && subscribed(events, event.type);
}
