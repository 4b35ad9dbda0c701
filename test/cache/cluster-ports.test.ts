import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { once } from "node:events";
import { freeClusterPort, portIsFree } from "../../support/redis-cluster.ts";

// A cluster node needs its port and its bus port (port + 10000) free; a port held by another
// process must read as taken, never throw (a CI run once failed every cluster test on it).
test("a port another listener holds is not free, and no error escapes; once released it is free", async () => {
  const holder = createServer();
  holder.listen(0, "127.0.0.1");
  await once(holder, "listening");
  const { port } = holder.address() as { port: number };
  assert.equal(await portIsFree(port), false);
  holder.close();
  await once(holder, "close");
  assert.equal(await portIsFree(port), true);
});

test("a cluster port skips ports already taken and has a free bus port", async () => {
  const first = await freeClusterPort(new Set());
  const second = await freeClusterPort(new Set([first, first + 10000]));
  assert.notEqual(second, first);
  assert.ok(second + 10000 <= 65535);
  assert.equal(await portIsFree(second + 10000), true);
});
