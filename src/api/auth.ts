import { SignJWT, jwtVerify, errors as joseErrors } from "jose";
import type { FastifyInstance, FastifyRequest } from "fastify";
import fp from "fastify-plugin";
import { validateUserId } from "../ids.ts";
import { forbidden, unauthenticated } from "./errors.ts";

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

async function verify(secret: Uint8Array, header: string | undefined): Promise<Caller | null> {
  if (header === undefined) return null;
  const match = /^Bearer +([A-Za-z0-9_.-]+) *$/i.exec(header); // the scheme is case-insensitive (RFC 9110)
  if (!match) throw unauthenticated("Authorization must be 'Bearer <token>'");
  try {
    // A token without exp would be valid forever: refused (requiredClaims).
    const { payload } = await jwtVerify(match[1]!, secret, { algorithms: ["HS256"], issuer: ISSUER, requiredClaims: ["exp"] });
    if (typeof payload.sub !== "string") throw unauthenticated("token has no subject");
    // A subject that is no valid user id ("me" included) is a bad credential (401), not bad input (400).
    if (!isValidUserId(payload.sub)) throw unauthenticated("token subject is not a valid user id");
    return { id: payload.sub, admin: payload.role === "admin" };
  } catch (err) {
    if (err instanceof joseErrors.JOSEError) throw unauthenticated(`invalid token: ${err.code}`);
    throw err;
  }
}

/**
 * Reads the bearer token as the matched route's `config.auth` says, in onRequest: a route that
 * requires a caller answers 401 before its params, query or body are validated. An unmatched
 * request (404) reads no header.
 */
export const authPlugin = fp(async (app: FastifyInstance, options: { secret: Uint8Array }) => {
  app.decorateRequest("caller", null);
  app.addHook("onRequest", async (request) => {
    if (request.is404) return;
    const mode: AuthMode = request.routeOptions.config.auth ?? "required";
    if (mode === "none") return;
    request.caller = await verify(options.secret, request.headers.authorization);
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
