import { once } from "node:events";
import type { PoolClient } from "../db/pool.ts";
import { mapPgError } from "../db/errors.ts";

/**
 * `COPY ... FROM STDIN` on a node-postgres client without pg-copy-streams: node-postgres runs any
 * object with `submit(connection)` as a query (its documented Submittable interface) and hands it
 * the protocol's messages; on CopyInResponse this one sends the chunks of `source` as CopyData,
 * waiting for the socket to drain when it backs up, then CopyDone (or CopyFail when the source
 * throws, which makes the server abort the COPY). Resolves with the rows copied.
 */
interface CopyConnection {
  query(text: string): void;
  sendCopyFromChunk(chunk: Buffer): void;
  endCopyFrom(): void;
  sendCopyFail(message: string): void;
  stream: NodeJS.WritableStream & { writableNeedDrain?: boolean };
}

class CopyIn {
  rows = 0;
  private failure: unknown;
  private settle!: { resolve: (rows: number) => void; reject: (err: unknown) => void };
  readonly done = new Promise<number>((resolve, reject) => (this.settle = { resolve, reject }));

  constructor(private readonly text: string, private readonly source: AsyncIterable<string>) {}

  submit(connection: CopyConnection): void {
    connection.query(this.text);
  }

  handleCopyInResponse(connection: CopyConnection): void {
    void this.pump(connection);
  }

  private async pump(connection: CopyConnection): Promise<void> {
    try {
      for await (const chunk of this.source) {
        connection.sendCopyFromChunk(Buffer.from(chunk, "utf8"));
        if (connection.stream.writableNeedDrain) await once(connection.stream, "drain");
      }
      connection.endCopyFrom();
    } catch (err) {
      this.failure = err;
      connection.sendCopyFail(err instanceof Error ? err.message : String(err));
    }
  }

  handleCommandComplete(msg: { text?: string }): void {
    const match = /^COPY (\d+)$/.exec(msg.text ?? "");
    this.rows = match ? Number(match[1]) : 0;
  }

  handleReadyForQuery(): void {
    if (this.failure === undefined) this.settle.resolve(this.rows);
  }

  handleError(err: unknown): void {
    // A source that threw is the cause; the server's "COPY from stdin failed" only echoes it.
    this.settle.reject(this.failure ?? mapPgError(err));
  }

  // Messages a COPY does not send; present because the client may call them.
  handleRowDescription(): void {}
  handleDataRow(): void {}
  handleEmptyQuery(): void {}
  handlePortalSuspended(): void {}
  handleCopyData(): void {}
}

export async function copyIn(client: PoolClient, text: string, source: AsyncIterable<string>): Promise<number> {
  const copy = new CopyIn(text, source);
  // The client queues the submittable like any query and calls its handlers.
  void (client as unknown as { query(s: unknown): unknown }).query(copy);
  return copy.done;
}
