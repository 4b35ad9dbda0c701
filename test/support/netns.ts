/**
 * A network namespace joined to this one by veth pairs, for partitions that drop packets
 * without a reset: a link taken down on this side leaves the namespace's end without carrier,
 * so whatever either side sends is dropped silently (no RST, no ICMP), as on a dead host or a
 * cut cable. Needs root and iproute2 (`ip`); CI runs as root.
 */
import { execFileSync } from "node:child_process";
import { randomInt } from "node:crypto";

function ip(...args: string[]): string {
  return execFileSync("ip", args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

const PREFIX = "sl-part-";

/** One veth pair: `here` on this side, `there` inside the namespace, a /30 between them. */
export interface Link {
  /** This side's interface and address. */
  here: { dev: string; address: string };
  /** The namespace's interface and address. */
  there: { dev: string; address: string };
}

export class NetworkNamespace {
  private readonly links: Link[] = [];

  private constructor(readonly name: string) {}

  /**
   * A new namespace (loopback up), named after this process so that one left by a killed run is
   * recognised and removed by the next (`removeLeftovers`).
   */
  static create(): NetworkNamespace {
    NetworkNamespace.removeLeftovers();
    const ns = new NetworkNamespace(`${PREFIX}${process.pid}-${randomInt(1_000_000)}`);
    ip("netns", "add", ns.name);
    ip("-n", ns.name, "link", "set", "lo", "up");
    return ns;
  }

  /** Namespaces of this helper whose process is gone. */
  static removeLeftovers(): void {
    for (const line of ip("netns", "list").split("\n")) {
      const name = line.split(" ")[0] ?? "";
      const pid = Number(/^sl-part-(\d+)-/.exec(name)?.[1]);
      if (!pid || pid === process.pid) continue;
      let alive = true;
      try {
        process.kill(pid, 0);
      } catch {
        alive = false;
      }
      if (!alive) ip("netns", "del", name);
    }
  }

  /** A veth pair to the namespace, on a /30 of 10.<random>.<random>.0 that no route but the default covers. */
  addLink(): Link {
    let subnet: string | undefined;
    for (let attempt = 0; attempt < 50 && subnet === undefined; attempt++) {
      const candidate = `10.${randomInt(100, 250)}.${randomInt(0, 250)}`;
      const routes = ip("-4", "route", "show", "to", "match", `${candidate}.1`)
        .split("\n")
        .filter((l) => l.trim() !== "" && !l.startsWith("default"));
      if (routes.length === 0) subnet = candidate;
    }
    if (subnet === undefined) throw new Error("no free 10.x.y.0/30 for a veth pair");
    const index = this.links.length;
    const tag = this.name.slice(PREFIX.length).replace(/\D/g, "").slice(-8);
    const link: Link = {
      here: { dev: `slh${tag}${index}`.slice(0, 15), address: `${subnet}.1` },
      there: { dev: `sln${tag}${index}`.slice(0, 15), address: `${subnet}.2` },
    };
    ip("link", "add", link.here.dev, "type", "veth", "peer", "name", link.there.dev);
    ip("link", "set", link.there.dev, "netns", this.name);
    ip("addr", "add", `${link.here.address}/30`, "dev", link.here.dev);
    ip("-n", this.name, "addr", "add", `${link.there.address}/30`, "dev", link.there.dev);
    ip("link", "set", link.here.dev, "up");
    ip("-n", this.name, "link", "set", link.there.dev, "up");
    this.links.push(link);
    return link;
  }

  /** Takes this side of the link down: every packet over it is dropped, both ways, without a reset. */
  cut(link: Link): void {
    ip("link", "set", link.here.dev, "down");
  }

  restore(link: Link): void {
    ip("link", "set", link.here.dev, "up");
  }

  /** The wrapper that runs a command inside the namespace. */
  get exec(): string[] {
    return ["ip", "netns", "exec", this.name];
  }

  /** Removes the namespace; its veth pairs go with it. */
  remove(): void {
    try {
      ip("netns", "del", this.name);
    } catch {
      // Already gone.
    }
    for (const link of this.links) {
      try {
        ip("link", "del", link.here.dev);
      } catch {
        // Removed with the namespace.
      }
    }
  }
}
