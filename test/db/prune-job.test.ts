/**
 * The service prunes dedup keys by itself (its periodic retention job): with
 * LEDGER_PRUNE_EVERY_MS=1000 a running service leaves no processed_event row at or below the
 * watermark once its consumers have applied the events; with 0 (the negative control) they stay.
 * With the retention margin at 0 the same job empties the outbox too (docs/retention.md).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { freePort } from "../../src/db/embedded-cluster.ts";
import { loadConfig } from "../../src/config.ts";
import { fullAudit } from "../../src/api/routes/admin.ts";
import { openLedger } from "../../src/ledger.ts";
import { startService } from "../../src/runtime/service.ts";
import { pollUntil } from "../../support/poll.ts";
import { createTestDatabase } from "../support/test-db.ts";

async function run(
  pruneEveryMs: string,
  margin: Record<string, string> = {},
): Promise<{ keys: number; applied: number; outbox: number; clean: boolean }> {
  const db = await createTestDatabase({ partitions: 2, poolSize: 2 });
  const config = loadConfig({
    DATABASE_URL: db.url,
    PORT: String(await freePort()),
    LEDGER_JWT_SECRET: randomBytes(32).toString("hex"),
    LEDGER_PRUNE_EVERY_MS: pruneEveryMs,
    ...margin,
  });
  const service = await startService(config, { logger: false });
  try {
    const ledger = await openLedger(db.pool);
    await ledger.likes.createItem("item-1");
    for (let u = 0; u < 20; u++) assert.equal((await ledger.likes.like(`user-${u}`, "item-1")).outcome, "CHANGED");
    const read = async () =>
      (
        await db.pool.query<{ keys: number; applied: number; lag: number; outbox: number }>(
          `SELECT (SELECT count(*) FROM processed_event)::int AS keys, (SELECT count(*) FROM like_outbox)::int AS outbox,
              (SELECT sum(applied_upto) FROM counter_watermark)::int AS applied,
              (SELECT sum(s.last - w.applied_upto) FROM like_seq s JOIN counter_watermark w USING (part))::int AS lag`,
        )
      ).rows[0]!;
    // Bounded polls of the database: the service's consumers and its pruner run on their own.
    const state = await pollUntil(
      "the service applied (and, with the job, pruned)",
      read,
      (s) =>
        s.lag === 0 &&
        (pruneEveryMs === "0" || (s.keys === 0 && (margin.LEDGER_RETENTION_KEEP_EVENTS !== "0" || s.outbox === 0))),
    );
    const clean = (await fullAudit(ledger)).clean;
    return { keys: state.keys, applied: state.applied, outbox: state.outbox, clean };
  } finally {
    await service.stop();
    await db.close();
  }
}

test("the service prunes dedup keys below the watermarks every LEDGER_PRUNE_EVERY_MS; with 0 (negative control) the keys stay", async (t) => {
  const pruned = await run("1000");
  const kept = await run("0");
  t.diagnostic(`note after 20 applied likes: keys left with the job=${pruned.keys}, without=${kept.keys}`);
  assert.deepEqual(
    pruned,
    { keys: 0, applied: 20, outbox: 20, clean: true },
    "the default margin keeps a day of events",
  );
  assert.deepEqual(kept, { keys: 20, applied: 20, outbox: 20, clean: true });
});

test("with the margin at 0 the service's job also prunes the outbox to the watermarks; the audits stay clean", async (t) => {
  const pruned = await run("1000", { LEDGER_RETENTION_KEEP_EVENTS: "0", LEDGER_RETENTION_KEEP_MS: "0" });
  t.diagnostic(`note after 20 applied likes, margin 0: ${JSON.stringify(pruned)}`);
  assert.deepEqual(pruned, { keys: 0, applied: 20, outbox: 0, clean: true });
});
