export {
  NotificationConsumer,
  NotificationFeed,
  applyWithDedup,
  emptyNotificationStats,
} from "./notification-consumer.ts";
export type { NotificationEvent, NotificationStats, NotificationApply } from "./notification-consumer.ts";
export { NotificationRebuild, NotificationRebuildInProgressError } from "./notification-rebuild.ts";
export type { NotificationRebuildReport } from "./notification-rebuild.ts";
export {
  listNotificationGroups,
  unreadCount,
  markRead,
  NOTIFICATION_ID_PATTERN,
  SAMPLE_ACCOUNTS,
} from "./notification-reads.ts";
export type { NotificationGroup, NotificationGroupPage, UnreadCount } from "./notification-reads.ts";
export {
  auditNotifications,
  notificationAuditClean,
  formatNotificationAudit,
  NOTIFICATION_AUDIT_SQL,
} from "./notification-audit.ts";
export type { NotificationAudit } from "./notification-audit.ts";
export { NOTIFICATION_SOURCES } from "./notification-sources.ts";
