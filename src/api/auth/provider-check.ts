import {
  decodeProtectedHeader,
  jwtVerify,
  errors as joseErrors,
  type JWTHeaderParameters,
  type JWTPayload,
} from "jose";
import { DEFAULT_TOKEN_TYPES, tokenType } from "../../config.ts";
import { HttpError, unauthenticated } from "../errors.ts";
import { readCaller, type ClaimMapping } from "./claims.ts";
import { KeysUnavailableError, type ProviderKeys } from "./provider-keys.ts";
import type { CheckedToken, TokenCheck } from "./token-check.ts";

/**
 * The algorithms of provider tokens. Only asymmetric ones: the key set is public, so an HS256
 * token "signed" with a public key's bytes as its HMAC secret (the classic confusion) would be
 * anyone's to make; jose also refuses an HMAC alg for a key set, and `none` is never one.
 */
export const PROVIDER_ALGORITHMS = ["RS256", "ES256", "EdDSA"] as const;

export interface ProviderCheckOptions {
  issuer: string;
  audience: string[];
  claims: Omit<ClaimMapping, "arrays">;
  /** The header typ values taken (LEDGER_JWT_TYPES, as config.ts tokenType writes them); default DEFAULT_TOKEN_TYPES. */
  tokenTypes?: readonly string[];
}

/**
 * Claims only an OIDC ID token carries (OpenID Connect Core 1.0, 2 and 3.1.3.6): the nonce of the
 * sign-in, the hashes that bind it to an access token or a code. Keycloak also says `typ: "ID"` in
 * the payload. A token typed only as a JWT (or not typed) that carries one is an ID token.
 */
const ID_TOKEN_CLAIMS = ["nonce", "at_hash", "c_hash"] as const;

/** Why a verified token is not an access token of this API, or undefined. */
function idTokenMark(payload: JWTPayload): string | undefined {
  const claim = ID_TOKEN_CLAIMS.find((c) => payload[c] !== undefined);
  if (claim) return `it carries ${claim}, a claim of OIDC ID tokens`;
  if (typeof payload.typ === "string" && payload.typ.toLowerCase() === "id") return "its typ claim says ID";
  return undefined;
}

const refused = (code: string, message: string) => new HttpError(401, code, message);

/** The header's alg and kid, for the message of a refusal (the token failed already, so its header may be garbage). */
function headerOf(token: string): { alg: string; kid: string | undefined } {
  try {
    const header = decodeProtectedHeader(token);
    return { alg: String(header.alg), kid: typeof header.kid === "string" ? header.kid : undefined };
  } catch {
    return { alg: "(unreadable)", kid: undefined };
  }
}

/**
 * Tokens of the product's identity provider: signed with a key of its JWKS (RS256, ES256 or
 * EdDSA; the key is picked by `kid`), issued by LEDGER_JWT_ISSUER for LEDGER_JWT_AUDIENCE,
 * with exp. Each reason for a refusal has a code of its own, so an operator wiring a provider
 * can tell a wrong audience from a key the service could not fetch.
 */
export class ProviderCheck implements TokenCheck {
  private readonly claims: ClaimMapping;
  private readonly types: readonly string[];

  constructor(
    private readonly keys: ProviderKeys,
    private readonly options: ProviderCheckOptions,
  ) {
    this.claims = { ...options.claims, arrays: true };
    this.types = options.tokenTypes ?? DEFAULT_TOKEN_TYPES;
  }

  keyGeneration(): number {
    return this.keys.keyGeneration();
  }

  async check(token: string, now: Date): Promise<CheckedToken> {
    let payload: JWTPayload;
    let protectedHeader: JWTHeaderParameters;
    try {
      ({ payload, protectedHeader } = await jwtVerify(token, this.keys.resolve, {
        algorithms: [...PROVIDER_ALGORITHMS],
        issuer: this.options.issuer,
        audience: this.options.audience,
        requiredClaims: ["exp"],
        currentDate: now,
      }));
    } catch (err) {
      throw this.refusal(err, token);
    }
    this.requireAccessToken(protectedHeader, payload);
    const read = readCaller(payload, this.claims);
    if ("problem" in read) throw refused("TOKEN_USER_CLAIM_INVALID", read.problem);
    return { caller: read.caller, exp: payload.exp!, nbf: payload.nbf, iat: payload.iat };
  }

  /**
   * An access token, not the ID token of a sign-in that a client sends instead (its aud is the
   * client's id, which may be an audience of this API too). RFC 9068 types access tokens at+jwt
   * in the header; a provider that types them only as JWT, or not at all, needs LEDGER_JWT_TYPES
   * to say so, and its tokens are then also refused when they carry an ID token's claims.
   */
  private requireAccessToken(header: JWTHeaderParameters, payload: JWTPayload): void {
    const typ = tokenType(typeof header.typ === "string" ? header.typ : "JWT");
    const shown = typeof header.typ === "string" ? JSON.stringify(header.typ) : "absent (a plain JWT)";
    if (!this.types.includes(typ)) {
      throw refused(
        "TOKEN_TYPE_NOT_ALLOWED",
        `the token's typ is ${shown}; LEDGER_JWT_TYPES takes ${this.types.join(", ")} (an OIDC ID token is not an access token; a provider that types its access tokens JWT, or not at all, needs LEDGER_JWT_TYPES=at+jwt,JWT)`,
      );
    }
    const mark = typ === "at+jwt" ? undefined : idTokenMark(payload);
    if (mark)
      throw refused("TOKEN_IS_ID_TOKEN", `the token is an OIDC ID token (${mark}): send an access token for this API`);
  }

  private refusal(err: unknown, token: string): HttpError {
    const { alg, kid } = headerOf(token);
    if (err instanceof KeysUnavailableError) return refused("TOKEN_KEY_UNAVAILABLE", `${err.message}; retry later`);
    if (err instanceof joseErrors.JOSEAlgNotAllowed) {
      return refused(
        "TOKEN_ALG_NOT_ALLOWED",
        `the token is signed with ${alg}; tokens of the identity provider must use ${PROVIDER_ALGORITHMS.join(", ")} (HS256 tokens of social-ledger token are refused when LEDGER_JWKS_URL is set)`,
      );
    }
    if (err instanceof joseErrors.JWKSNoMatchingKey) {
      const known = this.keys.knownKey(kid);
      if (known)
        return refused(
          "TOKEN_ALG_MISMATCH",
          `the provider's key ${kid} is of type ${known.kty}${known.crv ? ` ${known.crv}` : ""}${known.alg ? ` for ${known.alg}` : ""}; the token says ${alg}`,
        );
      if (this.keys.failing)
        return refused(
          "TOKEN_KEY_UNAVAILABLE",
          `the identity provider's keys could not be fetched, and the last fetched set has no key ${kid ?? "for " + alg}; retry later`,
        );
      return refused(
        "TOKEN_UNKNOWN_KID",
        `the identity provider has no key ${kid === undefined ? `for ${alg} (the token names no kid)` : `with kid ${kid}`}`,
      );
    }
    if (err instanceof joseErrors.JWKSMultipleMatchingKeys)
      return refused("TOKEN_UNKNOWN_KID", `the token names no kid, and several keys of the provider fit ${alg}`);
    if (err instanceof joseErrors.JWTExpired) return refused("TOKEN_EXPIRED", "the token has expired");
    if (err instanceof joseErrors.JWTClaimValidationFailed) {
      if (err.claim === "iss")
        return refused("TOKEN_ISSUER_MISMATCH", `the token's iss is not LEDGER_JWT_ISSUER (${this.options.issuer})`);
      if (err.claim === "aud")
        return refused(
          "TOKEN_AUDIENCE_MISMATCH",
          `the token's aud holds none of LEDGER_JWT_AUDIENCE (${this.options.audience.join(", ")})`,
        );
      if (err.claim === "nbf") return refused("TOKEN_NOT_YET_VALID", "the token is not valid yet (nbf)");
      return unauthenticated(`invalid token: ${err.message}`);
    }
    if (err instanceof joseErrors.JWSSignatureVerificationFailed)
      return refused(
        "TOKEN_SIGNATURE_INVALID",
        `the signature does not verify with the provider's key ${kid ?? ""}`.trimEnd(),
      );
    if (err instanceof joseErrors.JOSEError) return unauthenticated(`invalid token: ${err.code}`);
    // jose's TypeErrors for a key it cannot use for the alg (an RSA key under 2048 bits): the token's problem, not a 500.
    if (err instanceof TypeError) return unauthenticated(`the token cannot be verified: ${err.message}`);
    throw err;
  }
}
