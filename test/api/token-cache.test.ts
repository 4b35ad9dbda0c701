import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { SignJWT } from "jose";
import { TokenVerifier, signToken } from "../../src/api/auth.ts";

/**
 * The verifier remembers tokens that verified (src/api/auth.ts), so what must not be cached is
 * time: a remembered token is refused once the clock passes its exp, and one with a future nbf
 * is not accepted early because a copy of it verified later. A clock of our own stands in for
 * waiting. The negative control is a verifier whose remembered tokens never expire.
 */
const secret = randomBytes(32);

async function code(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return "accepted";
  } catch (err) {
    return (err as { message: string }).message;
  }
}

test("a remembered token is refused once the clock passes its exp, and a tampered copy is never accepted", async () => {
  let nowMs = Date.now();
  const verifier = new TokenVerifier(secret, () => nowMs);
  const token = await signToken(secret, "alice", { ttlSeconds: 60 });
  assert.deepEqual(await verifier.verify(`Bearer ${token}`), { id: "alice", admin: false });
  // Remembered: the second use answers the same, also without awaiting (the auth hook's path).
  assert.deepEqual(await verifier.verify(`Bearer ${token}`), { id: "alice", admin: false });
  assert.deepEqual(verifier.remembered(`Bearer ${token}`), { id: "alice", admin: false });
  assert.equal(verifier.remembered(undefined), null, "no header: no caller, nothing to check");
  assert.equal(verifier.remembered(`Bearer  ${token}`), undefined, "another header (two spaces) is checked on its own");
  // Another string is another key: a changed signature is verified, and refused.
  const tampered = `${token.slice(0, -2)}${token.endsWith("AA") ? "BB" : "AA"}`;
  assert.match(
    await code(verifier.verify(`Bearer ${tampered}`)),
    /invalid token: ERR_JWS_SIGNATURE_VERIFICATION_FAILED/,
  );
  assert.equal(verifier.remembered(`Bearer ${tampered}`), undefined, "a refused token is never remembered");
  nowMs += 61_000;
  assert.equal(
    verifier.remembered(`Bearer ${token}`),
    undefined,
    "past exp the hook must ask verify(), which refuses it",
  );
  assert.match(await code(verifier.verify(`Bearer ${token}`)), /invalid token: ERR_JWT_EXPIRED/);
});

test("a token is not accepted before its nbf, also after it was remembered", async () => {
  const start = Date.now();
  let nowMs = start;
  const verifier = new TokenVerifier(secret, () => nowMs);
  const nbf = Math.floor(start / 1000) + 30;
  const token = await new SignJWT({})
    .setProtectedHeader({ alg: "HS256" })
    .setSubject("bob")
    .setIssuer("social-ledger")
    .setNotBefore(nbf)
    .setExpirationTime(nbf + 60)
    .sign(secret);
  assert.match(await code(verifier.verify(`Bearer ${token}`)), /ERR_JWT_CLAIM_VALIDATION_FAILED/);
  nowMs = nbf * 1000;
  assert.deepEqual(await verifier.verify(`Bearer ${token}`), { id: "bob", admin: false });
  nowMs = start;
  assert.equal(verifier.remembered(`Bearer ${token}`), undefined, "before nbf the hook must ask verify()");
  assert.match(await code(verifier.verify(`Bearer ${token}`)), /ERR_JWT_CLAIM_VALIDATION_FAILED/);
});

test("negative control: a verifier that trusts what it remembered accepts an expired token", async () => {
  let nowMs = Date.now();
  class TrustingVerifier extends TokenVerifier {
    private readonly seen = new Map<string, { id: string; admin: boolean }>();
    override async verify(header: string | undefined) {
      const known = header && this.seen.get(header);
      if (known) return known;
      const caller = await super.verify(header);
      if (header && caller) this.seen.set(header, caller);
      return caller;
    }
  }
  const verifier = new TrustingVerifier(secret, () => nowMs);
  const token = await signToken(secret, "carol", { ttlSeconds: 60 });
  await verifier.verify(`Bearer ${token}`);
  nowMs += 61_000;
  // The bug the real verifier's test above would catch: an expired token answered as carol.
  assert.equal(await code(verifier.verify(`Bearer ${token}`)), "accepted");
});
