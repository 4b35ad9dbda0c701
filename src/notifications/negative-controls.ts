/**
 * A deliberately wrong apply, kept only so tests can show that the checks catch it. Never use it.
 */
import { NOTIFICATION_COLUMNS, withIdAndGroup } from "./notification-sources.ts";
import type { NotificationApply } from "./notification-consumer.ts";

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
     latest AS (SELECT DISTINCT ON (source, actor, subject) * FROM cand ORDER BY source, actor, subject, seq DESC)
     INSERT INTO notification AS n (${NOTIFICATION_COLUMNS})
     ${withIdAndGroup("latest")} FROM latest ORDER BY latest.source, latest.actor, latest.subject
     ON CONFLICT (source, actor, subject) DO UPDATE
        SET type = EXCLUDED.type, active = EXCLUDED.active, version = EXCLUDED.version, at = EXCLUDED.at, id = EXCLUDED.id,
            group_key = EXCLUDED.group_key, part = EXCLUDED.part, seq = EXCLUDED.seq`,
    [part, seqs],
  );
  return { applied: rowCount ?? 0, skipped: 0, dup: seqs.length - (rowCount ?? 0) };
};
