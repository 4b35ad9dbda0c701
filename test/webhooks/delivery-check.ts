/**
 * The at-least-once check of the crash tests: every committed event (per partition, seq 1..last)
 * was accepted (2xx) at least once; per partition the attempts went in order (each one the same
 * event again or the next one, never a skip or a step back); a repeat carries the same id and body.
 */
import { seqsByPartition, type Delivery } from "./receiver.ts";

export function deliveryProblems(
  source: string,
  lastByPartition: ReadonlyMap<number, number>,
  deliveries: readonly Delivery[],
): string[] {
  const problems: string[] = [];
  const accepted = new Set(deliveries.filter((d) => d.status !== undefined && d.status < 300).map((d) => d.id));
  for (const [part, last] of lastByPartition) {
    for (let seq = 1; seq <= last; seq++) {
      const id = `evt_${source}_${part}_${seq}`;
      if (!accepted.has(id)) problems.push(`missing ${id}`);
    }
  }
  const seqs = seqsByPartition(deliveries);
  for (const [key, list] of seqs) {
    list.forEach((seq, i) => {
      const prev = i === 0 ? 0 : list[i - 1]!;
      if (seq !== prev && seq !== prev + 1) problems.push(`${key}: attempt ${i} sent seq ${seq} after ${prev}`);
    });
  }
  const bodies = new Map<string, string>();
  for (const d of deliveries) {
    const seen = bodies.get(d.id);
    if (seen !== undefined && seen !== d.body) problems.push(`${d.id}: a repeat with another body`);
    bodies.set(d.id, d.body);
  }
  return problems;
}
