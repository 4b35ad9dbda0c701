import type { TransportKindName } from "../../src/transport/transport-kinds.ts";

/**
 * The JetStream message id as it was before it named the timeline: the position alone. After a
 * promotion with asynchronous replication the new primary hands a lost event's position to another
 * event, and the broker's duplicate window drops that event as a copy of the lost one.
 */
export function positionOnlyMessageId(kind: TransportKindName, part: number, seq: number): string {
  return `${kind}:${part}:${seq}`;
}
