/** Outcomes shared by every set-target-state operation (table 32-1). */
export type Outcome = "CHANGED" | "NOOP" | "REJECTED";

export interface LikeResult {
  outcome: Outcome;
  liked: boolean;
  version: number;
  /** The event's sequence number within its partition; 0 when no event was written. */
  seq: number;
  part: number;
  reason: string;
  /** Stable error code when REJECTED. */
  code?: string;
}

/** One outbox row as delivered to the consumer. */
export interface LikeEvent {
  part: number;
  seq: number;
  userId: string;
  itemId: string;
  delta: 1 | -1;
  version: number;
}

export interface LikeCountReading {
  n: number;
  lag: number;
  pendingForItem: number;
  stale: boolean;
}

export function formatResult(r: LikeResult): string {
  return `${r.outcome}(${r.liked ? "liked" : "unliked"},v${r.version},${r.reason})`;
}
