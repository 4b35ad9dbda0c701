/**
 * `copyIn` (src/portability/copy-in.ts), the COPY under the import's first pass: the rows of a
 * source arrive and are counted; a row the server refuses, a source that throws and a connection
 * lost in the middle each end it with the matching error and nothing written, the client still
 * usable where the connection lives; and a server that stops reading stops the reading of the
 * source (backpressure) instead of queueing it in memory.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Writable } from "node:stream";
import { ConnectionLostError, DatabaseError } from "../../src/db/errors.ts";
import { backendPid, type PoolClient } from "../../src/db/pool.ts";
import { copyIn } from "../../src/portability/copy-in.ts";
import { waitForLockWait } from "../support/pg-locks.ts";
import { pollUntil } from "../../support/poll.ts";
import { createTestDatabase } from "../support/test-db.ts";

async function* chunks(...texts: string[]): AsyncGenerator<string> {
  yield* texts;
}

test("copies every row of the source and returns their number", async (t) => {
  const db = await createTestDatabase({ partitions: null, poolSize: 2 });
  t.after(() => db.close());
  await db.pool.query("CREATE TABLE copied (n int NOT NULL, s text NOT NULL)");
  const client = await db.pool.connect();
  try {
    const rows = Array.from({ length: 5000 }, (_, i) => `${i}\trow ${i}\n`);
    // Rows split across chunks anywhere, as the import's 256 KB chunks split them.
    const text = rows.join("");
    const copied = await copyIn(
      client,
      "COPY copied (n, s) FROM STDIN",
      chunks(text.slice(0, 7), text.slice(7, 40_000), text.slice(40_000)),
    );
    assert.equal(copied, 5000);
  } finally {
    client.release();
  }
  const { rows } = await db.pool.query<{ n: number; sum: string }>(
    "SELECT count(*)::int AS n, sum(n)::text AS sum FROM copied WHERE s = 'row ' || n",
  );
  assert.deepEqual(rows[0], { n: 5000, sum: String((4999 * 5000) / 2) });
});

test("a row the server refuses: a typed DatabaseError with its SQLSTATE, nothing written, the client usable", async (t) => {
  const db = await createTestDatabase({ partitions: null, poolSize: 2 });
  t.after(() => db.close());
  await db.pool.query("CREATE TABLE copied (n int NOT NULL)");
  const client = await db.pool.connect();
  try {
    const good = "1\n".repeat(100_000);
    await assert.rejects(
      copyIn(client, "COPY copied (n) FROM STDIN", chunks(good, "2\nnot a number\n", good)),
      (err: unknown) => {
        assert.ok(err instanceof DatabaseError, `a DatabaseError, got ${String(err)}`);
        assert.equal(err.sqlState, "22P02");
        assert.match(err.message, /not a number/);
        return true;
      },
    );
    assert.deepEqual((await client.query("SELECT count(*)::int AS n FROM copied")).rows, [{ n: 0 }]);
  } finally {
    client.release();
  }
});

test("a source that throws: its own error, the COPY aborted with nothing written, the client usable", async (t) => {
  const db = await createTestDatabase({ partitions: null, poolSize: 2 });
  t.after(() => db.close());
  await db.pool.query("CREATE TABLE copied (n int NOT NULL)");
  const client = await db.pool.connect();
  // ECONNRESET as a source's own failure (a file on a network share): not the database's connection.
  const failure = Object.assign(new Error("the file could not be read"), { code: "ECONNRESET" });
  try {
    const source = async function* (): AsyncGenerator<string> {
      yield "1\n".repeat(100_000);
      throw failure;
    };
    await assert.rejects(copyIn(client, "COPY copied (n) FROM STDIN", source()), (err: unknown) => err === failure);
    assert.deepEqual((await client.query("SELECT count(*)::int AS n FROM copied")).rows, [{ n: 0 }]);
  } finally {
    client.release();
  }
});

test("the connection lost in the middle of the COPY: ConnectionLostError, nothing written", async (t) => {
  const db = await createTestDatabase({ partitions: null, poolSize: 2 });
  t.after(() => db.close());
  await db.pool.query("CREATE TABLE copied (n int NOT NULL)");
  const client = await db.pool.connect();
  let failed: unknown;
  try {
    const pid = backendPid(client)!;
    let terminated!: () => void;
    const gate = new Promise<void>((resolve) => (terminated = resolve));
    const source = async function* (): AsyncGenerator<string> {
      yield "1\n".repeat(1000);
      await gate;
      yield "2\n".repeat(1000);
    };
    // It may fail as soon as the server's FATAL arrives, before the source is read again.
    const copying = copyIn(client, "COPY copied (n) FROM STDIN", source()).then(
      () => undefined,
      (err: unknown) => err,
    );
    await pollUntil(
      "the COPY to be running",
      async () => (await db.pool.query("SELECT query FROM pg_stat_activity WHERE pid = $1", [pid])).rows[0]?.query,
      (q) => /^COPY/.test(q ?? ""),
    );
    await db.pool.query("SELECT pg_terminate_backend($1)", [pid]);
    await pollUntil(
      "the backend to be gone",
      async () =>
        (await db.pool.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = $1", [pid])).rows[0]!.n,
      (n) => n === 0,
    );
    terminated();
    failed = await copying;
  } finally {
    client.release(true);
  }
  assert.ok(failed instanceof ConnectionLostError, `a ConnectionLostError, got ${String(failed)}`);
  assert.deepEqual((await db.pool.query("SELECT count(*)::int AS n FROM copied")).rows, [{ n: 0 }]);
});

test(
  "a server that stops reading stops the reading of the source: it goes as far as the socket's buffers take, not to its end",
  { timeout: 60_000 },
  async (t) => {
    const db = await createTestDatabase({ partitions: null, poolSize: 3 });
    t.after(() => db.close());
    // The server sends CopyInResponse, then its statement trigger waits on a lock the test holds:
    // it reads nothing until the test lets go, and the socket backs up.
    await db.pool.query("CREATE TABLE slow_sink (s text NOT NULL)");
    await db.pool.query(`CREATE FUNCTION slow_sink_wait() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN PERFORM pg_advisory_xact_lock(7340033); RETURN NULL; END $$`);
    await db.pool.query(
      "CREATE TRIGGER slow_sink_wait BEFORE INSERT ON slow_sink FOR EACH STATEMENT EXECUTE FUNCTION slow_sink_wait()",
    );
    const holder = await db.pool.connect();
    const client = await db.pool.connect();
    try {
      await holder.query("SELECT pg_advisory_lock(7340033)");

      const socket = (client as PoolClient & { connection: { stream: Writable } }).connection.stream;
      const chunk = ("x".repeat(1023) + "\n").repeat(256); // 256 KB, the import's chunk size
      const total = 256; // 64 MB: far more than the kernel's socket buffers hold
      let pulled = 0;
      let mostQueued = 0;
      const source = async function* (): AsyncGenerator<string> {
        for (let i = 0; i < total; i++) {
          // What the client holds in memory, not yet handed to the kernel, when the next chunk is read.
          mostQueued = Math.max(mostQueued, socket.writableLength);
          pulled++;
          yield chunk;
        }
      };
      const copying = copyIn(client, "COPY slow_sink (s) FROM STDIN", source());
      await waitForLockWait(db.pool, () => backendPid(client));
      await pollUntil(
        "the socket to the server to back up",
        async () => socket.writableNeedDrain,
        (full) => full,
      );
      const pulledWhileBlocked = pulled;
      await holder.query("SELECT pg_advisory_unlock(7340033)");
      assert.equal(await copying, total * 256);
      // Without backpressure the whole source is read (into the COPY stream's or the socket's buffer) while the server reads nothing.
      assert.ok(
        pulledWhileBlocked < total,
        `the source was read to its end (${pulledWhileBlocked} chunks) while the server read nothing`,
      );
      assert.ok(
        mostQueued <= 2 * chunk.length,
        `at most two chunks queued in the socket's buffer, saw ${(mostQueued / 2 ** 20).toFixed(1)} MB`,
      );
    } finally {
      holder.release();
      client.release();
    }
  },
);
