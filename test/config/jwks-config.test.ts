import assert from "node:assert/strict";
import { test } from "node:test";
import { loadConfig } from "../../src/config.ts";
import { InvalidInputError } from "../../src/errors.ts";

/** LEDGER_JWKS_URL and its companions: a provider setup that is incomplete or contradictory is refused at start, by name. */

const PROVIDER = {
  LEDGER_JWKS_URL: "https://id.example.com/.well-known/jwks.json",
  LEDGER_JWT_ISSUER: "https://id.example.com/",
  LEDGER_JWT_AUDIENCE: "social-ledger-api",
};

function refused(env: NodeJS.ProcessEnv, field: string, message: RegExp): void {
  assert.throws(
    () => loadConfig(env),
    (err: unknown) => {
      assert.ok(err instanceof InvalidInputError, `expected InvalidInputError, got ${String(err)}`);
      assert.equal(err.field, field);
      assert.match(err.message, message);
      return true;
    },
    JSON.stringify(env),
  );
}

test("config: without LEDGER_JWKS_URL there is no provider (HS256, the embedded default)", () => {
  assert.equal(loadConfig({}).jwks, undefined);
});

test("config: a provider with its defaults (sub, role admin, 30 s cooldown, 10 min max age), and with every variable set", () => {
  assert.deepEqual(loadConfig(PROVIDER).jwks, {
    url: PROVIDER.LEDGER_JWKS_URL,
    issuer: PROVIDER.LEDGER_JWT_ISSUER,
    audience: ["social-ledger-api"],
    userClaim: "sub",
    adminClaim: "role",
    adminValue: "admin",
    cooldownMs: 30_000,
    cacheMaxAgeMs: 600_000,
    tokenTypes: ["at+jwt"],
  });
  assert.deepEqual(
    loadConfig({
      ...PROVIDER,
      LEDGER_JWT_AUDIENCE: " web , mobile,",
      LEDGER_JWT_USER_CLAIM: "preferred_username",
      LEDGER_JWT_ADMIN_CLAIM: "groups",
      LEDGER_JWT_ADMIN_VALUE: "Ledger Admins",
      LEDGER_JWKS_COOLDOWN_MS: "5000",
      LEDGER_JWKS_MAX_AGE_MS: "0",
      LEDGER_JWT_TYPES: " at+jwt, application/JWT ,JWT",
    }).jwks,
    {
      url: PROVIDER.LEDGER_JWKS_URL,
      issuer: PROVIDER.LEDGER_JWT_ISSUER,
      audience: ["web", "mobile"],
      userClaim: "preferred_username",
      adminClaim: "groups",
      adminValue: "Ledger Admins",
      cooldownMs: 5000,
      cacheMaxAgeMs: 0,
      tokenTypes: ["at+jwt", "jwt"],
    },
  );
  assert.equal(
    loadConfig({ ...PROVIDER, LEDGER_JWKS_URL: "http://127.0.0.1:8081/jwks" }).jwks?.url,
    "http://127.0.0.1:8081/jwks",
    "plain http on loopback",
  );
});

test("config: a provider without its issuer or audience is refused, so is plain http off loopback or a URL that is none", () => {
  refused({ ...PROVIDER, LEDGER_JWT_ISSUER: "" }, "LEDGER_JWT_ISSUER", /required when LEDGER_JWKS_URL is set/);
  refused({ ...PROVIDER, LEDGER_JWT_ISSUER: undefined }, "LEDGER_JWT_ISSUER", /required when LEDGER_JWKS_URL is set/);
  refused(
    { ...PROVIDER, LEDGER_JWT_AUDIENCE: undefined },
    "LEDGER_JWT_AUDIENCE",
    /required when LEDGER_JWKS_URL is set/,
  );
  refused({ ...PROVIDER, LEDGER_JWT_AUDIENCE: " , " }, "LEDGER_JWT_AUDIENCE", /required when LEDGER_JWKS_URL is set/);
  refused({ ...PROVIDER, LEDGER_JWKS_URL: "http://id.example.com/jwks" }, "LEDGER_JWKS_URL", /https/);
  refused({ ...PROVIDER, LEDGER_JWKS_URL: "id.example.com/jwks" }, "LEDGER_JWKS_URL", /https/);
  refused({ ...PROVIDER, LEDGER_JWKS_URL: "file:///etc/jwks.json" }, "LEDGER_JWKS_URL", /https/);
  refused({ ...PROVIDER, LEDGER_JWT_USER_CLAIM: "user name" }, "LEDGER_JWT_USER_CLAIM", /claim name/);
  refused({ ...PROVIDER, LEDGER_JWKS_COOLDOWN_MS: "-1" }, "LEDGER_JWKS_COOLDOWN_MS", /integer/);
  refused({ ...PROVIDER, LEDGER_JWT_TYPES: "at+jwt JWT" }, "LEDGER_JWT_TYPES", /comma-separated media types/);
  refused({ ...PROVIDER, LEDGER_JWT_TYPES: " , " }, "LEDGER_JWT_TYPES", /comma-separated media types/);
});

test("config: LEDGER_JWT_SECRET with a provider, or a provider's companion without LEDGER_JWKS_URL, is refused (it would be silently ignored)", () => {
  refused(
    { ...PROVIDER, LEDGER_JWT_SECRET: "x".repeat(40) },
    "LEDGER_JWT_SECRET",
    /HS256 tokens are refused when LEDGER_JWKS_URL is set/,
  );
  for (const name of [
    "LEDGER_JWT_ISSUER",
    "LEDGER_JWT_AUDIENCE",
    "LEDGER_JWT_USER_CLAIM",
    "LEDGER_JWT_ADMIN_CLAIM",
    "LEDGER_JWT_ADMIN_VALUE",
    "LEDGER_JWT_TYPES",
    "LEDGER_JWKS_COOLDOWN_MS",
    "LEDGER_JWKS_MAX_AGE_MS",
  ]) {
    refused({ [name]: "5" }, name, /applies only with LEDGER_JWKS_URL/);
  }
});
