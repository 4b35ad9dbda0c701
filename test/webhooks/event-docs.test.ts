/**
 * docs/webhooks.md lists every event type the code sends, from the outbox the code reads it from,
 * and no type the code does not have (the fields are checked against delivered bodies in
 * delivery.test.ts). The control: the same comparison over the document with one row taken out, or
 * a type the code lacks added, reports it.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { EVENT_TYPES, OUTBOX_OF_SOURCE, SOURCE_OF_TYPE } from "../../src/webhooks/webhook-events.ts";
import { parseEventsTable, type DocumentedEvent } from "./event-docs.ts";

function differences(documented: Map<string, DocumentedEvent>): string[] {
  const out: string[] = [];
  for (const type of EVENT_TYPES) {
    const doc = documented.get(type);
    if (!doc) out.push(`${type} is not documented`);
    else if (doc.outbox !== OUTBOX_OF_SOURCE[SOURCE_OF_TYPE[type]])
      out.push(`${type} is documented from ${doc.outbox}, sent from ${OUTBOX_OF_SOURCE[SOURCE_OF_TYPE[type]]}`);
    else if (doc.fields.length === 0) out.push(`${type} has no documented data`);
  }
  for (const type of documented.keys())
    if (!(EVENT_TYPES as readonly string[]).includes(type)) out.push(`${type} is documented but not sent`);
  return out;
}

test("docs/webhooks.md's Events table lists exactly the code's event types, each with its outbox and data", async () => {
  const markdown = await readFile(new URL("../../docs/webhooks.md", import.meta.url), "utf8");
  assert.deepEqual(differences(parseEventsTable(markdown)), []);

  // The controls: a row taken out, a type the code lacks, an outbox changed.
  const withoutErased = markdown
    .split("\n")
    .filter((l) => !l.startsWith("| `account.erased`"))
    .join("\n");
  assert.deepEqual(differences(parseEventsTable(withoutErased)), ["account.erased is not documented"]);
  const extra = markdown.replace("| `account.erased` |", "| `account.erased`, `account.restored` |");
  assert.deepEqual(differences(parseEventsTable(extra)), ["account.restored is documented but not sent"]);
  const moved = markdown.replace("| `post.created` | `post_outbox`", "| `post.created` | `comment_outbox`");
  assert.deepEqual(differences(parseEventsTable(moved)), [
    "post.created is documented from comment_outbox, sent from post_outbox",
  ]);
});
