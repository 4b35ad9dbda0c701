/**
 * A bounded poll of state a test cannot be told about by a hook point (another process, a
 * reconnecting client, a page): read until `done`, a short pause between reads, and a clear
 * error with the last value at the deadline. Never a fixed sleep standing in for an event.
 */
export async function pollUntil<T>(
  what: string,
  read: () => Promise<T>,
  done: (value: T) => boolean,
  ms = 30_000,
  intervalMs = 25,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not reached within ${ms} ms; last: ${JSON.stringify(value)}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
