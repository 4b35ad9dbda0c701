import { isIP } from "node:net";
import { lookup } from "node:dns/promises";
import { WebhookUrlRefusedError } from "./webhook-errors.ts";

/**
 * The SSRF policy (docs/webhooks.md, "SSRF"): a webhook goes to a public address only, unless
 * LEDGER_WEBHOOK_ALLOW_PRIVATE is set (local development, tests). Checked at registration and
 * again at every delivery after DNS resolution; the delivery connects to the address checked
 * here (delivery-http.ts pins it), so a name that resolves differently the second time cannot
 * reach an internal address.
 *
 * IPv6 is allowed in global unicast (2000::/3) only, less the special ranges below. The forms
 * that carry or translate an IPv4 address are judged by that address (a translator or tunnel
 * would deliver to it); the one whose IPv4 position depends on a local choice (local-use NAT64)
 * and the deprecated IPv4-compatible form are refused outright.
 */

/** A refused range: its first address, its prefix length and why it is refused. */
export type RefusedRange = readonly [network: string, prefix: number, why: string];

export const REFUSED_V4: readonly RefusedRange[] = [
  ["0.0.0.0", 8, "unspecified"],
  ["10.0.0.0", 8, "private"],
  ["100.64.0.0", 10, "shared (CGNAT)"],
  ["127.0.0.0", 8, "loopback"],
  ["169.254.0.0", 16, "link-local"],
  ["172.16.0.0", 12, "private"],
  ["192.0.0.0", 24, "IETF protocol assignments"],
  ["192.0.2.0", 24, "documentation"],
  ["192.168.0.0", 16, "private"],
  ["198.18.0.0", 15, "benchmarking"],
  ["198.51.100.0", 24, "documentation"],
  ["203.0.113.0", 24, "documentation"],
  ["224.0.0.0", 4, "multicast"],
  ["240.0.0.0", 4, "reserved"],
];

/** Checked in this order (the first match names the reason), before the carrying forms and the global-unicast rule. */
export const REFUSED_V6: readonly RefusedRange[] = [
  ["::", 128, "unspecified"],
  ["::1", 128, "loopback"],
  ["::", 96, "IPv4-compatible (deprecated)"],
  ["64:ff9b:1::", 48, "local-use NAT64"],
  ["100::", 64, "discard-only"],
  ["2001:2::", 48, "benchmarking"],
  ["2001:20::", 28, "ORCHIDv2"],
  ["2001:db8::", 32, "documentation"],
  ["3fff::", 20, "documentation"],
  ["fc00::", 7, "unique-local"],
  ["fe80::", 10, "link-local"],
  ["fec0::", 10, "site-local"],
  ["ff00::", 8, "multicast"],
];

/** The only IPv6 space a webhook may go to directly. */
export const GLOBAL_UNICAST_V6: RefusedRange = ["2000::", 3, "outside global unicast 2000::/3"];

/** An IPv6 form that carries IPv4 addresses: the addresses it would reach, from its 128 bits. */
interface CarryingForm {
  network: string;
  prefix: number;
  name: string;
  inner: (a: bigint) => bigint[];
}

const low32 = (a: bigint, shift: number) => (a >> BigInt(shift)) & 0xffff_ffffn;
export const CARRYING_V6: readonly CarryingForm[] = [
  { network: "::ffff:0:0", prefix: 96, name: "IPv4-mapped", inner: (a) => [low32(a, 0)] },
  { network: "::ffff:0:0:0", prefix: 96, name: "IPv4-translated (SIIT)", inner: (a) => [low32(a, 0)] },
  { network: "64:ff9b::", prefix: 96, name: "NAT64", inner: (a) => [low32(a, 0)] },
  { network: "2002::", prefix: 16, name: "6to4", inner: (a) => [low32(a, 80)] },
  // Teredo: the server's IPv4 in bits 32..63, the client's (the one the relay delivers to) in the last 32, inverted.
  { network: "2001::", prefix: 32, name: "Teredo", inner: (a) => [low32(a, 64), low32(a, 0) ^ 0xffff_ffffn] },
];

/** An address as an unsigned integer (32 or 128 bits); `text` must be an IP address (isIP). */
export function addressValue(text: string): bigint {
  if (isIP(text) === 4) return text.split(".").reduce((n, b) => (n << 8n) | BigInt(Number(b)), 0n);
  let rest = text.toLowerCase().split("%")[0]!;
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(rest);
  let tail: bigint[] = [];
  if (dotted) {
    const v = addressValue(dotted[1]!);
    tail = [v >> 16n, v & 0xffffn];
    rest = rest.slice(0, -dotted[1]!.length);
    if (rest.endsWith(":") && !rest.endsWith("::")) rest = rest.slice(0, -1);
  }
  const [head, after] = rest.includes("::") ? (rest.split("::") as [string, string]) : [rest, undefined];
  const h = head === "" ? [] : head.split(":").map((g) => BigInt(parseInt(g, 16)));
  const t = [
    ...(after === undefined || after === "" ? [] : after.split(":").map((g) => BigInt(parseInt(g, 16)))),
    ...tail,
  ];
  const groups = after === undefined ? [...h, ...t] : [...h, ...Array<bigint>(8 - h.length - t.length).fill(0n), ...t];
  return groups.reduce((n, g) => (n << 16n) | g, 0n);
}

export function v4Text(value: bigint): string {
  return [24n, 16n, 8n, 0n].map((s) => String((value >> s) & 255n)).join(".");
}

function inRange(value: bigint, bits: number, network: string, prefix: number): boolean {
  const shift = BigInt(bits - prefix);
  return value >> shift === addressValue(network) >> shift;
}

/** Why an address may not receive webhooks: the range, and the IPv4 address inside an IPv6 one that decided it. */
export interface Refusal {
  why: string;
  inside?: { form: string; address: string };
}

/** Why an address may not receive webhooks, or undefined when it may. */
export function refusalOf(address: string): Refusal | undefined {
  const family = isIP(address);
  if (family === 0) return { why: "not an IP address" };
  const value = addressValue(address);
  if (family === 4) {
    const range = REFUSED_V4.find(([net, prefix]) => inRange(value, 32, net, prefix));
    return range && { why: range[2] };
  }
  const range = REFUSED_V6.find(([net, prefix]) => inRange(value, 128, net, prefix));
  if (range) return { why: range[2] };
  const form = CARRYING_V6.find((f) => inRange(value, 128, f.network, f.prefix));
  if (form) {
    for (const inner of form.inner(value)) {
      const text = v4Text(inner);
      const refused = refusalOf(text);
      if (refused) return { why: refused.why, inside: { form: form.name, address: text } };
    }
    return undefined;
  }
  return inRange(value, 128, GLOBAL_UNICAST_V6[0], GLOBAL_UNICAST_V6[1]) ? undefined : { why: GLOBAL_UNICAST_V6[2] };
}

/** Why an address may not receive webhooks, in words (with the IPv4 address inside an IPv6 one), or undefined when it may. */
export function refusedBecause(address: string): string | undefined {
  const refusal = refusalOf(address);
  if (!refusal) return undefined;
  return refusal.inside
    ? `${refusal.why} (IPv4 ${refusal.inside.address} inside IPv6, ${refusal.inside.form})`
    : refusal.why;
}

export interface ParsedTarget {
  url: URL;
  /** The host name to resolve, or the literal address (brackets removed). */
  host: string;
  literal: boolean;
}

/** An http(s) URL with a host, no credentials; anything else is refused. */
export function parseTarget(raw: string): ParsedTarget {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new WebhookUrlRefusedError(raw, "not a URL");
  }
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw new WebhookUrlRefusedError(raw, `scheme ${url.protocol} (only http and https)`);
  if (url.username !== "" || url.password !== "") throw new WebhookUrlRefusedError(raw, "credentials in the URL");
  if (url.hash !== "") throw new WebhookUrlRefusedError(raw, "a fragment");
  const host = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
  if (host === "") throw new WebhookUrlRefusedError(raw, "no host");
  return { url, host, literal: isIP(host) !== 0 };
}

export interface ResolvedTarget extends ParsedTarget {
  /** The address the delivery connects to. */
  address: string;
  family: 4 | 6;
}

export type Resolver = (host: string) => Promise<{ address: string; family: number }[]>;
const systemResolver: Resolver = (host) => lookup(host, { all: true, verbatim: true });

/**
 * Resolves the URL's host and checks every address it resolves to (one refused address refuses
 * the URL: which one a connection would take is not ours to choose). Returns the first address,
 * which the delivery pins.
 */
export async function resolveTarget(
  raw: string,
  allowPrivate: boolean,
  resolver: Resolver = systemResolver,
): Promise<ResolvedTarget> {
  const target = parseTarget(raw);
  let addresses: { address: string; family: number }[];
  if (target.literal) {
    addresses = [{ address: target.host, family: isIP(target.host) }];
  } else {
    try {
      addresses = await resolver(target.host);
    } catch (err) {
      throw new WebhookUrlRefusedError(
        raw,
        `${target.host} does not resolve (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`,
      );
    }
    if (addresses.length === 0) throw new WebhookUrlRefusedError(raw, `${target.host} resolves to no address`);
  }
  if (!allowPrivate) {
    for (const { address } of addresses) {
      const refusal = refusalOf(address);
      if (!refusal) continue;
      // A name's refusal gives the class of the address, never the address: the answer goes to an
      // admin, and naming what any host name resolves to would map the internal DNS for them.
      const what = target.literal
        ? `${target.host} is refused: ${refusedBecause(address)!}`
        : `${target.host} resolves to a refused address: ${refusal.why}`;
      throw new WebhookUrlRefusedError(raw, `${what} (LEDGER_WEBHOOK_ALLOW_PRIVATE=1 allows it)`);
    }
  }
  const first = addresses[0]!;
  return { ...target, address: first.address, family: first.family === 6 ? 6 : 4 };
}
