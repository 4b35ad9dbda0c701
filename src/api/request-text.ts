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
  const stack: { value: unknown; where: string; depth: number }[] = [{ value, where, depth: 0 }];
  while (stack.length > 0) {
    const next = stack.pop()!;
    if (typeof next.value === "string") {
      const problem = unstorableText(next.value);
      if (problem) return `${next.where} ${problem}`;
      continue;
    }
    if (next.value === null || typeof next.value !== "object") continue;
    if (next.depth >= MAX_INPUT_DEPTH) return `${where} is nested deeper than ${MAX_INPUT_DEPTH} levels`;
    const entries = Object.entries(next.value);
    for (const [key] of entries) {
      const keyProblem = unstorableText(key);
      if (keyProblem) return `${next.where}: a key ${keyProblem}`;
    }
    // Pushed in reverse, so the first value is looked at first.
    for (let i = entries.length - 1; i >= 0; i--) stack.push({ value: entries[i]![1], where: `${next.where}.${entries[i]![0]}`, depth: next.depth + 1 });
  }
  return undefined;
}
