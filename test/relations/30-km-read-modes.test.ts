import { test } from "node:test";
import assert from "node:assert/strict";
import { READ_MODES, type ReadDecision } from "../../src/content/post-types.ts";
import { acct, relationsFixture, scalar, type RelationsFixture } from "./fixture.ts";

function show(d: ReadDecision): string {
  return `${d.allowed ? "ALLOW" : "DENY"}/${d.source}`;
}

async function table(
  f: RelationsFixture,
  reader: string,
  posts: Record<string, string>,
): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const mode of READ_MODES) {
    const cells = [];
    for (const [name, id] of Object.entries(posts))
      cells.push(`${name}=${show(await f.posts.canRead(reader, id, mode))}`);
    out[mode] = cells.join(" ");
  }
  return out;
}

for (const partitions of [1, 4]) {
  test(`30-K P=${partitions} the new-enemy case: four read modes after a block the projection has not seen`, async (t) => {
    const f = await relationsFixture(partitions, 400, [300]);
    t.after(() => f.close());
    const author = acct(300);
    const reader = acct(342);
    await f.rel.follow(reader, author);
    await f.rel.decide(author, reader, true);
    const p1 = await f.posts.createPost(author, "FOLLOWERS", "P1: before the block");
    await f.projector.drain();
    const block = await f.rel.block(author, reader);
    const p2 = await f.posts.createPost(author, "FOLLOWERS", "P2: after the block");
    const watermark = await scalar(f, "SELECT applied_upto AS n FROM proj_watermark WHERE part = $1", [p2.part]);
    t.diagnostic(
      `note block seq=${block.seq} P1 token=${p1.aclToken} P2 token=${p2.aclToken} projection watermark=${watermark} (no projector run)`,
    );
    assert.equal(p2.aclToken, block.seq);
    assert.ok(watermark >= p1.aclToken && watermark < p2.aclToken, "the projection has P1's token but not the block");

    const modes = await table(f, reader, { P1: p1.postId, P2: p2.postId });
    for (const mode of READ_MODES) t.diagnostic(`note ${mode.padEnd(15)} ${modes[mode]}`);
    assert.deepEqual(modes, {
      TRUTH: "P1=DENY/truth P2=DENY/truth",
      PROJECTION_ONLY: "P1=ALLOW/projection P2=ALLOW/projection",
      CONTENT_TOKEN: "P1=ALLOW/projection P2=DENY/fallback-truth",
      FRESH_TOKEN: "P1=DENY/fallback-truth P2=DENY/fallback-truth",
    });

    await f.projector.drain();
    const after = await f.posts.canRead(reader, p1.postId, "CONTENT_TOKEN");
    const w = await scalar(f, "SELECT applied_upto AS n FROM proj_watermark WHERE part = $1", [p1.part]);
    t.diagnostic(`note after drain watermark=${w} P1 CONTENT_TOKEN=${show(after)}`);
    assert.equal(show(after), "DENY/projection");
    assert.equal(show(await f.posts.canRead(author, p2.postId, "PROJECTION_ONLY")), "ALLOW/author");
  });
}

test("30-M P=1 PUBLIC is readable by non-followers and denied after a block in all four modes; SELF is denied to followers", async (t) => {
  const f = await relationsFixture(1, 20);
  t.after(() => f.close());
  const author = acct(1);
  const stranger = acct(2);
  const follower = acct(3);
  await f.rel.follow(follower, author);
  await f.projector.drain();
  const pub = await f.posts.createPost(author, "PUBLIC", "hello");
  const self = await f.posts.createPost(author, "SELF", "note to self");
  for (const mode of READ_MODES) {
    assert.equal(show(await f.posts.canRead(stranger, pub.postId, mode)), "ALLOW/public-block-check", mode);
    assert.equal(show(await f.posts.canRead(follower, self.postId, mode)), "DENY/truth", mode);
    assert.equal(show(await f.posts.canRead(author, self.postId, mode)), "ALLOW/author", mode);
  }
  await f.rel.block(author, stranger);
  const denied = [];
  for (const mode of READ_MODES) {
    const d = await f.posts.canRead(stranger, pub.postId, mode);
    denied.push(`${mode}=${show(d)}`);
    assert.equal(show(d), "DENY/public-block-check", mode);
  }
  t.diagnostic(`note PUBLIC after block: ${denied.join(" ")}`);
  // The block also works the other way round: the blocked user blocking back changes nothing.
  await f.rel.block(stranger, author);
  await f.rel.unblock(author, stranger);
  assert.equal(show(await f.posts.canRead(stranger, pub.postId, "TRUTH")), "DENY/public-block-check");
});
