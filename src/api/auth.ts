import { SignJWT, jwtVerify, errors as joseErrors } from "jose";
import type { FastifyInstance, FastifyRequest } from "fastify";
import fp from "fastify-plugin";
import { validateId } from "../ids.ts";
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

const ISSUER = "social-ledger";

function isValidId(value: string): boolean {
  try {
    validateId("sub", value);
    return true;
  } catch {
    return false;
  }
}

/** Mints an HS256 token: `sub` is the acting user, `role: "admin"` unlocks admin routes. */
export async function signToken(secret: Uint8Array, userId: string, options: { admin?: boolean; ttlSeconds?: number } = {}): Promise<string> {
  validateId("userId", userId);
  return new SignJWT(options.admin ? { role: "admin" } : {})
    .setProtectedHeader({ alg: "HS256" })
    .setSubject(userId)
    .setIssuer(ISSUER)
    .setIssuedAt()
    .setExpirationTime(`${options.ttlSeconds ?? 24 * 3600}s`)
    .sign(secret);
}

async function verify(secret: Uint8Array, header: string | undefined): Promise<Caller | null> {
  if (header === undefined) return null;
  const match = /^Bearer +([A-Za-z0-9_.-]+) *$/i.exec(header); // the scheme is case-insensitive (RFC 9110)
  if (!match) throw unauthenticated("Authorization must be 'Bearer <token>'");
  try {
    const { payload } = await jwtVerify(match[1]!, secret, { algorithms: ["HS256"], issuer: ISSUER });
    if (typeof payload.sub !== "string") throw unauthenticated("token has no subject");
    // A subject that is no valid id is a bad credential (401), not bad input (400).
    if (!isValidId(payload.sub)) throw unauthenticated("token subject is not a valid user id");
    return { id: payload.sub, admin: payload.role === "admin" };
  } catch (err) {
    if (err instanceof joseErrors.JOSEError) throw unauthenticated(`invalid token: ${err.code}`);
    throw err;
  }
}

/** Reads the bearer token of every request; routes then demand what they need. */
export const authPlugin = fp(async (app: FastifyInstance, options: { secret: Uint8Array }) => {
  app.decorateRequest("caller", null);
  app.addHook("onRequest", async (request) => {
    // Only the API is authenticated: health, metrics and docs answer whatever the header says.
    if (!request.url.startsWith("/v1/")) return;
    request.caller = await verify(options.secret, request.headers.authorization);
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
