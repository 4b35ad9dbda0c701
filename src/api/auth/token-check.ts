import type { Caller } from "./claims.ts";

/** What a token verified to: its caller and the claims that decide, at each use, whether it is still valid. */
export interface CheckedToken {
  caller: Caller;
  exp: number;
  nbf: number | undefined;
  iat: number | undefined;
}

/**
 * One way of checking a token's signature and claims: the embedded HS256 secret, or the identity
 * provider's keys. A refused token throws an HttpError 401 with a stable code.
 */
export interface TokenCheck {
  check(token: string, now: Date): Promise<CheckedToken>;
  /**
   * Changes when keys a remembered token may have been signed with are withdrawn (the provider
   * dropped a key from its set): remembered tokens of an older generation are checked again.
   */
  keyGeneration(): number;
}
