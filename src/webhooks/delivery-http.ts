import http from "node:http";
import https from "node:https";
import type { LookupFunction } from "node:net";
import { resolveTarget, type Resolver } from "./address-policy.ts";

/**
 * One HTTP attempt of one message: the URL resolved and checked by the SSRF policy, the
 * connection pinned to the checked address (the socket's lookup answers that address, so no
 * second resolution happens; TLS still checks the certificate against the URL's host), bounded
 * connect and response times, no redirect followed, at most `maxResponseBytes` of the answer read.
 */

export interface AttemptLimits {
  connectTimeoutMs: number;
  /** From the request's start to the end of the (bounded) response body. */
  responseTimeoutMs: number;
  maxResponseBytes: number;
  allowPrivate: boolean;
  resolver?: Resolver;
}

export const DEFAULT_LIMITS: AttemptLimits = {
  connectTimeoutMs: 5_000,
  responseTimeoutMs: 10_000,
  maxResponseBytes: 64 * 1024,
  allowPrivate: false,
};

export type AttemptResult = { ok: true; status: number } | { ok: false; status?: number; error: string };

export async function attempt(
  url: string,
  headers: Record<string, string>,
  body: string,
  limits: AttemptLimits,
): Promise<AttemptResult> {
  let target;
  try {
    target = await resolveTarget(url, limits.allowPrivate, limits.resolver);
  } catch (err) {
    return { ok: false, error: (err as Error).message };
  }
  const pinned: LookupFunction = (_host, options, callback) => {
    if ((options as { all?: boolean }).all)
      (callback as unknown as (e: null, a: { address: string; family: number }[]) => void)(null, [
        { address: target.address, family: target.family },
      ]);
    else callback(null, target.address, target.family);
  };
  const transport = target.url.protocol === "https:" ? https : http;
  return new Promise<AttemptResult>((resolve) => {
    let settled = false;
    const finish = (result: AttemptResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(overall);
      req.destroy();
      resolve(result);
    };
    const req = transport.request(target.url, {
      method: "POST",
      lookup: pinned,
      agent: false,
      headers: {
        ...headers,
        "content-type": "application/json",
        "content-length": String(Buffer.byteLength(body)),
        "user-agent": "social-ledger-webhooks/1",
      },
    });
    const overall = setTimeout(
      () => finish({ ok: false, error: `no complete response within ${limits.responseTimeoutMs} ms` }),
      limits.responseTimeoutMs,
    );
    req.on("socket", (socket) => {
      const connectTimer = setTimeout(
        () => finish({ ok: false, error: `no connection within ${limits.connectTimeoutMs} ms` }),
        limits.connectTimeoutMs,
      );
      socket.once("connect", () => clearTimeout(connectTimer));
      socket.once("secureConnect", () => clearTimeout(connectTimer));
      socket.once("close", () => clearTimeout(connectTimer));
    });
    req.on("error", (err) => finish({ ok: false, error: err.message }));
    req.on("response", (res) => {
      const status = res.statusCode ?? 0;
      let read = 0;
      res.on("data", (chunk: Buffer) => {
        read += chunk.length;
        // The answer's body means nothing to us; a receiver that sends without end is cut off.
        if (read > limits.maxResponseBytes)
          finish(verdict(status, `response body above ${limits.maxResponseBytes} bytes`));
      });
      res.on("end", () => finish(verdict(status)));
      res.on("error", (err) => finish({ ok: false, status, error: err.message }));
    });
    req.end(body);
  });
}

/** 2xx is delivered; a 3xx is a failure (redirects are not followed: the target was checked, its redirect was not). */
function verdict(status: number, cut?: string): AttemptResult {
  if (status >= 200 && status < 300) return { ok: true, status };
  const why = status >= 300 && status < 400 ? `redirect ${status} not followed` : `status ${status}`;
  return { ok: false, status, error: cut ? `${why}; ${cut}` : why };
}
