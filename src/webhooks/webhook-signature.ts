import { createHmac, randomBytes } from "node:crypto";

/**
 * Standard Webhooks signing (https://www.standardwebhooks.com, docs/webhooks.md): the secret is
 * 'whsec_' + base64 of random bytes, the signature of one attempt is 'v1,' + base64 of
 * HMAC-SHA256 keyed with the secret's decoded bytes over `${id}.${timestamp}.${body}`, and the
 * webhook-signature header lists one signature per valid secret, separated by spaces.
 */

export const SECRET_PREFIX = "whsec_";
/** Bytes of a new secret (the specification asks for 24 to 64). */
export const SECRET_BYTES = 32;

export function newSecret(): string {
  return SECRET_PREFIX + randomBytes(SECRET_BYTES).toString("base64");
}

function keyOf(secret: string): Buffer {
  if (!secret.startsWith(SECRET_PREFIX)) throw new Error("a webhook secret starts with whsec_");
  return Buffer.from(secret.slice(SECRET_PREFIX.length), "base64");
}

/** One 'v1,<base64>' signature of a message with one secret. */
export function sign(secret: string, id: string, timestampSeconds: number, body: string): string {
  const mac = createHmac("sha256", keyOf(secret)).update(`${id}.${timestampSeconds}.${body}`).digest("base64");
  return `v1,${mac}`;
}

/** The webhook-signature header: a signature per secret (the current one first, then one in its rotation grace). */
export function signatureHeader(
  secrets: readonly string[],
  id: string,
  timestampSeconds: number,
  body: string,
): string {
  return secrets.map((s) => sign(s, id, timestampSeconds, body)).join(" ");
}
