import { unstorableText } from "../text.ts";

/**
 * How deeply a parsed request part may nest. The API's bodies are flat objects with at most a
 * list of ids (depth 2); 32 leaves room for clients that wrap, and keeps a 16 KB body of
 * 8,000 nested arrays a 400 instead of the stack overflow of a recursive walk.
 */
export const MAX_INPUT_DEPTH = 32;

/**
 * The first problem of a parsed request part (body, query, params) as "where: why": nesting
 * deeper than MAX_INPUT_DEPTH, or a string (value or key) that text cannot store. Walked with
 * an explicit stack, never by recursion, so no input can exhaust the call stack.
 */
export function findInputProblem(value: unknown, where: string): string | undefined {
  // Every request walks its body, query and params: nothing is allocated for an absent part,
  // and a value's "where" (body.a.b) is spelled out only for the one that has a problem.
  if (value === undefined || value === null) return undefined;
  if (typeof value === "string") {
    const problem = unstorableText(value);
    return problem ? `${where} ${problem}` : undefined;
  }
  if (typeof value !== "object") return undefined;
  // Params and most queries are flat objects of strings: looked at in place, in the walk's
  // order (every key, then every value), with nothing allocated; anything nested is walked.
  let nested = false;
  for (const key in value) {
    if (!Object.hasOwn(value, key)) continue;
    const keyProblem = unstorableText(key);
    if (keyProblem) return `${where}: a key ${keyProblem}`;
    const inner = (value as Record<string, unknown>)[key];
    if (typeof inner === "object" && inner !== null) nested = true;
  }
  if (!nested) {
    for (const key in value) {
      const inner = (value as Record<string, unknown>)[key];
      if (typeof inner !== "string" || !Object.hasOwn(value, key)) continue;
      const problem = unstorableText(inner);
      if (problem) return `${where}.${key} ${problem}`;
    }
    return undefined;
  }
  const stack: Entry[] = [{ value, key: where, parent: undefined, depth: 0 }];
  while (stack.length > 0) {
    const next = stack.pop()!;
    if (typeof next.value === "string") {
      const problem = unstorableText(next.value);
      if (problem) return `${pathOf(next)} ${problem}`;
      continue;
    }
    if (next.value === null || typeof next.value !== "object") continue;
    if (next.depth >= MAX_INPUT_DEPTH) return `${where} is nested deeper than ${MAX_INPUT_DEPTH} levels`;
    const entries = Object.entries(next.value);
    for (const [key] of entries) {
      const keyProblem = unstorableText(key);
      if (keyProblem) return `${pathOf(next)}: a key ${keyProblem}`;
    }
    // Pushed in reverse, so the first value is looked at first.
    for (let i = entries.length - 1; i >= 0; i--)
      stack.push({ value: entries[i]![1], key: entries[i]![0], parent: next, depth: next.depth + 1 });
  }
  return undefined;
}

/** A value still to be looked at: its key and the entry it is in (the part itself has the part's name as key). */
interface Entry {
  value: unknown;
  key: string;
  parent: Entry | undefined;
  depth: number;
}

/** "body.a.b": the keys from the part down to the entry. */
function pathOf(entry: Entry): string {
  let path = entry.key;
  for (let up = entry.parent; up; up = up.parent) path = `${up.key}.${path}`;
  return path;
}
