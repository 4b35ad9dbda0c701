/**
 * The soak's webhook receiver (bench/soak.ts): a plain HTTP server that answers every delivery
 * 204 and counts them, distinct message ids apart (delivery is at least once), and a delivery that
 * is not a signed POST as an error.
 */
import { createServer, type Server } from "node:http";
import { once } from "node:events";

export class WebhookReceiver {
  deliveries = 0;
  readonly messageIds = new Set<string>();
  malformed = 0;
  private server: Server | undefined;
  url = "";

  static async start(): Promise<WebhookReceiver> {
    const receiver = new WebhookReceiver();
    const server = createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        const id = req.headers["webhook-id"];
        const signed = typeof req.headers["webhook-signature"] === "string";
        if (req.method !== "POST" || typeof id !== "string" || !signed) receiver.malformed++;
        else {
          receiver.deliveries++;
          receiver.messageIds.add(id);
        }
        res.writeHead(204).end();
      });
    });
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const { port } = server.address() as { port: number };
    receiver.server = server;
    receiver.url = `http://127.0.0.1:${port}/hook`;
    return receiver;
  }

  async close(): Promise<void> {
    const server = this.server;
    if (!server) return;
    const closed = once(server, "close");
    server.close();
    server.closeAllConnections();
    await closed;
  }
}
