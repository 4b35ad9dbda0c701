export { FeedConsumer, FeedConsumers, DEFAULT_FEED_MAX_ITEMS, emptyFeedStats, planFromFacts } from "./feed-consumer.ts";
export type { FeedEvent, FeedStats, FeedPlanner, PlanRow } from "./feed-consumer.ts";
export { readHomeTimeline } from "./feed-reads.ts";
export type { TimelineEntry, TimelinePage } from "./feed-reads.ts";
export { auditFeed, feedAuditClean, formatFeedAudit, FEED_AUDIT_SQL } from "./feed-audit.ts";
export type { FeedAudit } from "./feed-audit.ts";
export { FEED_SOURCES } from "./feed-sources.ts";
export { FeedRebuild } from "./feed-rebuild.ts";
export type { FeedRebuildReport } from "./feed-rebuild.ts";
