/**
 * An erasure batch takes the sequence rows last (erasure_unlike, erasure_remove_relations; docs/erasure.md "Pacing"): parked
 * at the SQL hook point `erasure.beforeSequences` (its fact rows written, its sequence rows not
 * yet taken), a live like and a live follow in the partitions the batch is about to number are
 * served, with no lock wait in pg_locks. The control moves the sequence lock back to where the
 * erasure migration had it (before the fact rows), and the same live like waits on the parked batch.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Pool } from "../../src/db/pool.ts";
import { IS_HOOK_WAIT, SqlHook } from "../support/sql-hooks.ts";
import { replaceFunctionText } from "../support/function-mutant.ts";
import { buildWorld, type World } from "./fixture.ts";

/** Waits until `write` settles ("served") or a backend of this database waits on a lock other than a hook's ("waited"): a bounded poll of pg_locks. */
async function servedOrWaited(pool: Pool, write: Promise<unknown>, deadlineMs = 15_000): Promise<"served" | "waited"> {
  let settled = false;
  const done = write.then(
    () => (settled = true),
    () => (settled = true),
  );
  const deadline = Date.now() + deadlineMs;
  while (!settled) {
    // This database's backends only: other test files share the cluster.
    const { rows } = await pool.query(
      `SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid AND a.datname = current_database() WHERE NOT l.granted AND NOT ${IS_HOOK_WAIT}`,
    );
    if (rows.length > 0) return "waited";
    if (Date.now() > deadline) throw new Error(`neither served nor waiting within ${deadlineMs} ms`);
    await new Promise((resolve) => setImmediate(resolve));
  }
  await done;
  return "served";
}

/** After a failed assertion too: the parked batch is let go (and its erasure ends) before the pool closes, which would wait for it. */
async function cleanUp(w: World, hook: SqlHook): Promise<void> {
  await hook.release();
  await w.close();
}

/** A user id whose partition is `part`. */
async function userIn(w: World, part: number, prefix: string): Promise<string> {
  const { rows } = await w.db.pool.query<{ u: string }>(
    "SELECT u FROM (SELECT $3 || i AS u FROM generate_series(1, 1000) i) x WHERE ledger_partition(u, $1) = $2 LIMIT 1",
    [w.ledger.partitions, part, prefix],
  );
  return rows[0]!.u;
}

/** Starts eve's erasure and parks its first batch that numbers events of `seq` at erasure.beforeSequences; its partitions. */
async function parkBeforeSequences(
  w: World,
  hook: SqlHook,
  seq: string,
): Promise<{ parts: number[]; running: Promise<unknown> }> {
  await w.ledger.erasure.start("eve", "admin");
  const running = w.ledger.erasure.run("eve");
  const parked = await hook.parked();
  assert.equal(parked.context.seq, seq);
  return { parts: parked.context.parts as number[], running };
}

test("erasure: parked between its fact rows and its sequence rows, a batch holds no sequence row: live likes of its partitions are served", async (t) => {
  const w = await buildWorld();
  const hook = await SqlHook.arm(w.db.pool, "erasure.beforeSequences");
  t.after(() => cleanUp(w, hook));
  const { parts, running } = await parkBeforeSequences(w, hook, "like_seq");
  for (const part of parts) {
    const user = await userIn(w, part, "live-");
    assert.equal(
      await servedOrWaited(w.db.pool, w.ledger.likes.like(user, "plain-x")),
      "served",
      `a like in partition ${part}`,
    );
  }
  await hook.release();
  await running;
});

test("erasure: the same for a relations batch: live follows of its followees' partitions are served while it is parked", async (t) => {
  const w = await buildWorld();
  // Park only the relations' numbering: the like batches pass (their point is the same, so arm after them).
  const stars: string[] = [];
  for (let part = 0; part < w.ledger.partitions; part++) stars.push(await userIn(w, part, "star-"));
  for (const a of ["fan", ...stars]) await w.ledger.relations.upsertAccount(a);
  await w.ledger.erasure.start("eve", "admin");
  while ((await w.ledger.erasure.status("eve"))!.phase !== "following") await w.ledger.erasure.step("eve");
  const hook = await SqlHook.arm(w.db.pool, "erasure.beforeSequences");
  t.after(() => cleanUp(w, hook));
  const running = w.ledger.erasure.run("eve");
  const parked = await hook.parked();
  assert.equal(parked.context.seq, "event_seq");
  for (const part of parked.context.parts as number[]) {
    assert.equal(
      await servedOrWaited(w.db.pool, w.ledger.relations.follow("fan", stars[part]!)),
      "served",
      `a follow in partition ${part}`,
    );
  }
  await hook.release();
  await running;
});

test("negative control: with the sequence rows locked before the fact rows (the erasure migration's order), the same live like waits on the parked batch", async (t) => {
  const w = await buildWorld();
  await replaceFunctionText(w.db.pool, "erasure_unlike(text[], text[], integer)", [
    [
      "  WITH upd AS (\n",
      "  PERFORM 1 FROM like_seq s WHERE s.part IN (SELECT DISTINCT ledger_partition(u, p_partitions) FROM unnest(p_users) AS u) ORDER BY s.part FOR UPDATE;\n  WITH upd AS (\n",
    ],
  ]);
  const hook = await SqlHook.arm(w.db.pool, "erasure.beforeSequences");
  t.after(() => cleanUp(w, hook));
  const { parts, running } = await parkBeforeSequences(w, hook, "like_seq");
  const like = w.ledger.likes.like(await userIn(w, parts[0]!, "live-"), "plain-x");
  assert.equal(await servedOrWaited(w.db.pool, like), "waited");
  await hook.release();
  await like;
  await running;
});
