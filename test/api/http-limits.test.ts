import { test } from "node:test";
import assert from "node:assert/strict";
import { connect, type Socket } from "node:net";
import type { AddressInfo } from "node:net";
import { HTTP_TIMEOUTS } from "../../src/api/app.ts";
import { MAX_INPUT_DEPTH } from "../../src/api/request-text.ts";
import { assertError, createAccounts, ok, startApi, type ApiHarness, type PostJson } from "./harness.ts";

/** Slow clients are cut off, deep bodies are a 400, PATCH passes CORS. */

interface RawExchange {
  socket: Socket;
  /** Everything the server sent, once it closed the connection; rejects at the deadline. */
  closed(deadlineMs: number): Promise<string>;
}

/** A raw TCP connection to the API: the test decides byte by byte what the server gets. */
async function rawConnection(h: ApiHarness, head: string): Promise<RawExchange> {
  const { port } = h.app.server.address() as AddressInfo;
  const socket = connect(port, "127.0.0.1");
  await new Promise<void>((resolve, reject) => socket.once("connect", resolve).once("error", reject));
  let received = "";
  socket.on("data", (chunk: Buffer) => (received += chunk.toString("utf8")));
  socket.on("error", () => undefined); // a reset by the server is a close too
  const ended = new Promise<string>((resolve) => socket.once("close", () => resolve(received)));
  socket.write(head);
  return {
    socket,
    closed: (deadlineMs) => {
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<never>((_resolve, reject) => {
        timer = setTimeout(
          () =>
            reject(
              new Error(
                `the server kept the connection open for ${deadlineMs} ms; received: ${JSON.stringify(received)}`,
              ),
            ),
          deadlineMs,
        );
      });
      return Promise.race([ended, deadline]).finally(() => {
        clearTimeout(timer);
        socket.destroy();
      });
    },
  };
}

/** The client's workload: one byte every `everyMs` until the connection closes (pacing, not synchronisation). */
function trickle(socket: Socket, everyMs: number): void {
  const timer = setInterval(() => {
    if (socket.destroyed || !socket.writable) clearInterval(timer);
    else socket.write("x");
  }, everyMs);
  socket.once("close", () => clearInterval(timer));
}

test("slow clients: a body or headers trickling in one byte at a time are cut off with 408 and a closed connection within the request timeout", async (t) => {
  const h = await startApi({ app: { httpTimeouts: { headersMs: 1_000, requestMs: 1_500, checkEveryMs: 100 } } });
  t.after(() => h.close());
  const alice = await h.as("alice");
  ok(await (await h.as("admin", { admin: true })).put("/v1/accounts/alice"));

  // Authenticated, so the server reads the body: it declares 1000 bytes and sends one every 200 ms.
  const body = await rawConnection(
    h,
    `POST /v1/posts HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer ${alice.token}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{`,
  );
  trickle(body.socket, 200);
  const bodyAnswer = await body.closed(15_000);
  assert.match(bodyAnswer, /^HTTP\/1\.1 408 /, bodyAnswer);
  assert.match(bodyAnswer, /"code":"REQUEST_TIMEOUT"/);

  // No token needed to hold a socket with headers that never end (slowloris).
  const headers = await rawConnection(h, "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: ");
  trickle(headers.socket, 200);
  assert.match(await headers.closed(15_000), /^HTTP\/1\.1 408 /);

  const { rows } = await h.db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM post");
  assert.equal(rows[0]!.n, 0, "the cut-off request wrote nothing");
});

test("slow clients: the service's timeouts are bounded (headers, whole request, idle socket, keep-alive, checked every second)", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const server = h.app.server;
  assert.deepEqual(
    {
      headersMs: server.headersTimeout,
      requestMs: server.requestTimeout,
      idleMs: server.timeout,
      keepAliveMs: server.keepAliveTimeout,
    },
    {
      headersMs: HTTP_TIMEOUTS.headersMs,
      requestMs: HTTP_TIMEOUTS.requestMs,
      idleMs: HTTP_TIMEOUTS.idleMs,
      keepAliveMs: HTTP_TIMEOUTS.keepAliveMs,
    },
  );
  for (const [name, ms] of Object.entries(HTTP_TIMEOUTS))
    assert.ok(ms > 0 && ms <= 120_000, `${name} is bounded: ${ms}`);
});

test("early errors: a 401 before the body and a 413 on its Content-Length close the connection instead of reading the body; a complete bad body keeps it", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const alice = await h.as("alice");

  // 60 KB announced, none sent: the 401 comes from the headers alone.
  const unauthenticated = await rawConnection(
    h,
    "POST /v1/posts HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n",
  );
  const answer401 = await unauthenticated.closed(10_000);
  assert.match(answer401, /^HTTP\/1\.1 401 /, answer401);
  assert.match(answer401, /\r\nconnection: close\r\n/i);

  const tooLarge = await rawConnection(
    h,
    `POST /v1/posts HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer ${alice.token}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{`,
  );
  const answer413 = await tooLarge.closed(10_000);
  assert.match(answer413, /^HTTP\/1\.1 413 /, answer413);
  assert.match(answer413, /\r\nconnection: close\r\n/i);

  // Control: a 400 whose (small, complete) body was read leaves the connection open for the next request.
  const complete = await rawConnection(
    h,
    `POST /v1/posts HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer ${alice.token}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`,
  );
  complete.socket.write("GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
  const both = await complete.closed(10_000);
  assert.match(both, /^HTTP\/1\.1 400 /, both);
  assert.doesNotMatch(both.split("\r\n\r\n")[0]!, /connection: close/i, "the 400 keeps the connection");
  assert.match(both, /HTTP\/1\.1 200 [\s\S]*"status":"ok"/, "the second request was served on the same connection");
});

/** 8,000 nested arrays in 16 KB. */
const DEEP = "[".repeat(8_000) + "]".repeat(8_000);

test("deep JSON: a body nested 8,000 levels is 400 INVALID_INPUT on every route that takes a body, and writes nothing; nesting within the cap reaches the schema", async (t) => {
  const h = await startApi();
  t.after(() => h.close());
  const admin = await h.as("admin", { admin: true });
  await createAccounts(admin, ["alice", "bob"]);
  const alice = await h.as("alice");
  const post = ok<PostJson>(await alice.post("/v1/posts", { visibility: "PUBLIC", body: "hello" }), 201);
  const comment = ok<{ id: string }>(await alice.post(`/v1/posts/${post.id}/comments`, { body: "first" }), 201);
  const snapshot = async () =>
    (
      await h.db.pool.query<{ s: string }>(
        "SELECT (SELECT count(*) FROM post) || '/' || (SELECT count(*) FROM comment) || '/' || (SELECT count(*) FROM account) || '/' || (SELECT count(*) FROM like_rebuild_run) AS s",
      )
    ).rows[0]!.s;
  const before = await snapshot();
  const routes: [string, string, string][] = [
    ["POST", "/v1/posts", alice.token],
    ["POST", `/v1/posts/${post.id}/comments`, alice.token],
    ["PATCH", `/v1/comments/${comment.id}`, alice.token],
    ["PUT", "/v1/accounts/alice", alice.token],
    ["POST", "/v1/admin/rebuild", admin.token],
    ["POST", "/v1/admin/comment-counts/rebuild", admin.token],
  ];
  for (const [method, path, token] of routes) {
    for (const [shape, raw] of [
      ["top level", DEEP],
      ["in a field", `{"body":${DEEP},"items":${DEEP}}`],
    ]) {
      const res = await h.request(method, path, { token, raw, headers: { "content-type": "application/json" } });
      const { error } = assertError(res, 400, "INVALID_INPUT", `${method} ${path} ${shape}`);
      assert.match(error.message, /nested deeper than/, `${method} ${path} ${shape}`);
    }
  }
  assert.equal(await snapshot(), before, "nothing was written");
  // Within the cap the walk passes and the schema decides: a wrong type, not a depth error.
  const within = "[".repeat(MAX_INPUT_DEPTH - 1) + "]".repeat(MAX_INPUT_DEPTH - 1);
  const res = await alice.post("/v1/posts", undefined, {
    raw: `{"visibility":"PUBLIC","body":${within}}`,
    headers: { "content-type": "application/json" },
  });
  assert.doesNotMatch(assertError(res, 400, "INVALID_INPUT").error.message, /nested/);
});

test("CORS: a preflight for PATCH (editing a comment from a browser app) is allowed", async (t) => {
  const h = await startApi({ corsOrigins: ["https://app.example.com"] });
  t.after(() => h.close());
  const preflight = await h.request("OPTIONS", "/v1/comments/c-1", {
    headers: {
      origin: "https://app.example.com",
      "access-control-request-method": "PATCH",
      "access-control-request-headers": "authorization,content-type",
    },
  });
  assert.equal(preflight.status, 204, preflight.text);
  assert.equal(preflight.headers.get("access-control-allow-origin"), "https://app.example.com");
  const methods = (preflight.headers.get("access-control-allow-methods") ?? "").split(",").map((m) => m.trim());
  assert.ok(methods.includes("PATCH"), `allowed methods: ${methods.join(", ")}`);
});
