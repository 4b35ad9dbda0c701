/**
 * The Events table of docs/webhooks.md as data: per event type the outbox it names and the fields
 * of its `data` (besides `partition` and `seq`, which every event has). "same" in the data column
 * repeats the row above.
 */
import { readFile } from "node:fs/promises";

export interface DocumentedEvent {
  outbox: string;
  fields: string[];
}

const ticked = (cell: string) => [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);

export function parseEventsTable(markdown: string): Map<string, DocumentedEvent> {
  const start = markdown.indexOf("## Events");
  if (start < 0) throw new Error("docs/webhooks.md has no Events section");
  const section = markdown.slice(start, markdown.indexOf("\n## ", start + 1));
  const out = new Map<string, DocumentedEvent>();
  let previous: string[] = [];
  for (const line of section.split("\n")) {
    if (!line.startsWith("| `")) continue;
    const cells = line.split("|").slice(1, -1);
    if (cells.length !== 4) throw new Error(`an Events row without four cells: ${line}`);
    const fields = cells[3]!.trim() === "same" ? previous : ticked(cells[3]!);
    previous = fields;
    const outbox = ticked(cells[1]!)[0];
    if (!outbox) throw new Error(`an Events row without an outbox: ${line}`);
    for (const type of ticked(cells[0]!)) {
      if (out.has(type)) throw new Error(`${type} is listed twice`);
      out.set(type, { outbox, fields });
    }
  }
  return out;
}

export async function documentedEvents(): Promise<Map<string, DocumentedEvent>> {
  return parseEventsTable(await readFile(new URL("../../docs/webhooks.md", import.meta.url), "utf8"));
}
