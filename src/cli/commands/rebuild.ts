import cliProgress from "cli-progress";
import { loadConfig } from "../../config.ts";
import { Hooks } from "../../hooks.ts";
import { openLedger } from "../../ledger.ts";
import type { RebuildReport } from "../../likes/like-rebuild.ts";
import { openDatabase } from "../../runtime/database.ts";
import { recordCounterRebuildDrift, recordRebuildDrift } from "../../cache/reconciler.ts";
import type { CounterRebuildReport } from "../../counters/counter-rebuild.ts";
import type { RebuildKind } from "../args.ts";

/** Drifted items listed in the readable report; --json lists them all. */
const MAX_LISTED = 50;

function signed(n: number): string {
  return n > 0 ? `+${n}` : String(n);
}

export function formatRebuildReport(report: RebuildReport, checked = "item(s)"): string {
  const lines = [
    `rebuild run ${report.runId}: ${report.itemsChecked} ${checked} checked, ${report.drifted.length} drifted, total |drift| ${report.totalAbsDrift}`,
    `  snapshot seqs per partition: [${report.snapshotSeqs.join(", ")}]`,
  ];
  for (const d of report.drifted.slice(0, MAX_LISTED)) {
    const skipped =
      d.skippedPartitions.length > 0 ? `  (partitions ${d.skippedPartitions.join(",")} left to a newer rebuild)` : "";
    lines.push(`  ${d.itemId}: ${d.oldN} -> ${d.newN} (drift ${signed(d.drift)})${skipped}`);
  }
  if (report.drifted.length > MAX_LISTED)
    lines.push(`  ... and ${report.drifted.length - MAX_LISTED} more (--json lists all)`);
  return `${lines.join("\n")}\n`;
}

/** The comment counts' report in the readable form of the like report (keys are post ids). */
export function formatCommentRebuildReport(report: CounterRebuildReport): string {
  return formatRebuildReport(
    {
      runId: report.runId,
      snapshotSeqs: report.snapshotSeqs,
      itemsChecked: report.keysChecked,
      totalAbsDrift: report.totalAbsDrift,
      drifted: report.drifted.map((d) => ({
        itemId: d.key,
        oldN: d.oldN,
        newN: d.newN,
        drift: d.drift,
        skippedPartitions: d.skippedPartitions,
      })),
    },
    "post(s)",
  );
}

/** `social-ledger rebuild --kind comments`: the comment counts from a snapshot of the counted comments. */
async function rebuildComments(opts: { items?: string[]; json?: boolean }): Promise<number> {
  const config = loadConfig();
  const database = await openDatabase(config, { poolSize: 4, applicationName: "social-ledger-rebuild" });
  try {
    const ledger = await openLedger(database.pool);
    const report = await ledger.commentRebuild.rebuild(opts.items ? { keys: opts.items } : {});
    await recordCounterRebuildDrift(database.pool, "comments", report.drifted);
    process.stdout.write(opts.json ? `${JSON.stringify(report, null, 2)}\n` : formatCommentRebuildReport(report));
    return 0;
  } finally {
    await database.close();
  }
}

/** `social-ledger rebuild --kind notifications`: the notification view from the facts, per recipient (docs/notifications.md). */
async function rebuildNotifications(opts: { items?: string[]; json?: boolean }): Promise<number> {
  const config = loadConfig();
  const database = await openDatabase(config, { poolSize: 4, applicationName: "social-ledger-rebuild" });
  try {
    const ledger = await openLedger(database.pool);
    const report = await ledger.notificationRebuild.rebuild(opts.items ? { recipients: opts.items } : {});
    const lines = [
      `notification rebuild run ${report.runId}: ${report.recipientsChecked} recipient(s) checked, ${report.rowsDrifted} row(s) drifted, ${report.rowsPending} pending`,
    ];
    for (const c of report.changed.slice(0, MAX_LISTED))
      lines.push(`  ${c.recipient}: ${c.rowsDrifted} drifted, ${c.rowsPending} pending`);
    if (report.changed.length > MAX_LISTED)
      lines.push(`  ... and ${report.changed.length - MAX_LISTED} more (--json lists all)`);
    process.stdout.write(opts.json ? `${JSON.stringify(report, null, 2)}\n` : `${lines.join("\n")}\n`);
    return 0;
  } finally {
    await database.close();
  }
}

/** `social-ledger rebuild --kind feed`: the home timelines from the facts, per reader (docs/feed.md). */
async function rebuildFeed(opts: { items?: string[]; json?: boolean }): Promise<number> {
  const config = loadConfig();
  const database = await openDatabase(config, { poolSize: 4, applicationName: "social-ledger-rebuild" });
  try {
    const ledger = await openLedger(database.pool, { feedMaxItems: config.feedMaxItems, pacing: config.pacing });
    const report = await ledger.feedRebuild.rebuild(opts.items ? { readers: opts.items } : {});
    const lines = [
      `feed rebuild run ${report.runId}: ${report.readersChecked} reader(s) checked, ${report.readersDrifted} drifted, ${report.rowsAdded} row(s) added, ${report.rowsRemoved} removed`,
    ];
    for (const c of report.changed.slice(0, MAX_LISTED)) lines.push(`  ${c.reader}: +${c.added} -${c.removed}`);
    if (report.changed.length > MAX_LISTED)
      lines.push(`  ... and ${report.changed.length - MAX_LISTED} more (--json lists all)`);
    process.stdout.write(opts.json ? `${JSON.stringify(report, null, 2)}\n` : `${lines.join("\n")}\n`);
    return 0;
  } finally {
    await database.close();
  }
}

/**
 * `social-ledger rebuild`: LikeRebuild.rebuild with a progress bar driven by its
 * "rebuild.beforeCommit" hook point (one call per installed item), then the drift report.
 */
export async function rebuild(opts: { kind?: RebuildKind; items?: string[]; json?: boolean }): Promise<number> {
  if (opts.kind === "comments") return rebuildComments(opts);
  if (opts.kind === "notifications") return rebuildNotifications(opts);
  if (opts.kind === "feed") return rebuildFeed(opts);
  const config = loadConfig();
  const hooks = new Hooks();
  const database = await openDatabase(config, { poolSize: 4, applicationName: "social-ledger-rebuild" });
  let bar: cliProgress.SingleBar | undefined;
  try {
    const ledger = await openLedger(database.pool, { hooks });
    if (process.stdout.isTTY && !opts.json) {
      const total = opts.items
        ? opts.items.length
        : (await database.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM item")).rows[0]!.n;
      bar = new cliProgress.SingleBar(
        {
          format: "rebuild [{bar}] {value}/{total} items | {eta_formatted} left",
          stream: process.stdout,
          hideCursor: true,
          clearOnComplete: true,
        },
        cliProgress.Presets.shades_classic,
      );
      bar.start(Math.max(total, 1), 0);
      // An install transaction may be retried (40001/40P01): count each item once.
      const installed = new Set<string>();
      hooks.on("rebuild.beforeCommit", (context) => {
        installed.add(String(context.itemId));
        if (installed.size > bar!.getTotal()) bar!.setTotal(installed.size); // items created since the count
        bar!.update(installed.size);
      });
    }
    const report = await ledger.likeRebuild.rebuild(opts.items ? { items: opts.items } : {});
    await recordRebuildDrift(database.pool, report.drifted);
    bar?.stop();
    bar = undefined;
    process.stdout.write(opts.json ? `${JSON.stringify(report, null, 2)}\n` : formatRebuildReport(report));
    return 0;
  } finally {
    bar?.stop();
    await database.close();
  }
}
