/**
 * An identity provider of the test's own: its JWKS served over real HTTP on 127.0.0.1:0
 * (node:http), keys generated with jose, tokens signed with them. It counts the requests it
 * receives, and can be down in the ways a provider is: answering 503, resetting each
 * connection, or accepting and never answering.
 */
import { createServer, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { SignJWT, exportJWK, exportSPKI, generateKeyPair, type JWK } from "jose";
import type { JwksOptions } from "../../src/api/auth.ts";

export type ProviderAlg = "RS256" | "ES256" | "EdDSA";

export interface ProviderKey {
  kid: string;
  alg: ProviderAlg;
  privateKey: CryptoKey;
  publicJwk: JWK;
  /** The public key as PEM: what a naive verifier would use as the HMAC secret of an HS256 token. */
  publicPem: string;
}

export type ProviderMode = "up" | "503" | "reset" | "hang";

export interface TokenOptions {
  sub?: string | undefined;
  iss?: string;
  aud?: string | string[];
  /** Seconds from now (negative: already expired), or false for none. */
  expIn?: number | false;
  nbfIn?: number;
  /** The header's alg and kid, when they should differ from the key's. */
  alg?: string;
  kid?: string | undefined;
  /** The header's typ: at+jwt (an RFC 9068 access token) unless told otherwise; undefined: none. */
  typ?: string | undefined;
}

let keyCounter = 0;

export async function generateProviderKey(
  alg: ProviderAlg,
  kid = `key-${alg.toLowerCase()}-${++keyCounter}`,
): Promise<ProviderKey> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
  return {
    kid,
    alg,
    privateKey,
    publicJwk: { ...(await exportJWK(publicKey)), kid, alg, use: "sig" },
    publicPem: await exportSPKI(publicKey),
  };
}

export class TestProvider {
  readonly issuer = "https://id.example.test/";
  readonly audience = "social-ledger-api";
  /** The keys the JWKS publishes, in order. */
  published: ProviderKey[] = [];
  mode: ProviderMode = "up";
  /** Requests for the JWKS received, whatever the mode. */
  requests = 0;
  private readonly held = new Set<ServerResponse>();

  private readonly server: Server = createServer((req, res) => this.answer(req.url ?? "", res));
  /** The JWKS URL, once it listens. */
  url = "";

  static async start(): Promise<TestProvider> {
    const provider = new TestProvider();
    await new Promise<void>((resolve) => provider.server.listen(0, "127.0.0.1", resolve));
    provider.url = `http://127.0.0.1:${(provider.server.address() as AddressInfo).port}/.well-known/jwks.json`;
    return provider;
  }

  private answer(url: string, res: ServerResponse): void {
    this.requests += 1;
    if (this.mode === "reset") {
      res.socket?.destroy();
      return;
    }
    if (this.mode === "hang") {
      this.held.add(res);
      return;
    }
    if (this.mode === "503" || url !== "/.well-known/jwks.json") {
      res.writeHead(this.mode === "503" ? 503 : 404).end();
      return;
    }
    res
      .writeHead(200, { "content-type": "application/jwk-set+json" })
      .end(JSON.stringify({ keys: this.published.map((k) => k.publicJwk) }));
  }

  async addKey(alg: ProviderAlg, kid?: string): Promise<ProviderKey> {
    const key = await generateProviderKey(alg, kid);
    this.published.push(key);
    return key;
  }

  removeKey(kid: string): void {
    this.published = this.published.filter((k) => k.kid !== kid);
  }

  /** The service's settings for this provider (short timeouts; the cooldown and max age as the test says). */
  options(o: Partial<JwksOptions> = {}): JwksOptions {
    return {
      url: this.url,
      issuer: this.issuer,
      audience: [this.audience],
      userClaim: "sub",
      adminClaim: "role",
      adminValue: "admin",
      cooldownMs: 60_000,
      cacheMaxAgeMs: 600_000,
      timeoutMs: 2000,
      ...o,
    };
  }

  /** A token signed with `key`: sub, iss, aud, iat and exp as a provider would set them, unless told otherwise. */
  sign(key: ProviderKey, claims: Record<string, unknown> = {}, o: TokenOptions = {}): Promise<string> {
    const header: { alg: string; kid?: string; typ?: string } = { alg: o.alg ?? key.alg };
    const kid = "kid" in o ? o.kid : key.kid;
    if (kid !== undefined) header.kid = kid;
    const typ = "typ" in o ? o.typ : "at+jwt";
    if (typ !== undefined) header.typ = typ;
    const jwt = new SignJWT(claims)
      .setProtectedHeader(header)
      .setIssuer(o.iss ?? this.issuer)
      .setAudience(o.aud ?? this.audience)
      .setIssuedAt();
    const sub = "sub" in o ? o.sub : "alice";
    if (sub !== undefined) jwt.setSubject(sub);
    if (o.expIn !== false) jwt.setExpirationTime(Math.floor(Date.now() / 1000) + (o.expIn ?? 600));
    if (o.nbfIn !== undefined) jwt.setNotBefore(Math.floor(Date.now() / 1000) + o.nbfIn);
    return jwt.sign(key.privateKey);
  }

  async close(): Promise<void> {
    for (const res of this.held) res.socket?.destroy();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** A compact JWS with the given header and claims and no signature (alg none, or a made-up one). */
export function unsigned(header: Record<string, unknown>, claims: Record<string, unknown>): string {
  const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString("base64url");
  return `${b64(header)}.${b64(claims)}.`;
}
