/**
 * Retention of the two outboxes only webhook delivery reads (docs/retention.md): the block outbox
 * (webhook_block_event, kind `blocks`) and the account outbox (account_outbox, kind `accounts`).
 * `social-ledger prune` takes every row each endpoint's cursor has passed and keeps the rows a
 * paused endpoint has not received; that endpoint then gets them in order and the next prune takes
 * them; the audits stay clean, the gapless checks counting the pruned prefix. Negative controls: a
 * prune blind to an endpoint's cursor deletes what it has not received, and delivery stops at the
 * gap with the audit naming the cursor below the floor; a row deleted by hand (in the middle, or a
 * prefix not recorded in the floor) is reported by the full and the incremental gapless checks.
 * An endpoint registered before the two outboxes were pruned gets its holds from the migration.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fullAudit } from "../../src/api/routes/admin.ts";
import { incrementalAudit } from "../../src/audit/incremental-audit.ts";
import { initLedger } from "../../src/db/ledger-config.ts";
import { loadMigrations, migrate } from "../../src/db/migrate.ts";
import { releaseRetention } from "../../src/db/retention-boundary.ts";
import { pruneRetained, type RetentionReport } from "../../src/retention/retention.ts";
import { holderOf } from "../../src/webhooks/endpoint-registry.ts";
import { auditWebhooks } from "../../src/webhooks/webhook-audit.ts";
import { childEnv, runCli } from "../cli/cli-child.ts";
import { createEmptyDatabase } from "../support/test-db.ts";
import { assertContiguous, webhookLab, type WebhookLab } from "../webhooks/fixture.ts";
import { seqsByPartition } from "../webhooks/receiver.ts";

const NO_MARGIN = { keepLast: 0, keepSeconds: 0 };
const WEBHOOK_OUTBOXES = {
  blocks: ["webhook_block_seq", "webhook_block_event"],
  accounts: ["account_seq", "account_outbox"],
} as const;
type Kind = keyof typeof WEBHOOK_OUTBOXES;

interface PartitionState {
  part: number;
  last: number;
  floor: number;
  rows: number;
  /** The lowest seq still in the outbox, or null when none is. */
  first: number | null;
}

/** Per partition of the kind's outbox: its end, its retention floor, the rows kept and the first of them. */
async function outboxState(lab: WebhookLab, kind: Kind): Promise<PartitionState[]> {
  const [sequence, outbox] = WEBHOOK_OUTBOXES[kind];
  const { rows } = await lab.db.pool.query<PartitionState>(
    `SELECT s.part, s.last::int, coalesce(f.pruned_upto, 0)::int AS floor,
            (SELECT count(*) FROM ${outbox} o WHERE o.part = s.part)::int AS rows,
            (SELECT min(o.seq) FROM ${outbox} o WHERE o.part = s.part)::int AS first
       FROM ${sequence} s LEFT JOIN retention_floor f ON f.kind = $1 AND f.part = s.part ORDER BY s.part`,
    [kind],
  );
  return rows;
}

async function cursorOf(lab: WebhookLab, endpointId: string, kind: Kind, part: number): Promise<number> {
  return (await lab.registry.cursors(endpointId)).find((c) => c.source === kind && c.part === part)!.deliveredUpto;
}

/** New accounts, a setting changed, blocks made and undone: events in both outboxes and both partitions. */
async function writeEvents(lab: WebhookLab, round: number): Promise<void> {
  const { relations } = lab.ledger;
  for (let i = 0; i < 6; i++) await relations.upsertAccount(`r${round}-${i}`, { private: i % 2 === 0 });
  await relations.upsertAccount(`r${round}-0`, { private: false });
  for (const [a, b] of [
    ["alice", `r${round}-1`],
    ["bob", `r${round}-2`],
    [`r${round}-3`, "carol"],
    [`r${round}-4`, "dave"],
  ] as const) {
    await relations.block(a, b);
    if (round % 2 === 0) await relations.unblock(a, b);
  }
}

test(
  "social-ledger prune takes the block and account events every endpoint has passed and keeps what a paused one has not received; it receives them gapless and the next prune takes them",
  { timeout: 180_000 },
  async (t) => {
    const lab = await webhookLab(t, { partitions: 2 });
    const dataDir = await mkdtemp(path.join(os.tmpdir(), "ledger-webhook-prune-"));
    t.after(() => rm(dataDir, { recursive: true, force: true }));
    await lab.seed();
    await writeEvents(lab, 0); // before any endpoint: nobody will read these
    const fast = await lab.register(["*"]);
    const slow = await lab.register(["*"]);
    await lab.registry.setPaused(slow.id, true);
    const slowFrom = {} as Record<Kind, number[]>;
    for (const kind of ["blocks", "accounts"] as const)
      slowFrom[kind] = await Promise.all([0, 1].map((p) => cursorOf(lab, slow.id, kind, p)));
    await writeEvents(lab, 1);
    await lab.deliverAll();
    const env = childEnv({ DATABASE_URL: lab.db.url, LEDGER_DATA_DIR: dataDir });

    const first = await runCli(["prune", "--keep-last", "0", "--keep-seconds", "0", "--json"], env);
    assert.equal(first.code, 0, first.stderr);
    const report = JSON.parse(first.stdout) as RetentionReport;
    for (const kind of ["blocks", "accounts"] as const) {
      const state = await outboxState(lab, kind);
      t.diagnostic(`note ${kind} after the first prune: ${JSON.stringify(state)}`);
      const k = report.kinds.find((r) => r.kind === kind)!;
      assert.equal(k.skipped, undefined);
      for (const s of state) {
        const held = slowFrom[kind][s.part]!;
        assert.ok(s.last > held, `${kind}/${s.part}: the paused endpoint has events to receive (the control)`);
        assert.equal(s.floor, held, `${kind}/${s.part}: the floor stops at the paused endpoint's cursor`);
        assert.deepEqual(
          [s.rows, s.first],
          [s.last - held, held + 1],
          `${kind}/${s.part}: every row the paused endpoint has not received is kept`,
        );
        assert.equal(await cursorOf(lab, fast.id, kind, s.part), s.last, "the fast endpoint has passed them all");
      }
      assert.equal(
        k.outboxRows,
        Object.values(slowFrom[kind]).reduce((a, n) => a + n, 0),
        `${kind}: the rows written before the paused endpoint registered went`,
      );
    }
    assert.deepEqual(await auditWebhooks(lab.db.pool), {
      cursorsPastEnd: 0,
      holdsOffCursor: 0,
      cursorsBelowFloor: 0,
      blockSequenceViolations: 0,
      accountSequenceViolations: 0,
    });

    await lab.registry.setPaused(slow.id, false);
    await lab.deliverAll();
    const toSlow = lab.receiver.accepted().filter((d) => d.signedBy.includes(slow.secret));
    const bySource = seqsByPartition(toSlow.filter((d) => /^evt_(blocks|accounts)_/.test(d.id)));
    for (const kind of ["blocks", "accounts"] as const) {
      for (const s of await outboxState(lab, kind)) {
        assert.deepEqual(
          bySource.get(`${kind}/${s.part}`)?.[0],
          slowFrom[kind][s.part]! + 1,
          `${kind}/${s.part}: the paused endpoint starts right after its cursor`,
        );
      }
    }
    assertContiguous(bySource, "the paused endpoint after its resume");

    const second = await runCli(["prune", "--keep-last", "0", "--keep-seconds", "0"], env);
    assert.equal(second.code, 0, second.stderr);
    assert.match(
      second.stdout,
      /^accounts: pruned 0 dedup key\(s\) at or below the watermarks and [1-9]\d* outbox event/m,
    );
    for (const kind of ["blocks", "accounts"] as const) {
      for (const s of await outboxState(lab, kind))
        assert.deepEqual([s.floor, s.rows], [s.last, 0], `${kind}/${s.part}: everything delivered is pruned`);
    }
    await lab.ledger.likeConsumer.drain();
    await lab.ledger.projector.drain();
    await lab.ledger.commentConsumer.drain();
    await lab.ledger.notifications.drain();
    await lab.ledger.feed.drain();
    const audit = await fullAudit(lab.ledger);
    assert.ok(audit.clean, JSON.stringify(audit));
    const cli = await runCli(["audit"], env);
    assert.equal(cli.code, 0, cli.stdout + cli.stderr);
  },
);

test("negative control: a prune blind to an endpoint's cursor deletes block and account events it has not received; delivery stops at the gap and the audit names the cursors below the floor", async (t) => {
  const lab = await webhookLab(t, { partitions: 2 });
  // Registered first: its block and account cursors start at 0, so every event is one it has to receive.
  const { id } = await lab.register(["*"]);
  await lab.registry.setPaused(id, true);
  await lab.seed();
  await writeEvents(lab, 0);
  // The blind prune: the endpoint's holds dropped behind its back.
  await releaseRetention(lab.db.pool, holderOf(id));
  await pruneRetained(lab.db.pool, NO_MARGIN);
  let lost = 0;
  for (const kind of ["blocks", "accounts"] as const) {
    for (const s of await outboxState(lab, kind)) {
      if (s.last === 0) continue;
      assert.deepEqual([s.floor, s.rows], [s.last, 0], `${kind}/${s.part}: pruned past the endpoint's cursor`);
      assert.ok((await cursorOf(lab, id, kind, s.part)) < s.floor);
      lost++;
    }
  }
  assert.ok(lost >= 3, `events lost in ${lost} partitions`);
  const pruned = await auditWebhooks(lab.db.pool);
  assert.deepEqual(
    [pruned.cursorsBelowFloor, pruned.holdsOffCursor],
    [lost, 12],
    "the audit names each cursor left below its floor, and the missing holds (6 sources x 2 partitions)",
  );
  await lab.registry.setPaused(id, false);
  for (let i = 0; i < 10; i++) await lab.delivery.pass();
  const cursors = (await lab.registry.cursors(id)).filter((c) => c.source === "blocks" || c.source === "accounts");
  for (const c of cursors.filter((x) => x.last > 0)) {
    assert.equal(c.deliveredUpto, 0, `${c.source}/${c.part}: the cursor does not jump the gap`);
    assert.match(c.lastError ?? "", new RegExp(`event 1 is no longer in the ${c.source} outbox`));
  }
  assert.equal(
    lab.receiver.deliveries.filter((d) => /^evt_(blocks|accounts)_/.test(d.id)).length,
    0,
    "nothing after the gap was sent",
  );
  const audit = await auditWebhooks(lab.db.pool);
  assert.equal(audit.cursorsBelowFloor, lost, "the delivery stays at the gap, and the audit still reports it");
  assert.deepEqual(
    [audit.blockSequenceViolations, audit.accountSequenceViolations],
    [0, 0],
    "the numbering itself is whole: the prune recorded what it took",
  );
});

test("the gapless checks of the block and account outboxes count the pruned prefix and report a hole made by hand, in the full and the incremental audit", async (t) => {
  const lab = await webhookLab(t, { partitions: 1 });
  await lab.seed();
  await writeEvents(lab, 0);
  await pruneRetained(lab.db.pool, { keepLast: 3, keepSeconds: 0 });
  for (const kind of ["blocks", "accounts"] as const) {
    const [s] = await outboxState(lab, kind);
    assert.deepEqual([s!.floor, s!.rows], [s!.last - 3, 3], `${kind}: a prefix pruned, the newest three kept`);
  }
  const clean = await auditWebhooks(lab.db.pool);
  assert.deepEqual([clean.blockSequenceViolations, clean.accountSequenceViolations], [0, 0]);
  // The incremental audit's first run is its full form; it leaves a cursor per outbox of the section.
  const seeded = await incrementalAudit(lab.db.pool);
  assert.deepEqual(
    [seeded.scope.webhooks.mode, seeded.scope.webhooks.held],
    ["full", false],
    JSON.stringify(seeded.webhooks),
  );
  const { rows: sections } = await lab.db.pool.query<{ section: string }>(
    "SELECT DISTINCT section FROM audit_cursor WHERE section LIKE 'webhooks%' ORDER BY section",
  );
  assert.deepEqual(
    sections.map((r) => r.section),
    ["webhooks.accounts", "webhooks.blocks"],
  );

  await writeEvents(lab, 1);
  const holes = {
    blocks: "DELETE FROM webhook_block_event WHERE seq = (SELECT max(seq) - 1 FROM webhook_block_event)",
    accounts: "DELETE FROM account_outbox WHERE seq = (SELECT max(seq) - 1 FROM account_outbox)",
  };
  for (const [kind, sql] of Object.entries(holes)) {
    const before = await auditWebhooks(lab.db.pool);
    const name = kind === "blocks" ? "blockSequenceViolations" : "accountSequenceViolations";
    assert.equal(before[name], 0, `${kind}: whole before the hole`);
    await lab.db.pool.query(sql);
    assert.equal((await auditWebhooks(lab.db.pool))[name], 1, `${kind}: the full check reports the hole`);
  }
  const run = await incrementalAudit(lab.db.pool);
  assert.equal(run.scope.webhooks.mode, "incremental");
  assert.deepEqual(
    [run.webhooks.blockSequenceViolations, run.webhooks.accountSequenceViolations],
    [1, 1],
    "the incremental check reports both holes in the ranges it reads",
  );
  assert.equal(run.clean, false);

  // A prefix deleted without its count in the floor (not what the prune does) is a gap as well.
  const fresh = await webhookLab(t, { partitions: 1 });
  await fresh.seed();
  await writeEvents(fresh, 0);
  await fresh.db.pool.query("DELETE FROM account_outbox WHERE seq <= 2");
  await fresh.db.pool.query("DELETE FROM webhook_block_event WHERE seq <= 2");
  const unrecorded = await auditWebhooks(fresh.db.pool);
  assert.deepEqual([unrecorded.blockSequenceViolations, unrecorded.accountSequenceViolations], [1, 1]);
});

test("an endpoint registered before the block and account outboxes were pruned: the migration gives its cursors their holds, so the first prune keeps what it has not received", async (t) => {
  const db = await createEmptyDatabase({ poolSize: 4 });
  t.after(() => db.close());
  const migrations = await loadMigrations();
  const at = migrations.findIndex((m) => m.name === "040_webhook_outbox_retention.sql");
  assert.ok(at > 0);
  await migrate(db.pool, migrations.slice(0, at));
  await initLedger(db.pool, { partitions: 1 });
  // The schema before: accounts and a block (their events), and an endpoint as the registry wrote it then,
  // its block and account cursors behind the ends and no hold for them.
  await db.pool.query("INSERT INTO account (account_id) VALUES ('alice'), ('bob'), ('carol')");
  await db.pool.query("INSERT INTO block (blocker, blocked) VALUES ('alice', 'bob'), ('alice', 'carol')");
  await db.pool.query(
    "INSERT INTO webhook_endpoint (endpoint_id, url, events, secret) VALUES ('whe_old', 'https://8.8.8.8/hook', '{*}', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')",
  );
  await db.pool.query(
    "INSERT INTO webhook_cursor (endpoint_id, source, part, delivered_upto) VALUES ('whe_old', 'accounts', 0, 1), ('whe_old', 'blocks', 0, 0)",
  );
  await db.pool.query("INSERT INTO audit_cursor (section, part, audited_upto) VALUES ('webhooks', 0, 2)");

  await migrate(db.pool, migrations);
  const { rows: holds } = await db.pool.query<{ kind: string; upto: number }>(
    "SELECT kind, upto::int FROM retention_hold WHERE holder = 'webhook:whe_old' ORDER BY kind",
  );
  assert.deepEqual(holds, [
    { kind: "accounts", upto: 1 },
    { kind: "blocks", upto: 0 },
  ]);
  const { rows: cursors } = await db.pool.query<{ section: string; audited_upto: number }>(
    "SELECT section, audited_upto::int FROM audit_cursor",
  );
  assert.deepEqual(cursors, [{ section: "webhooks.blocks", audited_upto: 2 }], "the block outbox's audit cursor kept");
  await pruneRetained(db.pool, NO_MARGIN);
  const { rows } = await db.pool.query<{ accounts: number[]; blocks: number[] }>(
    "SELECT ARRAY(SELECT seq::int FROM account_outbox ORDER BY seq) AS accounts, ARRAY(SELECT seq::int FROM webhook_block_event ORDER BY seq) AS blocks",
  );
  assert.deepEqual(rows[0], { accounts: [2, 3], blocks: [1, 2] }, "only what the endpoint had passed went");
  const audit = await auditWebhooks(db.pool);
  assert.deepEqual(audit, {
    cursorsPastEnd: 0,
    holdsOffCursor: 0,
    cursorsBelowFloor: 0,
    blockSequenceViolations: 0,
    accountSequenceViolations: 0,
  });
});
