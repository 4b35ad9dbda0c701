import type { Outcome } from "../likes/types.ts";

export type { Outcome };
export type RelationState = "ACTIVE" | "PENDING" | "REMOVED";

export interface RelationResult {
  outcome: Outcome;
  /** State of the pair the operation is about (for block: the blocked user's follow of the blocker). */
  state: RelationState;
  version: number;
  /** Highest sequence number the operation wrote, 0 when it wrote no event. */
  seq: number;
  reason: string;
  code?: string;
}

export interface RelationEvent {
  part: number;
  seq: number;
  follower: string;
  followee: string;
  state: RelationState;
  version: number;
  createdAt: Date;
}

export function formatRelationResult(r: RelationResult): string {
  if (r.outcome === "CHANGED") return `CHANGED(${r.state},v${r.version},seq${r.seq})`;
  return `${r.outcome}(${r.state},v${r.version},${r.reason})`;
}

export interface Relationship {
  /** I follow them (ACTIVE). */
  following: boolean;
  /** I asked to follow them and they have not decided (PENDING). */
  requested: boolean;
  /** They follow me. */
  followedBy: boolean;
  /** They asked to follow me and I have not decided: approve or reject it. */
  requestedBy: boolean;
  blocking: boolean;
  blockedBy: boolean;
}

/**
 * A relationship as the API shows it to the viewer: without blockedBy, since no route tells a
 * user that someone blocks them (docs/api.md, "What a blocked user learns").
 */
export type ViewerRelationship = Omit<Relationship, "blockedBy">;

/** An account after upsertAccount: whether it was created, and how many pending requests an unlock approved. */
export interface AccountSettings {
  accountId: string;
  private: boolean;
  created: boolean;
  approvedRequests: number;
}
