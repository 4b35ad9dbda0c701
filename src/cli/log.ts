/** One JSON object per line on stdout: the worker's structured log. */
export type Level = "debug" | "info" | "warn" | "error";

export type JsonLog = (level: Level, msg: string, fields?: Record<string, unknown>) => void;

export function jsonLog(base: Record<string, unknown>, out: (line: string) => void = (line) => process.stdout.write(line)): JsonLog {
  return (level, msg, fields = {}) => {
    out(`${JSON.stringify({ time: new Date().toISOString(), level, ...base, msg, ...fields })}\n`);
  };
}

export function errorFields(err: unknown): Record<string, unknown> {
  if (err instanceof Error) return { err: { type: err.name, message: err.message, ...("code" in err ? { code: err.code } : {}) } };
  return { err: { message: String(err) } };
}
