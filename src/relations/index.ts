export { RelationService } from "./relation-service.ts";
export { RelationProjector, type Verdict, type VerdictCounts } from "./projector.ts";
export {
  listFollowers,
  followerCount,
  listFollowing,
  listFollowRequests,
  listBlocks,
  readAccount,
  followingCount,
  relationships,
  pairRelationship,
  missingAccounts,
  MAX_RELATIONSHIPS,
  type FollowerPage,
  type FollowerCount,
  type AccountListPage,
  type Account,
} from "./relation-reads.ts";
export { setHideCollections } from "./account-settings.ts";
export {
  auditRelations,
  projectionDiff,
  relationAuditClean,
  RELATION_INVARIANTS,
  PROJECTION_DIFF,
} from "./relation-audit.ts";
export { AccountNotFoundError } from "./errors.ts";
export * from "./types.ts";
