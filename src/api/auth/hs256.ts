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
export async function signToken(
  secret: Uint8Array,
  userId: string,
  options: { admin?: boolean; ttlSeconds?: number } = {},
): Promise<string> {
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
 * The likely cause of a signature that does not verify: the token was minted with another
 * secret, mostly by `social-ledger token` run with another data directory than the service's.
 */
export const WRONG_SECRET_HINT =
  "the token was signed with another secret than this service's; `social-ledger token` signs with LEDGER_JWT_SECRET or the jwt-secret file of LEDGER_DATA_DIR (it names the one it used on stderr): mint it with the service's LEDGER_DATA_DIR or LEDGER_JWT_SECRET";

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
      const { payload } = await jwtVerify(token, this.key, {
        algorithms: ["HS256"],
        issuer: ISSUER,
        requiredClaims: ["exp"],
        currentDate: now,
      });
      const read = readCaller(payload, MINTED_CLAIMS);
      if ("problem" in read) throw unauthenticated(read.problem);
      return { caller: read.caller, exp: payload.exp!, nbf: payload.nbf, iat: payload.iat };
    } catch (err) {
      if (err instanceof joseErrors.JWSSignatureVerificationFailed)
        throw unauthenticated(`invalid token: ${err.code}: ${WRONG_SECRET_HINT}`);
      if (err instanceof joseErrors.JOSEError) throw unauthenticated(`invalid token: ${err.code}`);
      throw err;
    }
  }

  keyGeneration(): number {
    return 0;
  }
}
