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

/**
 * A message of an event committed on an earlier timeline that the database does not have under that
 * timeline: a promotion lost it (asynchronous replication), and its position may now name another
 * event (docs/failover.md). Dead-lettered (reason "lost") so that it is reported, never applied.
 */
export class EventLostInFailoverError extends LedgerError {
  constructor(kind: string, part: number, seq: number, timeline: number, now: number, taken: boolean) {
    super(
      "EVENT_LOST_IN_FAILOVER",
      `${kind} event ${part}:${seq} of timeline ${timeline} is not in the outbox (timeline ${now} now): ` +
        `a promotion lost it; ${taken ? "its position holds another event" : "its position is free again"}`,
    );
  }
}
