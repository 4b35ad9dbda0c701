import { BlockList, isIP } from "node:net";
import { lookup } from "node:dns/promises";
import { WebhookUrlRefusedError } from "./webhook-errors.ts";

/**
 * The SSRF policy (docs/webhooks.md): a webhook goes to a public address only, unless
 * LEDGER_WEBHOOK_ALLOW_PRIVATE is set (local development, tests). Checked at registration and
 * again at every delivery after DNS resolution; the delivery connects to the address checked
 * here (delivery-http.ts pins it), so a name that resolves differently the second time cannot
 * reach an internal address.
 */

const REFUSED_V4: [string, number, string][] = [
  ["0.0.0.0", 8, "unspecified"], ["10.0.0.0", 8, "private"], ["100.64.0.0", 10, "shared (CGNAT)"],
  ["127.0.0.0", 8, "loopback"], ["169.254.0.0", 16, "link-local"], ["172.16.0.0", 12, "private"],
  ["192.0.0.0", 24, "IETF protocol assignments"], ["192.168.0.0", 16, "private"], ["198.18.0.0", 15, "benchmarking"],
  ["224.0.0.0", 4, "multicast"], ["240.0.0.0", 4, "reserved"],
];
const REFUSED_V6: [string, number, string][] = [
  ["::", 128, "unspecified"], ["::1", 128, "loopback"], ["fe80::", 10, "link-local"], ["fec0::", 10, "site-local"],
  ["fc00::", 7, "unique-local"], ["ff00::", 8, "multicast"], ["100::", 64, "discard-only"],
];

const v4 = REFUSED_V4.map(([net, prefix, why]) => ({ list: blockOf(net, prefix, "ipv4"), why }));
const v6 = REFUSED_V6.map(([net, prefix, why]) => ({ list: blockOf(net, prefix, "ipv6"), why }));

function blockOf(net: string, prefix: number, type: "ipv4" | "ipv6"): BlockList {
  const list = new BlockList();
  list.addSubnet(net, prefix, type);
  return list;
}

/** The eight 16-bit groups of an IPv6 address (with an embedded dotted IPv4 tail, too). */
function groupsOf(address: string): number[] {
  let text = address.toLowerCase();
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    const b = dotted[1]!.split(".").map(Number);
    text = text.slice(0, -dotted[1]!.length) + `${((b[0]! << 8) | b[1]!).toString(16)}:${((b[2]! << 8) | b[3]!).toString(16)}`;
  }
  const [head, tail] = text.includes("::") ? text.split("::") as [string, string] : [text, undefined];
  const h = head === "" ? [] : head.split(":");
  const t = tail === undefined || tail === "" ? [] : tail.split(":");
  const zeros = tail === undefined ? [] : Array<string>(8 - h.length - t.length).fill("0");
  return [...h, ...zeros, ...t].map((g) => parseInt(g, 16));
}

/** An IPv4 address carried in an IPv6 one (IPv4-mapped ::ffff:a.b.c.d, IPv4-compatible ::a.b.c.d, NAT64 64:ff9b::a.b.c.d), if any. */
function embeddedV4(address: string): string | undefined {
  const g = groupsOf(address);
  const v4Of = () => `${g[6]! >> 8}.${g[6]! & 255}.${g[7]! >> 8}.${g[7]! & 255}`;
  const zeroUpTo = (n: number) => g.slice(0, n).every((x) => x === 0);
  if (zeroUpTo(5) && g[5] === 0xffff) return v4Of();
  if (zeroUpTo(6) && (g[6] !== 0 || g[7]! > 1)) return v4Of();
  if (g[0] === 0x64 && g[1] === 0xff9b && g.slice(2, 6).every((x) => x === 0)) return v4Of();
  return undefined;
}

/** Why an address may not receive webhooks, or undefined when it may. */
export function refusedBecause(address: string): string | undefined {
  const family = isIP(address);
  if (family === 4) return v4.find((r) => r.list.check(address, "ipv4"))?.why;
  if (family === 6) {
    const inner = embeddedV4(address);
    if (inner !== undefined) {
      const why = refusedBecause(inner);
      return why && `${why} (IPv4 ${inner} inside IPv6)`;
    }
    return v6.find((r) => r.list.check(address, "ipv6"))?.why;
  }
  return "not an IP address";
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
  if (url.protocol !== "http:" && url.protocol !== "https:") throw new WebhookUrlRefusedError(raw, `scheme ${url.protocol} (only http and https)`);
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
export async function resolveTarget(raw: string, allowPrivate: boolean, resolver: Resolver = systemResolver): Promise<ResolvedTarget> {
  const target = parseTarget(raw);
  let addresses: { address: string; family: number }[];
  if (target.literal) {
    addresses = [{ address: target.host, family: isIP(target.host) }];
  } else {
    try {
      addresses = await resolver(target.host);
    } catch (err) {
      throw new WebhookUrlRefusedError(raw, `${target.host} does not resolve (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
    }
    if (addresses.length === 0) throw new WebhookUrlRefusedError(raw, `${target.host} resolves to no address`);
  }
  if (!allowPrivate) {
    for (const { address } of addresses) {
      const why = refusedBecause(address);
      if (why) throw new WebhookUrlRefusedError(raw, `${target.host} resolves to ${address}, a ${why} address (LEDGER_WEBHOOK_ALLOW_PRIVATE=1 allows it)`);
    }
  }
  const first = addresses[0]!;
  return { ...target, address: first.address, family: first.family === 6 ? 6 : 4 };
}
