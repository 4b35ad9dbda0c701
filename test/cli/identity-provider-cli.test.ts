/**
 * Provider tokens as real child processes: `social-ledger token` refuses to mint under a JWKS
 * setup (exit 2, `social-ledger token: ...`, no secret generated); an incomplete provider setup
 * stops serve before it starts anything; and serve with a provider that is down at start
 * listens, answers 401 TOKEN_KEY_UNAVAILABLE, and takes the provider's tokens once it answers,
 * without a restart and without an HS256 secret in its data directory.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { rm } from "node:fs/promises";
import path from "node:path";
import { clusterTempDir } from "../../src/db/embedded-cluster.ts";
import { TestProvider } from "../support/identity-provider.ts";
import { childEnv, httpClient, runCli } from "./cli-child.ts";
import { serveLab } from "./serve-lab.ts";

const PROVIDER = {
  LEDGER_JWKS_URL: "https://id.example.com/.well-known/jwks.json",
  LEDGER_JWT_ISSUER: "https://id.example.com/",
  LEDGER_JWT_AUDIENCE: "social-ledger-api",
};
const LISTENING = /^social-ledger listening on (http:\/\/\S+)$/;

test("token under LEDGER_JWKS_URL: exit 2 with 'social-ledger token: ...', nothing on stdout, no secret generated; an incomplete provider setup is exit 2 for token and serve", async (t) => {
  const dataDir = await clusterTempDir("ledger-token-jwks-");
  t.after(() => rm(dataDir, { recursive: true, force: true }));
  const env = (vars: Record<string, string | undefined>) =>
    childEnv(
      Object.fromEntries(
        Object.entries({ LEDGER_DATA_DIR: dataDir, ...vars }).filter(([, v]) => v !== undefined),
      ) as Record<string, string>,
    );
  const cases: { args: string[]; vars: Record<string, string | undefined>; stderr: RegExp }[] = [
    {
      args: ["token", "alice"],
      vars: PROVIDER,
      stderr:
        /^social-ledger token: LEDGER_JWKS_URL: is set: tokens come from the identity provider \(https:\/\/id\.example\.com\/\), and this service refuses the HS256 tokens token mints; get one from the provider$/m,
    },
    { args: ["token", "root", "--admin"], vars: PROVIDER, stderr: /^social-ledger token: LEDGER_JWKS_URL: is set/m },
    {
      args: ["token", "alice"],
      vars: { ...PROVIDER, LEDGER_JWT_ISSUER: undefined },
      stderr: /^social-ledger token: LEDGER_JWT_ISSUER: is required when LEDGER_JWKS_URL is set$/m,
    },
    {
      args: ["serve"],
      vars: { ...PROVIDER, LEDGER_JWT_AUDIENCE: undefined },
      stderr: /^social-ledger serve: LEDGER_JWT_AUDIENCE: is required when LEDGER_JWKS_URL is set/m,
    },
    {
      args: ["serve"],
      vars: { ...PROVIDER, LEDGER_JWT_SECRET: "s".repeat(40) },
      stderr: /^social-ledger serve: LEDGER_JWT_SECRET: HS256 tokens are refused when LEDGER_JWKS_URL is set/m,
    },
    {
      args: ["serve"],
      vars: { LEDGER_JWT_AUDIENCE: "api" },
      stderr: /^social-ledger serve: LEDGER_JWT_AUDIENCE: applies only with LEDGER_JWKS_URL/m,
    },
  ];
  // Two at a time with a long deadline: `serve` loads the whole runtime before it reads the config, and the machine is shared.
  const results: Awaited<ReturnType<typeof runCli>>[] = [];
  for (let i = 0; i < cases.length; i += 2) {
    results.push(...(await Promise.all(cases.slice(i, i + 2).map((c) => runCli(c.args, env(c.vars), 120_000)))));
  }
  results.forEach((result, i) => {
    const { args, stderr } = cases[i]!;
    assert.equal(result.code, 2, `${args.join(" ")}: exit code (stderr: ${result.stderr})`);
    assert.match(result.stderr, stderr, `${args.join(" ")}: message`);
    assert.equal(result.stdout, "", `${args.join(" ")}: no token, no log`);
  });
  assert.equal(existsSync(path.join(dataDir, "jwt-secret")), false, "no HS256 secret was generated");
  assert.equal(existsSync(path.join(dataDir, "pg")), false, "serve started no PostgreSQL");
  // Control: the same data directory without a provider mints a token (the refusal is the provider's).
  const minted = await runCli(["token", "alice", "--create-secret"], env({}));
  assert.equal(minted.code, 0, minted.stderr);
  assert.match(minted.stdout, /^[\w-]+\.[\w-]+\.[\w-]+\n$/);
});

test(
  "serve with a provider down at start listens, answers 401 TOKEN_KEY_UNAVAILABLE, then takes its tokens once it answers (no restart, no HS256 secret)",
  { timeout: 240_000 },
  async (t) => {
    const idp = await TestProvider.start();
    t.after(() => idp.close());
    const key = await idp.addKey("ES256", "k1");
    idp.mode = "reset";
    const lab = await serveLab(t, "ledger-serve-jwks-", {
      LEDGER_JWKS_URL: idp.url,
      LEDGER_JWT_ISSUER: idp.issuer,
      LEDGER_JWT_AUDIENCE: idp.audience,
      LEDGER_JWKS_COOLDOWN_MS: "0",
      LOG_LEVEL: "info",
    });
    const serve = lab.serve("serve (provider down)");
    const address = LISTENING.exec(await serve.waitFor(LISTENING, 120_000))![1]!;
    await serve.waitFor(
      /^ {2}tokens: {4}from the identity provider https:\/\/id\.example\.test\/ \(aud social-ledger-api; keys: http:\/\/127\.0\.0\.1:\d+\/\.well-known\/jwks\.json\)$/,
    );
    assert.doesNotMatch(
      serve.stderr,
      /social-ledger token/,
      "the banner does not offer a token the service would refuse",
    );
    const warned = JSON.parse(await serve.waitFor(/"jwks":\{"url".*"reason"/)) as { jwks: { reason: string } };
    t.diagnostic(`note the start's log: ${warned.jwks.reason}`);
    const http = httpClient(address);
    const token = await idp.sign(key, { role: "admin" }, { sub: "root" });
    const down = await http<{ error: { code: string } }>("GET", "/v1/admin/status", token);
    assert.deepEqual([down.status, down.body.error.code], [401, "TOKEN_KEY_UNAVAILABLE"]);
    assert.equal((await http("GET", "/healthz")).status, 200);
    idp.mode = "up";
    assert.equal(
      (await http("GET", "/v1/admin/status", token)).status,
      200,
      "the provider answers: the same token works",
    );
    await serve.waitFor(/"jwks":\{"url".*"kids":\["k1"\]/);
    assert.equal(existsSync(path.join(lab.dataDir, "jwt-secret")), false, "no HS256 secret under a provider");
    assert.deepEqual(await serve.stop("SIGTERM"), { code: 0, signal: null });
  },
);
