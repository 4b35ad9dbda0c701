import { CountFeeder } from "../../src/cache/count-feeder.ts";
import type { AttemptResult } from "../../src/webhooks/delivery-http.ts";
import { WebhookDelivery, type Claim } from "../../src/webhooks/delivery-worker.ts";
import type { WebhookEvent } from "../../src/webhooks/webhook-events.ts";
import type { OutboxKindName } from "../../src/transport/transport-kinds.ts";

/**
 * The JetStream message id as it was before it named the timeline: the position alone. After a
 * promotion with asynchronous replication the new primary hands a lost event's position to another
 * event, and the broker's duplicate window drops that event as a copy of the lost one.
 */
export function positionOnlyMessageId(kind: OutboxKindName, part: number, seq: number): string {
  return `${kind}:${part}:${seq}`;
}

/**
 * The Redis count feeder without its realignment at a timeline change: the layer keeps the lost
 * tail's increments, and its increment log refuses the new events at the tail's positions as
 * already applied. Returns the function that puts the real one back.
 */
export function feederWithoutRealign(): () => void {
  const proto = CountFeeder.prototype as unknown as { realign: () => Promise<void> };
  const real = proto.realign;
  proto.realign = async () => undefined;
  return () => {
    proto.realign = real;
  };
}

/**
 * Webhook messages whose id is the position alone (`evt_<source>_<part>_<seq>` on every timeline): a
 * receiver that de-duplicates by webhook-id takes an event of the new primary for the lost one that
 * had its position, and drops it.
 */
export class PositionOnlyIdDelivery extends WebhookDelivery {
  protected override send(claim: Claim, event: WebhookEvent): Promise<AttemptResult> {
    return super.send(claim, { ...event, id: `evt_${event.source}_${event.part}_${event.seq}` });
  }
}
