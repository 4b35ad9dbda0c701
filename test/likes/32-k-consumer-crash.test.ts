/**
 * 32-K: the consumer runs as its own process (test/likes/fixtures/consumer-child.ts) with a
 * delivery offset file written only after each database commit, and is killed with SIGKILL
 * (kill -9) at two places: inside a batch transaction, and between a commit and the offset
 * write. The parent synchronises only on the child's stdout lines and on bounded polling of
 * pg_stat_activity; nothing here sleeps.
 */
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { formatReadSide, readSide, type ReadSideAudit } from "../../src/likes/like-audit.ts";
import { LikeService } from "../../src/likes/like-service.ts";
import { seededRandom } from "../support/concurrency.ts";
import { LineChild, type Exit } from "../support/line-child.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";
import { LAB_ITEMS, count, user } from "./fixture.ts";

const REPO_ROOT = fileURLToPath(new URL("../../", import.meta.url));
const CHILD_SCRIPT = fileURLToPath(new URL("./fixtures/consumer-child.ts", import.meta.url));
const EVENTS = 120;
/** Upper bound for the server to notice a dead client and end its backend (normally a few ms). */
const BACKEND_GONE_DEADLINE_MS = 15_000;

/** The consumer child process; its stdout lines can be awaited. */
class ConsumerChild extends LineChild {
  constructor(
    name: string,
    readonly appName: string,
    args: { db: string; offsetFile: string; stop: string; batch: number },
  ) {
    super(
      name,
      [
        "--import",
        "tsx",
        CHILD_SCRIPT,
        "--db",
        args.db,
        "--offset-file",
        args.offsetFile,
        "--stop",
        args.stop,
        "--batch",
        String(args.batch),
        "--app",
        appName,
      ],
      { cwd: REPO_ROOT },
    );
  }

  /** kill -9, then the exit as observed by the parent. */
  kill9(): Promise<Exit> {
    return this.stop("SIGKILL");
  }
}

function readOffsets(file: string): Record<string, number> {
  return existsSync(file) ? (JSON.parse(readFileSync(file, "utf8")) as Record<string, number>) : {};
}

async function backendStates(db: TestDatabase, appName: string): Promise<string[]> {
  const { rows } = await db.pool.query<{ state: string | null }>(
    "SELECT state FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
    [appName],
  );
  return rows.map((r) => r.state ?? "");
}

/**
 * Bounded polling of observable state: query pg_stat_activity back to back until the child's
 * backend is gone or the deadline passes. Returns how many rows are still listed and the polls.
 */
async function waitBackendGone(db: TestDatabase, appName: string): Promise<{ stillListed: number; polls: number }> {
  const deadline = Date.now() + BACKEND_GONE_DEADLINE_MS;
  for (let polls = 1; ; polls++) {
    const stillListed = (await backendStates(db, appName)).length;
    if (stillListed === 0 || Date.now() > deadline) return { stillListed, polls };
  }
}

interface PartState {
  last: number;
  watermark: number;
  processed: number;
}

async function partStates(db: TestDatabase): Promise<PartState[]> {
  const { rows } = await db.pool.query<{ part: number; last: number; watermark: number; processed: number }>(
    `SELECT s.part, s.last, w.applied_upto AS watermark,
            (SELECT count(*) FROM processed_event p WHERE p.part = s.part)::bigint AS processed
       FROM like_seq s JOIN counter_watermark w USING (part) ORDER BY s.part`,
  );
  return rows.map((r) => ({ last: r.last, watermark: r.watermark, processed: r.processed }));
}

/**
 * No acknowledged loss: every delivery position in the offset file is backed by committed
 * processed_event rows 1..offset, and no watermark is behind its offset. Every processed row
 * lies inside the contiguous watermark (a killed transaction left nothing behind).
 */
async function assertNoAcknowledgedLoss(
  db: TestDatabase,
  offsets: Record<string, number>,
  states: PartState[],
): Promise<void> {
  for (const [p, state] of states.entries()) {
    const offset = offsets[String(p)] ?? 0;
    const covered = await count(db, "SELECT count(*) AS n FROM processed_event WHERE part = $1 AND seq <= $2", [
      p,
      offset,
    ]);
    assert.equal(covered, offset, `part ${p}: processed rows 1..${offset} acknowledged in the offset file`);
    assert.ok(state.watermark >= offset, `part ${p}: watermark ${state.watermark} >= offset ${offset}`);
    assert.equal(state.processed, state.watermark, `part ${p}: processed rows = watermark (no partial batch)`);
  }
}

function assertIdentity(audit: ReadSideAudit, when: string): void {
  assert.equal(audit.exactViolations, 0, `${when}: exact_violations`);
  assert.equal(audit.boundViolations, 0, `${when}: bound_violations`);
  assert.equal(audit.unprocessedOverLag, false, `${when}: unprocessed <= lag`);
}

function parseDone(line: string): { applied: number; covered: number; dup: number; watermark: number } {
  const m = /^DONE applied=(\d+) covered=(\d+) dup=(\d+) watermark=(\d+)$/.exec(line);
  assert.ok(m, `DONE line: ${line}`);
  return { applied: Number(m[1]), covered: Number(m[2]), dup: Number(m[3]), watermark: Number(m[4]) };
}

interface Lab {
  db: TestDatabase;
  dir: string;
  offsetFile: string;
  spawn(name: string, stop: string): ConsumerChild;
}

/** A fresh database with P partitions and 120 events over the lab items, written before any consumer runs. */
async function lab(t: TestContext, partitions: number, batch: number): Promise<Lab> {
  const db = await createTestDatabase({ partitions });
  const dir = await mkdtemp(path.join(os.tmpdir(), "ledger-32k-"));
  const children: ConsumerChild[] = [];
  t.after(async () => {
    for (const child of children) if (child.alive()) await child.kill9();
    await db.close();
    await rm(dir, { recursive: true, force: true });
  });
  const likes = await LikeService.open(db.pool);
  for (const item of LAB_ITEMS) await likes.createItem(item);
  const random = seededRandom(3211);
  for (let changed = 0; changed < EVENTS;) {
    const u = user(1 + Math.floor(random() * 60));
    const item = LAB_ITEMS[Math.floor(random() * LAB_ITEMS.length)]!;
    const result = random() < 0.7 ? await likes.like(u, item) : await likes.unlike(u, item);
    if (result.outcome === "CHANGED") changed++;
  }
  assert.equal(await count(db, "SELECT count(*) AS n FROM like_outbox"), EVENTS);
  const offsetFile = path.join(dir, "offset.json");
  const tag = path.basename(dir);
  return {
    db,
    dir,
    offsetFile,
    spawn(name, stop) {
      const child = new ConsumerChild(name, `${tag}-${name}`, { db: db.url, offsetFile, stop, batch });
      children.push(child);
      return child;
    },
  };
}

test(
  "32-K P=1 consumer process killed -9 inside a batch and between commit and offset write",
  { timeout: 120_000 },
  async (t) => {
    const { db, offsetFile, spawn: start } = await lab(t, 1, 25);
    const offset = () => readOffsets(offsetFile)["0"] ?? 0;
    const figures = async () => {
      const [s] = await partStates(db);
      return { watermark: s!.watermark, processed: s!.processed, offsetFile: offset() };
    };

    // child1: stops inside the transaction of batch 2 (seq 26..50), all rows written, COMMIT not sent.
    const child1 = start("child1", "pause-in-tx@2");
    const paused = await child1.waitFor(/^PAUSED_IN_TX /);
    t.diagnostic(`note child1| ${paused}`);
    assert.equal(paused, "PAUSED_IN_TX batch=2 seq=26..50");
    assert.equal(await child1.waitFor(/^OFFSET batch=1 /), "OFFSET batch=1 offset=25");
    const states = await backendStates(db, child1.appName);
    const idleInTx = states.filter((s) => s === "idle in transaction").length;
    t.diagnostic(`note child1 backend state idle in transaction = ${idleInTx}`);
    assert.equal(idleInTx, 1, `child1 backend states: ${JSON.stringify(states)}`);
    const exit1 = await child1.kill9();
    assert.equal(exit1.signal, "SIGKILL");
    assert.equal(exit1.code, null);
    const gone1 = await waitBackendGone(db, child1.appName);
    const after1 = await figures();
    t.diagnostic(
      `note kill -9 child1 exit=${exit1.signal} backendStillListed=${gone1.stillListed} watermark=${after1.watermark} ` +
        `processed=${after1.processed} offsetFile=${after1.offsetFile}`,
    );
    t.diagnostic(`note   (backend gone after ${gone1.polls} pg_stat_activity polls)`);
    assert.equal(gone1.stillListed, 0, "the server ended child1's backend and rolled its transaction back");
    assert.deepEqual(after1, { watermark: 25, processed: 25, offsetFile: 25 });
    assert.equal(await count(db, "SELECT count(*) AS n FROM processed_event WHERE seq BETWEEN 26 AND 50"), 0);
    assertIdentity(await readSide(db.pool), "after child1");

    // child2: resumes at 25, commits batch 2 (offset 50) and batch 3 (51..75), killed before writing offset 75.
    const child2 = start("child2", "after-commit@3");
    assert.equal(await child2.waitFor(/^OFFSET batch=2 /), "OFFSET batch=2 offset=50");
    const committed = await child2.waitFor(/^COMMITTED batch=3 /);
    t.diagnostic(`note child2| ${committed}`);
    assert.equal(committed, "COMMITTED batch=3 seq=51..75 applied=25 covered=0 dup=0 watermark=75");
    const exit2 = await child2.kill9();
    assert.equal(exit2.signal, "SIGKILL");
    const gone2 = await waitBackendGone(db, child2.appName);
    const after2 = await figures();
    t.diagnostic(
      `note kill -9 child2 exit=${exit2.signal} backendStillListed=${gone2.stillListed} watermark=${after2.watermark} ` +
        `processed=${after2.processed} offsetFile=${after2.offsetFile}`,
    );
    assert.equal(gone2.stillListed, 0);
    assert.deepEqual(
      after2,
      { watermark: 75, processed: 75, offsetFile: 50 },
      "committed but not acknowledged: 51..75",
    );
    assertIdentity(await readSide(db.pool), "after child2");

    // child3: runs to the end from offset 50; 51..75 are redelivered and absorbed as dup.
    const child3 = start("child3", "none");
    const done = await child3.waitFor(/^DONE /);
    const exit3 = await child3.exited;
    t.diagnostic(`note child3| ${done}`);
    assert.deepEqual(exit3, { code: 0, signal: null });
    assert.deepEqual(parseDone(done), { applied: 45, covered: 0, dup: 25, watermark: 120 });
    const after3 = await figures();
    assert.deepEqual(after3, { watermark: 120, processed: 120, offsetFile: 120 });
    const audit = await readSide(db.pool);
    t.diagnostic(`note after child3 read-side: ${formatReadSide(audit)}`);
    assertIdentity(audit, "after child3");
    assert.equal(audit.lag, 0);
    assert.equal(audit.unprocessed, 0);
    assert.equal(audit.countMismatchItems, 0, "counts equal facts");
    assert.equal(audit.maxAbsErr, 0);
    assert.equal(
      await count(db, "SELECT count(*) AS n FROM processed_event WHERE how = 'APPLIED'"),
      EVENTS,
      "every event took effect exactly once",
    );
  },
);

test(
  "32-K P=4 consumer process killed -9: invariants only (seq ranges are per partition)",
  { timeout: 120_000 },
  async (t) => {
    // Batch 10 instead of 25: 120 events over 4 partitions leave ~30 per partition, and the
    // scenario needs a partition with at least three batches.
    const batch = 10;
    const { db, offsetFile, spawn: start } = await lab(t, 4, batch);
    const lasts = (await partStates(db)).map((s) => s.last);
    t.diagnostic(`note P=4 events per partition: [${lasts.join(", ")}] batch=${batch}`);
    assert.ok(
      lasts.some((l) => l > 2 * batch),
      "some partition has a third batch",
    );

    const child1 = start("child1", "pause-in-tx@2");
    const paused = await child1.waitFor(/^PAUSED_IN_TX /);
    t.diagnostic(`note child1| ${paused}`);
    const idleInTx = (await backendStates(db, child1.appName)).filter((s) => s === "idle in transaction").length;
    assert.equal(idleInTx, 1);
    const exit1 = await child1.kill9();
    assert.equal(exit1.signal, "SIGKILL");
    const gone1 = await waitBackendGone(db, child1.appName);
    assert.equal(gone1.stillListed, 0);
    const offsets1 = readOffsets(offsetFile);
    const states1 = await partStates(db);
    t.diagnostic(
      `note kill -9 child1 exit=${exit1.signal} backendStillListed=${gone1.stillListed} ` +
        `watermarks=[${states1.map((s) => s.watermark).join(",")}] offsetFile=${JSON.stringify(offsets1)}`,
    );
    await assertNoAcknowledgedLoss(db, offsets1, states1);
    assert.ok(
      states1.every((s, p) => s.watermark === (offsets1[String(p)] ?? 0)),
      "the paused batch left nothing",
    );
    assertIdentity(await readSide(db.pool), "after child1");

    const child2 = start("child2", "after-commit@3");
    const committed = await child2.waitFor(/^COMMITTED (part=\d+ )?batch=3 /);
    t.diagnostic(`note child2| ${committed}`);
    const exit2 = await child2.kill9();
    assert.equal(exit2.signal, "SIGKILL");
    assert.equal((await waitBackendGone(db, child2.appName)).stillListed, 0);
    const offsets2 = readOffsets(offsetFile);
    const states2 = await partStates(db);
    const window = states2.reduce((sum, s, p) => sum + s.watermark - (offsets2[String(p)] ?? 0), 0);
    t.diagnostic(
      `note kill -9 child2 exit=${exit2.signal} watermarks=[${states2.map((s) => s.watermark).join(",")}] ` +
        `offsetFile=${JSON.stringify(offsets2)} committedNotAcknowledged=${window}`,
    );
    await assertNoAcknowledgedLoss(db, offsets2, states2);
    assert.ok(window > 0 && window <= batch, "one committed batch is not acknowledged");
    assertIdentity(await readSide(db.pool), "after child2");

    const child3 = start("child3", "none");
    const done = parseDone(await child3.waitFor(/^DONE /));
    assert.deepEqual(await child3.exited, { code: 0, signal: null });
    const redelivered = states2.reduce((sum, s, p) => sum + s.last - (offsets2[String(p)] ?? 0), 0);
    t.diagnostic(
      `note child3| DONE applied=${done.applied} covered=${done.covered} dup=${done.dup} watermark=${done.watermark}`,
    );
    assert.equal(done.dup, window, "dup absorbs exactly the committed-but-unacknowledged redelivery");
    assert.equal(done.applied + done.covered + done.dup, redelivered);
    assert.equal(done.watermark, EVENTS);
    const audit = await readSide(db.pool);
    t.diagnostic(`note after child3 read-side: ${formatReadSide(audit)}`);
    assertIdentity(audit, "after child3");
    assert.equal(audit.lag, 0);
    assert.equal(audit.countMismatchItems, 0, "exact after drain");
    assert.equal(await count(db, "SELECT count(*) AS n FROM processed_event WHERE how = 'APPLIED'"), EVENTS);
  },
);
