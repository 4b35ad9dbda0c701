import { spawn, type ChildProcess } from "node:child_process";
import { createServer } from "node:net";
import { once } from "node:events";
import { createClient } from "redis";

/** A free TCP port on 127.0.0.1 (never the machine's 6379: the OS picks one that is unused). */
async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as { port: number };
  server.close();
  await once(server, "close");
  return port;
}

/**
 * A throwaway redis-server from the system binary, without persistence (--save "" --appendonly
 * no), so a kill and restart comes back empty as the fault tests need. Start waits until it answers PING.
 */
export class TestRedis {
  private child: ChildProcess | undefined;

  private constructor(
    readonly port: number,
    private readonly extraArgs: readonly string[],
  ) {}

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  static async start(extraArgs: readonly string[] = []): Promise<TestRedis> {
    const redis = await TestRedis.notStarted(extraArgs);
    await redis.restart();
    return redis;
  }

  /** A free port and no server on it yet (a Redis that is down when a client starts); restart() starts it there. */
  static async notStarted(extraArgs: readonly string[] = []): Promise<TestRedis> {
    return new TestRedis(await freePort(), extraArgs);
  }

  /** Starts the server (again, empty) on the same port. */
  async restart(): Promise<void> {
    this.child = spawn(
      "redis-server",
      ["--port", String(this.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", ...this.extraArgs],
      {
        stdio: "ignore",
      },
    );
    const deadline = Date.now() + 15_000;
    for (;;) {
      const probe = createClient({ url: this.url, socket: { reconnectStrategy: false, connectTimeout: 500 } });
      probe.on("error", () => {});
      try {
        await probe.connect();
        await probe.ping();
        await probe.close();
        return;
      } catch (err) {
        if (Date.now() > deadline)
          throw new Error(`redis-server on port ${this.port} did not answer within 15 s`, { cause: err });
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
  }

  /** SIGSTOP: the server keeps its connections open and answers nothing (a hung Redis, a long GC pause of its host). */
  pause(): void {
    this.child?.kill("SIGSTOP");
  }

  /** SIGCONT after pause(). */
  resume(): void {
    this.child?.kill("SIGCONT");
  }

  /** SIGKILL and wait for the exit. */
  async kill(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, "exit");
    child.kill("SIGKILL");
    await exited;
  }
}
