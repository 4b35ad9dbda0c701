import type { Pool, PoolClient } from "../db/pool.ts";
import { withTransaction } from "../db/transaction.ts";
import type { Hooks } from "../hooks.ts";
import { readSide, writeSide, type ReadSideAudit, type WriteSideAudit } from "../likes/like-audit.ts";
import { auditCounter, type CounterAudit } from "../counters/counter-audit.ts";
import { COMMENT_COUNTER } from "../content/comment-spec.ts";
import {
  auditRelations,
  PROJECTION_CAUGHT_UP_SQL,
  projectionDiffWhenCaughtUp,
  type ProjectionDiff,
  type RelationAudit,
} from "../relations/relation-audit.ts";
import { auditNotifications, type NotificationAudit } from "../notifications/notification-audit.ts";
import { auditFeed, auditFeedReaders, feedAuditClean, recordFeedAudit, type FeedAudit } from "../feed/feed-audit.ts";
import { DEFAULT_FEED_MAX_ITEMS } from "../feed/feed-consumer.ts";
import { auditWebhooks, type WebhookAudit } from "../webhooks/webhook-audit.ts";
import {
  COMMENT_AUDIT_INCREMENTAL_SQL,
  FEED_TOUCHED_READERS_SQL,
  LIKE_READ_SIDE_INCREMENTAL_SQL,
  LIKE_WRITE_SIDE_INCREMENTAL_SQL,
  NOTIFICATION_AUDIT_INCREMENTAL_SQL,
  PROJECTION_DIFF_INCREMENTAL,
  RELATION_INVARIANTS_INCREMENTAL,
  WEBHOOK_INVARIANTS_INCREMENTAL,
  WEBHOOK_SEQUENCE_OUTBOX,
} from "./incremental-invariants.ts";
import { DEFAULT_RECOUNT_ABOVE, storeKeyBaselines, type KeyBaselines } from "./key-baseline.ts";

/** The outboxes the periodic audit follows, by retention kind: their sequence tables. */
const OUTBOXES = {
  likes: "like_seq",
  relations: "event_seq",
  comments: "comment_seq",
  posts: "post_seq",
  blocks: "webhook_block_seq",
  accounts: "account_seq",
} as const;
type Outbox = keyof typeof OUTBOXES;

/**
 * The rotating samples' walks: the next $2 keys after $1, in the primary key's own order (the
 * database's collation), so a walk reads its page of the key's index and not the table. In
 * `COLLATE "C"` order no index would serve the ORDER BY: every run would read and
 * sort every item (2 → 36 ms from 100k to 1M likes; test/audit/periodic-audit-plans.test.ts).
 */
export const SAMPLE_WALK_SQL = {
  likes: "SELECT item_id AS key FROM item WHERE item_id > $1 ORDER BY item_id LIMIT $2",
  relations: "SELECT account_id AS key FROM account WHERE account_id > $1 ORDER BY account_id LIMIT $2",
  comments: "SELECT post_id AS key FROM post WHERE post_id > $1 ORDER BY post_id LIMIT $2",
  feed: "SELECT reader AS key FROM feed_reader WHERE reader > $1 ORDER BY reader LIMIT $2",
} as const;

/**
 * A section of the audit, the outboxes it follows, the table its rotating sample walks (none: no
 * sample), and per outbox the consumer watermark its range stops at (none: the outbox's last).
 */
const SECTIONS = {
  likes: { outboxes: ["likes"], sampleFrom: SAMPLE_WALK_SQL.likes, appliedBy: {} },
  relations: { outboxes: ["relations"], sampleFrom: SAMPLE_WALK_SQL.relations, appliedBy: {} },
  comments: { outboxes: ["comments"], sampleFrom: SAMPLE_WALK_SQL.comments, appliedBy: {} },
  notifications: { outboxes: ["likes", "relations", "comments", "posts"], sampleFrom: undefined, appliedBy: {} },
  webhooks: { outboxes: ["blocks", "accounts"], sampleFrom: undefined, appliedBy: {} },
  // An event above the feed's watermark is not applied yet: a difference it explains is lag, and
  // the reader it touches is audited again by a later run, once the event is applied and below `to`.
  feed: {
    outboxes: ["posts", "relations"],
    sampleFrom: SAMPLE_WALK_SQL.feed,
    appliedBy: { posts: "feed_post_watermark", relations: "feed_relation_watermark" },
  },
} as const satisfies Record<
  string,
  { outboxes: readonly Outbox[]; sampleFrom: string | undefined; appliedBy: Partial<Record<Outbox, string>> }
>;
type Section = keyof typeof SECTIONS;

/** A section's cursor name for one of its outboxes: the section's own name when it follows one. */
const cursorName = (section: Section, outbox: Outbox) =>
  SECTIONS[section].outboxes.length > 1 ? `${section}.${outbox}` : section;

/** One outbox's range in a run: per partition, (from, to]. */
interface Range {
  parts: number[];
  from: number[];
  to: number[];
}

/** How one section was audited this run. */
export interface SectionScope {
  /** incremental: the events in the ranges and the targets they touched; full: everything (no cursor yet, or it is below the retention floor). */
  mode: "incremental" | "full";
  /** Per outbox the events audited, by partition (incremental). */
  ranges: Partial<Record<Outbox, Range>>;
  /** Untouched targets audited too (the rotating sample). */
  sampled: number;
  /** The cursor stays where it was: this section found a violation (so it reports it again) or could not be judged (projection lagging). */
  held: boolean;
  /** Touched keys audited by induction from their stored baseline instead of a recount (likes; key-baseline.ts). */
  inducted: number;
  /** Touched targets audited (feed: the readers the ranges' events reached, sample excluded). */
  touched?: number;
}

export interface IncrementalAuditOptions {
  /** Untouched targets per section and run (default 100; 0: none). */
  sample?: number;
  /**
   * A touched key with at least this many counted facts is audited by induction from its stored
   * baseline when that is valid, and a recounted one gets its baseline stored (likes; default
   * 10,000; Infinity: never, and stored baselines are dropped as their keys are audited).
   */
  recountAbove?: number;
  /** LEDGER_FEED_MAX_ITEMS: the cap the feed section checks the inboxes against (default 800). */
  feedMaxItems?: number;
  /** The ledger's hook points (a full-form projection diff pauses at `audit.beforeProjectionDiff`). */
  hooks?: Hooks;
}

/** What fullAudit reports, from the incremental forms; `scope` says what each section covered. */
export interface PeriodicAuditReport {
  clean: boolean;
  likes: { writeSide: WriteSideAudit; readSide: ReadSideAudit };
  relations: { invariants: RelationAudit; projectionCaughtUp: boolean; projectionDiff: ProjectionDiff | null };
  comments: CounterAudit;
  notifications: NotificationAudit;
  webhooks: WebhookAudit;
  /** The home timelines: the readers the post and relation events touched, plus the sampled ones (feed_audit_readers). */
  feed: FeedAudit;
  scope: Record<Section, SectionScope>;
}

const camel = (row: Record<string, unknown>) =>
  Object.fromEntries(Object.entries(row).map(([k, v]) => [k.replace(/_(\w)/g, (_, c: string) => c.toUpperCase()), v]));

function sectionClean(section: Section, r: PeriodicAuditReport): boolean {
  switch (section) {
    case "likes": {
      const w = r.likes.writeSide,
        s = r.likes.readSide;
      return (
        w.lastSeq === w.outboxRows &&
        w.seqGapPartitions === 0 &&
        w.versionMismatchPairs === 0 &&
        w.deltaSumMismatchItems === 0 &&
        w.misplacedEvents === 0 &&
        s.exactViolations === 0 &&
        s.boundViolations === 0 &&
        !s.unprocessedOverLag
      );
    }
    case "relations":
      return (
        Object.values(r.relations.invariants).every((n) => n === 0) &&
        (r.relations.projectionDiff === null || Object.values(r.relations.projectionDiff).every((n) => n === 0))
      );
    case "comments": {
      const c = r.comments;
      return (
        c.seqGapPartitions === 0 &&
        c.deltaSumMismatchKeys === 0 &&
        c.boundViolations === 0 &&
        c.negativeCounts === 0 &&
        (c.lag > 0 || c.countMismatchKeys === 0)
      );
    }
    case "notifications": {
      const n = r.notifications;
      return n.extra === 0 && n.missing === 0 && n.differing === 0 && n.selfNotifications === 0;
    }
    case "webhooks":
      return Object.values(r.webhooks).every((n) => n === 0);
    case "feed":
      return feedAuditClean(r.feed);
  }
}

/**
 * The service's periodic audit (docs/counters.md, "The periodic audit is incremental"): the checks of fullAudit, but each section over what
 * changed since its last clean run (the table audit_cursor) plus a rotating sample of
 * untouched targets, so its cost follows the change, not the history. A section without a
 * cursor, or whose cursor is below its outbox's retention floor (the events it would read are
 * pruned), runs its full form once. Positions, cursors, floors and the incremental statements
 * share one REPEATABLE READ snapshot, so every event at or below a run's `to` is committed and
 * seen. A touched hot item (recountAbove likes or more) is audited by induction from its stored
 * baseline instead of recounted (key-baseline.ts), so it costs its events in the range, not its
 * likes. The full audit (GET /v1/admin/audit, `social-ledger audit`) is unchanged.
 * Not covered incrementally (docs/counters.md): a fact changed without an outbox event (a direct
 * UPDATE) on a target nobody touches is found by the sample when its turn comes, or by the full
 * audit; webhook cursors are checked as in the full audit (one row per endpoint and partition,
 * not history); a like fact of a hot item changed without an event is not seen by a run that audits
 * the item by induction, only by the sample's recount or the full audit; an inbox changed without
 * a post or relation event (a hot author's heating or cooling, a rebuild) on a reader nobody touches
 * is found by the feed's sample or the full audit.
 */
export async function incrementalAudit(
  pool: Pool,
  options: IncrementalAuditOptions = {},
): Promise<PeriodicAuditReport> {
  const sampleSize = options.sample ?? 100;
  const recountAbove = options.recountAbove ?? DEFAULT_RECOUNT_ABOVE;
  const threshold = Number.isFinite(recountAbove) ? recountAbove : null;
  const feedMaxItems = options.feedMaxItems ?? DEFAULT_FEED_MAX_ITEMS;
  const { report, samples, baselines } = await withTransaction(
    pool,
    (client) => auditSnapshot(client, sampleSize, threshold, feedMaxItems),
    { isolation: "REPEATABLE READ", readOnly: true },
  );
  // Sections without a usable cursor: their full forms, after the snapshot (they read a later one, which covers at least `to`).
  if (report.scope.likes.mode === "full")
    report.likes = { writeSide: await writeSide(pool), readSide: await readSide(pool) };
  if (report.scope.comments.mode === "full") report.comments = await auditCounter(pool, COMMENT_COUNTER);
  if (report.scope.notifications.mode === "full") report.notifications = await auditNotifications(pool);
  if (report.scope.webhooks.mode === "full") report.webhooks = await auditWebhooks(pool);
  if (report.scope.relations.mode === "full") {
    report.relations.invariants = await auditRelations(pool);
    // "Caught up" again, in the diff's own snapshot: the one above is older than the truth the diff reads.
    report.relations.projectionDiff = await projectionDiffWhenCaughtUp(pool, options.hooks);
    report.relations.projectionCaughtUp = report.relations.projectionDiff !== null;
  }
  if (report.scope.feed.mode === "full") report.feed = await auditFeed(pool, feedMaxItems);
  // Every audit's feed figures are what ledger_feed_drift_rows_total counts (src/api/metrics.ts).
  await recordFeedAudit(pool, report.feed, "periodic");
  let clean = true;
  for (const section of Object.keys(SECTIONS) as Section[]) {
    const ok = sectionClean(section, report);
    clean &&= ok;
    report.scope[section].held = !ok || (section === "relations" && report.relations.projectionDiff === null);
  }
  report.clean = clean;
  await storeCursors(pool, report, samples, sampleSize, baselines);
  return report;
}

async function auditSnapshot(client: PoolClient, sampleSize: number, threshold: number | null, feedMaxItems: number) {
  const positions = {} as Record<Outbox, { part: number; last: number }[]>;
  for (const outbox of Object.keys(OUTBOXES) as Outbox[]) {
    positions[outbox] = (
      await client.query<{ part: number; last: number }>(`SELECT part, last FROM ${OUTBOXES[outbox]} ORDER BY part`)
    ).rows;
  }
  const cursors = new Map(
    (
      await client.query<{ section: string; part: number; audited_upto: number }>(
        "SELECT section, part, audited_upto FROM audit_cursor",
      )
    ).rows.map((c) => [`${c.section}/${c.part}`, c.audited_upto]),
  );
  const floors = new Map(
    (
      await client.query<{ kind: string; part: number; pruned_upto: number }>(
        "SELECT kind, part, pruned_upto FROM retention_floor",
      )
    ).rows.map((f) => [`${f.kind}/${f.part}`, f.pruned_upto]),
  );
  const applied = new Map<string, number>();
  for (const table of new Set(Object.values(SECTIONS).flatMap((s) => Object.values(s.appliedBy) as string[]))) {
    for (const w of (
      await client.query<{ part: number; applied_upto: number }>(`SELECT part, applied_upto FROM ${table}`)
    ).rows)
      applied.set(`${table}/${w.part}`, Number(w.applied_upto));
  }
  const sampleAfter = new Map(
    (
      await client.query<{ section: string; after_key: string }>("SELECT section, after_key FROM audit_sample")
    ).rows.map((s) => [s.section, s.after_key]),
  );

  const scope = {} as Record<Section, SectionScope>;
  const samples = {} as Record<Section, string[]>;
  for (const section of Object.keys(SECTIONS) as Section[]) {
    const { outboxes, sampleFrom, appliedBy } = SECTIONS[section];
    const ranges: Partial<Record<Outbox, Range>> = {};
    let full = false;
    for (const outbox of outboxes) {
      const key = (part: number) => `${cursorName(section, outbox)}/${part}`;
      const watermark = (appliedBy as Partial<Record<Outbox, string>>)[outbox];
      const range: Range = { parts: [], from: [], to: [] };
      for (const { part, last: outboxLast } of positions[outbox]) {
        const last = watermark ? Math.min(outboxLast, applied.get(`${watermark}/${part}`) ?? 0) : outboxLast;
        const from = cursors.get(key(part));
        // No cursor yet, or events it would need were pruned: only the full form can judge.
        if (from === undefined || from < (floors.get(`${outbox}/${part}`) ?? 0)) full = true;
        range.parts.push(part);
        range.from.push(Math.min(from ?? 0, last));
        range.to.push(last);
      }
      ranges[outbox] = range;
    }
    samples[section] =
      full || !sampleFrom || sampleSize === 0
        ? []
        : (await client.query<{ key: string }>(sampleFrom, [sampleAfter.get(section) ?? "", sampleSize])).rows.map(
            (r) => r.key,
          );
    scope[section] = {
      mode: full ? "full" : "incremental",
      ranges,
      sampled: samples[section].length,
      held: false,
      inducted: 0,
    };
  }

  const args = (section: "likes" | "relations" | "comments", sample: string[] = []) => {
    const r = scope[section].ranges[section]!;
    return [r.parts, r.from, r.to, sample];
  };
  // Each statement binds the parameters it names (they are always a prefix: $1..$3, then $4 for the sample).
  const bind = (sql: string, values: unknown[]) => values.filter((_, i) => sql.includes(`$${i + 1}`));
  const one = async <T>(sql: string, values: unknown[]) => camel((await client.query(sql, values)).rows[0]) as T;
  const report = { clean: false, scope } as PeriodicAuditReport;
  let baselines: KeyBaselines | null = null;
  const { rows: caught } = await client.query<{ caught_up: boolean }>(PROJECTION_CAUGHT_UP_SQL);
  const projectionCaughtUp = caught[0]!.caught_up;
  report.relations = { invariants: {} as RelationAudit, projectionCaughtUp, projectionDiff: null };
  if (scope.likes.mode === "incremental") {
    // $5: the threshold of the hot keys audited by induction (key-baseline.ts).
    const writeSideRow = await one<WriteSideAudit>(LIKE_WRITE_SIDE_INCREMENTAL_SQL, [
      ...args("likes", samples.likes),
      threshold,
    ]);
    const {
      countMismatchKeys,
      baselines: computed,
      droppedBaselines,
      inductedKeys,
      ...readRest
    } = await one<ReadSideAudit & KeyBaselines & { countMismatchKeys: number; inductedKeys: number }>(
      LIKE_READ_SIDE_INCREMENTAL_SQL,
      [...args("likes", samples.likes), threshold],
    );
    report.likes = { writeSide: writeSideRow, readSide: { ...readRest, countMismatchItems: countMismatchKeys } };
    scope.likes.inducted = inductedKeys;
    baselines = { baselines: computed, droppedBaselines };
  }
  if (scope.comments.mode === "incremental")
    report.comments = await one<CounterAudit>(COMMENT_AUDIT_INCREMENTAL_SQL, args("comments", samples.comments));
  if (scope.relations.mode === "incremental") {
    for (const [name, sql] of Object.entries(RELATION_INVARIANTS_INCREMENTAL)) {
      (report.relations.invariants as Record<string, number>)[name] = (
        await client.query<{ n: number }>(sql, bind(sql, args("relations")))
      ).rows[0]!.n;
    }
    if (projectionCaughtUp) {
      const diff = {} as Record<string, number>;
      for (const [name, sql] of Object.entries(PROJECTION_DIFF_INCREMENTAL))
        diff[name] = (
          await client.query<{ n: number }>(sql, bind(sql, args("relations", samples.relations)))
        ).rows[0]!.n;
      report.relations.projectionDiff = diff as ProjectionDiff;
    }
  }
  if (scope.notifications.mode === "incremental") {
    const n = scope.notifications.ranges;
    report.notifications = await one<NotificationAudit>(
      NOTIFICATION_AUDIT_INCREMENTAL_SQL,
      (["likes", "relations", "comments", "posts"] as const).flatMap((o) => [n[o]!.parts, n[o]!.from, n[o]!.to]),
    );
  }
  if (scope.webhooks.mode === "incremental") {
    const webhooks = {} as Record<string, number>;
    for (const [name, sql] of Object.entries(WEBHOOK_INVARIANTS_INCREMENTAL)) {
      const outbox = (WEBHOOK_SEQUENCE_OUTBOX as Partial<Record<string, Outbox>>)[name];
      const r = outbox && scope.webhooks.ranges[outbox]!;
      webhooks[name] = (await client.query<{ n: number }>(sql, r ? [r.parts, r.from, r.to] : [])).rows[0]!.n;
    }
    report.webhooks = webhooks as WebhookAudit;
  }
  if (scope.feed.mode === "incremental") {
    const p = scope.feed.ranges.posts!,
      r = scope.feed.ranges.relations!;
    const touched = (
      await client.query<{ reader: string }>(FEED_TOUCHED_READERS_SQL, [p.parts, p.from, p.to, r.parts, r.from, r.to])
    ).rows.map((row) => row.reader);
    scope.feed.touched = touched.length;
    report.feed = await auditFeedReaders(client, [...touched, ...samples.feed], feedMaxItems);
  }
  return { report, samples, baselines };
}

/**
 * Clean sections move their cursors to the run's `to`, and every sample walks on (wrapping after
 * the last key). The likes' key baselines move with their cursors, in the same transaction, and
 * only when the section was clean: a run that found drift stores no truth it computed.
 */
async function storeCursors(
  pool: Pool,
  report: PeriodicAuditReport,
  samples: Record<Section, string[]>,
  sampleSize: number,
  baselines: KeyBaselines | null,
): Promise<void> {
  const sections: string[] = [],
    parts: number[] = [],
    upto: number[] = [];
  for (const section of Object.keys(SECTIONS) as Section[]) {
    const scope = report.scope[section];
    if (scope.held) continue;
    for (const [outbox, range] of Object.entries(scope.ranges) as [Outbox, Range][]) {
      range.parts.forEach((part, i) => {
        sections.push(cursorName(section, outbox));
        parts.push(part);
        upto.push(range.to[i]!);
      });
    }
  }
  const sampled =
    sampleSize === 0
      ? []
      : (Object.keys(SECTIONS) as Section[]).filter(
          (s) => SECTIONS[s].sampleFrom && report.scope[s].mode === "incremental",
        );
  await withTransaction(pool, async (client) => {
    await client.query(
      `INSERT INTO audit_cursor AS c (section, part, audited_upto)
       SELECT * FROM unnest($1::text[], $2::int[], $3::bigint[])
       ON CONFLICT (section, part) DO UPDATE SET audited_upto = greatest(c.audited_upto, EXCLUDED.audited_upto)`,
      [sections, parts, upto],
    );
    await client.query(
      `INSERT INTO audit_sample (section, after_key) SELECT * FROM unnest($1::text[], $2::text[])
       ON CONFLICT (section) DO UPDATE SET after_key = EXCLUDED.after_key`,
      [sampled, sampled.map((s) => (samples[s].length < sampleSize ? "" : samples[s].at(-1)!))],
    );
    if (baselines && report.scope.likes.mode === "incremental" && !report.scope.likes.held) {
      await storeKeyBaselines(client, "likes", report.scope.likes.ranges.likes!, baselines);
    }
  });
}
