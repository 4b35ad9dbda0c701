import { fullAudit } from "../../api/routes/admin.ts";
import { loadConfig } from "../../config.ts";
import { openLedger } from "../../ledger.ts";
import { formatReadSide, formatWriteSide, readSideClean, writeSideClean } from "../../likes/like-audit.ts";
import { relationAuditClean } from "../../relations/relation-audit.ts";
import { counterAuditClean, formatCounterAudit } from "../../counters/counter-audit.ts";
import { openDatabase } from "../../runtime/database.ts";
import { formatNotificationAudit, notificationAuditClean } from "../../notifications/notification-audit.ts";
import { webhookAuditClean } from "../../webhooks/webhook-audit.ts";
import { erasureAuditClean } from "../../erasure/erasure-audit.ts";
import { feedAuditClean, formatFeedAudit } from "../../feed/feed-audit.ts";

type AuditReport = Awaited<ReturnType<typeof fullAudit>>;

function verdict(ok: boolean): string {
  return ok ? "ok       " : "VIOLATION";
}

function pairs(record: Record<string, number>): string {
  return Object.entries(record)
    .map(([k, v]) => `${k}=${v}`)
    .join(" ");
}

export function formatAudit(report: AuditReport): string {
  const { likes, relations } = report;
  const diff = relations.projectionDiff;
  const diffClean = diff === null || Object.values(diff).every((n) => n === 0);
  return (
    [
      `likes write side     ${verdict(writeSideClean(likes.writeSide))} ${formatWriteSide(likes.writeSide)}`,
      `likes read side      ${verdict(readSideClean(likes.readSide))} ${formatReadSide(likes.readSide)}`,
      `relation invariants  ${verdict(relationAuditClean(relations.invariants))} ${pairs(relations.invariants)}`,
      diff === null
        ? `follower projection  skipped   (not caught up yet: the diff against the truth is checked once it is)`
        : `follower projection  ${verdict(diffClean)} ${pairs(diff)}`,
      `comment counts       ${verdict(counterAuditClean(report.comments))} ${formatCounterAudit("comment_count", report.comments)}`,
      `notifications        ${verdict(notificationAuditClean(report.notifications))} ${formatNotificationAudit(report.notifications)}`,
      `webhook cursors      ${verdict(webhookAuditClean(report.webhooks))} ${pairs(report.webhooks)}`,
      `erasure leftovers    ${verdict(erasureAuditClean(report.erasure))} ${pairs(report.erasure)}`,
      `home timelines       ${verdict(feedAuditClean(report.feed))} ${formatFeedAudit(report.feed)}`,
      `failover findings    ${report.findings.lostWebhookDeliveries === 0 ? "none     " : "REPORTED "} ${pairs(report.findings)} (not a violation: see webhook_lost_delivery, docs/failover.md)`,
      report.clean ? "clean: no violation" : "NOT CLEAN: at least one violation",
    ].join("\n") + "\n"
  );
}

/** `social-ledger audit`: fullAudit (what GET /v1/admin/audit returns); exit code 1 unless clean. */
export async function audit(opts: { json?: boolean }): Promise<number> {
  const config = loadConfig();
  const database = await openDatabase(config, { poolSize: 2, applicationName: "social-ledger-audit" });
  try {
    const report = await fullAudit(await openLedger(database.pool, { feedMaxItems: config.feedMaxItems }));
    process.stdout.write(opts.json ? `${JSON.stringify(report, null, 2)}\n` : formatAudit(report));
    return report.clean ? 0 : 1;
  } finally {
    await database.close();
  }
}
