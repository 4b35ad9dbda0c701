import { numericDefault, wholeSeconds } from "../config.ts";
import { TransportConfigError } from "./transport-errors.ts";

/** What the relay and the JetStream workers need to know about the broker (environment, see README). */
export interface TransportConfig {
  /** NATS_URL: comma-separated servers, e.g. nats://127.0.0.1:4222. */
  servers: string[];
  /** LEDGER_NATS_STREAM: the events stream's name; subjects are `<lowercased name>.<kind>.<part>`, dead letters in `<name>_DLQ`. */
  stream: string;
  /** LEDGER_NATS_ACK_WAIT_MS: how long a delivery may stay unacknowledged before JetStream redelivers it. */
  ackWaitMs: number;
  /** LEDGER_NATS_MAX_DELIVER: deliveries of one message before it goes to the dead-letter stream. */
  maxDeliver: number;
  /** LEDGER_NATS_DUPLICATE_WINDOW_MS: JetStream drops a re-published Nats-Msg-Id within this window. */
  duplicateWindowSeconds: number;
  /** LEDGER_NATS_MAX_AGE_MS: how long the stream keeps a message (the outbox stays the truth). */
  maxAgeSeconds: number;
  /** LEDGER_GAP_CHECK_MS: a worker whose watermark stood still this long below what the relay had published fills the gap from the outbox. */
  gapCheckMs: number;
  /** LEDGER_NATS_PING_INTERVAL_MS: how often the client pings the server; a silent connection is noticed after LEDGER_NATS_MAX_PINGS_OUT of them. */
  pingIntervalMs: number;
  /** LEDGER_NATS_MAX_PINGS_OUT: unanswered pings before the client drops the connection and reconnects. */
  maxPingsOut: number;
}

function integer(name: string, raw: string | undefined, fallback: number, min: number, max: number): number {
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new TransportConfigError(`${name} must be an integer in ${min}..${max}, got ${JSON.stringify(raw)}`);
  }
  return value;
}

export function loadTransportConfig(env: NodeJS.ProcessEnv = process.env): TransportConfig {
  const servers = (env.NATS_URL ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
  if (servers.length === 0)
    throw new TransportConfigError("--transport nats needs NATS_URL (e.g. nats://127.0.0.1:4222)");
  const stream = env.LEDGER_NATS_STREAM || "LEDGER";
  if (!/^[A-Za-z0-9_-]{1,32}$/.test(stream))
    throw new TransportConfigError(`LEDGER_NATS_STREAM must be 1-32 of A-Z a-z 0-9 _ -, got ${JSON.stringify(stream)}`);
  return {
    servers,
    stream,
    ackWaitMs: integer(
      "LEDGER_NATS_ACK_WAIT_MS",
      env.LEDGER_NATS_ACK_WAIT_MS,
      numericDefault("LEDGER_NATS_ACK_WAIT_MS"),
      100,
      3_600_000,
    ),
    maxDeliver: integer(
      "LEDGER_NATS_MAX_DELIVER",
      env.LEDGER_NATS_MAX_DELIVER,
      numericDefault("LEDGER_NATS_MAX_DELIVER"),
      2,
      1000,
    ),
    duplicateWindowSeconds: wholeSeconds(
      "LEDGER_NATS_DUPLICATE_WINDOW_MS",
      env.LEDGER_NATS_DUPLICATE_WINDOW_MS,
      1,
      86_400,
    ),
    maxAgeSeconds: wholeSeconds("LEDGER_NATS_MAX_AGE_MS", env.LEDGER_NATS_MAX_AGE_MS, 60, 365 * 86_400),
    gapCheckMs: integer(
      "LEDGER_GAP_CHECK_MS",
      env.LEDGER_GAP_CHECK_MS,
      numericDefault("LEDGER_GAP_CHECK_MS"),
      50,
      3_600_000,
    ),
    pingIntervalMs: integer(
      "LEDGER_NATS_PING_INTERVAL_MS",
      env.LEDGER_NATS_PING_INTERVAL_MS,
      numericDefault("LEDGER_NATS_PING_INTERVAL_MS"),
      100,
      600_000,
    ),
    maxPingsOut: integer(
      "LEDGER_NATS_MAX_PINGS_OUT",
      env.LEDGER_NATS_MAX_PINGS_OUT,
      numericDefault("LEDGER_NATS_MAX_PINGS_OUT"),
      1,
      100,
    ),
  };
}
