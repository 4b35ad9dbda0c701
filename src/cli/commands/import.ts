import { createReadStream, existsSync, statSync } from "node:fs";
import cliProgress from "cli-progress";
import { openCountLayer } from "../../cache/count-layer.ts";
import { CountStore } from "../../cache/count-store.ts";
import { loadConfig } from "../../config.ts";
import { formatPhase, importFacts, type ImportReport } from "../../portability/import.ts";
import { BadLinesError } from "../../portability/import-stage.ts";
import { openDatabase } from "../../runtime/database.ts";
import { UsageError } from "../args.ts";

/** How long `import` waits for the count layer's Redis before it gives up (exit 1). */
const REDIS_WAIT_MS = 5000;

export function formatImportReport(r: ImportReport): string {
  const head =
    r.existing === "done"
      ? `import run ${r.runId}: this file (${r.lines} lines) was imported before; nothing changed`
      : `import run ${r.runId}: ${r.lines} lines${r.existing === "resumed" ? " (resumed)" : ""}${r.path === "empty-ledger" ? " (empty-ledger path)" : ""}, done`;
  const written = Object.entries(r.applied)
    .map(([k, v]) => `${k}=${v}`)
    .join(" ");
  const phases = r.phases.map((p) => `  ${formatPhase(p)}\n`).join("");
  return `${head}\n  written: ${written || "nothing"}\n${r.existing === "done" ? "" : formatWebhooks(r)}${phases ? `  time per step:\n${phases}` : ""}`;
}

/** What webhook receivers were not told of (docs/webhooks.md, "Imports"). */
function formatWebhooks(r: ImportReport): string {
  const { follows, likes } = r.webhooks.withoutEvents;
  if (follows + likes === 0)
    return "  webhooks: every follow and like written sent its event (accounts and blocks always do)\n";
  return (
    `  webhooks: follows=${follows} likes=${likes} written without events: no webhook tells a receiver of them;\n` +
    `    resync receivers from \`social-ledger export\` (docs/webhooks.md, "Imports"); accounts, blocks and the\n` +
    `    other follows and likes sent their events\n`
  );
}

/**
 * `social-ledger import FILE` (`-`: standard input): stages and checks the whole file, then
 * applies it (docs/import.md). A bad line: every bad line (first 20) on stderr, exit 2, nothing
 * imported. With REDIS_URL, the count layer's counters of the touched targets are dropped at the end.
 */
export async function importCommand(
  file: string,
  opts: { batchSize?: number; json?: boolean; emptyLedger?: boolean },
): Promise<number> {
  if (file !== "-" && !existsSync(file)) throw new UsageError(`no such file: ${file}`);
  const config = loadConfig();
  const database = await openDatabase(config, { poolSize: 4, applicationName: "social-ledger-import" });
  const counts = config.redisUrl
    ? await openCountLayer(database.pool, {
        redisUrl: config.redisUrl,
        allowEviction: config.redisAllowEviction,
        buckets: config.countBuckets,
        requireRedis: true,
        startWaitMs: REDIS_WAIT_MS,
      })
    : undefined;
  const store = counts?.redis ? new CountStore(counts.redis, config.countBuckets) : undefined;
  const tty = process.stderr.isTTY && !opts.json;
  const bar = tty
    ? new cliProgress.SingleBar(
        {
          format: "import {phase} [{bar}] {value}/{total} lines",
          stream: process.stderr,
          hideCursor: true,
          clearOnComplete: true,
        },
        cliProgress.Presets.shades_classic,
      )
    : undefined;
  try {
    const input = file === "-" ? process.stdin : createReadStream(file);
    bar?.start(file === "-" ? 0 : Math.max(1, Math.round(statSync(file).size / 60)), 0, { phase: "check" });
    const report = await importFacts(database.pool, input, {
      ...(opts.batchSize ? { batchSize: opts.batchSize } : {}),
      feedMaxItems: config.feedMaxItems,
      ...(opts.emptyLedger ? { emptyLedger: "require" as const } : {}),
      onLines: (lines) => {
        if (bar && lines > bar.getTotal()) bar.setTotal(lines);
        bar?.update(lines, { phase: "check" });
      },
      onProgress: (phase, done, phaseLines) => {
        bar?.setTotal(phaseLines);
        bar?.update(done, { phase });
      },
      ...(store
        ? {
            dropCounters: async (targets) => {
              for (const t of targets) await store.drop(t.kind, t.target);
            },
          }
        : {}),
    });
    bar?.stop();
    process.stdout.write(opts.json ? `${JSON.stringify(report, null, 2)}\n` : formatImportReport(report));
    return 0;
  } catch (err) {
    bar?.stop();
    if (err instanceof BadLinesError) {
      process.stderr.write(`social-ledger import: ${err.message}\n`);
      return 2;
    }
    throw err;
  } finally {
    await counts?.close();
    await database.close();
  }
}
