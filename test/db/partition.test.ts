import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { stablePartition } from "../../src/partition.ts";
import { initLedger, readPartitions } from "../../src/db/ledger-config.ts";
import { seededRandom } from "../support/concurrency.ts";
import { createTestDatabase, type TestDatabase } from "../support/test-db.ts";

/**
 * stablePartition (TypeScript, used by the write path) and ledger_partition (SQL, used by
 * the audits and the rebuild) must be the same function, or events land in one partition
 * while the audits look for them in another.
 */

const PARTITION_COUNTS = [1, 2, 3, 4, 7, 16];

/** ~2000 deterministic keys: ids as the app makes them, edge cases, and random unicode. */
function generatedKeys(): string[] {
  const random = seededRandom(32);
  const keys = new Set<string>([
    "",
    "a",
    "A",
    " ",
    "user-00",
    "user-01",
    "item-lab-01",
    "x".repeat(128),
    "x".repeat(1000),
    "é",
    "e\u0301",
    "ß",
    "日本語",
    "Ελληνικά",
    "😀",
    "👩‍👩‍👧",
    "\u{10FFFF}",
    "\uFEFFbom",
    "tab\there",
    "new\nline",
    "'quote\"",
  ]);
  for (let i = 0; keys.size < 1000; i++) keys.add(`user-${String(i).padStart(2, "0")}`);
  const alphabets = [
    "abcdefghijklmnopqrstuvwxyz0123456789-_.:@",
    "äöüßéèêñçåøæ",
    "αβγδεζηθλμπσω",
    "你好世界数据库分区哈希",
    "😀🎉🚀🌍🔥💡",
    "\u0301\u0308\u200d",
  ];
  while (keys.size < 2000) {
    const length = 1 + Math.floor(random() * 24);
    let key = "";
    for (let i = 0; i < length; i++) {
      const alphabet = [...alphabets[Math.floor(random() * alphabets.length)]!];
      key += alphabet[Math.floor(random() * alphabet.length)];
    }
    keys.add(key);
  }
  return [...keys];
}

async function sqlPartitions(db: TestDatabase, keys: string[], partitions: number[]): Promise<Map<string, number>> {
  const { rows } = await db.pool.query<{ i: number; p: number; part: number }>(
    `SELECT k.i::int AS i, p.p, ledger_partition(k.key, p.p) AS part
       FROM unnest($1::text[]) WITH ORDINALITY AS k(key, i)
      CROSS JOIN unnest($2::int[]) AS p(p)`,
    [keys, partitions],
  );
  return new Map(rows.map((r) => [`${r.i - 1}/${r.p}`, r.part]));
}

function mismatches(
  keys: string[],
  partitions: number[],
  sql: Map<string, number>,
  ts: (key: string, p: number) => number,
): string[] {
  const out: string[] = [];
  keys.forEach((key, i) => {
    for (const p of partitions) {
      const expected = sql.get(`${i}/${p}`);
      const actual = ts(key, p);
      if (expected !== actual) out.push(`${JSON.stringify(key)} P=${p}: sql=${expected} ts=${actual}`);
    }
  });
  return out;
}

/** Largest relative deviation of a bucket from the mean. */
function maxDeviation(
  keys: string[],
  partitions: number,
  partitionOf: (key: string, p: number) => number,
): { counts: number[]; deviation: number } {
  const counts = Array.from({ length: partitions }, () => 0);
  for (const key of keys) counts[partitionOf(key, partitions)]!++;
  const mean = keys.length / partitions;
  return { counts, deviation: Math.max(...counts.map((c) => Math.abs(c - mean) / mean)) };
}

let db: TestDatabase;
const keys = generatedKeys();

test.before(async () => {
  db = await createTestDatabase();
});
test.after(async () => {
  await db?.close();
});

test("stablePartition equals SQL ledger_partition for 2000 keys (unicode included) and P in {1,2,3,4,7,16}", async (t) => {
  const encoding = await db.pool.query<{ server_encoding: string }>("SHOW server_encoding");
  t.diagnostic(`note server_encoding=${encoding.rows[0]!.server_encoding}, ${keys.length} keys`);
  assert.equal(keys.length, 2000);
  assert.ok(keys.filter((k) => [...k].some((ch) => ch.codePointAt(0)! > 0x7f)).length > 500, "many keys are non-ASCII");
  const sql = await sqlPartitions(db, keys, PARTITION_COUNTS);
  assert.equal(sql.size, keys.length * PARTITION_COUNTS.length);
  assert.deepEqual(mismatches(keys, PARTITION_COUNTS, sql, stablePartition), []);
  // Both sides treat the 32-bit prefix as unsigned: keys whose md5 starts with a set bit exist
  // and still map into 0..P-1.
  const highBit = keys.filter((k) => createHash("md5").update(k, "utf8").digest()[0]! >= 0x80);
  assert.ok(highBit.length > 500, "plenty of keys have the top bit of the prefix set");
  for (const key of highBit)
    for (const p of PARTITION_COUNTS) {
      const part = stablePartition(key, p);
      assert.ok(Number.isInteger(part) && part >= 0 && part < p);
    }
});

test("negative control: a signed reading of the prefix disagrees with SQL, and the comparison sees it", async () => {
  const signed = (key: string, p: number): number =>
    p === 1 ? 0 : ((createHash("md5").update(key, "utf8").digest().readInt32BE(0) % p) + p) % p;
  const latin1 = (key: string, p: number): number =>
    p === 1 ? 0 : createHash("md5").update(key, "latin1").digest().readUInt32BE(0) % p;
  const sql = await sqlPartitions(db, keys, PARTITION_COUNTS);
  assert.ok(mismatches(keys, PARTITION_COUNTS, sql, signed).length > 100, "a sign bug is visible");
  assert.ok(mismatches(keys, PARTITION_COUNTS, sql, latin1).length > 100, "an encoding bug is visible");
});

test("distribution over P = 4 is even: every bucket within 20% of the mean", (t) => {
  const { counts, deviation } = maxDeviation(keys, 4, stablePartition);
  t.diagnostic(`note P=4 buckets ${counts.join("/")} max deviation ${(deviation * 100).toFixed(1)}%`);
  assert.equal(
    counts.reduce((a, b) => a + b, 0),
    keys.length,
  );
  assert.ok(deviation <= 0.2, `buckets ${counts.join("/")} deviate ${(deviation * 100).toFixed(1)}% from the mean`);
  for (const p of [2, 3, 7, 16]) {
    const other = maxDeviation(keys, p, stablePartition);
    assert.ok(other.deviation <= 0.3, `P=${p}: buckets ${other.counts.join("/")}`);
  }
});

test("negative control: a skewed partition function fails the same distribution check", () => {
  const byLength = (key: string, p: number): number => [...key].length % p;
  const byFirstChar = (key: string, p: number): number => (key.codePointAt(0) ?? 0) % p;
  assert.ok(maxDeviation(keys, 4, byLength).deviation > 0.2, "length bucketing is caught");
  assert.ok(maxDeviation(keys, 4, byFirstChar).deviation > 0.2, "first-character bucketing is caught");
});

test("partitioned by default: a database the service creates gets P = 16 (SERVICE_PARTITIONS_OF_NEW), the library's initLedger keeps the chapter's 1, and an existing database keeps its own P", async (t) => {
  const { openDatabase, SERVICE_PARTITIONS_OF_NEW } = await import("../../src/runtime/database.ts");
  const { loadConfig } = await import("../../src/config.ts");
  const fresh = await createTestDatabase({ partitions: null, poolSize: 2 });
  const library = await createTestDatabase({ partitions: null, poolSize: 2 });
  t.after(async () => {
    await fresh.close();
    await library.close();
  });
  const config = loadConfig({ DATABASE_URL: fresh.url });
  const database = await openDatabase(config, { poolSize: 2 });
  try {
    assert.equal(await readPartitions(database.pool), SERVICE_PARTITIONS_OF_NEW);
  } finally {
    await database.close();
  }
  assert.equal(SERVICE_PARTITIONS_OF_NEW, 16);
  assert.equal(await initLedger(library.pool), 1, "the library's default is the chapter's P = 1");
  assert.equal(await initLedger(library.pool, { partitionsOfNew: 8 }), 1, "an existing database keeps its P");
  const again = await openDatabase(loadConfig({ DATABASE_URL: fresh.url }), { poolSize: 2 });
  try {
    assert.equal(
      await readPartitions(again.pool),
      SERVICE_PARTITIONS_OF_NEW,
      "reopened without LEDGER_PARTITIONS: still the P it was created with",
    );
  } finally {
    await again.close();
  }
});
