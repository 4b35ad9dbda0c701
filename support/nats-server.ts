import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { once } from "node:events";
import os from "node:os";
import path from "node:path";
import { connect } from "@nats-io/transport-node";
import { freePort } from "../src/db/embedded-cluster.ts";
import { pollUntil } from "./poll.ts";

/** Debian's binary (`apt-get install nats-server`, which .ci/run does when it is missing). */
export const NATS_SERVER_BIN =
  process.env.NATS_SERVER_BIN ?? (existsSync("/usr/sbin/nats-server") ? "/usr/sbin/nats-server" : "nats-server");

/**
 * A throwaway `nats-server -js` on a free port (never the machine's 4222) with its JetStream store in
 * a temporary directory. restart() keeps the store (what a broker restart does); the directory is
 * removed by close(). Start waits until a client can connect.
 */
export class TestNats {
  private child: ChildProcess | undefined;

  private constructor(
    readonly port: number,
    readonly storeDir: string,
    readonly host: string,
  ) {}

  get url(): string {
    return `nats://${this.host}:${this.port}`;
  }

  /** `host`: the one address it listens on (a veth pair's end for a partition test); 127.0.0.1 unless given. */
  static async start(options: { host?: string } = {}): Promise<TestNats> {
    const nats = new TestNats(
      await freePort(),
      await mkdtemp(path.join(os.tmpdir(), "ledger-nats-")),
      options.host ?? "127.0.0.1",
    );
    await nats.restart();
    return nats;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  async restart(): Promise<void> {
    this.child = spawn(NATS_SERVER_BIN, ["-js", "-a", this.host, "-p", String(this.port), "-sd", this.storeDir], {
      stdio: "ignore",
    });
    const spawned = this.child;
    const failed = new Promise<never>((_, reject) =>
      spawned.once("error", (err) =>
        reject(new Error(`cannot start ${NATS_SERVER_BIN} (apt-get install nats-server): ${err.message}`)),
      ),
    );
    // A refused connection is the expected answer until the server listens; a failed spawn or an
    // exited server ends the wait at once.
    const accepted = async (): Promise<boolean | Error> => {
      try {
        const nc = await Promise.race([connect({ servers: this.url, reconnect: false, timeout: 500 }), failed]);
        await nc.close();
        return true;
      } catch (err) {
        if (spawned.exitCode !== null || (err instanceof Error && err.message.startsWith("cannot start")))
          return err as Error;
        return false;
      }
    };
    const outcome = await pollUntil(
      `nats-server on port ${this.port} accepts a connection`,
      accepted,
      (r) => r !== false,
      15_000,
      50,
    );
    if (outcome instanceof Error) throw new Error(`nats-server on port ${this.port} did not start`, { cause: outcome });
  }

  /** Stops the server with a signal (SIGKILL: a crash; SIGTERM: a clean shutdown) and waits for the exit. */
  async stop(signal: NodeJS.Signals = "SIGKILL"): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, "exit");
    child.kill(signal);
    await exited;
  }

  async close(): Promise<void> {
    await this.stop();
    await rm(this.storeDir, { recursive: true, force: true });
  }
}
