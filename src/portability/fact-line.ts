import { InvalidInputError } from "../errors.ts";
import { MAX_ID_LENGTH, RESERVED_USER_IDS, validateId, validateUserId } from "../ids.ts";

/** One fact of the portability format (docs/import.md), as a line of NDJSON holds it. */
export type FactLine =
  | { kind: "account"; id: string; private?: boolean; hideCollections?: boolean; erased?: true }
  | { kind: "item"; id: string }
  | { kind: "like"; user: string; item: string; at?: string }
  | { kind: "follow"; follower: string; followee: string; state: "ACTIVE" | "PENDING"; at?: string }
  | { kind: "block"; blocker: string; blocked: string; at?: string };

/** The fields each kind allows, and which of them it requires. */
const FIELDS: Record<FactLine["kind"], { required: readonly string[]; optional: readonly string[] }> = {
  // erased: the tombstone of an erased account (docs/erasure.md), as the export writes it: no settings.
  account: { required: ["id"], optional: ["private", "hideCollections", "erased"] },
  item: { required: ["id"], optional: [] },
  like: { required: ["user", "item"], optional: ["at"] },
  follow: { required: ["follower", "followee", "state"], optional: ["at"] },
  block: { required: ["blocker", "blocked"], optional: ["at"] },
};

const NOT_IMPORTABLE: Record<string, string> = {
  post: "posts are not importable yet",
  comment: "comments are not importable yet",
};

/** ISO-8601 date and time with a zone (Z or ±hh:mm), seconds optional, up to microseconds. */
const ISO_DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?(Z|[+-]\d{2}:\d{2})$/;

function validateAt(value: unknown, now: number): string {
  if (typeof value !== "string")
    throw new InvalidInputError("at", `must be an ISO-8601 date-time string, got ${typeof value}`);
  const m = ISO_DATE_TIME.exec(value);
  if (!m)
    throw new InvalidInputError(
      "at",
      `must be an ISO-8601 date-time with a zone, like 2024-05-01T12:00:00Z, got ${JSON.stringify(value.slice(0, 40))}`,
    );
  const [year, month, day, hour, minute, second] = [m[1], m[2], m[3], m[4], m[5], m[6] ?? "0"].map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const calendar = new Date(Date.UTC(year, month - 1, day));
  if (
    year < 1970 ||
    calendar.getUTCMonth() !== month - 1 ||
    calendar.getUTCDate() !== day ||
    hour > 23 ||
    minute > 59 ||
    second > 59
  ) {
    throw new InvalidInputError("at", `is not a valid date-time (from 1970 on): ${value}`);
  }
  if (Date.parse(value) > now) throw new InvalidInputError("at", `is in the future: ${value}`);
  return value;
}

function validateBoolean(field: string, value: unknown): boolean {
  if (typeof value !== "boolean")
    throw new InvalidInputError(field, `must be true or false, got ${JSON.stringify(value)}`);
  return value;
}

/**
 * A like line exactly as the export and JSON.stringify write it: the fields in this order, no
 * whitespace, ids of the ID_PATTERN alphabet and length (so no escapes), `at` a string without
 * escapes. Any line it matches parses to the same object through JSON.parse, so it skips that (a
 * million like lines: about 0.3 s instead of 3 s); every other line takes the general path.
 */
const ID = "[A-Za-z0-9][A-Za-z0-9._:@-]{0," + String(MAX_ID_LENGTH - 1) + "}";
const PLAIN_LIKE = new RegExp(`^\\{"kind":"like","user":"(${ID})","item":"(${ID})"(?:,"at":"([^"\\\\]*)")?\\}$`);

/**
 * Parses and checks one line on its own (JSON, kind, fields, ids as the API checks them, dates,
 * self-relations). Returns the fact, or throws InvalidInputError naming the field. `now` bounds
 * `at`: a fact cannot have happened after the import.
 */
export function parseFactLine(text: string, now: number): FactLine {
  const like = PLAIN_LIKE.exec(text);
  if (like && !RESERVED_USER_IDS.includes(like[1]!)) {
    return {
      kind: "like",
      user: like[1]!,
      item: like[2]!,
      ...(like[3] === undefined ? {} : { at: validateAt(like[3], now) }),
    };
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new InvalidInputError("line", "is not valid JSON");
  }
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw new InvalidInputError("line", "must be a JSON object");
  const o = value as Record<string, unknown>;
  const kind = o.kind;
  if (typeof kind !== "string" || !Object.hasOwn(FIELDS, kind)) {
    const known = Object.keys(FIELDS).join(", ");
    throw new InvalidInputError(
      "kind",
      typeof kind === "string" && NOT_IMPORTABLE[kind]
        ? NOT_IMPORTABLE[kind]!
        : `must be one of ${known}, got ${JSON.stringify(kind)}`,
    );
  }
  const spec = FIELDS[kind as FactLine["kind"]];
  for (const field of Object.keys(o)) {
    if (field !== "kind" && !spec.required.includes(field) && !spec.optional.includes(field)) {
      throw new InvalidInputError(
        field,
        `is not a field of a ${kind} (allowed: ${[...spec.required, ...spec.optional].join(", ")})`,
      );
    }
  }
  for (const field of spec.required)
    if (!Object.hasOwn(o, field)) throw new InvalidInputError(field, `is required for a ${kind}`);
  const at = o.at === undefined ? {} : { at: validateAt(o.at, now) };
  switch (kind as FactLine["kind"]) {
    case "account":
      if (o.erased !== undefined) {
        if (o.erased !== true)
          throw new InvalidInputError(
            "erased",
            `must be true (the tombstone of an erased account) or absent, got ${JSON.stringify(o.erased)}`,
          );
        if (o.private !== undefined || o.hideCollections !== undefined)
          throw new InvalidInputError("erased", "an erased account's line has no settings");
        return { kind: "account", id: validateUserId("id", o.id), erased: true };
      }
      return {
        kind: "account",
        id: validateUserId("id", o.id),
        ...(o.private === undefined ? {} : { private: validateBoolean("private", o.private) }),
        ...(o.hideCollections === undefined
          ? {}
          : { hideCollections: validateBoolean("hideCollections", o.hideCollections) }),
      };
    case "item":
      return { kind: "item", id: validateId("id", o.id) };
    case "like":
      return { kind: "like", user: validateUserId("user", o.user), item: validateId("item", o.item), ...at };
    case "follow": {
      const follower = validateUserId("follower", o.follower);
      const followee = validateUserId("followee", o.followee);
      if (follower === followee) throw new InvalidInputError("followee", "an account cannot follow itself");
      if (o.state !== "ACTIVE" && o.state !== "PENDING")
        throw new InvalidInputError("state", `must be ACTIVE or PENDING, got ${JSON.stringify(o.state)}`);
      return { kind: "follow", follower, followee, state: o.state, ...at };
    }
    case "block": {
      const blocker = validateUserId("blocker", o.blocker);
      const blocked = validateUserId("blocked", o.blocked);
      if (blocker === blocked) throw new InvalidInputError("blocked", "an account cannot block itself");
      return { kind: "block", blocker, blocked, ...at };
    }
  }
}

const NULL = "\\N";

/**
 * The staging row of a fact in COPY's text format (import_stage's columns after run_id). Ids are
 * validated to [A-Za-z0-9._:@-] and dates to the ISO pattern, so no value needs escaping.
 */
export function stageRow(runId: number, line: number, f: FactLine): string {
  const cols: (string | boolean | undefined)[] = (() => {
    switch (f.kind) {
      case "account":
        return [f.id, undefined, f.erased ? "ERASED" : undefined, f.private, f.hideCollections, undefined];
      case "item":
        return [f.id, undefined, undefined, undefined, undefined, undefined];
      case "like":
        return [f.user, f.item, undefined, undefined, undefined, f.at];
      case "follow":
        return [f.follower, f.followee, f.state, undefined, undefined, f.at];
      case "block":
        return [f.blocker, f.blocked, undefined, undefined, undefined, f.at];
    }
  })();
  return `${runId}\t${f.kind}\t${line}\t${cols.map((c) => (c === undefined ? NULL : String(c))).join("\t")}\n`;
}
