/**
 * The SSRF policy (docs/webhooks.md): without LEDGER_WEBHOOK_ALLOW_PRIVATE an endpoint that is or
 * resolves to a loopback, private, link-local, unique-local, multicast or unspecified address
 * (IPv4-mapped IPv6 included) is refused at registration and again at every delivery, after
 * resolution; the connection goes to the address that was checked; redirects are not followed;
 * an answer that does not come in time fails the attempt.
 */
import { test } from "node:test";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { attempt } from "../../src/webhooks/delivery-http.ts";
import assert from "node:assert/strict";
import { refusedBecause } from "../../src/webhooks/address-policy.ts";
import { WebhookDelivery } from "../../src/webhooks/delivery-worker.ts";
import { EndpointRegistry } from "../../src/webhooks/endpoint-registry.ts";
import { WebhookUrlRefusedError } from "../../src/webhooks/webhook-errors.ts";
import { FAST_RETRIES, PUBLIC_URL, webhookLab } from "./fixture.ts";

test("address classes: every refused range, IPv4 inside IPv6 included; public addresses pass", () => {
  const refused = [
    "127.0.0.1",
    "127.255.0.9",
    "10.1.2.3",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "169.254.169.254",
    "100.64.0.1",
    "0.0.0.0",
    "224.0.0.1",
    "239.1.1.1",
    "255.255.255.255",
    "::1",
    "::",
    "fe80::1",
    "fc00::1",
    "fd12:3456::1",
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:7f00:1",
    "::ffff:10.0.0.1",
    "::ffff:169.254.169.254",
    "64:ff9b::a00:1",
    "::127.0.0.1",
    "203.0.113.10",
    "2001:db8::1",
    "2002:7f00:1::1",
    "2001:0:4136:e378:8000:63bf:80ff:fffe",
    "64:ff9b:1::808:808",
    "::ffff:0:7f00:1",
  ];
  // The whole list, range by range, is walked in address-policy.test.ts.
  for (const a of refused) assert.ok(refusedBecause(a), `${a} is refused`);
  assert.match(refusedBecause("::ffff:127.0.0.1")!, /loopback \(IPv4 127\.0\.0\.1 inside IPv6, IPv4-mapped\)/);
  for (const a of ["8.8.8.8", "172.32.0.1", "2606:4700::1111", "::ffff:8.8.8.8"])
    assert.equal(refusedBecause(a), undefined, `${a} passes`);
});

test("registration without the allow flag refuses internal targets, by literal and by DNS (localhost), and other schemes; a public address is accepted", async (t) => {
  const lab = await webhookLab(t, { partitions: 1 });
  const strict = new EndpointRegistry(lab.db.pool, { allowPrivate: false });
  const urls = [
    "http://127.0.0.1:9/hook",
    "http://localhost:9/hook",
    "http://[::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://[::ffff:7f00:1]/",
    "http://10.0.0.7/",
    "http://169.254.169.254/latest/meta-data",
    "http://[fe80::1]/",
    "http://[fc00::1]/",
    "http://0.0.0.0/",
    "http://224.0.0.1/",
    "http://2130706433/", // 127.0.0.1 as one number: the URL parser normalises it
    "http://192.0.2.1/",
    "http://[2001:db8::1]/",
    "http://[2002:7f00:1::1]/",
    "ftp://8.8.8.8/",
    "file:///etc/passwd",
    "http://user:pw@8.8.8.8/",
    "not a url",
    lab.receiver.url,
  ];
  for (const url of urls) {
    await assert.rejects(
      strict.create({ url, events: ["*"] }),
      (err: unknown) => {
        assert.ok(err instanceof WebhookUrlRefusedError, `${url}: ${String(err)}`);
        assert.equal(err.code, "WEBHOOK_URL_REFUSED");
        return true;
      },
      url,
    );
  }
  await assert.rejects(
    strict.create({ url: "http://localhost:9/hook", events: ["*"] }),
    /localhost resolves to a refused address: loopback/,
    "refused after DNS resolution",
  );
  const { rows } = await lab.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM webhook_endpoint");
  assert.equal(rows[0]!.n, 0, "a refused registration writes nothing");
  const accepted = await strict.create({ url: PUBLIC_URL, events: ["like.created"] });
  assert.equal(accepted.endpoint.status, "active");
});

/** A resolver that knows a few names, each with several addresses, in the order given. */
function resolverOf(names: Record<string, string[]>) {
  return async (host: string) => {
    const addresses = names[host];
    if (!addresses) throw Object.assign(new Error(`${host} unknown`), { code: "ENOTFOUND" });
    return addresses.map((address) => ({ address, family: address.includes(":") ? 6 : 4 }));
  };
}

test("a name is refused if any address it resolves to is refused (one public and one loopback address, in either order), at registration and at delivery", async (t) => {
  const lab = await webhookLab(t, { partitions: 1 });
  await lab.seed();
  const resolver = resolverOf({
    "public-then-loopback.test": ["8.8.8.8", "127.0.0.1"],
    "loopback-then-public.test": ["127.0.0.1", "8.8.8.8"],
    "v6-public-then-loopback.test": ["2606:4700::1111", "::1"],
    "public-then-mapped-private.test": ["2606:4700::1111", "8.8.4.4", "::ffff:10.0.0.1"],
    "all-public.test": ["8.8.8.8", "2606:4700::1111", "1.1.1.1"],
  });
  const strict = new EndpointRegistry(lab.db.pool, { allowPrivate: false, resolver });
  for (const [host, why] of [
    ["public-then-loopback.test", "loopback"],
    ["loopback-then-public.test", "loopback"],
    ["v6-public-then-loopback.test", "loopback"],
    ["public-then-mapped-private.test", "private"],
  ] as const) {
    await assert.rejects(strict.create({ url: `https://${host}/hook`, events: ["*"] }), (err: unknown) => {
      assert.ok(err instanceof WebhookUrlRefusedError, `${host}: ${String(err)}`);
      assert.match(
        err.message,
        new RegExp(`${host.replace(/\./g, "\\.")} resolves to a refused address: ${why} \\(`),
        host,
      );
      return true;
    });
  }
  // The negative control: a name with several addresses, all public, is accepted, so the refusals
  // above are the refused address's and not the resolver's or the number of addresses.
  const accepted = await strict.create({ url: "https://all-public.test/hook", events: ["*"] });
  assert.equal(accepted.endpoint.status, "active");
  const { rows } = await lab.db.pool.query<{ url: string }>("SELECT url FROM webhook_endpoint");
  assert.deepEqual(
    rows.map((r) => r.url),
    ["https://all-public.test/hook"],
    "only the all-public name was registered",
  );

  // At delivery: an endpoint registered with the flag on, delivered by a worker without it, whose
  // name resolves to a public address first (the one a connection would take) and loopback second.
  const lenient = new EndpointRegistry(lab.db.pool, { allowPrivate: true, resolver });
  const { endpoint } = await lenient.create({
    url: `http://public-then-loopback.test:${lab.receiver.port}/hook`,
    events: ["like.created"],
  });
  await strict.delete(accepted.endpoint.id);
  const worker = new WebhookDelivery(lab.db.pool, {
    ...FAST_RETRIES,
    retryBaseMs: 60_000,
    maxBackoffMs: 60_000,
    limits: { ...FAST_RETRIES.limits, allowPrivate: false, resolver },
  });
  await lab.ledger.likes.like("u1", "item-1");
  assert.equal(await worker.step(), 1);
  const cursor = (await lenient.cursors(endpoint.id)).find((c) => c.source === "likes")!;
  assert.deepEqual([cursor.deliveredUpto, cursor.attempts], [0, 1], "the event stays next, one failed attempt");
  assert.match(cursor.lastError ?? "", /public-then-loopback\.test resolves to a refused address: loopback/);
  assert.equal(lab.receiver.deliveries.length, 0, "no request was sent");
});

test("a refusal names the class of the address, never the address a name resolves to (no internal-DNS oracle)", async (t) => {
  const lab = await webhookLab(t, { partitions: 1 });
  const internal = ["10.20.30.40", "::ffff:10.20.30.41", "64:ff9b::a14:1e2a", "fd00:1234::42", "2002:a14:1e2b::1"];
  const names = Object.fromEntries(internal.map((a, i) => [`db${i}.corp.test`, [a]]));
  const strict = new EndpointRegistry(lab.db.pool, { allowPrivate: false, resolver: resolverOf(names) });
  // Each internal address in any notation the message could use: dotted, the hex groups of an embedding, the IPv6 prefix.
  const leaks = (message: string) =>
    [/10\.20\.30\./, /a14:1e2/i, /fd00:1234/i, /::ffff/i, /2002:/].filter((r) => r.test(message)).map(String);
  for (const [host, [address]] of Object.entries(names)) {
    await assert.rejects(strict.create({ url: `https://${host}/`, events: ["*"] }), (err: unknown) => {
      assert.ok(err instanceof WebhookUrlRefusedError);
      assert.match(
        err.message,
        new RegExp(`${host.replace(/\./g, "\\.")} resolves to a refused address: (private|unique-local) \\(`),
        `${host} -> ${address}`,
      );
      assert.deepEqual(leaks(err.message), [], `${err.message} names no address`);
      return true;
    });
  }
  // The negative control: the same check sees an address when one is in the message (a literal,
  // which the admin wrote, is named with the IPv4 inside it).
  await assert.rejects(strict.create({ url: "https://[::ffff:10.20.30.41]/", events: ["*"] }), (err: unknown) => {
    assert.ok(err instanceof WebhookUrlRefusedError);
    assert.match(err.message, /is refused: private \(IPv4 10\.20\.30\.41 inside IPv6, IPv4-mapped\)/);
    assert.ok(leaks(err.message).length > 0, "the leak check sees an address");
    return true;
  });
});

test("each delivery checks again after resolving: an endpoint accepted earlier (or with the flag) whose address is internal now gets nothing", async (t) => {
  const lab = await webhookLab(t, { partitions: 1 });
  await lab.seed();
  // A name that resolved publicly at registration and resolves to loopback at delivery (DNS rebinding).
  let answer = "8.8.8.8";
  const resolver = async () => [{ address: answer, family: 4 }];
  const registry = new EndpointRegistry(lab.db.pool, { allowPrivate: false, resolver });
  const { endpoint } = await registry.create({ url: `http://rebind.test:${lab.receiver.port}/hook`, events: ["*"] });
  answer = "127.0.0.1";
  const strict = new WebhookDelivery(lab.db.pool, {
    ...FAST_RETRIES,
    limits: { ...FAST_RETRIES.limits, allowPrivate: false, resolver },
  });
  await lab.ledger.likes.like("u1", "item-1");
  await strict.step();
  const cursor = (await registry.cursors(endpoint.id)).find((c) => c.source === "likes")!;
  assert.equal(cursor.deliveredUpto, 0);
  assert.match(cursor.lastError ?? "", /rebind\.test resolves to a refused address: loopback/);
  assert.equal(lab.receiver.deliveries.length, 0, "no request reached the receiver");
});

test("the connection goes to the address that was checked: a name only the policy's resolver knows reaches the receiver", async (t) => {
  const lab = await webhookLab(t, { partitions: 1 });
  await lab.seed();
  const resolver = async () => [{ address: "127.0.0.1", family: 4 }];
  const registry = new EndpointRegistry(lab.db.pool, { allowPrivate: true, resolver });
  const { secret } = await registry.create({
    url: `http://pinned.invalid:${lab.receiver.port}/hook`,
    events: ["like.created"],
  });
  lab.receiver.secrets.push(secret);
  const pinned = new WebhookDelivery(lab.db.pool, { ...FAST_RETRIES, limits: { ...FAST_RETRIES.limits, resolver } });
  await lab.ledger.likes.like("u1", "item-1");
  await pinned.step();
  // .invalid never resolves in DNS (RFC 6761): the request got there through the pinned address.
  assert.deepEqual(
    lab.receiver.deliveries.map((d) => [d.id, d.signedBy.length, d.status]),
    [["evt_likes_0_1", 1, 200]],
  );
});

test("a 3xx is a failure and its Location is not followed; an answer that does not come in time fails the attempt", async (t) => {
  const lab = await webhookLab(t, {
    partitions: 1,
    delivery: { ...FAST_RETRIES, retryBaseMs: 60_000, limits: { ...FAST_RETRIES.limits, responseTimeoutMs: 300 } },
  });
  await lab.seed();
  const { id } = await lab.register(["like.created"]);
  await lab.ledger.likes.like("u1", "item-1");
  lab.receiver.answer = () => 302;
  await lab.delivery.step();
  let cursor = (await lab.registry.cursors(id)).find((c) => c.source === "likes")!;
  assert.deepEqual([cursor.deliveredUpto, cursor.attempts, cursor.lastStatus], [0, 1, 302]);
  assert.match(cursor.lastError ?? "", /redirect 302 not followed/);
  assert.equal(lab.receiver.deliveries.length, 1, "one request, no second one to a Location");
  await lab.db.pool.query("UPDATE webhook_cursor SET next_attempt_at = now()");
  lab.receiver.answer = () => "hold";
  await lab.delivery.step();
  cursor = (await lab.registry.cursors(id)).find((c) => c.source === "likes")!;
  assert.deepEqual([cursor.deliveredUpto, cursor.attempts], [0, 2]);
  assert.match(cursor.lastError ?? "", /no complete response within 300 ms/);
});

test("an answer's body is read up to its bound only: a receiver that streams without end does not hold the attempt", async (t) => {
  const server = http.createServer((req, res) => {
    req.resume();
    res.writeHead(req.url === "/ok" ? 200 : 500, { "content-type": "text/plain" });
    const chunk = Buffer.alloc(16 * 1024, 120);
    const pump = () => {
      while (res.write(chunk));
      res.once("drain", pump);
    };
    pump();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const limits = {
    connectTimeoutMs: 2_000,
    responseTimeoutMs: 20_000,
    maxResponseBytes: 64 * 1024,
    allowPrivate: true,
  };
  const started = Date.now();
  const failed = await attempt(`${base}/fail`, {}, "{}", limits);
  assert.deepEqual(failed, { ok: false, status: 500, error: "status 500; response body above 65536 bytes" });
  assert.deepEqual(await attempt(`${base}/ok`, {}, "{}", limits), { ok: true, status: 200 });
  assert.ok(Date.now() - started < 10_000, "cut off at the bound, long before the attempt's timeout");
});
