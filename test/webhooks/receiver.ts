/**
 * A real webhook receiver on 127.0.0.1 (node:http) that checks every delivery's signature with
 * an HMAC-SHA256 of its own (built here from SHA-256, not from src/), records what it got, and
 * answers as the test says: a status, or a request held open until the test releases it.
 */
import { createHash } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { pollUntil } from "../../support/poll.ts";

/** HMAC-SHA256 (RFC 2104) from SHA-256 alone. */
export function hmacSha256(key: Buffer, message: string): Buffer {
  const block = 64;
  const k = key.length > block ? createHash("sha256").update(key).digest() : key;
  const padded = Buffer.concat([k, Buffer.alloc(block - k.length)]);
  const inner = createHash("sha256")
    .update(Buffer.from(padded.map((b) => b ^ 0x36)))
    .update(message, "utf8")
    .digest();
  return createHash("sha256")
    .update(Buffer.from(padded.map((b) => b ^ 0x5c)))
    .update(inner)
    .digest();
}

/** The secrets (whsec_...) among `secrets` that signed this message: one per matching `v1,` entry. */
export function signersOf(
  secrets: readonly string[],
  id: string,
  timestamp: string,
  body: string,
  header: string,
): string[] {
  const given = header
    .split(" ")
    .filter((s) => s.startsWith("v1,"))
    .map((s) => s.slice(3));
  return secrets.filter((secret) => {
    const expected = hmacSha256(
      Buffer.from(secret.replace(/^whsec_/, ""), "base64"),
      `${id}.${timestamp}.${body}`,
    ).toString("base64");
    return given.includes(expected);
  });
}

export interface Delivery {
  id: string;
  timestamp: string;
  signature: string;
  body: string;
  parsed: { type: string; timestamp: string; data: Record<string, unknown> & { partition: number; seq: number } };
  /** Which of the receiver's known secrets signed it. */
  signedBy: string[];
  /** The status the receiver answered (undefined while held, or when the connection was cut). */
  status?: number;
  /** The sender went away before an answer (killed, timed out). */
  cut?: boolean;
  receivedAt: number;
}

/** What to answer a delivery: a status, or "hold" (the request stays open until release()). */
export type Answer = number | "hold" | Promise<number>;

export class TestReceiver {
  readonly deliveries: Delivery[] = [];
  /** Secrets to check signatures against (the test adds each secret it is given). */
  readonly secrets: string[] = [];
  answer: (d: Delivery, index: number) => Answer = () => 200;
  /** Deliveries being answered at once (a second one on the same partition would break the order). */
  inFlight = 0;
  maxInFlight = 0;
  private readonly held: { delivery: Delivery; respond: (status: number) => void }[] = [];
  private constructor(
    private readonly server: http.Server,
    readonly url: string,
  ) {}

  /** On `port` (0: a free one); a receiver that is "back" listens on the port it had. */
  static async start(path = "/hook", port = 0): Promise<TestReceiver> {
    const holder: { receiver?: TestReceiver } = {};
    const server = http.createServer((req, res) => holder.receiver!.handle(req, res));
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, "127.0.0.1", resolve);
    });
    holder.receiver = new TestReceiver(server, `http://127.0.0.1:${(server.address() as AddressInfo).port}${path}`);
    return holder.receiver;
  }

  get port(): number {
    return Number(new URL(this.url).port);
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    let body = "";
    req.setEncoding("utf8").on("data", (chunk: string) => (body += chunk));
    req.on("end", () => {
      const header = (name: string) => String(req.headers[name] ?? "");
      const delivery: Delivery = {
        id: header("webhook-id"),
        timestamp: header("webhook-timestamp"),
        signature: header("webhook-signature"),
        body,
        parsed: JSON.parse(body) as Delivery["parsed"],
        signedBy: signersOf(
          this.secrets,
          header("webhook-id"),
          header("webhook-timestamp"),
          body,
          header("webhook-signature"),
        ),
        receivedAt: Date.now(),
      };
      const index = this.deliveries.push(delivery) - 1;
      this.inFlight++;
      this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
      const respond = (status: number) => {
        if (delivery.cut) return;
        this.inFlight--;
        delivery.status = status;
        res.writeHead(status, { "content-type": "text/plain" }).end("ok");
      };
      res.on("close", () => {
        if (delivery.status !== undefined) return;
        delivery.cut = true;
        this.inFlight = Math.max(0, this.inFlight - 1);
      });
      const answer = this.answer(delivery, index);
      if (answer === "hold") this.held.push({ delivery, respond });
      else if (typeof answer === "number") respond(answer);
      else void answer.then(respond);
    });
  }

  /** Waits (bounded) until a request is held, and returns it. */
  async waitHeld(ms = 30_000): Promise<Delivery> {
    await pollUntil(
      "a delivery held by the receiver",
      async () => this.held.length,
      (n) => n > 0,
      ms,
    );
    return this.held[0]!.delivery;
  }

  /** Waits (bounded) until the sender of every held request has gone away (its connection closed). */
  async waitCut(ms = 30_000): Promise<void> {
    await pollUntil(
      "the held requests' connections closed",
      async () => this.held.every((h) => h.delivery.cut),
      (done) => done,
      ms,
    );
  }

  /** Answers the held requests with `status` (a request whose sender has gone is not answered). */
  release(status = 200): void {
    for (const h of this.held.splice(0)) h.respond(status);
  }

  /** The deliveries answered 2xx. */
  accepted(): Delivery[] {
    return this.deliveries.filter((d) => d.status !== undefined && d.status >= 200 && d.status < 300);
  }

  async waitAccepted(n: number, ms = 30_000): Promise<Delivery[]> {
    return pollUntil(
      `${n} deliveries accepted`,
      async () => this.accepted(),
      (a) => a.length >= n,
      ms,
    );
  }

  async close(): Promise<void> {
    this.release(503);
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** Per (source, partition) the seqs in delivery order, from the webhook-ids. */
export function seqsByPartition(deliveries: readonly Delivery[]): Map<string, number[]> {
  const out = new Map<string, number[]>();
  for (const d of deliveries) {
    const m = /^evt_([a-z]+)_(\d+)_(\d+)$/.exec(d.id);
    if (!m) throw new Error(`webhook-id ${d.id} is not evt_<source>_<partition>_<seq>`);
    const key = `${m[1]}/${m[2]}`;
    out.set(key, [...(out.get(key) ?? []), Number(m[3])]);
  }
  return out;
}
