/**
 * The SSRF policy's whole refused list, walked from this file's own table (docs/webhooks.md,
 * "SSRF"): for every range a sample address refused for that range's reason, its first and last
 * addresses refused, and the addresses just outside it judged by the rest of the table (allowed
 * where nothing else covers them). A range that vanishes from the policy's list, or shrinks or
 * grows, fails here; the table is written out rather than read from src/ so that it cannot lose
 * a range together with the policy. Then each IPv6 form that carries an IPv4 address, judged by
 * the IPv4 address inside it.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { CARRYING_V6, REFUSED_V4, REFUSED_V6, refusedBecause } from "../../src/webhooks/address-policy.ts";

type Row = readonly [cidr: string, why: RegExp];

const V4: readonly Row[] = [
  ["0.0.0.0/8", /^unspecified$/],
  ["10.0.0.0/8", /^private$/],
  ["100.64.0.0/10", /^shared \(CGNAT\)$/],
  ["127.0.0.0/8", /^loopback$/],
  ["169.254.0.0/16", /^link-local$/],
  ["172.16.0.0/12", /^private$/],
  ["192.0.0.0/24", /^IETF protocol assignments$/],
  ["192.0.2.0/24", /^documentation$/],
  ["192.168.0.0/16", /^private$/],
  ["198.18.0.0/15", /^benchmarking$/],
  ["198.51.100.0/24", /^documentation$/],
  ["203.0.113.0/24", /^documentation$/],
  ["224.0.0.0/4", /^multicast$/],
  ["240.0.0.0/4", /^reserved$/],
];

const V6: readonly Row[] = [
  ["::/128", /^unspecified$/],
  ["::1/128", /^loopback$/],
  ["::/96", /^IPv4-compatible/],
  ["64:ff9b:1::/48", /^local-use NAT64$/],
  ["100::/64", /^discard-only$/],
  ["2001:2::/48", /^benchmarking$/],
  ["2001:20::/28", /^ORCHIDv2$/],
  ["2001:db8::/32", /^documentation$/],
  ["3fff::/20", /^documentation$/],
  ["fc00::/7", /^unique-local$/],
  ["fe80::/10", /^link-local$/],
  ["fec0::/10", /^site-local$/],
  ["ff00::/8", /^multicast$/],
];

/** IPv6 outside 2000::/3 is refused unless it is a form that carries IPv4 (below). */
const GLOBAL_UNICAST = "2000::/3";
const OUTSIDE_GLOBAL_UNICAST = /^outside global unicast/;

/** The forms judged by the IPv4 inside: this file's own encodings (RFC 4291, 6052, 7915, 3056, 4380). */
const CARRYING: readonly { name: string; cidr: string; embed: (v4: string) => string }[] = [
  { name: "IPv4-mapped", cidr: "::ffff:0:0/96", embed: (v4) => `::ffff:${v4}` },
  { name: "IPv4-translated (SIIT)", cidr: "::ffff:0:0:0/96", embed: (v4) => `::ffff:0:${v4}` },
  { name: "NAT64", cidr: "64:ff9b::/96", embed: (v4) => `64:ff9b::${v4}` },
  { name: "6to4", cidr: "2002::/16", embed: (v4) => `2002:${hexPair(v4)}::1` },
  // Teredo carries two: the server's and the client's (inverted); each is judged.
  { name: "Teredo", cidr: "2001::/32", embed: (v4) => `2001:0:${hexPair(PUBLIC_V4)}:8000:63bf:${hexPair(invert(v4))}` },
  { name: "Teredo", cidr: "2001::/32", embed: (v4) => `2001:0:${hexPair(v4)}:8000:63bf:${hexPair(invert(PUBLIC_V4))}` },
];
const PUBLIC_V4 = "8.8.8.8";

// Address arithmetic of this file's own (not the policy's parser).
const bitsOf = (text: string) => (text.includes(":") ? 128 : 32);
function value(text: string): bigint {
  if (!text.includes(":")) return text.split(".").reduce((n, b) => (n << 8n) | BigInt(b), 0n);
  const [head, tail] = text.includes("::") ? text.split("::") : [text, undefined];
  const h = head ? head.split(":") : [];
  const t = tail ? tail.split(":") : [];
  const groups = tail === undefined ? h : [...h, ...Array<string>(8 - h.length - t.length).fill("0"), ...t];
  return groups.reduce((n, g) => (n << 16n) | BigInt(parseInt(g, 16)), 0n);
}
function text(v: bigint, bits: number): string {
  if (bits === 32) return [24n, 16n, 8n, 0n].map((s) => String((v >> s) & 255n)).join(".");
  return Array.from({ length: 8 }, (_, i) => ((v >> BigInt(112 - 16 * i)) & 0xffffn).toString(16)).join(":");
}
function hexPair(v4: string): string {
  const v = value(v4);
  return `${(v >> 16n).toString(16)}:${(v & 0xffffn).toString(16)}`;
}
const escaped = (s: string) => s.replace(/[.()]/g, "\\$&");
const invert = (v4: string) => text(value(v4) ^ 0xffff_ffffn, 32);
function span(cidr: string): { first: bigint; last: bigint; prefix: number; bits: number } {
  const [net, p] = cidr.split("/") as [string, string];
  const bits = bitsOf(net);
  const prefix = Number(p);
  const first = value(net);
  return { first, last: first + (1n << BigInt(bits - prefix)) - 1n, prefix, bits };
}
const within = (v: bigint, cidr: string) => {
  const s = span(cidr);
  return v >= s.first && v <= s.last;
};

/** The reason the table gives an address outside the carrying forms: the most specific range covering it. */
function expectedWhy(address: bigint, bits: number): RegExp | undefined {
  const rows = (bits === 32 ? V4 : V6).filter(([cidr]) => within(address, cidr));
  rows.sort((a, b) => span(b[0]).prefix - span(a[0]).prefix);
  if (rows[0]) return rows[0][1];
  if (bits === 32) return undefined;
  assert.ok(
    !CARRYING.some((f) => within(address, f.cidr)),
    `${text(address, bits)}: a neighbour inside a carrying form needs a row of its own`,
  );
  return within(address, GLOBAL_UNICAST) ? undefined : OUTSIDE_GLOBAL_UNICAST;
}

function assertVerdict(address: string, why: RegExp | undefined, what: string): void {
  const got = refusedBecause(address);
  if (why === undefined) assert.equal(got, undefined, `${what}: ${address} is allowed`);
  else assert.match(got ?? "(allowed)", why, `${what}: ${address} is refused as ${String(why)}`);
}

function walk(rows: readonly Row[]): number {
  let checked = 0;
  for (const [cidr, why] of rows) {
    const { first, last, bits } = span(cidr);
    const sample = first + (last - first + 1n) / 2n;
    assertVerdict(text(sample, bits), why, `${cidr} sample`);
    assertVerdict(text(first, bits), expectedWhy(first, bits), `${cidr} first`);
    assertVerdict(text(last, bits), expectedWhy(last, bits), `${cidr} last`);
    assert.ok(refusedBecause(text(first, bits)) && refusedBecause(text(last, bits)), `${cidr}: both ends refused`);
    if (first > 0n) assertVerdict(text(first - 1n, bits), expectedWhy(first - 1n, bits), `just below ${cidr}`);
    if (last < (1n << BigInt(bits)) - 1n)
      assertVerdict(text(last + 1n, bits), expectedWhy(last + 1n, bits), `just above ${cidr}`);
    checked++;
  }
  return checked;
}

test("every refused IPv4 range: a sample, its first and last address refused for its reason; the addresses just outside judged by the rest of the list", () => {
  assert.equal(walk(V4), V4.length);
  // The neighbours that nothing else covers are allowed (checked above); name a few so a reader sees them.
  for (const a of [
    "9.255.255.255",
    "11.0.0.0",
    "100.63.255.255",
    "100.128.0.0",
    "126.255.255.255",
    "128.0.0.0",
    "172.15.255.255",
    "172.32.0.0",
    "192.0.1.255",
    "192.0.3.0",
    "198.17.255.255",
    "198.20.0.0",
    "203.0.112.255",
    "203.0.114.0",
    "223.255.255.255",
    PUBLIC_V4,
  ]) {
    assert.equal(refusedBecause(a), undefined, `${a} is allowed`);
  }
});

test("every refused IPv6 range, and the global-unicast rule around them: a sample, both ends, the neighbours", () => {
  assert.equal(walk(V6), V6.length);
  assertVerdict("1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", OUTSIDE_GLOBAL_UNICAST, "just below 2000::/3");
  assertVerdict("2000::", undefined, "first of 2000::/3");
  assertVerdict("3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", undefined, "last of 2000::/3");
  assertVerdict("4000::", OUTSIDE_GLOBAL_UNICAST, "just above 2000::/3");
  for (const a of ["5f00::1", "8000::1", "e000::1"]) assertVerdict(a, OUTSIDE_GLOBAL_UNICAST, "unassigned");
  assertVerdict("2606:4700::1111", undefined, "a public IPv6 address");
  assertVerdict("fe80::1%eth0", /^link-local$/, "with a zone id");
});

test("the policy's list and this table name the same ranges (a range added to the policy needs a row here)", () => {
  const cidrs = (rows: readonly (readonly [string, number, string])[]) =>
    rows.map(([net, prefix]) => `${net}/${prefix}`).sort();
  assert.deepEqual(cidrs(REFUSED_V4), V4.map(([c]) => c).sort());
  assert.deepEqual(cidrs(REFUSED_V6), V6.map(([c]) => c).sort());
  assert.deepEqual(
    [...new Set(CARRYING_V6.map((f) => `${f.network}/${f.prefix}`))].sort(),
    [...new Set(CARRYING.map((f) => f.cidr))].sort(),
  );
});

test("IPv6 forms carrying IPv4 (mapped, SIIT, NAT64, 6to4, Teredo) are judged by the IPv4 inside: refused for each refused IPv4 range, allowed around a public one", () => {
  for (const form of CARRYING) {
    for (const [cidr, why] of V4) {
      const { first, last } = span(cidr);
      for (const inner of [first + (last - first + 1n) / 2n, first, last].map((v) => text(v, 32))) {
        const address = form.embed(inner);
        assert.ok(
          within(value(address.replace(/(\d+\.\d+\.\d+\.\d+)$/, (d) => hexPair(d))), form.cidr),
          `${address} is a ${form.name} address`,
        );
        const reason = `${why.source.replace(/\$$/, "")} \\(IPv4 ${escaped(inner)} inside IPv6, ${escaped(form.name)}\\)$`;
        assert.match(
          refusedBecause(address) ?? "(allowed)",
          new RegExp(reason),
          `${form.name} ${address} carrying ${inner} (${cidr}): refused for it, naming the IPv4 and the form`,
        );
      }
    }
    // The negative control: the same form around a public address is allowed, so the refusals above are the IPv4's.
    assert.equal(refusedBecause(form.embed(PUBLIC_V4)), undefined, `${form.name} around ${PUBLIC_V4} is allowed`);
  }
  // Both notations of a mapped address; the ends of each form (0.0.0.0 and 255.255.255.255 inside).
  assert.match(refusedBecause("::ffff:7f00:1")!, /^loopback \(IPv4 127\.0\.0\.1 inside IPv6, IPv4-mapped\)$/);
  for (const a of [
    "::ffff:0:0",
    "::ffff:ffff:ffff",
    "::ffff:0:0:0",
    "::ffff:0:ffff:ffff",
    "64:ff9b::",
    "64:ff9b::ffff:ffff",
    "2002::",
    "2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
    "2001::",
    "2001:0:ffff:ffff:ffff:ffff:ffff:ffff",
  ]) {
    assert.ok(refusedBecause(a), `${a} (an end of its form) is refused`);
  }
  // Just outside the forms: the global-unicast neighbours of 6to4 and Teredo are allowed.
  for (const a of [
    "2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
    "2003::",
    "2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
    "2001:1::",
  ])
    assert.equal(refusedBecause(a), undefined, `${a} is allowed`);
  for (const a of ["::fffe:ffff:ffff", "::1:0:0:0", "64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff", "64:ff9b:0:0:0:1::"])
    assertVerdict(a, OUTSIDE_GLOBAL_UNICAST, "next to a carrying form");
});
