import { SignJWT, jwtVerify, errors as joseErrors } from "jose";
import { LRUCache } from "lru-cache";
import { createSecretKey, type KeyObject } from "node:crypto";
import type { FastifyInstance, FastifyRequest } from "fastify";
import fp from "fastify-plugin";
import { MAX_TOKEN_TTL_S } from "../config.ts";
import { validateUserId } from "../ids.ts";
import { HttpError, forbidden, unauthenticated } from "./errors.ts";

export interface Caller {
  id: string;
  admin: boolean;
}

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

const ISSUER = "social-ledger";
/** The default lifetime of a minted token (the CLI's `token --ttl`). */
export const DEFAULT_TOKEN_TTL_S = 30 * 24 * 3600;
function isValidUserId(value: string): boolean {
  try {
    validateUserId("sub", value);
    return true;
  } catch {
    return false;
  }
}

/** Mints an HS256 token: `sub` is the acting user, `role: "admin"` unlocks admin routes, `exp` is always set. */
export async function signToken(secret: Uint8Array, userId: string, options: { admin?: boolean; ttlSeconds?: number } = {}): Promise<string> {
  validateUserId("userId", userId);
  return new SignJWT(options.admin ? { role: "admin" } : {})
    .setProtectedHeader({ alg: "HS256" })
    .setSubject(userId)
    .setIssuer(ISSUER)
    .setIssuedAt()
    .setExpirationTime(`${options.ttlSeconds ?? DEFAULT_TOKEN_TTL_S}s`)
    .sign(secret);
}

/** A verified token's caller and the claims that decide, at each use, whether it is still valid. */
interface VerifiedToken {
  caller: Caller;
  exp: number;
  nbf: number | undefined;
}

/** Distinct tokens kept verified; a token past its exp is verified again (and refused) whatever the cache holds. */
const VERIFIED_TOKENS = 10_000;

/**
 * Checks bearer tokens. Verifying an HS256 token with jose costs a WebCrypto key import and an
 * HMAC on every request (a sixth of the server's CPU per like in the bench), so a token that
 * verified once is remembered by its exact compact form: its signature, issuer, subject and role
 * cannot change, since any change to the string is another cache key. What does change is time,
 * so exp and nbf are compared with the clock on every use, and a token outside them is handed to
 * jose again, which refuses it with its own error code. The key is imported once.
 */
export class TokenVerifier {
  private readonly key: KeyObject;
  private readonly verified = new LRUCache<string, VerifiedToken>({ max: VERIFIED_TOKENS });

  constructor(secret: Uint8Array, private readonly now: () => number = Date.now, private readonly maxTtlSeconds: number = MAX_TOKEN_TTL_S) {
    this.key = createSecretKey(secret);
  }

  async verify(header: string | undefined): Promise<Caller | null> {
    if (header === undefined) return null;
    const match = /^Bearer +([A-Za-z0-9_.-]+) *$/i.exec(header); // the scheme is case-insensitive (RFC 9110)
    if (!match) throw unauthenticated("Authorization must be 'Bearer <token>'");
    const token = match[1]!;
    const nowMs = this.now();
    const known = this.verified.get(token);
    if (known && this.inTime(known, nowMs)) return known.caller;
    try {
      // A token without exp would be valid forever: refused (requiredClaims).
      const { payload } = await jwtVerify(token, this.key, {
        algorithms: ["HS256"], issuer: ISSUER, requiredClaims: ["exp"], currentDate: new Date(nowMs),
      });
      if (typeof payload.sub !== "string") throw unauthenticated("token has no subject");
      // A subject that is no valid user id ("me" included) is a bad credential (401), not bad input (400).
      if (!isValidUserId(payload.sub)) throw unauthenticated("token subject is not a valid user id");
      this.requireBoundedLifetime(payload.exp!, payload.iat, nowMs);
      const caller: Caller = { id: payload.sub, admin: payload.role === "admin" };
      this.verified.set(token, { caller, exp: payload.exp!, nbf: payload.nbf });
      return caller;
    } catch (err) {
      if (err instanceof joseErrors.JOSEError) throw unauthenticated(`invalid token: ${err.code}`);
      throw err;
    }
  }

  /**
   * A token's lifetime is exp - iat, or exp - now when it has no iat or claims one in the future
   * (iat is the minter's word; what counts is how long the token stays valid from now). exp
   * must be bounded: a leaked token with exp = 1e300 would be valid forever. A cached token
   * passed this check when it was first verified, and its exp - now only shrinks.
   */
  private requireBoundedLifetime(exp: number, iat: number | undefined, nowMs: number): void {
    const now = Math.floor(nowMs / 1000);
    const lifetime = exp - Math.min(iat ?? now, now);
    if (!(lifetime <= this.maxTtlSeconds)) {
      throw new HttpError(401, "TOKEN_LIFETIME_TOO_LONG", `the token is valid for longer than ${this.maxTtlSeconds} s (LEDGER_JWT_MAX_TTL_SECONDS); mint one with a shorter lifetime`);
    }
  }

  /** jose's own rule (no clock tolerance): valid while now < exp and nbf <= now, in whole seconds. */
  private inTime(token: VerifiedToken, nowMs: number): boolean {
    const now = Math.floor(nowMs / 1000);
    return now < token.exp && (token.nbf === undefined || token.nbf <= now);
  }
}

/**
 * Reads the bearer token as the matched route's `config.auth` says, in onRequest: a route that
 * requires a caller answers 401 before its params, query or body are validated. An unmatched
 * request (404) reads no header.
 */
export const authPlugin = fp(async (app: FastifyInstance, options: { secret: Uint8Array; maxTtlSeconds?: number }) => {
  const tokens = new TokenVerifier(options.secret, Date.now, options.maxTtlSeconds);
  app.decorateRequest("caller", null);
  app.addHook("onRequest", async (request) => {
    if (request.is404) return;
    const mode: AuthMode = request.routeOptions.config.auth ?? "required";
    if (mode === "none") return;
    request.caller = await tokens.verify(request.headers.authorization);
    if (mode === "required" && !request.caller) throw unauthenticated("a bearer token is required");
  });
});

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
