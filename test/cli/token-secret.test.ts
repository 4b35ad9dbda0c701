/**
 * `social-ledger token` signs with the service's secret or says why it cannot: it names on stderr
 * the secret it used (LEDGER_JWT_SECRET, or the data directory's jwt-secret file), and without
 * that file (run elsewhere than the service's LEDGER_DATA_DIR) it is refused, exit 2, creating
 * nothing, unless --create-secret asks for a new one. Real CLI children.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { jwtVerify } from "jose";
import { childEnv, REPO_ROOT, runCli } from "./cli-child.ts";

const TOKEN = /^[\w-]+\.[\w-]+\.[\w-]+\n$/;

test("token: without the data directory's secret it is refused (exit 2, nothing created) unless --create-secret; it names the secret it signed with on stderr", async (t) => {
  const root = await mkdtemp(path.join(os.tmpdir(), "ledger-token-secret-"));
  t.after(() => rm(root, { recursive: true, force: true }));
  const dataDir = path.join(root, "data");
  const file = path.join(dataDir, "jwt-secret");
  const env = childEnv({ LEDGER_DATA_DIR: dataDir });

  const refused = await runCli(["token", "alice"], env);
  assert.equal(refused.code, 2, refused.stderr);
  assert.equal(refused.stdout, "");
  assert.equal(
    refused.stderr,
    `social-ledger token: LEDGER_DATA_DIR: no JWT secret at ${file}: the service creates it in its data directory when it first starts; run token with the service's LEDGER_DATA_DIR (or LEDGER_JWT_SECRET), or pass --create-secret to create one here before the first start\n`,
  );
  assert.equal(existsSync(dataDir), false, "nothing was created");

  const created = await runCli(["token", "alice", "--create-secret"], env);
  assert.equal(created.code, 0, created.stderr);
  assert.match(created.stdout, TOKEN);
  assert.equal(created.stderr, `social-ledger token: signed with the secret in ${file} (created now)\n`);
  const secret = new TextEncoder().encode(readFileSync(file, "utf8").trim());
  assert.equal((await jwtVerify(created.stdout.trim(), secret)).payload.sub, "alice", "signed with that file's secret");

  const again = await runCli(["token", "bob"], env);
  assert.equal(again.code, 0, again.stderr);
  assert.equal(again.stderr, `social-ledger token: signed with the secret in ${file}\n`);
  assert.equal((await jwtVerify(again.stdout.trim(), secret)).payload.sub, "bob");

  // A relative LEDGER_DATA_DIR is named as the absolute path it resolves to.
  const relative = await runCli(["token", "carol"], childEnv({ LEDGER_DATA_DIR: path.relative(REPO_ROOT, dataDir) }));
  assert.equal(relative.code, 0, relative.stderr);
  assert.equal(relative.stderr, `social-ledger token: signed with the secret in ${file}\n`);

  const fromEnvironment = await runCli(
    ["token", "dora"],
    childEnv({ LEDGER_DATA_DIR: path.join(root, "elsewhere"), LEDGER_JWT_SECRET: randomBytes(32).toString("hex") }),
  );
  assert.equal(fromEnvironment.code, 0, fromEnvironment.stderr);
  assert.match(fromEnvironment.stdout, TOKEN);
  assert.equal(fromEnvironment.stderr, "social-ledger token: signed with LEDGER_JWT_SECRET\n");
  assert.equal(existsSync(path.join(root, "elsewhere")), false);
});
