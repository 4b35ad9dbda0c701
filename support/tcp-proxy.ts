import net from "node:net";
import type { AddressInfo } from "node:net";

/**
 * A TCP forwarder on 127.0.0.1 whose target can be changed: what a virtual IP, a DNS name or a load
 * balancer (haproxy with a health check) is to a client after a failover. `retarget` cuts every
 * open connection (as a dead host or a moved address does) and sends new ones to the new port.
 */
export class TcpProxy {
  private readonly open = new Set<net.Socket>();

  private constructor(
    private readonly server: net.Server,
    private target: number,
  ) {}

  static async start(target: number): Promise<TcpProxy> {
    const server = net.createServer();
    const proxy = new TcpProxy(server, target);
    server.on("connection", (client) => proxy.forward(client));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return proxy;
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  private forward(client: net.Socket): void {
    const upstream = net.connect(this.target, "127.0.0.1");
    for (const s of [client, upstream]) {
      this.open.add(s);
      s.on("error", () => undefined);
      s.on("close", () => {
        this.open.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
  }

  /** New connections go to `target`; the open ones are cut. */
  retarget(target: number): void {
    this.target = target;
    for (const s of this.open) s.destroy();
  }

  async close(): Promise<void> {
    for (const s of this.open) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
