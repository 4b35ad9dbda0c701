import { LRUCache } from "lru-cache";
import { MAX_TOKEN_TTL_S } from "../../config.ts";
import { HttpError, unauthenticated } from "../errors.ts";
import type { Caller } from "./claims.ts";
import { Hs256Check } from "./hs256.ts";
import type { TokenCheck } from "./token-check.ts";

/** A verified token as remembered: its caller, its validity window, and the key generation it was checked under. */
interface VerifiedToken {
  caller: Caller;
  exp: number;
  nbf: number | undefined;
  keyGeneration: number;
}

/** Distinct tokens kept verified; a token past its exp is verified again (and refused) whatever the cache holds. */
const VERIFIED_TOKENS = 10_000;

/**
 * Checks bearer tokens. Verifying a token with jose costs a WebCrypto key import and a signature
 * check on every request (for HS256, a sixth of the server's CPU per like in the bench), so a
 * token that verified once is remembered by its exact Authorization header (so by its compact form): its signature, issuer,
 * subject and role cannot change, since any change to the string is another cache key. What
 * does change is time, so exp and nbf are compared with the clock on every use, and a token
 * outside them is handed to the check again, which refuses it with its own error code; and so
 * does the provider's key set, so a token checked before a key was withdrawn is checked again.
 */
export class TokenVerifier {
  private readonly tokens: TokenCheck;
  private readonly verified = new LRUCache<string, VerifiedToken>({ max: VERIFIED_TOKENS });

  /** `source`: the HS256 secret, or another check (the identity provider's, provider-check.ts). */
  constructor(
    source: Uint8Array | TokenCheck,
    private readonly now: () => number = Date.now,
    private readonly maxTtlSeconds: number = MAX_TOKEN_TTL_S,
  ) {
    this.tokens = source instanceof Uint8Array ? new Hs256Check(source) : source;
  }

  /**
   * The caller of a header whose token verified before and is still valid now, decided without
   * awaiting anything (every request with a known token takes this path): null without a
   * header, undefined when verify() must decide (never seen, outside its exp or nbf, or checked
   * under keys the provider has withdrawn since). Keyed by the exact header, which names exactly
   * one token: it passed the Bearer syntax check when it was first verified.
   */
  remembered(header: string | undefined): Caller | null | undefined {
    if (header === undefined) return null;
    const known = this.verified.get(header);
    if (known && this.inTime(known, this.now()) && known.keyGeneration === this.tokens.keyGeneration())
      return known.caller;
    return undefined;
  }

  async verify(header: string | undefined): Promise<Caller | null> {
    const remembered = this.remembered(header);
    if (remembered !== undefined) return remembered;
    const match = /^Bearer +([A-Za-z0-9_.-]+) *$/i.exec(header!); // the scheme is case-insensitive (RFC 9110)
    if (!match) throw unauthenticated("Authorization must be 'Bearer <token>'");
    const token = match[1]!;
    const nowMs = this.now();
    const keyGeneration = this.tokens.keyGeneration();
    const checked = await this.tokens.check(token, new Date(nowMs));
    this.requireBoundedLifetime(checked.exp, checked.iat, nowMs);
    this.verified.set(header!, { caller: checked.caller, exp: checked.exp, nbf: checked.nbf, keyGeneration });
    return checked.caller;
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
      throw new HttpError(
        401,
        "TOKEN_LIFETIME_TOO_LONG",
        `the token is valid for longer than ${this.maxTtlSeconds} s (LEDGER_JWT_MAX_TTL_MS); mint one with a shorter lifetime`,
      );
    }
  }

  /** jose's own rule (no clock tolerance): valid while now < exp and nbf <= now, in whole seconds. */
  private inTime(token: VerifiedToken, nowMs: number): boolean {
    const now = Math.floor(nowMs / 1000);
    return now < token.exp && (token.nbf === undefined || token.nbf <= now);
  }
}
