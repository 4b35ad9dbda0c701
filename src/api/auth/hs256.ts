import { SignJWT, jwtVerify, errors as joseErrors } from "jose";
import { createSecretKey, type KeyObject } from "node:crypto";
import { validateUserId } from "../../ids.ts";
import { unauthenticated } from "../errors.ts";
import { MINTED_CLAIMS, readCaller } from "./claims.ts";
import type { CheckedToken, TokenCheck } from "./token-check.ts";

const ISSUER = "social-ledger";
/** The default lifetime of a minted token (the CLI's `token --ttl`). */
export const DEFAULT_TOKEN_TTL_S = 30 * 24 * 3600;

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

/**
 * The embedded default: HS256 tokens of `social-ledger token`, under the generated secret (or
 * LEDGER_JWT_SECRET). Every refusal is 401 UNAUTHENTICATED naming jose's code. The key is
 * imported once.
 */
export class Hs256Check implements TokenCheck {
  private readonly key: KeyObject;

  constructor(secret: Uint8Array) {
    this.key = createSecretKey(secret);
  }

  async check(token: string, now: Date): Promise<CheckedToken> {
    try {
      // A token without exp would be valid forever: refused (requiredClaims).
      const { payload } = await jwtVerify(token, this.key, { algorithms: ["HS256"], issuer: ISSUER, requiredClaims: ["exp"], currentDate: now });
      const read = readCaller(payload, MINTED_CLAIMS);
      if ("problem" in read) throw unauthenticated(read.problem);
      return { caller: read.caller, exp: payload.exp!, nbf: payload.nbf, iat: payload.iat };
    } catch (err) {
      if (err instanceof joseErrors.JOSEError) throw unauthenticated(`invalid token: ${err.code}`);
      throw err;
    }
  }

  keyGeneration(): number {
    return 0;
  }
}
