import type { JWTPayload } from "jose";
import { validateUserId } from "../../ids.ts";

/** Who acts: the user a verified token names, and whether it opens the admin routes. */
export interface Caller {
  id: string;
  admin: boolean;
}

/** Which claim names the user and which claim, with which value, makes an admin. */
export interface ClaimMapping {
  userClaim: string;
  adminClaim: string;
  adminValue: string;
  /**
   * Whether an array claim (`groups: ["staff", "ledger-admins"]`) makes an admin when it holds the
   * value. The embedded HS256 tokens say `role: "admin"` exactly, and keep meaning only that.
   */
  arrays: boolean;
}

/** The claims of the tokens `social-ledger token` mints. */
export const MINTED_CLAIMS: ClaimMapping = { userClaim: "sub", adminClaim: "role", adminValue: "admin", arrays: false };

function isValidUserId(value: string): boolean {
  try {
    validateUserId("sub", value);
    return true;
  } catch {
    return false;
  }
}

/** A scalar claim matches when its text is the value (`true` for "true"), so booleans and numbers map too. */
function matches(value: unknown, wanted: string): boolean {
  return (
    (typeof value === "string" || typeof value === "number" || typeof value === "boolean") && String(value) === wanted
  );
}

/** The caller a verified token's claims name, or why they name none (the verifier answers 401 with it). */
export function readCaller(payload: JWTPayload, mapping: ClaimMapping): { caller: Caller } | { problem: string } {
  const id = payload[mapping.userClaim];
  if (id === undefined) return { problem: `the token has no ${mapping.userClaim} claim (the user)` };
  // A value that is no valid user id ("me" included) is a bad credential (401), not bad input (400).
  if (typeof id !== "string" || !isValidUserId(id))
    return { problem: `the token's ${mapping.userClaim} claim is not a valid user id` };
  const claim = payload[mapping.adminClaim];
  const admin =
    mapping.arrays && Array.isArray(claim)
      ? claim.some((v) => matches(v, mapping.adminValue))
      : matches(claim, mapping.adminValue);
  return { caller: { id, admin } };
}
