/**
 * `social-ledger import` and `export` as child processes: a bad file is exit 2 with every bad
 * line by number and nothing written; `-` reads standard input; with REDIS_URL the count layer's
 * counters of the touched targets are dropped, so a counter Redis held before the import shows
 * the imported facts at its next read (and, the control, an import that does not drop them leaves
 * Redis showing the old count: the imported facts have no events for its feeder to see).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { Readable } from "node:stream";
import { openCountLayer } from "../../src/cache/count-layer.ts";
import { FOLLOWER_COUNTS, LIKE_COUNTS } from "../../src/cache/counter-kinds.ts";
import { importFacts } from "../../src/portability/import.ts";
import { TestRedis } from "../../support/redis-server.ts";
import { createTestDatabase } from "../support/test-db.ts";
import { BIN, REPO_ROOT, childEnv, runCli } from "../cli/cli-child.ts";

const ndjson = (facts: readonly object[]) => facts.map((f) => JSON.stringify(f)).join("\n") + "\n";

/** The CLI with `input` on its standard input (runCli gives none). */
function runWithStdin(
  args: readonly string[],
  env: NodeJS.ProcessEnv,
  input: string,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [BIN, ...args], { cwd: REPO_ROOT, env, stdio: ["pipe", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (c: string) => (stdout += c));
  child.stderr.setEncoding("utf8").on("data", (c: string) => (stderr += c));
  child.stdin.end(input);
  const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  return new Promise((resolve) =>
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    }),
  );
}

test(
  "import CLI: bad lines are exit 2 and write nothing; - reads stdin; export --account of an unknown account is exit 2",
  { timeout: 120_000 },
  async (t) => {
    const db = await createTestDatabase({ partitions: 2, poolSize: 4 });
    const dir = await mkdtemp(path.join(os.tmpdir(), "ledger-import-cli-"));
    t.after(async () => {
      await db.close();
      await rm(dir, { recursive: true, force: true });
    });
    const env = childEnv({ DATABASE_URL: db.url, LEDGER_DATA_DIR: dir });
    const bad = path.join(dir, "bad.ndjson");
    await writeFile(
      bad,
      ndjson([
        { kind: "item", id: "i1" },
        ...Array.from({ length: 23 }, (_, i) => ({ kind: "like", user: `u${i}`, item: "i1", at: "yesterday" })),
      ]),
    );
    const refused = await runCli(["import", bad], env);
    assert.equal(refused.code, 2, refused.stderr);
    const lines = refused.stderr.trimEnd().split("\n");
    assert.equal(lines[0], "social-ledger import: 23 bad line(s), nothing was imported:");
    assert.match(lines[1]!, /^ {2}line 2: at: must be an ISO-8601 date-time/);
    assert.equal(lines.length, 22);
    assert.equal(lines[21], "  and 3 more");
    const { rows } = await db.pool.query(
      "SELECT (SELECT count(*) FROM item)::int AS items, (SELECT count(*) FROM import_run)::int AS runs",
    );
    assert.deepEqual(rows[0], { items: 0, runs: 0 });

    const good = ndjson([
      { kind: "item", id: "i1" },
      { kind: "like", user: "alice", item: "i1" },
      { kind: "account", id: "bob" },
      { kind: "follow", follower: "alice", followee: "bob", state: "ACTIVE" },
    ]);
    const fromStdin = await runWithStdin(["import", "-", "--json"], env, good);
    assert.equal(fromStdin.code, 0, fromStdin.stderr);
    assert.equal((JSON.parse(fromStdin.stdout) as { applied: Record<string, number> }).applied.likes, 1);
    const exported = await runCli(["export", "--account", "alice"], env);
    assert.equal(exported.code, 0, exported.stderr);
    assert.deepEqual(
      exported.stdout
        .trim()
        .split("\n")
        .map((l) => (JSON.parse(l) as { kind: string }).kind),
      ["account", "account", "item", "follow", "like"],
    );
    const unknown = await runCli(["export", "--account", "nobody"], env);
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /^social-ledger export: .*nobody/);
  },
);

test(
  "import with REDIS_URL drops the touched counters: the next read backfills the imported facts; without the drop Redis keeps the old count",
  { timeout: 120_000 },
  async (t) => {
    const redis = await TestRedis.start();
    const db = await createTestDatabase({ partitions: 2, poolSize: 6 });
    const dir = await mkdtemp(path.join(os.tmpdir(), "ledger-import-redis-"));
    t.after(async () => {
      await db.close();
      await redis.kill();
      await rm(dir, { recursive: true, force: true });
    });
    const counts = await openCountLayer(db.pool, { redisUrl: redis.url, localTtlMs: 0 });
    t.after(() => counts.close());
    const read = async (kind: typeof LIKE_COUNTS, target: string) =>
      counts.reader.read(kind, target, { allowedLag: 0 });

    await importFacts(
      db.pool,
      Readable.from([
        ndjson([
          { kind: "item", id: "i1" },
          { kind: "account", id: "star" },
          ...["a", "b", "c"].map((u) => ({ kind: "like", user: u, item: "i1" })),
          { kind: "follow", follower: "a", followee: "star", state: "ACTIVE" },
        ]),
      ]),
    );
    assert.deepEqual(
      [(await read(LIKE_COUNTS, "i1")).count, (await read(FOLLOWER_COUNTS, "star")).count],
      [3, 1],
      "backfilled into Redis",
    );
    assert.equal((await read(LIKE_COUNTS, "i1")).source, "cache");

    // The control: the same kind of import without the drop. Redis keeps showing 3.
    await importFacts(db.pool, Readable.from([ndjson([{ kind: "like", user: "d", item: "i1" }])]));
    assert.equal((await read(LIKE_COUNTS, "i1")).count, 3, "without the drop the counter misses the imported like");

    const env = childEnv({ DATABASE_URL: db.url, LEDGER_DATA_DIR: dir, REDIS_URL: redis.url });
    const file = path.join(dir, "more.ndjson");
    await writeFile(
      file,
      ndjson([
        { kind: "like", user: "e", item: "i1" },
        ...["b", "c"].map((u) => ({ kind: "follow", follower: u, followee: "star", state: "PENDING" })),
      ]),
    );
    const run = await runCli(["import", file], env);
    assert.equal(run.code, 0, run.stderr);
    const like = await read(LIKE_COUNTS, "i1");
    assert.deepEqual(
      [like.count, like.source],
      [5, "cache"],
      "dropped, then backfilled from the facts (d's like included)",
    );
    assert.equal((await read(FOLLOWER_COUNTS, "star")).count, 3);
    const reconcile = await runCli(["reconcile", "--json"], env);
    assert.equal(reconcile.code, 0, reconcile.stderr);
    assert.ok((JSON.parse(reconcile.stdout) as { drifted: unknown[] }[]).every((r) => r.drifted.length === 0));
  },
);
