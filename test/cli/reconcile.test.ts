/**
 * `social-ledger reconcile` as a child process: against a count layer whose Redis
 * counter was bumped by a blind replay, it reports the drift with its sign (truth − shown = −3),
 * repairs it, and exits 0; a second run visits nothing; without REDIS_URL it exits 2 and says why.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { openCountLayer } from "../../src/cache/count-layer.ts";
import { LIKE_COUNTS } from "../../src/cache/counter-kinds.ts";
import { CountStore } from "../../src/cache/count-store.ts";
import { openLedger } from "../../src/ledger.ts";
import { TestRedis } from "../../support/redis-server.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { childEnv, runCli } from "./cli-child.ts";

test(
  "social-ledger reconcile reports a replayed increment as drift -3, repairs it, exits 0; a second run visits nothing; no REDIS_URL is exit 2",
  { timeout: 120_000 },
  async (t) => {
    const redis = await TestRedis.start();
    const db = await createTestDatabase({ partitions: 2, poolSize: 4 });
    const dataDir = await mkdtemp(path.join(os.tmpdir(), "ledger-reconcile-"));
    t.after(async () => {
      await db.close();
      await redis.kill();
      await rm(dataDir, { recursive: true, force: true });
    });
    const ledger = await openLedger(db.pool);
    const counts = await openCountLayer(db.pool, { redisUrl: redis.url, localTtlMs: 0 });
    try {
      await ledger.likes.createItem("item-1");
      await counts.reader.read(LIKE_COUNTS, "item-1", { allowedLag: 0 }); // backfill the counter, as a first read does
      await counts.feed(); // the feeder's cursor starts at the present
      for (let u = 0; u < 5; u++) await ledger.likes.like(`user-${u}`, "item-1");
      await counts.feed();
      // Three blind replays of an increment, as a client with an offline queue would send after a reconnect.
      const store = new CountStore(counts.redis!, 16);
      for (let i = 0; i < 3; i++)
        await counts.redis!.sendCommand(["HINCRBY", store.counterKey("likes", "item-1"), "b0", "1"]);
      assert.equal(
        (await counts.reader.read(LIKE_COUNTS, "item-1", { allowedLag: 0 })).count,
        8,
        "the cache shows the overcount",
      );
    } finally {
      await counts.close();
    }

    const env = childEnv({ DATABASE_URL: db.url, REDIS_URL: redis.url, LEDGER_DATA_DIR: dataDir });
    const first = await runCli(["reconcile"], env);
    t.diagnostic(`note reconcile: ${first.stdout.trim().split("\n").join(" | ")}`);
    assert.equal(first.code, 0, first.stderr);
    assert.match(first.stdout, /item-1: showed 8, facts 5 \(drift -3\)/);
    const { rows } = await db.pool.query<{ drift: number }>(
      "SELECT drift::int AS drift FROM count_drift_history WHERE kind = 'likes' AND target = 'item-1'",
    );
    assert.deepEqual(rows, [{ drift: -3 }]);

    const after = await openCountLayer(db.pool, { redisUrl: redis.url, localTtlMs: 0 });
    try {
      assert.equal(
        (await after.reader.read(LIKE_COUNTS, "item-1", { allowedLag: 0 })).count,
        5,
        "repaired to the facts",
      );
    } finally {
      await after.close();
    }
    const second = await runCli(["reconcile", "--json"], env);
    assert.equal(second.code, 0, second.stderr);
    const reports = JSON.parse(second.stdout) as { kind: string; visited: number; drifted: unknown[] }[];
    assert.deepEqual(
      reports.map((r) => [r.kind, r.visited, r.drifted.length]),
      reports.map((r) => [r.kind, 0, 0]),
      "nothing changed since",
    );

    const without = await runCli(["reconcile"], childEnv({ DATABASE_URL: db.url, LEDGER_DATA_DIR: dataDir }));
    assert.equal(without.code, 2);
    assert.match(without.stderr, /REDIS_URL is not set/);
  },
);

test(
  "social-ledger reconcile with REDIS_URL to a closed port gives up: exit 1 and a message naming the address, nothing reconciled",
  { timeout: 120_000 },
  async (t) => {
    const redis = await TestRedis.notStarted();
    const db = await createTestDatabase({ partitions: 1, poolSize: 2 });
    const dataDir = await mkdtemp(path.join(os.tmpdir(), "ledger-reconcile-down-"));
    t.after(async () => {
      await db.close();
      await rm(dataDir, { recursive: true, force: true });
    });
    const result = await runCli(
      ["reconcile"],
      childEnv({ DATABASE_URL: db.url, REDIS_URL: redis.url, LEDGER_DATA_DIR: dataDir }),
    );
    t.diagnostic(`note reconcile: ${result.stderr.trim()}`);
    assert.equal(result.code, 1, result.stdout + result.stderr);
    assert.match(
      result.stderr,
      new RegExp(
        `^social-ledger reconcile: Redis at 127\\.0\\.0\\.1:${redis.port} did not answer within 5000 ms \\(last error: connect ECONNREFUSED[^)]*\\); nothing was reconciled$`,
        "m",
      ),
    );
    assert.equal(result.stdout, "");
  },
);

test(
  "social-ledger reconcile with a malformed counter: the other counters are reconciled, the failed one is listed and dropped, exit 1",
  { timeout: 120_000 },
  async (t) => {
    const redis = await TestRedis.start();
    const db = await createTestDatabase({ partitions: 1, poolSize: 4 });
    const dataDir = await mkdtemp(path.join(os.tmpdir(), "ledger-reconcile-bad-"));
    t.after(async () => {
      await db.close();
      await redis.kill();
      await rm(dataDir, { recursive: true, force: true });
    });
    const ledger = await openLedger(db.pool);
    const counts = await openCountLayer(db.pool, { redisUrl: redis.url, localTtlMs: 0 });
    try {
      for (const item of ["item-1", "item-2"]) {
        await ledger.likes.createItem(item);
        await counts.reader.read(LIKE_COUNTS, item, { allowedLag: 0 });
      }
      await counts.feed();
      for (const item of ["item-1", "item-2"]) await ledger.likes.like("user-0", item);
      await counts.feed();
      const store = new CountStore(counts.redis!, 16);
      await counts.redis!.sendCommand(["HSET", store.logKey("likes", "item-1"), "not-an-event", "1"]);
      await counts.redis!.sendCommand(["HINCRBY", store.counterKey("likes", "item-2"), "b0", "2"]);
    } finally {
      await counts.close();
    }
    const result = await runCli(
      ["reconcile"],
      childEnv({ DATABASE_URL: db.url, REDIS_URL: redis.url, LEDGER_DATA_DIR: dataDir }),
    );
    t.diagnostic(`note reconcile: ${result.stdout.trim().split("\n").join(" | ")} || ${result.stderr.trim()}`);
    assert.equal(result.code, 1, result.stdout + result.stderr);
    assert.match(result.stdout, /^likes: 2 changed counter\(s\) visited, 1 reconciled, 1 drifted, 1 failed$/m);
    assert.match(result.stdout, /^ {2}item-2: showed 3, facts 1 \(drift -2\)$/m);
    assert.match(
      result.stdout,
      /^ {2}item-1: failed \(.*malformed.*not-an-event.*\); counter dropped, backfilled from the facts at its next read$/m,
    );
    assert.match(result.stderr, /1 counter\(s\) failed to reconcile/);
  },
);
