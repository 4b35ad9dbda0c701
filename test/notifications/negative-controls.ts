/**
 * A deliberately wrong apply, kept only so tests can show that the checks catch it. Never use it.
 */
import { NOTIFICATION_COLUMNS, withIdAndGroup } from "../../src/notifications/notification-sources.ts";
import type { NotificationApply } from "../../src/notifications/notification-consumer.ts";
import type { TruthRow } from "../../src/notifications/notification-rebuild.ts";
import type { Pool } from "../../src/db/pool.ts";
import { withTransaction } from "../../src/db/transaction.ts";

/**
 * The apply without its guards: every delivered event takes effect (the seen table is written
 * only for the watermark, never asked) and overwrites its pair's row whatever its version. A
 * redelivered like after the unlike brings the notification back, and a group counts a liker
 * who no longer likes the post.
 */
export const applyWithoutGuards: NotificationApply = async (client, source, part, seqs) => {
  await client.query(
    `INSERT INTO ${source.tables.seen} (part, seq) SELECT DISTINCT $1::int, s FROM unnest($2::bigint[]) AS s ORDER BY 2 ON CONFLICT DO NOTHING`,
    [part, seqs],
  );
  const { rowCount } = await client.query(
    `WITH fresh AS (SELECT DISTINCT s AS seq FROM unnest($2::bigint[]) AS s),
     cand AS (${source.candidatesSql}),
     latest AS (SELECT DISTINCT ON (source, actor, subject, recipient) * FROM cand ORDER BY source, actor, subject, recipient, seq DESC)
     INSERT INTO notification AS n (${NOTIFICATION_COLUMNS})
     ${withIdAndGroup("latest")} FROM latest ORDER BY latest.source, latest.actor, latest.subject, latest.recipient
     ON CONFLICT (source, actor, subject, recipient) DO UPDATE
        SET type = EXCLUDED.type, active = EXCLUDED.active, version = EXCLUDED.version, at = EXCLUDED.at, id = EXCLUDED.id,
            group_key = EXCLUDED.group_key, part = EXCLUDED.part, seq = EXCLUDED.seq`,
    [part, seqs],
  );
  return { applied: rowCount ?? 0, skipped: 0, dup: seqs.length - (rowCount ?? 0) };
};

/**
 * The naive install (chapter 32's 32-H for this view): the recipient's rows := its snapshot rows,
 * without comparing versions and without keeping rows newer than the snapshot. What the consumer
 * applied after the snapshot is undone, and its events are below the watermark: never again.
 */
export async function installOverwrite(pool: Pool, recipient: string, truth: readonly TruthRow[]): Promise<void> {
  await withTransaction(pool, async (client) => {
    await client.query("DELETE FROM notification WHERE recipient = $1", [recipient]);
    for (const t of truth) {
      await client.query(
        `INSERT INTO notification (${NOTIFICATION_COLUMNS})
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::timestamptz, $10, notification_group_key($5, $6, $9::timestamptz, $10), 0, 0)`,
        [t.source, t.actor, t.subject, recipient, t.type, t.item_id, t.active, t.version, t.at, t.id],
      );
    }
  });
}
