import { loadConfig } from "../../config.ts";
import type { ErasureStatus } from "../../erasure/erasure-service.ts";
import { openLedger } from "../../ledger.ts";
import { openDatabase } from "../../runtime/database.ts";

export function formatErasure(s: ErasureStatus): string {
  return `${s.accountId}: phase ${s.phase}, ${s.done} fact(s) done, ${s.remaining} remaining, ${s.batches} batch(es)`;
}

/**
 * `social-ledger erase <id>`: starts the erasure (or finds it running, after a crash too) and runs
 * its batches in the foreground to the end, a progress line on stderr per phase and at most
 * every second, the final status on stdout. An erasure that was done already is reported as is.
 */
export async function erase(accountId: string, opts: { batchSize?: number; json?: boolean }): Promise<number> {
  const config = loadConfig();
  const database = await openDatabase(config, { poolSize: 2, applicationName: "social-ledger-erase" });
  try {
    const ledger = await openLedger(database.pool, {
      erasureBatchSize: opts.batchSize ?? config.erasureBatchSize,
      pacing: config.pacing,
    });
    const started = await ledger.erasure.start(accountId, "cli");
    if (started.outcome !== "STARTED")
      process.stderr.write(
        `erase: ${started.outcome === "ERASED" ? "already erased" : "resuming the running erasure"}\n`,
      );
    let lastPhase = "";
    let lastLine = 0;
    const status = await ledger.erasure.run(accountId, {
      onBatch: (batch, s) => {
        if (batch.nextPhase === lastPhase && Date.now() - lastLine < 1_000) return;
        lastPhase = batch.nextPhase;
        lastLine = Date.now();
        process.stderr.write(`erase: ${formatErasure(s)}\n`);
      },
    });
    process.stdout.write(opts.json ? `${JSON.stringify(status)}\n` : `${formatErasure(status)}\n`);
    return 0;
  } finally {
    await database.close();
  }
}
