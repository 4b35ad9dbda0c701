import { LedgerError } from "../errors.ts";

/** No endpoint has this id (or it was deleted). */
export class WebhookNotFoundError extends LedgerError {
  constructor(endpointId: string) {
    super("WEBHOOK_NOT_FOUND", `webhook endpoint ${endpointId} not found`);
  }
}

/** The URL is not one a webhook may be sent to: scheme, form, or an address the SSRF policy refuses. */
export class WebhookUrlRefusedError extends LedgerError {
  constructor(url: string, why: string) {
    super("WEBHOOK_URL_REFUSED", `webhook url ${JSON.stringify(url.slice(0, 200))} refused: ${why}`);
  }
}

/** An event type that no outbox produces. */
export class UnknownEventTypeError extends LedgerError {
  constructor(types: readonly string[], known: readonly string[]) {
    super(
      "UNKNOWN_EVENT_TYPE",
      `unknown event type(s) ${types.map((t) => JSON.stringify(t)).join(", ")}; known: "*", ${known.join(", ")}`,
    );
  }
}

/** A replay from a position whose events retention has already pruned. */
export class ReplayBelowRetentionError extends LedgerError {
  constructor(source: string, part: number, fromSeq: number, floor: number) {
    super(
      "REPLAY_BELOW_RETENTION",
      `cannot replay ${source} partition ${part} from seq ${fromSeq}: events up to ${floor} are pruned; the oldest position to replay from is ${floor + 1}`,
    );
  }
}

/** A replay from a position the outbox has not reached. */
export class ReplayBeyondEndError extends LedgerError {
  constructor(source: string, part: number, fromSeq: number, last: number) {
    super(
      "REPLAY_BEYOND_END",
      `cannot replay ${source} partition ${part} from seq ${fromSeq}: the partition's last event is ${last}`,
    );
  }
}
