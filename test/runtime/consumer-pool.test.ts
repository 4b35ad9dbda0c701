/**
 * serve's consumer loops take their connections from a pool of LEDGER_CONSUMER_CONNECTIONS of their
 * own, so callers holding or queueing for every connection of the API's pool cannot hold them up
 * (docs/write-path.md, "The consumers of the outbox"). The test holds every connection of the
 * service's API pool and writes likes on a connection of its own: with the consumers' own pool the
 * like counter's watermark reaches the sequence while the hold lasts; with
 * LEDGER_CONSUMER_CONNECTIONS=0 (the negative control) the loops queue behind the hold on the API's
 * pool and the watermark stands still until it is released.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { InvalidInputError } from "../../src/errors.ts";
import { freePort } from "../../src/db/embedded-cluster.ts";
import type { PoolClient } from "../../src/db/pool.ts";
import { loadConfig } from "../../src/config.ts";
import { openLedger } from "../../src/ledger.ts";
import { startService } from "../../src/runtime/service.ts";
import { pollUntil } from "../../support/poll.ts";
import { createTestDatabase } from "../support/test-db.ts";

const LAG = `SELECT (SELECT sum(last) FROM like_seq)::int AS written,
                    (SELECT sum(s.last - w.applied_upto) FROM like_seq s JOIN counter_watermark w USING (part))::int AS lag`;

async function run(consumerConnections: string): Promise<{ lagDuringHold: number; queuedOnApiPool: number }> {
  const db = await createTestDatabase({ partitions: 4, poolSize: 2 });
  const config = loadConfig({
    DATABASE_URL: db.url,
    PORT: String(await freePort()),
    LEDGER_JWT_SECRET: randomBytes(32).toString("hex"),
    LEDGER_PRUNE_EVERY_MS: "0",
    LEDGER_CONSUMER_CONNECTIONS: consumerConnections,
  });
  const service = await startService(config, { logger: false });
  const held: PoolClient[] = [];
  try {
    const { pool, consumerPool } = service.database;
    assert.equal(consumerPool === pool, consumerConnections === "0", "a pool of their own unless the setting is 0");
    if (consumerPool !== pool) assert.equal(consumerPool.options.max, Number(consumerConnections));
    const ledger = await openLedger(db.pool);
    await ledger.likes.createItem("item-1");
    // Every connection of the API's pool checked out: a checkout of the loops' on it now waits.
    for (let n = 0; n < (pool.options.max ?? 0); n++) held.push(await pool.connect());
    for (let u = 0; u < 8; u++) assert.equal((await ledger.likes.like(`user-${u}`, "item-1")).outcome, "CHANGED");
    const read = async () => (await db.pool.query<{ written: number; lag: number }>(LAG)).rows[0]!;
    let during: { written: number; lag: number };
    let queuedOnApiPool = 0;
    if (consumerPool !== pool) {
      during = await pollUntil(
        "the consumers applied the likes while the API's pool is held",
        read,
        (s) => s.lag === 0,
      );
    } else {
      // The loops poll every partition all the time; once their checkouts wait on the held pool, none can apply.
      queuedOnApiPool = await pollUntil(
        "the consumer loops wait for a connection of the held API pool",
        async () => pool.waitingCount,
        (n) => n > 0,
      );
      during = await read();
    }
    assert.equal(during.written, 8);
    for (const client of held.splice(0)) client.release();
    await pollUntil("the consumers applied the likes once the hold ended", read, (s) => s.lag === 0);
    return { lagDuringHold: during.lag, queuedOnApiPool };
  } finally {
    for (const client of held) client.release();
    await service.stop();
    await db.close();
  }
}

test("consumer loops on a pool of their own apply while every API connection is held; on the API's pool (0, negative control) they wait", async () => {
  const own = await run("2");
  assert.equal(own.lagDuringHold, 0, "with a pool of their own the loops applied every like during the hold");
  const shared = await run("0");
  assert.ok(shared.queuedOnApiPool > 0);
  assert.equal(shared.lagDuringHold, 8, "on the held API pool the loops applied nothing during the hold");
});

test("LEDGER_CONSUMER_CONNECTIONS: 0 (the API's pool) by default, 0..100, anything else a typed error naming the variable", () => {
  const base = { LEDGER_JWT_SECRET: randomBytes(32).toString("hex") };
  assert.equal(loadConfig(base).consumerConnections, 0);
  assert.equal(loadConfig({ ...base, LEDGER_CONSUMER_CONNECTIONS: "0" }).consumerConnections, 0);
  assert.equal(loadConfig({ ...base, LEDGER_CONSUMER_CONNECTIONS: "100" }).consumerConnections, 100);
  for (const bad of ["-1", "101", "2.5", "four"]) {
    assert.throws(
      () => loadConfig({ ...base, LEDGER_CONSUMER_CONNECTIONS: bad }),
      (err: unknown) => err instanceof InvalidInputError && /LEDGER_CONSUMER_CONNECTIONS/.test(err.message),
      bad,
    );
  }
});
