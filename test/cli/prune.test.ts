/**
 * `social-ledger prune` as a child process (docs/retention.md): a bad margin is exit 2 and
 * deletes nothing; the default margin (a day, 10,000 events) prunes the dedup keys and keeps every
 * young event; LEDGER_RETENTION_KEEP_EVENTS and --keep-seconds 0 keep only the newest events per
 * partition; --keep-last 0 prunes every outbox to its watermark, and `social-ledger audit` stays clean.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import type { RetentionReport } from "../../src/retention/retention.ts";
import { openLedger } from "../../src/ledger.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { childEnv, runCli } from "./cli-child.ts";

test(
  "social-ledger prune: a bad margin is exit 2; the default margin keeps young events; the env margin keeps the newest; --keep-last 0 prunes to the watermarks and the audit is clean",
  { timeout: 120_000 },
  async (t) => {
    const db = await createTestDatabase({ partitions: 2, poolSize: 4 });
    const dataDir = await mkdtemp(path.join(os.tmpdir(), "ledger-prune-"));
    t.after(async () => {
      await db.close();
      await rm(dataDir, { recursive: true, force: true });
    });
    const ledger = await openLedger(db.pool);
    await ledger.likes.createItem("item-1");
    for (let u = 0; u < 20; u++) await ledger.likes.like(`user-${u}`, "item-1");
    await ledger.likeConsumer.drain();
    // The prune waits for every view of the outbox, the notifications too (docs/notifications.md).
    await ledger.notifications.drain();
    const rows = async () =>
      (
        await db.pool.query<{ outbox: number; keys: number }>(
          "SELECT (SELECT count(*) FROM like_outbox)::int AS outbox, (SELECT count(*) FROM processed_event)::int AS keys",
        )
      ).rows[0]!;
    const env = childEnv({ DATABASE_URL: db.url, LEDGER_DATA_DIR: dataDir });

    const bad = await runCli(["prune", "--keep-last", "-1"], env);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--keep-last/);
    assert.deepEqual(await rows(), { outbox: 20, keys: 20 }, "a bad argument deletes nothing");

    const young = await runCli(["prune"], env);
    t.diagnostic(`note default margin: ${young.stdout.trim().split("\n").join(" | ")}`);
    assert.equal(young.code, 0, young.stderr);
    assert.match(young.stdout, /likes: pruned 20 dedup key\(s\) at or below the watermarks and 0 outbox event\(s\)/);
    assert.deepEqual(await rows(), { outbox: 20, keys: 0 });

    const newest = await runCli(["prune", "--keep-seconds", "0"], { ...env, LEDGER_RETENTION_KEEP_EVENTS: "3" });
    assert.equal(newest.code, 0, newest.stderr);
    const { rows: perPart } = await db.pool.query<{ part: number; n: number }>(
      "SELECT part, count(*)::int AS n FROM like_outbox GROUP BY part ORDER BY part",
    );
    assert.deepEqual(
      perPart.map((r) => r.n),
      [3, 3],
      "the newest three of each partition",
    );

    const all = await runCli(["prune", "--keep-last", "0", "--keep-seconds", "0", "--json"], env);
    assert.equal(all.code, 0, all.stderr);
    const report = JSON.parse(all.stdout) as RetentionReport;
    assert.equal(report.kinds.find((k) => k.kind === "likes")!.outboxRows, 6);
    assert.deepEqual(await rows(), { outbox: 0, keys: 0 });
    const audit = await runCli(["audit"], env);
    assert.equal(audit.code, 0, audit.stdout + audit.stderr);
  },
);
