import type { Pool } from "../db/pool.ts";
import type { OutboxKindName } from "./transport-kinds.ts";

/** Each kind's outbox table (fixed names, never input). */
const OUTBOX_TABLE: Record<OutboxKindName, string> = {
  likes: "like_outbox",
  relations: "relation_event",
  comments: "comment_outbox",
  posts: "post_outbox",
};

/**
 * The timeline each outbox row of [from, to] was committed on (docs/failover.md): with its position it
 * names the event, so an event written after a promotion at a position a lost event had used is
 * told apart from it.
 */
export async function outboxTimelines(
  pool: Pool,
  kind: OutboxKindName,
  part: number,
  from: number,
  to: number,
): Promise<Map<number, number>> {
  const { rows } = await pool.query<{ seq: string; timeline: number }>(
    `SELECT seq, timeline FROM ${OUTBOX_TABLE[kind]} WHERE part = $1 AND seq BETWEEN $2 AND $3`,
    [part, from, to],
  );
  return new Map(rows.map((r) => [Number(r.seq), r.timeline]));
}

/** The timeline the database writes on now (ledger_timeline(): moves at a promotion). */
export async function currentTimeline(pool: Pool): Promise<number> {
  const { rows } = await pool.query<{ timeline: number }>("SELECT ledger_timeline() AS timeline");
  return rows[0]!.timeline;
}
