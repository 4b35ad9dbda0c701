import { LedgerError } from "../errors.ts";

/** A message on the stream that cannot be an event of its subject (bad JSON, wrong partition, missing fields). */
export class MalformedEventError extends LedgerError {
  constructor(subject: string, message: string) {
    super("MALFORMED_EVENT", `${subject}: ${message}`);
  }
}

/** The transport's configuration is unusable (NATS_URL missing, a bad stream name); reported before anything runs. */
export class TransportConfigError extends LedgerError {
  constructor(message: string) {
    super("TRANSPORT_CONFIG", message);
  }
}
