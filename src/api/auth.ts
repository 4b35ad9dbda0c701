import type { FastifyInstance, FastifyRequest } from "fastify";
import fp from "fastify-plugin";
import type { JwksConfig } from "../config.ts";
import { HttpError, forbidden, unauthenticated } from "./errors.ts";
import type { RefusalBudget } from "./rate-limits.ts";
import type { Caller } from "./auth/claims.ts";
import { ProviderCheck } from "./auth/provider-check.ts";
import { ProviderKeys } from "./auth/provider-keys.ts";
import { TokenVerifier } from "./auth/token-verifier.ts";

export type { Caller } from "./auth/claims.ts";
export { DEFAULT_TOKEN_TTL_S, signToken } from "./auth/hs256.ts";
export { TokenVerifier } from "./auth/token-verifier.ts";

declare module "fastify" {
  interface FastifyRequest {
    caller: Caller | null;
  }
}

/**
 * Who may call a route, declared in its `config`: `required` (401 without a valid token,
 * before the input is looked at), `optional` (public data; a token that is sent must be valid)
 * or `none` (health, metrics, docs: the header is not read). A route that declares nothing
 * requires a token.
 */
export type AuthMode = "required" | "optional" | "none";

declare module "fastify" {
  interface FastifyContextConfig {
    auth?: AuthMode;
  }
}

/** The identity provider's settings (LEDGER_JWKS_URL and its companions), and how long a fetch of its keys may take. */
export type JwksOptions = JwksConfig & { timeoutMs?: number };

export interface AuthOptions {
  /** HS256 tokens under this secret (the embedded default); ignored when `jwks` is set. */
  secret?: Uint8Array;
  /** Tokens of the identity provider only: HS256 tokens are then refused, whatever `secret` says. */
  jwks?: JwksOptions;
  maxTtlSeconds?: number;
  /** Refused tokens per client address (rate-limits.ts); absent: refusals are not limited. */
  refusals?: RefusalBudget;
}

/** The provider's keys and the check of its tokens; the app logs what happens to the keys and fetches them once at start. */
function providerCheck(app: FastifyInstance, jwks: JwksOptions): ProviderCheck {
  const keys = new ProviderKeys({
    url: jwks.url,
    cooldownMs: jwks.cooldownMs,
    cacheMaxAgeMs: jwks.cacheMaxAgeMs,
    ...(jwks.timeoutMs === undefined ? {} : { timeoutMs: jwks.timeoutMs }),
    onFetchFailed: (reason) =>
      app.log.warn(
        { jwks: { url: jwks.url, reason } },
        "the identity provider's keys could not be fetched; tokens with a key of the last fetched set still work, others get 401 TOKEN_KEY_UNAVAILABLE",
      ),
    onKeysChanged: (kids) => app.log.info({ jwks: { url: jwks.url, kids } }, "fetched the identity provider's keys"),
  });
  // Not awaited: a provider that is down must not keep the service from starting.
  app.addHook("onReady", async () => void keys.warmUp());
  const { userClaim, adminClaim, adminValue } = jwks;
  return new ProviderCheck(keys, {
    issuer: jwks.issuer,
    audience: jwks.audience,
    claims: { userClaim, adminClaim, adminValue },
    ...(jwks.tokenTypes ? { tokenTypes: jwks.tokenTypes } : {}),
  });
}

/**
 * Reads the bearer token as the matched route's `config.auth` says, in onRequest: a route that
 * requires a caller answers 401 before its params, query or body are validated. An unmatched
 * request (404) reads no header.
 */
export const authPlugin = fp(async (app: FastifyInstance, options: AuthOptions) => {
  const source = options.jwks ? providerCheck(app, options.jwks) : options.secret;
  if (!source) throw new Error("authPlugin needs a secret (HS256) or jwks (an identity provider)");
  const tokens = new TokenVerifier(source, Date.now, options.maxTtlSeconds);
  app.decorateRequest("caller", null);
  // A callback hook, not an async one: a remembered token (every request but a token's first)
  // is decided without a promise or a turn of the microtask queue.
  const { refusals } = options;
  app.addHook("onRequest", (request, reply, done) => {
    if (request.is404) return done();
    const mode: AuthMode = request.routeOptions.config.auth ?? "required";
    if (mode === "none") return done();
    const header = request.headers.authorization;
    const remembered = tokens.remembered(header);
    // Every request with a known token: admitted with nothing allocated (no refusal can follow).
    if (remembered) {
      request.caller = remembered;
      return done();
    }
    // A 401 of this hook draws on the address's budget of refusals; other errors pass as they are.
    const answer = refusals
      ? (err?: Error) =>
          err instanceof HttpError && err.statusCode === 401 ? refusals.count(request, reply, err, done) : done(err)
      : done;
    if (remembered !== undefined) return admit(request, mode, remembered, answer);
    const early = refusals?.refuseEarly(request, reply);
    if (early) return done(early);
    tokens.verify(header).then((caller) => admit(request, mode, caller, answer), answer);
  });
});

function admit(request: FastifyRequest, mode: AuthMode, caller: Caller | null, done: (err?: Error) => void): void {
  request.caller = caller;
  if (mode === "required" && !caller) return done(unauthenticated("a bearer token is required"));
  done();
}

export function requireCaller(request: FastifyRequest): Caller {
  if (!request.caller) throw unauthenticated("a bearer token is required");
  return request.caller;
}

export function requireAdmin(request: FastifyRequest): Caller {
  const caller = requireCaller(request);
  if (!caller.admin) throw forbidden("admin role required");
  return caller;
}

/** Admins may act for anyone (for account setup); everybody else only for themselves. */
export function requireSelfOrAdmin(request: FastifyRequest, userId: string): Caller {
  const caller = requireCaller(request);
  if (caller.id !== userId && !caller.admin) throw forbidden("you may only act for yourself");
  return caller;
}
